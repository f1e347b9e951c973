"""``ray job submit`` end to end (issue 5): a head with the dashboard, the fabric up, the example
job submitted through Ray's job API, and the job's work placed by the fabric."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))


def submit(address: str, *entrypoint: str) -> subprocess.CompletedProcess:
    """``ray job submit``, retried while the head's job agent is still starting."""
    deadline = time.monotonic() + 120
    while True:
        out = subprocess.run([RAY, "job", "submit", "--address", address, "--", *entrypoint],
                             capture_output=True, text=True, timeout=300, env=os.environ.copy())
        starting = "No available agent" in out.stderr or "Failed to connect" in out.stderr
        if not starting or time.monotonic() > deadline:
            return out
        time.sleep(2)


def test_ray_job_submit_runs_the_example_on_the_fabric():
    with LocalFabric(["gpu-cuda-workstation", "steamdeck-apu", "cpu-only-box"], dashboard=True, max_slots=2,
                     timeout_s=120) as lf:
        url = lf.dashboard_url
        sched = ray.get_actor("fabric.scheduler", namespace="fabric")
        before = ray.get(sched.metrics.remote())
        out = submit(url, sys.executable, str(ROOT / "examples" / "adaptive_job.py"), "12")
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert "succeeded" in (out.stdout + out.stderr).lower()
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("FABRIC_RESULT ")][-1]
        result = json.loads(line.split(" ", 1)[1])
        assert result["tasks"] == 12 and result["complete"]
        assert set(result["by_tier"]) <= {"gpu_cuda", "gpu_apu", "cpu_ffmpeg"}, out.stdout[-3000:]
        assert result["by_tier"].get("gpu_cuda", 0) > 0  # the best tier was used
        # the job used this cluster's fabric: the same detached scheduler leased it slots
        after = ray.get(sched.metrics.remote())
        assert after["leases_granted"] > before["leases_granted"]
        # every call of the job counted, though its driver and workers are gone: calls on leased
        # slots by the driver, which sends their counts before it exits; spilled ones by their
        # workers, which the exiting driver gives the time to report (fabric.runtime.counts).
        # A worker's last report is an actor call still on its way: a few seconds at most.
        deadline = time.time() + 10
        while after["placements_succeeded"] - before["placements_succeeded"] < 12 and time.time() < deadline:
            time.sleep(0.2)
            after = ray.get(sched.metrics.remote())
        assert after["placements_succeeded"] - before["placements_succeeded"] == 12, (before, after)

"""What ``fabric.down()`` does to jobs, on a real local fabric.

- By default it stops every job that has not ended, a bundle's job too, before the actors go: the
  instances' processes end, their output stops growing, and the store says ``stopped``, so a new
  ``fabric.up()`` starts none of them.
- ``keep_jobs=True`` leaves the instance running: the next ``up`` re-adopts it (the same actor,
  the same process, still ``running``, no restart).
- ``fabric down`` says which rule ran: ``--keep-jobs`` names the lease in force, a plain one
  counts the jobs it stops; ``fabric down --help`` names the rule and the flag.

The fence's lease is 30 s here (not LocalFabric's 4 s): a kept instance must outlive the time the
next ``up`` takes on a loaded 2-core machine. One module-scoped LocalFabric of one small raylet;
waits are bounded polls.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fabric import Bundle, BundleJob, JobState, adaptive  # noqa: E402
from fabric.core.names import NAMESPACE, job_actor_name  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.netns_net import pid_alive  # noqa: E402

pytestmark = pytest.mark.integration

SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0},
            "fence": {"lease_ttl_s": 30.0, "renew_every_s": 1.0, "margin_s": 0.5}}
STILL_S = 1.5
"""How long a stopped job's output is watched for growth (ten of its periods)."""


class Ticker:
    """Appends one line to ``path`` every 0.15 s from a thread of its own; ``pid()`` is its process."""

    def __init__(self, path: str) -> None:
        self.path = path
        threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self) -> None:
        while True:
            with open(self.path, "a") as f:
                f.write("tick\n")
            time.sleep(0.15)

    def pid(self) -> int:
        return os.getpid()


Tick = adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60)(Ticker)


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(["cpu-only-box"], settings=SETTINGS, max_slots=4, timeout_s=90) as fabric_:
        yield fabric_


def ticks(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def running(lf, path: Path, job_id: str) -> int:
    """The pid of the job's instance, once it runs and writes."""
    lf.wait_until(lambda: lf.handle.job(job_id).state == JobState.RUNNING, f"job {job_id} running", timeout_s=90)
    lf.wait_until(lambda: ticks(path) >= 3, f"job {job_id}'s first ticks", timeout_s=60)
    handle = lf.handle.job_handle(job_id)
    return handle.result(handle.pid.remote(), timeout_s=60)


def test_down_stops_every_job_and_a_new_up_starts_none(lf, tmp_path):
    import fabric

    plain_out, bundled_out = tmp_path / "plain", tmp_path / "bundled"
    plain = Tick.remote(str(plain_out))
    status = lf.handle.create_bundle(Bundle(bundle_id="down-jobs", jobs=[BundleJob(name="tick", cls=Tick,
                                                                                    args=(str(bundled_out),))]))
    bundled = next(iter(status.jobs.values()))
    pids = {plain.job_id: running(lf, plain_out, plain.job_id), bundled: running(lf, bundled_out, bundled)}
    assert all(pid_alive(p) for p in pids.values())

    stopped = fabric.down()
    assert "fabric.scheduler" in stopped
    assert not stopped.jobs.kept and not stopped.jobs.not_stopped and not stopped.jobs.error, stopped.jobs
    assert len(stopped.jobs.stopped) == 2 and all(any(j in s for s in stopped.jobs.stopped) for j in pids)
    lf.wait_until(lambda: not any(pid_alive(p) for p in pids.values()), "the instances' processes to end", timeout_s=30)
    seen = (ticks(plain_out), ticks(bundled_out))
    time.sleep(STILL_S)
    assert (ticks(plain_out), ticks(bundled_out)) == seen  # nothing writes any more

    handle = fabric.up(SETTINGS, timeout_s=90)
    assert {j: handle.job(j).state for j in pids} == {j: JobState.STOPPED for j in pids}
    time.sleep(STILL_S)  # the new scheduler had time to place anything it meant to
    assert {j: handle.job(j).state for j in pids} == {j: JobState.STOPPED for j in pids}
    assert (ticks(plain_out), ticks(bundled_out)) == seen  # and started nothing


def test_keep_jobs_leaves_the_instance_running_for_the_next_up_to_re_adopt(lf, tmp_path):
    import fabric

    out = tmp_path / "kept"
    job = Tick.remote(str(out))
    pid = running(lf, out, job.job_id)
    key = lf.handle.job(job.job_id).instance_key
    actor_id = ray.get_actor(job_actor_name(job.job_id, key), namespace=NAMESPACE)._actor_id.hex()
    try:
        stopped = fabric.down(keep_jobs=True)
        assert "fabric.scheduler" in stopped and stopped.jobs.kept and stopped.jobs.lease_ttl_s == 30.0, stopped.jobs
        assert pid_alive(pid)
        before = ticks(out)
        lf.wait_until(lambda: ticks(out) > before, "the kept instance still writing", timeout_s=30)

        handle = fabric.up(SETTINGS, timeout_s=90)
        s = lf.wait_until(lambda: (s := handle.job(job.job_id)).state == JobState.RUNNING and s, "the job re-adopted",
                          timeout_s=60)
        assert s.instance_key == key and s.restarts_last_hour == 0, s
        assert JobState.RECOVERING.value not in [h[1] for h in s.history], s.history
        assert ray.get_actor(job_actor_name(job.job_id, key), namespace=NAMESPACE)._actor_id.hex() == actor_id
        again = handle.job_handle(job.job_id)
        assert again.result(again.pid.remote(), timeout_s=60) == pid and pid_alive(pid)
    finally:
        job.stop(timeout_s=60)


def fabric_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabric", *args], capture_output=True, text=True, timeout=180,
                          env=dict(os.environ))


def test_the_cli_says_which_rule_ran(lf, tmp_path):
    import fabric

    out = tmp_path / "cli"
    job = Tick.remote(str(out))
    pid = running(lf, out, job.job_id)
    kept = fabric_cli("down", "--address", lf.address, "--keep-jobs")
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert "jobs: kept running for the next fabric up (their leases last 30 s without the scheduler)" in kept.stdout
    assert pid_alive(pid)
    handle = fabric.up(SETTINGS, timeout_s=90)
    lf.wait_until(lambda: handle.job(job.job_id).state == JobState.RUNNING, "the job re-adopted", timeout_s=60)

    down = fabric_cli("down", "--address", lf.address)
    assert down.returncode == 0, down.stderr[-2000:]
    lines = down.stdout.splitlines()
    assert lines[:2] == ["fabric down: stopping 1 job...", "fabric down: stopped 1 job"], down.stdout
    assert "fabric down: jobs: stopped 1" in lines, down.stdout
    lf.wait_until(lambda: not pid_alive(pid), "the instance's process to end", timeout_s=30)
    handle = fabric.up(SETTINGS, timeout_s=90)  # up again for the harness's own teardown
    assert handle.job(job.job_id).state == JobState.STOPPED


def test_down_help_names_the_rule_for_jobs(capsys):
    from fabric.cli import main

    with pytest.raises(SystemExit):
        main(["down", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "stop every job that has not ended" in text and "--keep-jobs" in text
    assert "only while its lease lasts (fence.lease_ttl_s" in text

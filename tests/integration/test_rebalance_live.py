"""Rebalance on a real local fleet (issue 16; the reconfiguration engine: node added ->
rebalance): the GPU node dies, its encoder job falls back to a CPU node; the GPU node rejoins and
the job moves back onto it by handover -- no gap, no duplicate, once -- and within the cool-down
it is not moved again (the GPU node dies and rejoins a second time: the job stays on the CPU node).

One module-scoped LocalFabric: the workstation and two CPU boxes. No wall-clock assertions."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from fabric import JobState, adaptive  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.counter import CounterJob  # noqa: E402
from fabric.testing.counter_report import analyze  # noqa: E402

pytestmark = pytest.mark.integration

PERIOD_MS = 10.0
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0, "reprobe_interval_s": 600.0, "flap_toggles": 50},
            "failure": {"min_recovery_interval_s": 0.5},
            "rebalance": {"settle_s": 1.0, "cooldown_s": 600.0}}
Encoder = adaptive.remote(min_tier="gpu_cuda", floor="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60)(CounterJob)


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(["gpu-cuda-workstation", "cpu-only-box", "cpu-only-box"], settings=SETTINGS, max_slots=4,
                     timeout_s=120) as fabric_:
        yield fabric_


def gpu_id(lf) -> str:
    return lf.node("gpu-cuda-workstation").node_id


def fall_back(lf, job_id: str) -> str:
    """Kill the workstation; wait for the job to run on a CPU box; bring the workstation back."""
    lf.kill_node("gpu-cuda-workstation")
    lf.wait_until(lambda: lf.handle.job(job_id).state == JobState.RUNNING and lf.handle.job(job_id).node_id != gpu_id(lf),
                  "the job to fall back to a CPU node", timeout_s=90)
    cpu = lf.handle.job(job_id).node_id
    lf.add_node("gpu-cuda-workstation", profile="gpu-cuda-workstation")
    return cpu


def test_the_job_moves_back_up_by_handover_once_and_not_again_in_the_cool_down(lf, tmp_path):
    h = lf.handle
    job = Encoder.remote(str(tmp_path), period_ms=PERIOD_MS)
    job.wait_running(120)
    assert job.node_id == gpu_id(lf)
    fall_back(lf, job.job_id)
    moved = lf.wait_until(lambda: [e for e in h.job_events(kinds=["job_rebalanced"]) if e["data"]["job_id"] == job.job_id],
                          "a rebalance move", timeout_s=90)
    assert moved[0]["data"]["strategy"] == "handover" and moved[0]["data"]["to_node"] == gpu_id(lf)
    mid = moved[0]["data"]["migration_id"]
    lf.wait_until(lambda: h.migration(mid).terminal, "the rebalance migration to end", timeout_s=90)
    assert h.migration(mid).phase.value == "done", h.migration(mid)
    assert h.job(job.job_id).node_id == gpu_id(lf)
    started = h.migration(mid).started_at
    time.sleep(0.5)  # the target writes on
    report = analyze(str(tmp_path), PERIOD_MS, start=int((started - 0.5) * 1000 / PERIOD_MS))
    assert report.gap_ms == 0 and report.duplicates == 0 and report.overlap_writers == 1, report
    # within the cool-down it is not moved again, although it runs below its min_tier once more
    cpu = fall_back(lf, job.job_id)
    lf.wait_until(lambda: any(n.node_id == gpu_id(lf) and n.status.value == "active" for n in h.nodes()),
                  "the workstation back", timeout_s=60)
    time.sleep(SETTINGS["rebalance"]["settle_s"] + 3.0)  # long past the settle time: a move would have started
    assert len([e for e in h.job_events(kinds=["job_rebalanced"]) if e["data"]["job_id"] == job.job_id]) == 1
    assert h.job(job.job_id).node_id == cpu
    job.stop()

"""A new Ray cluster on the store of one that is gone holds its jobs, says so, and resumes them only when asked.

Cluster A (a local head and one small raylet) runs two ``CounterJob`` jobs on a store folder
(``store.url``) and is shut down whole, its jobs never stopped (as a crashed cluster leaves them).
Cluster B starts cold on the same store folder: ``fabric.up()`` holds both jobs (``recovering``,
never placed, their reason naming cluster A) and says which cluster, how long ago and how many;
``fabric up`` prints that one line; ``fabric up --resume`` resumes them and they run. The store is
stamped with B's cluster id from then on, and A's node record is collected after its drain grace
like any other. A scheduler restart on B (the same cluster) holds nothing.

Clusters run one after another (2-core machine); waits are bounded polls.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")

from fabric import JobState, adaptive  # noqa: E402
from fabric.store.jobs import JobStore  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.counter import CounterJob  # noqa: E402

pytestmark = pytest.mark.integration

HEALTH = {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "monitor_interval_s": 0.25, "join_timeout_s": 60.0,
          "drain_grace_s": 3.0}
Counter = adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60)(CounterJob)


def cluster_id() -> str:
    from fabric.rayio.cluster_id import running_cluster_id

    found = running_cluster_id()
    assert found
    return found


def stamp(folder) -> dict:
    store = JobStore(folder / "fabric.jobs.db")
    try:
        return store.get_meta("cluster")
    finally:
        store.close()


def fabric_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabric", *args], capture_output=True, text=True, timeout=180,
                          env=dict(os.environ))


def test_a_cold_start_on_another_clusters_store_holds_its_jobs_until_resumed(tmp_path):
    import fabric

    folder = tmp_path / "store"
    settings = {"store": {"url": f"sqlite:///{folder}"}, "health": HEALTH}
    with LocalFabric(["cpu-only-box"], settings=settings, max_slots=4, timeout_s=90) as a:
        first = cluster_id()
        jobs = [Counter.remote(str(tmp_path / f"out{i}"), period_ms=100.0).job_id for i in range(2)]
        for job_id in jobs:
            a.wait_until(lambda j=job_id: a.handle.job(j).state == JobState.RUNNING, f"job {job_id} running", timeout_s=90)
        a_head, a_node = a.address, a.node("cpu-only-box").node_id
    assert stamp(folder)["cluster_id"] == first

    with LocalFabric(["cpu-only-box"], settings=settings, max_slots=4, timeout_s=90) as b:
        second = cluster_id()
        assert second != first
        handle = fabric.up(announce=False)
        found = handle.inherited
        assert found is not None and found["cluster"]["cluster_id"] == first and sorted(found["jobs"]) == sorted(jobs)
        assert found["cluster"]["head"] == a_head
        line = found["line"]
        assert re.fullmatch(rf"found the store of another cluster \(id {first[:12]}…, head {re.escape(a_head)}, last seen "
                            r"\d+ s ago\): 2 jobs held; fabric up --resume resumes them", line), line
        held = {j: handle.job(j) for j in jobs}
        assert all(s.state == JobState.RECOVERING and s.binding is None for s in held.values()), held
        assert all(s.reason.startswith("held: inherited from another Ray cluster") and first[:12] in s.reason
                   for s in held.values()), held
        assert stamp(folder)["cluster_id"] == second  # the store is the new cluster's now
        b.wait_until(lambda: a_node in {r.node_id for r in handle.collected()}, "cluster A's node collected", timeout_s=30)
        assert a_node not in {r.node_id for r in handle.records()}

        said = fabric_cli("up", "--address", b.address)
        assert said.returncode == 0, said.stderr[-2000:]
        assert f"fabric up: {line.split(' (')[0]}" in said.stdout and "2 jobs held; fabric up --resume resumes them" in said.stdout
        assert all(handle.job(j).state == JobState.RECOVERING for j in jobs)  # still held: nobody asked

        resumed = fabric_cli("up", "--address", b.address, "--resume")
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        assert "2 jobs resumed" in resumed.stdout, resumed.stdout
        for job_id in jobs:
            b.wait_until(lambda j=job_id: handle.job(j).state == JobState.RUNNING, f"job {job_id} resumed", timeout_s=90)
        assert fabric.up(announce=False).inherited is None  # said once; nothing is held any more

        keys = {j: handle.job(j).instance_key for j in jobs}
        b.kill_scheduler()  # the same cluster: everything resumes as it stood, nothing is held
        again = fabric.up(announce=False)
        assert again.inherited is None
        b.wait_until(lambda: all(again.job(j).state == JobState.RUNNING for j in jobs), "jobs re-adopted", timeout_s=60)
        assert {j: again.job(j).instance_key for j in jobs} == keys

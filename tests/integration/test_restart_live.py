"""A SIGKILLed scheduler resumes what it was doing (issue 21), on a real local fleet:

- during a drain of a node holding two jobs (their migrations waiting on targets that cannot come
  up yet): the scheduler comes back, reads the drain back from the job store, tries the moves the
  restart forgot again, and the drain completes; Ray is asked to drain the emptied node and takes it;
- while a reclaim notice is pending: after the restart the notice and its drain's deadline are the
  ones given before; the node is then lost, and the job that dies with it is recovered without
  counting against its restart ceiling.

The fabric's stores live where ``store.url`` says (a folder of the test's own), so the setting is
exercised on a live fleet. One module-scoped LocalFabric of three raylets; waits are bounded polls.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fabric import Bundle, BundleJob, JobState, adaptive  # noqa: E402
from fabric.core.names import JOB_PREFIX, NAMESPACE, SCHEDULER  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration


class Gated:
    """Comes up at once the first time (per ``once`` file); every later instance of it (a migration
    target, a recovery) waits in its constructor while the ``gate`` file exists."""

    def __init__(self, once: str, gate: str) -> None:
        if os.path.exists(once):
            deadline = time.monotonic() + 120
            while os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.2)
        else:
            Path(once).write_text("started once")

    def where(self) -> str:
        return ray.get_runtime_context().get_node_id()


Gate = adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60)(Gated)


@pytest.fixture(scope="module")
def lf(tmp_path_factory):
    store = tmp_path_factory.mktemp("stores")
    settings = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "monitor_interval_s": 0.25,
                           "join_timeout_s": 60.0, "reprobe_interval_s": 600.0, "flap_toggles": 50},
                "failure": {"min_recovery_interval_s": 0.5},
                "migration": {"default_strategy": "overlap"},
                "store": {"url": f"sqlite:///{store}"},
                "pools": [{"name": "default", "tiers": [{"name": "fixed", "packing": "binpack"}]}]}
    with LocalFabric(["steamdeck-apu"] * 3, settings=settings, max_slots=4, timeout_s=120) as fabric_:
        fabric_.store_folder = store
        yield fabric_


def kill_scheduler(lf) -> None:
    """SIGKILL the scheduler actor's process and wait for Ray to restart it (``max_restarts=-1``)."""
    sched = ray.get_actor(SCHEDULER, namespace=NAMESPACE)
    pid = ray.get(sched.pid.remote(), timeout=30)
    os.kill(pid, signal.SIGKILL)

    def back() -> bool:
        try:
            return ray.get(sched.pid.remote(), timeout=5) != pid
        except Exception:
            return False

    lf.wait_until(back, "the scheduler to come back", timeout_s=90)


def instances(job_id: str) -> list[str]:
    from ray.util import list_named_actors

    return [a["name"] for a in list_named_actors(all_namespaces=True)
            if a.get("namespace") == NAMESPACE and a["name"].startswith(f"{JOB_PREFIX}{job_id}.")]


def together(lf, jobs) -> str:
    """Both jobs on one node (a pinned move of the second while the gate is open); that node."""
    node = lf.handle.job(jobs[0].job_id).node_id
    for j in jobs[1:]:
        if lf.handle.job(j.job_id).node_id != node:
            mid = lf.handle.migrate_job(j.job_id, strategy="overlap", target_node=node)
            lf.wait_until(lambda mid=mid: lf.handle.migration(mid).phase.value == "done", "the gathering move", timeout_s=60)
    assert all(lf.handle.job(j.job_id).node_id == node for j in jobs)
    return node


def replace_node(lf, node_id: str) -> None:
    node = next(n for n in lf.history if n.node_id == node_id)
    if node.alive:
        try:
            lf.kill_node(node.name)
        except Exception:  # its raylet exited already (Ray drained it)
            node.alive = False
    lf.add_node(node.name, profile=node.profile)


def test_the_stores_are_where_store_url_says(lf):
    assert (lf.store_folder / "fabric.db").exists() and (lf.store_folder / "fabric.jobs.db").exists()


def test_a_drain_interrupted_by_a_scheduler_kill_completes_after_the_restart(lf, tmp_path):
    gate = tmp_path / "gate"
    jobs = [Gate.remote(str(tmp_path / f"once{i}"), str(gate)) for i in range(2)]
    for j in jobs:
        j.wait_running(120)
    node = together(lf, jobs)
    gate.write_text("closed")  # every new instance now waits: the drain's targets cannot come up
    st = lf.handle.drain(node, timeout_s=120)
    assert set(st.jobs) == {j.job_id for j in jobs}
    lf.wait_until(lambda: all(v.status.value == "migrating" for v in lf.handle.drain_status(node).jobs.values()),
                  "both moves started", timeout_s=30)
    before = lf.handle.drain_status(node)  # read just before the kill
    assert before.phase.value == "waiting" and not before.terminal, before
    kill_scheduler(lf)
    after = lf.handle.drain_status(node)  # the new scheduler read it back
    assert after is not None and after.started == before.started and after.deadline == before.deadline, after
    assert not after.terminal and set(after.jobs) == set(before.jobs), after
    for j in jobs:  # still running on the node (the forgotten overlap moves rolled back to it), once each
        assert lf.handle.job(j.job_id).node_id == node
    gate.unlink()  # the retried moves' targets come up now
    final = lf.wait_until(lambda: (lambda s: s if s.terminal else None)(lf.handle.drain_status(node)),
                          "the drain to end", timeout_s=120)
    assert final.phase.value == "done" and final.ray_drain == "accepted", final
    assert {v.status.value for v in final.jobs.values()} == {"migrated"}, final
    lf.wait_until(lambda: not any(n["NodeID"] == node and n["Alive"] for n in ray.nodes()), "Ray to take the node down",
                  timeout_s=60)
    for j in jobs:
        s = lf.handle.job(j.job_id)
        assert s.state == JobState.RUNNING and s.node_id != node
        assert len(instances(j.job_id)) == 1, instances(j.job_id)  # never twice
        assert ray.get(j.where.remote(), timeout=60) == s.node_id
        j.stop()
    replace_node(lf, node)


def test_a_reclaim_notice_holds_its_deadline_across_a_restart_and_its_loss_is_not_counted(lf, tmp_path):
    gate = tmp_path / "gate"
    b = Bundle(bundle_id="noticed", jobs=[BundleJob(name="enc", cls=Gate, args=(str(tmp_path / "once"), str(gate)),
                                                    max_restarts_per_hour=1)])
    lf.handle.create_bundle(b)
    job_id = lf.handle.bundle("noticed").jobs["0/enc"]
    lf.wait_until(lambda: lf.handle.job(job_id).state == JobState.RUNNING, "the job running", timeout_s=120)
    node = lf.handle.job(job_id).node_id
    gate.write_text("closed")  # its move cannot finish: it stays on the node under notice
    deadline = time.time() + 100
    notice = lf.handle.handle_node_interruption(node, kind="spot-interruption", deadline=deadline)
    before = lf.handle.drain_status(node)  # read just before the kill
    assert before.interruption == "spot-interruption" and not before.terminal, before
    kill_scheduler(lf)
    after = lf.handle.drain_status(node)
    assert after is not None and after.deadline == before.deadline == notice.drain.deadline, after
    assert after.interruption == "spot-interruption" and after.force and not after.terminal, after
    victim = next(n for n in lf.history if n.node_id == node)
    lf.kill_node(victim.name)  # the provider takes the node before the deadline, the job with it
    gate.unlink()
    lf.wait_until(lambda: lf.handle.job(job_id).state == JobState.RUNNING and lf.handle.job(job_id).node_id != node,
                  "the job recovered elsewhere", timeout_s=120)
    s = lf.handle.job(job_id)
    assert s.restarts_last_hour == 0, [h[1:] for h in s.history]  # preempted: not counted
    assert lf.handle.bundle("noticed").state == "live"
    assert len(instances(job_id)) == 1
    lf.handle.delete_bundle("noticed")
    lf.add_node(victim.name, profile=victim.profile)

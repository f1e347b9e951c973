"""A SIGKILLed scheduler resumes what it was doing (issue 21), on a real local fleet:

- during a drain of a node holding two jobs (their migrations waiting on targets that cannot come
  up yet): the scheduler comes back, reads the drain back from the job store, tries the moves the
  restart forgot again, and the drain completes; Ray is asked to drain the emptied node and takes it;
- while a reclaim notice is pending: after the restart the notice and its drain's deadline are the
  ones given before; the node is then lost, and the job that dies with it is recovered without
  counting against its restart ceiling;
- during each migration strategy, before its point of no return (the target held in ``preparing``:
  every CPU of its node is taken by a plain Ray actor, so Ray cannot start it) and after it (the
  source's stop held by ``CounterJob(hold_stop=...)``, or a handover's slow cut): the test reads
  the phase just before the kill and asserts it. Before, the saga rolls back and the source writes
  on; after, it finishes on its target. The job's own counter (``CounterJob``, one tick per 10 ms
  per instance, each to its own file) shows no duplicate for stop_then_start and handover, none
  past the moment the source was let go for overlap, and no gap longer than that strategy's gap
  without a kill (measured in the same test for stop_then_start; 0 for the others) plus the time
  the scheduler took to resume the saga; a resumed saga is not counted as a restart.

The fabric's stores live where ``store.url`` says (a folder of the test's own), so the setting is
exercised on a live fleet. One module-scoped LocalFabric of three raylets; waits are bounded polls.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fabric import Bundle, BundleJob, JobState, adaptive  # noqa: E402
from fabric.core import names  # noqa: E402
from fabric.core.names import JOB_PREFIX, NAMESPACE  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.counter import CounterJob, safe_file_name  # noqa: E402
from fabric.testing.counter_report import analyze  # noqa: E402

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
Counter = adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60)(CounterJob)
PERIOD_MS = 10.0
MARGIN_MS = 500.0
"""Slack on the gap bound: a tick's resolution, a loaded machine's wake-ups."""


@ray.remote(num_cpus=0)
class CpuHog:
    """Holds CPUs on one node (its ``num_cpus`` option) so that Ray can start nothing else there."""

    def ready(self) -> bool:
        return True


@pytest.fixture(scope="module")
def lf(tmp_path_factory):
    store = tmp_path_factory.mktemp("stores")
    settings = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "monitor_interval_s": 0.25,
                           "join_timeout_s": 60.0, "reprobe_interval_s": 600.0, "flap_toggles": 50},
                "failure": {"min_recovery_interval_s": 0.5},
                # a lease well past a scheduler restart on a loaded 2-core machine: with the local
                # fleet's 4 s lease the live instances could end themselves while it came back
                "fence": {"lease_ttl_s": 15.0, "renew_every_s": 1.0, "margin_s": 0.5},
                "migration": {"default_strategy": "overlap"},
                "store": {"url": f"sqlite:///{store}"},
                "pools": [{"name": "default", "tiers": [{"name": "fixed", "packing": "binpack"}]}]}
    with LocalFabric(["steamdeck-apu"] * 3, settings=settings, max_slots=4, timeout_s=120) as fabric_:
        fabric_.store_folder = store
        yield fabric_


def kill_scheduler(lf) -> float:
    return lf.kill_scheduler()


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


# -- migrations ------------------------------------------------------------------------------------
def start_counter(lf, out: Path, **kwargs):
    job = Counter.remote(str(out), period_ms=PERIOD_MS, **kwargs)
    job.wait_running(120)
    lf.wait_until(lambda: analyze(str(out), PERIOD_MS).ticks >= 10, "the job's first ticks", timeout_s=60)
    return job


def writer(job_id: str, key: str) -> str:
    return safe_file_name(names.job_actor_name(job_id, key))


def another_node(lf, node_id: str) -> str:
    return next(n.node_id for n in lf.handle.nodes() if n.status.value == "active" and n.node_id != node_id)


def hog_every_cpu(node_id: str):
    """A plain Ray actor holding every free CPU of ``node_id``: a job instance pinned there stays pending."""
    from ray._private.state import available_resources_per_node
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    free = available_resources_per_node().get(node_id, {}).get("CPU", 0.0)
    hog = CpuHog.options(num_cpus=free, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
    ray.get(hog.ready.remote(), timeout=60)
    return hog


def resumed_at(state) -> float | None:
    return next((at for _, at, why in state.history if why == "resumed after a scheduler restart"), None)


def ended(lf, mid: str):
    return lf.wait_until(lambda: (s := lf.handle.migration(mid)).terminal and s, f"migration {mid} to end",
                         timeout_s=120)


def target_writing(lf, out: Path, job_id: str, state) -> None:
    """The target writes on past the move (its file's last tick beyond the source's)."""
    def past():
        r = analyze(str(out), PERIOD_MS).per_writer
        src, dst = r.get(writer(job_id, state.source_key)), r.get(writer(job_id, state.target_key))
        return dst is not None and (src is None or dst[1] > src[1] + 20)

    lf.wait_until(past, "the target writing past the move", timeout_s=60)


@pytest.mark.parametrize("strategy", ["stop_then_start", "overlap", "handover"])
def test_a_migration_killed_before_its_point_of_no_return_rolls_back_and_the_source_writes_on(lf, tmp_path, strategy):
    out = tmp_path / strategy
    job = start_counter(lf, out)
    source = lf.handle.job(job.job_id)
    target_node = another_node(lf, source.node_id)
    hog = hog_every_cpu(target_node)  # Ray cannot start the target there: the saga waits in preparing
    try:
        mid = lf.handle.migrate_job(job.job_id, strategy=strategy, target_node=target_node)
        before = lf.handle.migration(mid)  # read just before the kill
        assert before.phase == "preparing" and not before.past_point_of_no_return, before
        kill_scheduler(lf)
        state = ended(lf, mid)
        assert state.phase == "aborted" and "before the point of no return" in state.reason, state
    finally:
        ray.kill(hog)
    s = lf.handle.job(job.job_id)
    assert s.state == JobState.RUNNING and s.instance_key == source.instance_key, s  # the source carries on
    assert s.restarts_last_hour == 0
    last = analyze(str(out), PERIOD_MS).per_writer[writer(job.job_id, source.instance_key)][1]
    lf.wait_until(lambda: analyze(str(out), PERIOD_MS).per_writer[writer(job.job_id, source.instance_key)][1] > last + 20,
                  "the source writing on", timeout_s=60)
    assert len(instances(job.job_id)) == 1, instances(job.job_id)  # the target it left was killed
    job.stop()
    r = analyze(str(out), PERIOD_MS)
    assert r.writers == 1 and (r.duplicates, r.gap_ms) == (0, 0), r.as_dict()


def _baseline_gap_ms(lf, out: Path) -> float:
    """A stop_then_start migration without a kill: its gap (the strategy's own)."""
    job = start_counter(lf, out)
    mid = lf.handle.migrate_job(job.job_id, strategy="stop_then_start")
    state = ended(lf, mid)
    assert state.phase == "done", state
    target_writing(lf, out, job.job_id, state)
    job.stop()
    return analyze(str(out), PERIOD_MS).gap_ms


@pytest.mark.parametrize("strategy", ["stop_then_start", "overlap"])
def test_a_migration_killed_past_its_point_of_no_return_finishes_on_its_target(lf, tmp_path, strategy):
    baseline_ms = _baseline_gap_ms(lf, tmp_path / "baseline") if strategy == "stop_then_start" else 0.0
    out, hold = tmp_path / strategy, tmp_path / "hold-stop"
    job = start_counter(lf, out, hold_stop=str(hold))
    hold.write_text("held")  # the source's stop waits (writing on): the saga rests in stopping_source
    mid = lf.handle.migrate_job(job.job_id, strategy=strategy)
    lf.wait_until(lambda: lf.handle.migration(mid).phase == "stopping_source", "the saga stopping its source",
                  timeout_s=60)
    before = lf.handle.migration(mid)  # read just before the kill
    assert before.phase == "stopping_source" and before.past_point_of_no_return, before
    killed_at = kill_scheduler(lf)
    hold.unlink()  # the source is let go: the old scheduler's stop finishes, the new one asks again
    let_go = time.time()
    state = ended(lf, mid)
    assert state.phase == "done", state
    target_writing(lf, out, job.job_id, state)
    s = lf.handle.job(job.job_id)
    assert s.state == JobState.RUNNING and s.instance_key == state.target_key and s.node_id == state.target_node, s
    assert s.restarts_last_hour == 0  # a resumed migration is not a restart
    assert len(instances(job.job_id)) == 1, instances(job.job_id)
    job.stop()
    r = analyze(str(out), PERIOD_MS)
    restart_ms = (resumed_at(state) - killed_at) * 1000.0
    assert r.writers == 2, r.as_dict()
    if strategy == "stop_then_start":
        assert (r.duplicates, r.overlap_writers) == (0, 1), r.as_dict()  # never two instances
        assert r.gap_ms <= baseline_ms + restart_ms + MARGIN_MS, (r.as_dict(), baseline_ms, restart_ms)
    else:  # two writers only while the source was held; none once it was let go
        assert r.gaps == [] and r.gap_ms == 0, r.as_dict()
        src_last = r.per_writer[writer(job.job_id, state.source_key)][1]
        assert src_last * PERIOD_MS / 1000.0 <= let_go + (restart_ms + MARGIN_MS) / 1000.0 + 2.0, (r.as_dict(), let_go)


def test_a_handover_killed_in_its_cut_finishes_without_a_gap_or_a_duplicate(lf, tmp_path):
    out = tmp_path / "handover"
    job = start_counter(lf, out, cut_delay_s=4.0)
    mid = lf.handle.migrate_job(job.job_id, strategy="handover")
    lf.wait_until(lambda: lf.handle.migration(mid).phase == "cutting", "the saga cutting", timeout_s=60)
    before = lf.handle.migration(mid)  # read just before the kill
    assert before.phase == "cutting" and before.past_point_of_no_return, before
    killed_at = kill_scheduler(lf)
    state = ended(lf, mid)
    assert state.phase == "done", state
    assert resumed_at(state) is not None and resumed_at(state) > killed_at
    target_writing(lf, out, job.job_id, state)
    s = lf.handle.job(job.job_id)
    assert s.state == JobState.RUNNING and s.instance_key == state.target_key and s.restarts_last_hour == 0, s
    assert len(instances(job.job_id)) == 1, instances(job.job_id)
    job.stop()
    r = analyze(str(out), PERIOD_MS)
    assert r.writers == 2 and (r.duplicates, r.overlap_writers) == (0, 1), r.as_dict()
    assert r.gaps == [] and r.gap_ms == 0, r.as_dict()

"""Drains and reclaim notices outlive the scheduler (issue 21): the rows they are kept as, and a
scheduler built again over the same job store (a SIGKILLed one coming back) that reads them back
and carries them on. Real ``Scheduler`` + ``JobRunner`` + ``JobStore``, a fake fleet and launcher."""

from __future__ import annotations

import asyncio
import json

import pytest

from fabric.core.jobs import JobState
from fabric.core.jobs.drains import AskRayToDrain, JobDrainStatus, NodeDrain, NodeDrainPhase, NodeInterruptionState
from fabric.core.jobs.rows import ROW_SCHEMA, RowError, drain_from_row, drain_row, notice_from_row, notice_row
from fabric.core.placement import Requirement
from fabric.core.jobs import JobSpec
from test_job_runner import FakeLauncher, make, settle
from test_scheduling import Clock

P, S = NodeDrainPhase, JobDrainStatus
SPEC = JobSpec("enc", Requirement(min_tier="cpu_ffmpeg", num_cpus=0.5))


# -- the rows ------------------------------------------------------------------------------------------
def _walked(phase: str) -> NodeDrain:
    d = NodeDrain("n1", ["a", "b"], 100.0, timeout_s=60, force=True, strategy="handover",
                  interruption="spot-interruption", interruption_deadline=190.0)
    d.set_job("a", S.MIGRATING, migration_id="m-a", reason="migrating")
    d.set_job("b", S.STUCK, reason="no target")
    d.started_all(101.0)
    if phase in ("draining", "done"):
        d.set_job("a", S.MIGRATED)
        d.set_job("b", S.TERMINATED)
        d.step(102.0)
    if phase == "done":
        d.ray_answered(True, "", 103.0)
    return d


@pytest.mark.parametrize("phase", ["waiting", "draining", "done"])
def test_a_drain_round_trips_its_row_at_every_phase(phase):
    d = _walked(phase)
    row = json.loads(json.dumps(drain_row(d)))  # plain JSON
    assert row["schema"] == ROW_SCHEMA
    back = drain_from_row(row)
    assert back.snapshot() == d.snapshot() and back.history == d.history and back.ended_at == d.ended_at
    assert back.interruption_deadline == 190.0 and back.deadline == d.deadline
    assert drain_row(back) == drain_row(d)


def test_a_drain_row_whose_history_breaks_the_table_is_refused():
    row = drain_row(_walked("done"))
    row["history"] = [["migrating", 100.0, ""], ["done", 101.0, ""]]
    with pytest.raises(RowError, match="drain") as err:
        drain_from_row(row)
    assert err.value.key == "n1"


def test_a_notice_round_trips_with_its_drain():
    d = _walked("waiting")
    n = NodeInterruptionState(node_id="n1", kind="spot-interruption", deadline=190.0, noticed_at=100.0, drain=d.snapshot())
    assert notice_from_row(json.loads(json.dumps(notice_row(n))), d) == n
    assert notice_from_row(notice_row(n), None) is None  # its drain not kept: no notice


# -- a scheduler built again over the same store --------------------------------------------------------
def _restart(tmp_path, launcher, clock):
    """A new scheduler over the same store and launcher (the instances outlive it, as Ray's actors do)."""
    return make(tmp_path, launcher, clock)


async def _running(sched, launcher, n: int) -> list[str]:
    runner = sched.jobs
    ids = [runner.submit(SPEC, b"cls", b"args") for _ in range(n)]
    runner.tick()
    await settle()
    for inst in launcher.started:
        for fut in inst.__fabric_started__.futures:
            if not fut.done():
                fut.set_result(None)
    await settle()
    assert all(runner.book.job(j).state == JobState.RUNNING for j in ids)
    return ids


def test_a_drain_in_progress_is_read_back_and_goes_on_after_a_restart(tmp_path):
    clock, launcher = Clock(), FakeLauncher()

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        ids = await _running(sched, launcher, 2)
        node = sched.jobs.book.job(ids[0]).binding.node_id
        ids = [j for j in ids if sched.jobs.book.job(j).binding.node_id == node]  # the jobs on that node
        st = await sched.jobs.drains.drain(node, timeout_s=120, strategy="stop_then_start")
        assert st.phase is P.WAITING and set(st.jobs) == set(ids)
        assert all(j.status is S.MIGRATING for j in st.jobs.values())
        before = st

        again = _restart(tmp_path, launcher, clock)  # the old one is gone: SIGKILL
        await again._sync()
        d = again.jobs.drains.drains.get(node)
        assert d is not None and d.snapshot().deadline == before.deadline and d.strategy == "stop_then_start"
        assert again.jobs.book.job(ids[0]).state in (JobState.RUNNING, JobState.MIGRATING)
        clock.t += 1
        again.jobs.tick()  # resume: the node cordoned again, the forgotten migrations tried again
        await settle()
        assert node in again.core.drains and again.core.fleet.get(node).cordoned
        st = again.jobs.drains.status(node)
        for j in ids:  # the sagas were before their point of no return: rolled back, the jobs stuck for now
            assert st.jobs[j].status is S.STUCK and "before the point of no return" in st.jobs[j].reason, st
            assert again.jobs.book.job(j).state == JobState.RUNNING and again.jobs.book.job(j).binding.node_id == node
        old = {j: st.jobs[j].migration_id for j in ids}
        assert all(again.jobs.moves.book.get(m).phase.value == "aborted" for m in old.values())
        clock.t += 3  # past the retry interval: moved again
        again.jobs.tick()
        await settle()
        st = again.jobs.drains.status(node)
        assert all(st.jobs[j].status is S.MIGRATING and st.jobs[j].migration_id != old[j] for j in ids), st
        assert again.jobs.book.validate_state() == [] and again.jobs.moves.book.validate_state() == []

    asyncio.run(go())


def test_a_drain_that_had_asked_ray_asks_again_or_ends_when_its_node_left(tmp_path):
    clock, launcher = Clock(), FakeLauncher()

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        runner = sched.jobs
        d = runner.drains.drains.start("n1", [], clock(), timeout_s=60, force=False, strategy=None)
        d.step(clock())  # no jobs: straight to asking Ray
        assert d.phase is P.DRAINING
        runner.persist()
        again = _restart(tmp_path, launcher, clock)
        await again._sync()
        again.jobs.drains.asks.clear()
        again.jobs.resume()
        assert again.jobs.drains.asks.get("n1") == AskRayToDrain("n1", "IDLE_TERMINATION", None,
                                                                 "fabric drain: every job is off the node")

    asyncio.run(go())


def test_a_reclaim_notice_keeps_its_deadline_and_what_dies_with_the_node_is_not_counted(tmp_path):
    clock, launcher = Clock(), FakeLauncher()

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        (job_id,) = await _running(sched, launcher, 1)
        node = sched.jobs.book.job(job_id).binding.node_id
        deadline = clock() + 120
        notice = await sched.jobs.drains.interrupt(node, "spot-interruption", deadline)
        assert notice.deadline == deadline

        again = _restart(tmp_path, launcher, clock)
        await again._sync()
        assert node in again.jobs.preempting
        kept = again.jobs.drains.interruptions[node]
        assert kept.deadline == deadline and kept.drain.deadline == notice.drain.deadline
        key = again.jobs.book.job(job_id).binding.instance_key
        launcher.live.pop((job_id, key))  # it died with the node while the scheduler was away
        clock.t += 1
        again.jobs.tick()
        await settle()
        rec = again.jobs.book.job(job_id)
        assert rec.restarts and not any(r.counted for r in rec.restarts)  # recovered, not counted
        assert rec.restarts_last_hour(clock()) == 0

    asyncio.run(go())


def test_a_withdrawn_notice_and_its_row_are_gone_after_a_restart(tmp_path):
    """An empty node's notice asks Ray at once: the uncordon withdraws the notice, not the drain."""
    clock, launcher = Clock(), FakeLauncher()

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        await sched.jobs.drains.interrupt("n2", "rebalance", None)
        sched.jobs.drains.withdraw("n2")
        assert [k for k, _ in sched.jobs.store.state("notice")] == []
        again = _restart(tmp_path, launcher, clock)
        await again._sync()
        assert "n2" not in again.jobs.preempting and "n2" not in again.jobs.drains.interruptions
        assert again.jobs.drains.status("n2").phase is P.DRAINING  # Ray was asked: there is no undrain

    asyncio.run(go())

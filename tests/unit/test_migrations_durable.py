"""Migration sagas outlive the scheduler (issue 21): each saga is a row of the job store, and a
scheduler built again over the same store (a SIGKILLed one coming back) carries it on by its phase:
before the point of no return it rolls back (the job runs on at its source), from it on it goes on
to ``done`` on its target with the step in flight asked again; a resumed saga is not a restart.
Pure decisions first (``Migration.restarted``, the rows), then a real ``Scheduler`` + ``JobRunner``
+ ``JobStore`` over a fake fleet and a fake instance launcher whose calls the test answers."""

from __future__ import annotations

import asyncio
import json

import pytest

from fabric.core.jobs import JobSpec, JobState
from fabric.core.jobs.migration import (
    PATHS, POINT_OF_NO_RETURN, BeginTarget, Cut, Migration, MigrationPhase, MigrationStrategy, Resume, RollBack,
    StopSource, StopTarget,
)
from fabric.core.jobs.rows import migration_from_row, migration_row
from fabric.core.placement import Requirement
from test_job_runner import Call, FakeLauncher, Instance, make, settle
from test_scheduling import Clock

P, S = MigrationPhase, MigrationStrategy
SPEC = JobSpec("enc", Requirement(min_tier="cpu_ffmpeg", num_cpus=0.5))


# -- the pure decision -------------------------------------------------------------------------------
def _saga(strategy: S, phase: P) -> Migration:
    m = Migration("mig-1", "j1", strategy, "n1", "primary@a", 7, 100.0, {}, phase=phase, target_node="n2",
                  target_key="primary@b", target_allocation=8, target_created=True, target_alive=True)
    m.history.append((phase.value, 100.0, ""))
    return m


@pytest.mark.parametrize("strategy", list(S))
def test_restarted_rolls_back_before_the_point_of_no_return_and_goes_on_after(strategy):
    path = PATHS[strategy]
    ponr = path.index(POINT_OF_NO_RETURN[strategy])
    for phase in path[:-1]:
        m = _saga(strategy, phase)
        out = m.restarted(200.0)
        assert m.source_allocation is None  # the old process's slots are reserved anew
        if path.index(phase) < ponr:
            assert m.phase is P.ABORTED and "before the point of no return" in m.reason
            assert any(isinstance(i, StopTarget) and i.allocation_id is None for i in out)
            assert any(isinstance(i, RollBack) for i in out)
        else:
            assert m.phase is phase and m.history[-1][2] == "resumed after a scheduler restart"
            assert m.phase_deadline is not None and m.phase_deadline > 200.0
            want = {P.STOPPING_SOURCE: StopSource, P.STARTING_TARGET: BeginTarget, P.CUTTING: Cut, P.RESUMING: Resume}
            assert [type(i) for i in out] == [want[phase]]
    done = _saga(strategy, P.DONE)
    assert done.restarted(200.0) == [] and done.phase is P.DONE


def test_a_stop_that_ended_before_the_kill_moves_the_saga_on():
    m = _saga(S.STOP_THEN_START, P.STOPPING_SOURCE)
    m.source_stopped = True
    out = m.restarted(200.0)
    assert m.phase is P.STARTING_TARGET and any(isinstance(i, BeginTarget) for i in out)


def test_a_saga_round_trips_its_row():
    m = _saga(S.HANDOVER, P.CUTTING)
    back = migration_from_row(json.loads(json.dumps(migration_row(m))))
    assert back == m and back.state() == m.state()


# -- a scheduler built again over the same store ------------------------------------------------------------
class Hooked:
    """The user's class as the fake launcher 'loads' it: it has the handover hooks."""

    def __fabric_ready__(self): ...

    def __fabric_cut__(self, payload): ...

    def __fabric_resume__(self, position): ...


class SagaInstance(Instance):
    def __init__(self, job_id, key, node_id) -> None:
        super().__init__(job_id, key, node_id)
        for hook in ("__fabric_begin__", "__fabric_ready__", "__fabric_cut__", "__fabric_resume__"):
            setattr(self, hook, Call())


class SagaLauncher(FakeLauncher):
    def start(self, job_id, key, node_id, cls_blob, args_blob, req, gpus=0.0, **kw):
        inst = SagaInstance(job_id, key, node_id)
        self.started.append(inst)
        self.live[(job_id, key)] = inst
        return inst

    def loaded(self, cls_blob):
        return (Hooked, None)

    def instances(self):
        out = {}
        for job_id, key in self.live:
            out.setdefault(job_id, []).append(key)
        return out


def answer(call: Call, value=None) -> int:
    n = 0
    for fut in call.futures:
        if not fut.done():
            fut.set_result(value)
            n += 1
    return n


async def running(tmp_path, launcher, clock):
    sched = make(tmp_path, launcher, clock)
    await sched._sync()
    job_id = sched.jobs.submit(SPEC, b"cls", b"args")
    sched.jobs.tick()
    await settle()
    answer(launcher.started[0].__fabric_started__)
    await settle()
    assert sched.jobs.book.job(job_id).state == JobState.RUNNING
    return sched, job_id


def target_of(launcher, sched, mid):
    m = sched.jobs.moves.book.get(mid)
    return launcher.live[(m.job_id, m.target_key)]


async def again(tmp_path, launcher, clock):
    """The scheduler SIGKILLed and back: a new one over the same store and the same live instances."""
    sched = make(tmp_path, launcher, clock)
    await sched._sync()
    clock.t += 1
    sched.jobs.tick()
    await settle()
    return sched


def finish_checks(sched, launcher, job_id, mid, source_key):
    m = sched.jobs.moves.book.get(mid)
    rec = sched.jobs.book.job(job_id)
    assert m.phase is P.DONE, m.history
    assert rec.state == JobState.RUNNING and rec.binding.instance_key == m.target_key
    assert rec.restarts == []  # a resumed migration is not a restart
    assert [k for (j, k) in launcher.live if j == job_id] == [m.target_key]  # one instance: never two
    assert (job_id, source_key) not in launcher.live
    assert sched.jobs.book.validate_state() == [] and sched.jobs.moves.book.validate_state() == []


def test_overlap_past_its_point_of_no_return_finishes_on_its_target(tmp_path):
    clock, launcher = Clock(), SagaLauncher()

    async def go():
        sched, job_id = await running(tmp_path, launcher, clock)
        source = launcher.started[0]
        mid = sched.jobs.moves.migrate(job_id, "overlap").migration_id
        await settle()
        answer(target_of(launcher, sched, mid).__fabric_started__)
        await settle()
        assert sched.jobs.moves.book.get(mid).phase is P.STOPPING_SOURCE  # just before the kill
        answer(source.__fabric_shutdown__)  # the old scheduler's stop reaches nobody: it is gone
        later = await again(tmp_path, launcher, clock)
        assert later.jobs.moves.book.get(mid).phase in (P.STOPPING_SOURCE, P.DONE)
        answer(source.__fabric_shutdown__)
        await settle()
        finish_checks(later, launcher, job_id, mid, source.key)

    asyncio.run(go())


def test_stop_then_start_past_its_point_of_no_return_runs_its_deferred_constructor(tmp_path):
    clock, launcher = Clock(), SagaLauncher()

    async def go():
        sched, job_id = await running(tmp_path, launcher, clock)
        source = launcher.started[0]
        mid = sched.jobs.moves.migrate(job_id, "stop_then_start").migration_id
        await settle()
        target = target_of(launcher, sched, mid)
        answer(target.__fabric_started__)
        await settle()
        answer(source.__fabric_shutdown__)
        await settle()
        assert sched.jobs.moves.book.get(mid).phase is P.STARTING_TARGET  # just before the kill
        assert target.__fabric_begin__.futures  # asked; its answer dies with the scheduler
        later = await again(tmp_path, launcher, clock)
        assert answer(target.__fabric_begin__) >= 1  # asked again
        await settle()
        finish_checks(later, launcher, job_id, mid, source.key)

    asyncio.run(go())


def test_handover_in_its_cut_asks_for_the_lost_payload_and_position_again(tmp_path):
    clock, launcher = Clock(), SagaLauncher()

    async def go():
        sched, job_id = await running(tmp_path, launcher, clock)
        source = launcher.started[0]
        mid = sched.jobs.moves.migrate(job_id, "handover").migration_id
        await settle()
        target = target_of(launcher, sched, mid)
        answer(target.__fabric_started__)
        await settle()
        answer(target.__fabric_ready__, {"payload": 1})
        await settle()
        assert sched.jobs.moves.book.get(mid).phase is P.CUTTING and source.__fabric_cut__.futures  # before the kill
        later = await again(tmp_path, launcher, clock)
        assert len(target.__fabric_ready__.futures) == 2  # the payload asked for again
        assert answer(source.__fabric_cut__, 42) >= 1  # the cut again: the source answers its position
        await settle()
        assert later.jobs.moves.book.get(mid).phase is P.RESUMING
        answer(target.__fabric_resume__)
        await settle()
        answer(source.__fabric_shutdown__)
        await settle()
        finish_checks(later, launcher, job_id, mid, source.key)

    asyncio.run(go())


@pytest.mark.parametrize("strategy", ["overlap", "handover", "stop_then_start"])
def test_before_its_point_of_no_return_a_saga_rolls_back_to_its_source(tmp_path, strategy):
    clock, launcher = Clock(), SagaLauncher()

    async def go():
        sched, job_id = await running(tmp_path, launcher, clock)
        source = launcher.started[0]
        mid = sched.jobs.moves.migrate(job_id, strategy).migration_id
        await settle()
        target = target_of(launcher, sched, mid)
        assert sched.jobs.moves.book.get(mid).phase is P.PREPARING  # the target not up yet: before the kill
        later = await again(tmp_path, launcher, clock)
        m = later.jobs.moves.book.get(mid)
        rec = later.jobs.book.job(job_id)
        assert m.phase is P.ABORTED and "before the point of no return" in m.reason
        assert rec.state == JobState.RUNNING and rec.binding.instance_key == source.key and rec.restarts == []
        assert (job_id, target.key) not in launcher.live and (job_id, source.key) in launcher.live
        assert later.jobs.book.validate_state() == [] and later.jobs.moves.book.validate_state() == []

    asyncio.run(go())

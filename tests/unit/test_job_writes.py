"""How the job runner writes its store, and how often the scheduler reads Ray's resource table:
what instances' watches see (many instances coming up at once) is written once per turn of the
event loop, every job's row in it; a submit is in the store before it is answered; Ray's slots in
use are read at most every ``SLOTS_READ_EVERY_S``."""

from __future__ import annotations

import asyncio

from fabric.core.jobs import JobState
from fabric.core.jobs.stimuli import InstanceStarted
from fabric.store.job_rows import decode_job
from fabric.store.jobs import JobStore

from test_job_runner import SPEC, FakeLauncher, make, settle
from test_scheduling import Clock


def counting(store: JobStore) -> dict[str, int]:
    """Count the store's write transactions (``write`` and ``append_events``)."""
    counts = {"write": 0, "events": 0}
    write, append = store.write, store.append_events

    def counted_write(*a, **kw):
        counts["write"] += 1
        return write(*a, **kw)

    def counted_append(events):
        counts["events"] += 1
        return append(events)

    store.write, store.append_events = counted_write, counted_append
    return counts


def stored_states(path) -> dict[str, JobState]:
    """Each job's state as a new process reads it from the store file."""
    other = JobStore(path)
    try:
        return {job_id: decode_job(blob).state for job_id, blob in other.jobs()}
    finally:
        other.close()


def test_instances_that_come_up_in_one_turn_are_written_once_each_job_running_in_it(tmp_path):
    clock, launcher = Clock(), FakeLauncher()

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        runner = sched.jobs
        ids = [runner.submit(SPEC, b"cls", b"args") for _ in range(4)]
        runner.tick()
        await settle()
        assert len(launcher.started) == 4
        counts = counting(runner.store)
        for inst in launcher.started:  # every instance answers in the same turn
            inst.__fabric_started__.futures[0].set_result(None)
        await settle()
        assert all(runner.book.job(j).state == JobState.RUNNING for j in ids)
        assert counts == {"write": 1, "events": 1}  # four InstanceStarted, one transaction each table
        assert runner.counters["coalesced_writes"] >= 1
        assert stored_states(tmp_path / "jobs.db") == {j: JobState.RUNNING for j in ids}
        assert len(runner.store.events(0)) == runner.seq  # no event left unwritten

    asyncio.run(go())


def test_instances_that_come_up_in_different_turns_are_each_written(tmp_path):
    clock, launcher = Clock(), FakeLauncher()

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        runner = sched.jobs
        ids = [runner.submit(SPEC, b"cls", b"args") for _ in range(2)]
        runner.tick()
        await settle()
        counts = counting(runner.store)
        launcher.started[0].__fabric_started__.futures[0].set_result(None)
        await settle()
        assert counts["write"] == 1 and stored_states(tmp_path / "jobs.db")[launcher.started[0].job_id] == JobState.RUNNING
        launcher.started[1].__fabric_started__.futures[0].set_result(None)
        await settle()
        assert counts["write"] == 2 and stored_states(tmp_path / "jobs.db") == {j: JobState.RUNNING for j in ids}

    asyncio.run(go())


def test_a_submit_is_in_the_store_before_it_is_answered(tmp_path):
    clock, launcher = Clock(), FakeLauncher()

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        runner = sched.jobs
        counts = counting(runner.store)
        job_id = runner.submit(SPEC, b"cls", b"args")  # no await after it: nothing written later
        assert counts["write"] == 1  # the job, its placement and its payload in one transaction
        assert stored_states(tmp_path / "jobs.db") == {job_id: runner.book.job(job_id).state}
        other = JobStore(tmp_path / "jobs.db")
        try:
            assert other.payload(job_id) is not None
        finally:
            other.close()

    asyncio.run(go())


def test_an_unanswered_stimulus_outside_a_loop_is_written_at_once(tmp_path):
    clock, launcher = Clock(), FakeLauncher()

    async def place():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        job_id = sched.jobs.submit(SPEC, b"cls", b"args")
        sched.jobs.tick()
        await settle()
        return sched, job_id

    sched, job_id = asyncio.run(place())
    runner = sched.jobs
    key = runner.book.job(job_id).binding.instance_key
    runner.handle(InstanceStarted(job_id, key), answered=False)  # no loop runs here
    assert stored_states(tmp_path / "jobs.db")[job_id] == JobState.RUNNING


def test_ray_slots_in_use_are_read_at_most_every_slots_read_every_s(monkeypatch):
    import fabric.rayio.driver as driver
    from fabric.rayio.adapter import SLOTS_READ_EVERY_S, RayAdapter

    reads: list[int] = []

    def read() -> dict[str, int]:
        reads.append(1)
        return {"n1": len(reads)}

    monkeypatch.setattr(driver, "slots_in_use", read)
    now = [100.0]
    adapter = RayAdapter()
    adapter._clock = lambda: now[0]
    assert adapter.slots_in_use() == {"n1": 1}  # the first ask reads
    now[0] += SLOTS_READ_EVERY_S / 4
    assert adapter.slots_in_use() == {} and len(reads) == 1  # too soon: nothing new, Ray not asked
    now[0] += SLOTS_READ_EVERY_S
    assert adapter.slots_in_use() == {"n1": 2} and len(reads) == 2
    assert RayAdapter().slots_in_use() == {"n1": 3}  # each adapter keeps its own time

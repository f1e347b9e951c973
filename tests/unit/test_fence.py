"""The fence (``fabric.core.jobs.fence``), through ``JobsCore.handle`` only with ``validate_state()``
after every step (the pure executor of test_jobs_core), and the instance side's ``LeaseKeeper``
on a fake clock.

The rule under test: a job's replacement never starts before the old instance's lease has surely
ended (the last grant + ``lease_ttl_s`` + ``margin_s``), whenever the old instance's end is not
known for sure; and an instance ends its own process once its lease has run out."""

from __future__ import annotations

import pytest

from fabric.core.jobs import JobState
from fabric.core.jobs import stimuli as js
from fabric.core.jobs.migration import BeginTarget, MigrationPhase, StopSource
from fabric.core.settings_fence import FenceSettings
from fabric.rayio.instances import GRANTED, REFUSED, LeaseKeeper
from test_jobs_core import SPEC, Fleet, _settle

FENCE = FenceSettings()
LIMIT = FENCE.lease_ttl_s + FENCE.margin_s


def running(f: Fleet, job_id: str = "a") -> str:
    f.handle(js.JobSubmitted(job_id, SPEC))
    f.handle(js.PlacementsDue())
    _settle(f)
    rec = f.core.book.job(job_id)
    assert rec.state == JobState.RUNNING and rec.binding is not None
    return rec.binding.instance_key


def renew(f: Fleet, key: str, job_id: str = "a") -> str:
    return f.handle(js.LeaseAsked(job_id, key))


def at(f: Fleet, t: float) -> None:
    f.now = t
    f.handle(js.JobsTick())
    f.handle(js.PlacementsDue())
    _settle(f)


def test_only_the_bound_instance_is_granted_a_renewal():
    f = Fleet()
    key = running(f)
    assert renew(f, key) == GRANTED and f.core.leases.grants[key] == f.now
    assert renew(f, "primary@someone-else") == REFUSED
    assert renew(f, key, job_id="no-such-job") == REFUSED


def test_a_lost_node_s_job_is_replaced_only_once_the_old_lease_has_surely_ended():
    f = Fleet()
    key = running(f)
    granted_at = f.now
    assert renew(f, key) == GRANTED
    f.now += 5.0
    node = f.live[("a", key)]
    del f.world.nodes[node]
    f.handle(js.JobsNodeLost(node))  # cut off: its instance may still run there, and still holds its lease
    rec = f.core.book.job("a")
    assert rec.state == JobState.RUNNING and rec.binding is not None and rec.binding.instance_key == key
    gone = [e for e in f.events if e.kind == "job_disconnected"]
    assert len(gone) == 1 and gone[0].data["lease_ends_in_s"] == pytest.approx(LIMIT - 5.0)
    at(f, granted_at + LIMIT - 0.5)
    assert f.core.book.job("a").binding.instance_key == key  # type: ignore[union-attr]
    at(f, granted_at + LIMIT + 0.5)  # no renewal came: it ended itself; the job recovers now
    rec = f.core.book.job("a")
    assert rec.state == JobState.RUNNING and rec.binding is not None and rec.binding.instance_key != key
    assert renew(f, key) == REFUSED  # the old instance, if it reaches us, renews no more


def test_a_link_that_heals_within_the_lease_moves_nothing():
    f = Fleet()
    key = running(f)
    assert renew(f, key) == GRANTED
    f.now += 5.0
    node = f.live[("a", key)]
    f.handle(js.JobsNodeLost(node))  # offline for the fleet, the instance still serving over there
    f.now += 5.0
    assert renew(f, key) == GRANTED  # the link is back
    assert [e.kind for e in f.events if e.kind.startswith("job_")][-2:] == ["job_disconnected", "job_reconnected"]
    at(f, f.now + LIMIT - 1)
    rec = f.core.book.job("a")
    assert rec.binding is not None and rec.binding.instance_key == key and not rec.restarts


def test_an_instance_ray_holds_dead_with_its_node_is_fenced_one_that_died_is_not():
    f = Fleet()
    key = running(f, "a")
    other = running(f, "b")
    assert renew(f, key, "a") == GRANTED and renew(f, other, "b") == GRANTED
    f.live.pop(("a", key))
    f.handle(js.InstanceEnded("a", key, "The actor is dead because its node has died.", node_died=True))
    assert f.core.book.job("a").not_before == pytest.approx(f.now + LIMIT)
    f.live.pop(("b", other))
    f.handle(js.InstanceEnded("b", other, "worker died"))
    assert f.core.book.job("b").not_before < f.now + LIMIT  # a process seen ending: its policy's wait only
    assert not [e for e in f.events if e.kind == "job_fenced" and e.data["job_id"] == "b"]


def test_an_instance_that_never_held_a_lease_never_served_so_nothing_waits():
    f = Fleet()
    key = running(f)
    node = f.live[("a", key)]
    del f.world.nodes[node]
    f.handle(js.JobsNodeLost(node))
    assert f.core.book.job("a").not_before < f.now + LIMIT
    assert not [e for e in f.events if e.kind == "job_fenced"]


def test_a_lease_that_lapsed_means_the_instance_stopped_itself_and_the_job_recovers():
    f = Fleet()
    key = running(f)
    start = f.now
    assert renew(f, key) == GRANTED
    at(f, start + LIMIT - 1)
    assert f.core.book.job("a").binding.instance_key == key  # type: ignore[union-attr]
    at(f, start + LIMIT + 1)  # no renewal since: it ended its own process, on whichever side of a cut
    rec = f.core.book.job("a")
    assert rec.binding is not None and rec.binding.instance_key != key and rec.state == JobState.RUNNING
    assert any("no lease renewal" in reason for _, _, reason in rec.history)
    assert ("a", key) not in f.live  # and it was killed, in case it was only slow


def test_after_a_restart_every_instance_bound_then_counts_as_renewed_at_the_restart():
    f = Fleet()
    key = running(f)
    assert renew(f, key) == GRANTED
    f.now += 100.0
    f.restart()
    restarted_at = f.now
    f.now += 3.0
    node = f.live[("a", key)]
    del f.world.nodes[node]
    f.handle(js.JobsNodeLost(node))
    at(f, restarted_at + LIMIT - 0.5)
    assert f.core.book.job("a").binding.instance_key == key  # type: ignore[union-attr]
    at(f, restarted_at + LIMIT + 0.5)
    rec = f.core.book.job("a")
    assert rec.binding is not None and rec.binding.instance_key != key


def test_a_migration_s_target_is_granted_and_the_source_is_refused_once_it_moved():
    f = Fleet()
    key = running(f)
    f.handle(js.MigrateRequested("a", "stop_then_start"))
    _settle(f)
    rec = f.core.book.job("a")
    assert rec.state == JobState.RUNNING and rec.binding is not None and rec.binding.instance_key != key
    assert renew(f, rec.binding.instance_key) == GRANTED
    assert renew(f, key) == REFUSED


class CutSource(Fleet):
    """The source's node is cut off: a graceful stop never comes back; the kill that follows is
    answered (``confirmed=False``), or, with ``hold``, no answer comes at all."""

    def __init__(self, *, hold: bool = False) -> None:
        super().__init__()
        self.hold, self.begun = hold, 0

    def _one(self, ins):  # type: ignore[no-untyped-def]
        if isinstance(ins, StopSource):
            if not self.hold:
                self.pending.append(js.SagaStepAnswered(ins.migration_id, "source_stopped", confirmed=False))
            return []
        self.begun += isinstance(ins, BeginTarget)
        return super()._one(ins)


def test_a_stop_then_start_target_waits_for_the_lease_of_a_source_that_was_only_killed():
    f = CutSource()
    key = running(f)
    granted_at = f.now
    assert renew(f, key) == GRANTED
    f.now += 1.0
    f.handle(js.MigrateRequested("a", "stop_then_start"))
    _settle(f)
    m = f.core.migrations.for_job("a")
    assert m is not None and m.phase is MigrationPhase.STOPPING_SOURCE and f.begun == 0
    fenced = [e for e in f.events if e.kind == "job_fenced"]
    assert len(fenced) == 1 and fenced[0].data["migration_id"] == m.migration_id
    assert fenced[0].data["wait_s"] == pytest.approx(LIMIT - 1.0)
    assert renew(f, key) == REFUSED  # a source being stopped keeps its lease no longer
    at(f, granted_at + LIMIT - 0.5)
    assert f.begun == 0 and f.core.book.job("a").binding.instance_key == key  # type: ignore[union-attr]
    at(f, granted_at + LIMIT + 0.5)  # the source's lease ended: it stopped itself; the target begins
    rec = f.core.book.job("a")
    assert f.begun == 1 and rec.state == JobState.RUNNING and rec.binding is not None and rec.binding.instance_key != key


def test_a_stop_then_start_whose_source_node_is_lost_mid_stop_begins_its_target_only_after_the_lease():
    f = CutSource(hold=True)
    key = running(f)
    granted_at = f.now
    assert renew(f, key) == GRANTED
    f.handle(js.MigrateRequested("a", "stop_then_start"))
    _settle(f)
    m = f.core.migrations.for_job("a")
    assert m is not None and m.phase is MigrationPhase.STOPPING_SOURCE
    f.now += 2.0
    f.handle(js.JobsNodeLost(m.source_node))  # the stop reached nobody; the node may run the source on
    assert f.begun == 0 and [e.data["reason"] for e in f.events if e.kind == "job_fenced"] == [
        f"node {m.source_node[:12]} lost"]
    at(f, granted_at + LIMIT + 0.5)
    rec = f.core.book.job("a")
    assert f.begun == 1 and rec.state == JobState.RUNNING and rec.binding is not None and rec.binding.instance_key != key


def test_a_source_that_answered_its_stop_or_held_no_lease_lets_the_target_begin_at_once():
    f = CutSource()
    running(f)  # never renewed: it never served, so nothing waits
    f.handle(js.MigrateRequested("a", "stop_then_start"))
    _settle(f)
    assert f.begun == 1 and not [e for e in f.events if e.kind == "job_fenced"]
    g = Fleet()  # the stop was answered by the source itself: it ends its own process
    key = running(g)
    assert renew(g, key) == GRANTED
    g.handle(js.MigrateRequested("a", "stop_then_start"))
    _settle(g)
    assert g.core.book.job("a").binding.instance_key != key and not [e for e in g.events if e.kind == "job_fenced"]  # type: ignore[union-attr]


# -- the instance side -------------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def keeper(answers: list[str | None], clock: Clock, *, latency: float = 0.0) -> tuple[LeaseKeeper, list[tuple[float, str]]]:
    ended: list[tuple[float, str]] = []
    replies = iter(answers)

    def ask() -> str | None:
        clock.t += latency
        return next(replies, None)

    k = LeaseKeeper(ask, 20.0, 4.0, end=lambda why: ended.append((clock.t, why)), clock=clock, sleep=clock.sleep)
    return k, ended


def test_a_grant_holds_the_lease_from_when_the_renewal_was_sent_not_answered():
    clock = Clock()
    k, _ = keeper([GRANTED], clock, latency=1.5)
    assert k.first() and k.until == pytest.approx(20.0)  # sent at 0, answered at 1.5


def test_the_process_ends_when_renewals_stop_coming_back_and_not_before():
    clock = Clock()
    k, ended = keeper([GRANTED, GRANTED, GRANTED], clock)  # then nothing answers: the link is cut
    assert k.first()
    k.run()
    assert k.grants == 3 and len(ended) == 1
    last_grant_sent = 8.0  # grants at 0, 4, 8
    assert ended[0][0] == pytest.approx(last_grant_sent + 20.0) and "no renewal granted for 20 s" in ended[0][1]


def test_a_refused_renewal_stops_the_renewals_and_the_process_ends_at_its_lease_s_end():
    clock = Clock()
    k, ended = keeper([GRANTED, REFUSED], clock)
    assert k.first()
    k.run()
    assert ended == [(pytest.approx(20.0), "its renewal was refused")]


def test_no_first_grant_means_the_user_s_constructor_never_runs():
    clock = Clock()
    k, _ = keeper([REFUSED], clock)
    assert not k.first() and k.refused
    clock2 = Clock()
    k2, _ = keeper([], clock2)  # the scheduler never answers
    assert not k2.first() and clock2.t >= 20.0


def test_after_a_renewal_without_an_answer_the_next_comes_at_once_not_a_period_later():
    clock = Clock()
    asked: list[float] = []
    answers = iter([GRANTED, None, None, GRANTED])

    def ask() -> str | None:
        asked.append(clock.t)
        return next(answers, REFUSED)

    k = LeaseKeeper(ask, 20.0, 4.0, end=lambda why: None, clock=clock, sleep=clock.sleep)
    assert k.first()
    k.run()
    assert asked[:4] == [0.0, 4.0, pytest.approx(4.25), pytest.approx(4.5)]
    assert k.until == pytest.approx(24.5)  # the grant of the renewal sent at 4.5


def test_the_watchdog_ends_the_process_at_the_lease_s_end_whatever_the_renewals_do():
    clock = Clock()
    ended: list[tuple[float, str]] = []
    k = LeaseKeeper(lambda: None, 20.0, 4.0, end=lambda why: ended.append((clock.t, why)), clock=clock, sleep=clock.sleep)
    k.until = 7.5  # the renewals thread is stuck in an ask meanwhile
    k.watchdog()
    assert ended == [(pytest.approx(7.5), "no renewal granted for 20 s")]


def test_the_keeper_s_threads_are_its_methods():
    """``renewals`` and ``watchdog`` run as threads of their own: nothing may shadow them."""
    k = LeaseKeeper(lambda: GRANTED, 20.0, 4.0, end=lambda why: None)
    assert callable(k.renewals) and callable(k.watchdog)


def test_the_two_threads_keep_a_lease_while_answers_come_and_end_it_once_they_stop():
    import threading
    import time as real_time

    answering = threading.Event()
    answering.set()
    ended: list[str] = []
    k = LeaseKeeper(lambda: GRANTED if answering.is_set() else None, 0.6, 0.1, end=ended.append)
    assert k.first()
    threading.Thread(target=k.watchdog, daemon=True).start()
    threading.Thread(target=k.renewals, daemon=True).start()
    real_time.sleep(1.2)
    assert ended == [] and k.grants >= 5
    answering.clear()
    deadline = real_time.monotonic() + 3.0
    while not ended and real_time.monotonic() < deadline:
        real_time.sleep(0.02)
    assert ended == ["no renewal granted for 0.6 s"]


def test_a_slot_reserved_again_after_a_restart_for_a_job_no_longer_bound_is_given_back():
    """A restart's ReserveSlot answered after the job lost its binding (its saga failed forward)
    must not leave the slot held for nobody."""
    from fabric.core.jobs.book import ReleaseSlot

    f = Fleet()
    running(f)
    out = f.core.handle(js.SlotReserved("no-such-job", 77))
    assert [type(i) for i in out] == [ReleaseSlot] and out[0].allocation_id == 77
    out = f.core.handle(js.SlotReserved("a", 78))  # bound, with its own allocation already: a late answer
    assert [type(i) for i in out] == [ReleaseSlot] and out[0].allocation_id == 78
    out = f.core.handle(js.SlotReserved("a", 79, migration_id="mig-gone"))
    assert [type(i) for i in out] == [ReleaseSlot] and out[0].allocation_id == 79


@pytest.mark.parametrize("how", ["node lost", "Ray holds its node dead"])
def test_a_handover_whose_source_is_lost_while_cutting_hands_the_job_over_only_after_the_source_s_lease(how: str):
    f = Fleet()
    key = running(f)
    granted_at = f.now
    assert renew(f, key) == GRANTED
    f.handle(js.MigrateRequested("a", "handover"))
    f.land(0)  # prepared
    f.land(0)  # ready: the source is asked to cut (past the point of no return)
    m = f.core.migrations.for_job("a")
    assert m is not None and m.phase is MigrationPhase.CUTTING and m.past_point_of_no_return
    target = m.target_key
    f.now += 2.0
    if how == "node lost":  # by missed heartbeats: the node may be stalled and run the source on
        del f.world.nodes[m.source_node]
        f.handle(js.JobsNodeLost(m.source_node))
    else:  # the watch says its node died; a node only cut off runs it on
        f.handle(js.InstanceEnded("a", key, "The actor is dead because its node has died.", node_died=True))
    f.pending.clear()  # the source's answer to the cut never comes
    fenced = [e for e in f.events if e.kind == "job_fenced"]
    assert len(fenced) == 1 and fenced[0].data["migration_id"] == m.migration_id, fenced
    assert f.core.book.job("a").binding.instance_key == key  # type: ignore[union-attr]
    assert renew(f, key) == REFUSED  # a fenced source keeps its lease no longer
    at(f, granted_at + LIMIT - 0.5)
    assert f.core.book.job("a").binding.instance_key == key  # type: ignore[union-attr]
    at(f, granted_at + LIMIT + 0.5)  # the source's lease ended: it stopped itself; the target carries the job
    rec = f.core.book.job("a")
    assert rec.state == JobState.RUNNING and rec.binding is not None and rec.binding.instance_key == target

"""The migration sagas, pure (fabric.core.jobs.migration): every strategy's path, the point of no
return, deadlines on both sides of it, aborts, failures, and the book's one-saga-per-job rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from fabric.core.errors import MigrationError, TransitionError
from fabric.core.jobs.migration import (
    LIFECYCLES, PATHS, POINT_OF_NO_RETURN, AskReady, BeginTarget, Complete, CreateTarget, Cut, MigrationBook,
    MigrationPhase as P, MigrationStrategy as S, Orphaned, PhaseEvent, PlaceTarget, Resume, RollBack, StopSource,
    StopTarget, past_point_of_no_return,
)


def kinds(out):
    return [type(i).__name__ for i in out if not isinstance(i, PhaseEvent)]


def start(strategy, book=None, now=0.0, **kw):
    book = book or MigrationBook({"ready_s": 5.0, "resume_s": 5.0, "stop_source_s": 2.0})
    m, out = book.start("job-1", strategy, "src", "primary@aaaa", 7, now, "t1", **kw)
    return book, m, out


def walk_to_target(m, now=1.0):
    out = m.target_placed("dst", 9, "primary@bbbb", now)
    assert kinds(out) == ["CreateTarget"]
    return out


def test_stop_then_start_creates_the_target_deferred_and_starts_it_only_after_the_source_stopped():
    book, m, out = start(S.STOP_THEN_START)
    assert kinds(out) == ["PlaceTarget"] and out[-1] == PlaceTarget(m.migration_id, "job-1", "src", None, False)
    create = walk_to_target(m)[-1]
    assert isinstance(create, CreateTarget) and create.deferred and not create.handover
    out = m.target_prepared(2.0)
    assert kinds(out) == ["StopSource"] and m.phase is P.STOPPING_SOURCE and m.past_point_of_no_return
    out = m.source_ended(3.0)
    assert kinds(out) == ["BeginTarget"] and m.phase is P.STARTING_TARGET
    out = m.target_began(4.0)
    assert kinds(out) == ["Complete"] and m.phase is P.DONE
    assert out[-1] == Complete(m.migration_id, "job-1", "dst", "primary@bbbb", 9, "target started")
    book.settle(m)
    assert book.for_job("job-1") is None and book.get(m.migration_id).phase is P.DONE and not book.validate_state()


def test_overlap_starts_the_target_then_stops_the_source():
    book, m, _ = start(S.OVERLAP)
    create = walk_to_target(m)[-1]
    assert not create.deferred and not create.handover
    assert kinds(m.target_prepared(2.0)) == ["StopSource"]
    assert kinds(m.source_ended(3.0)) == ["Complete"] and m.phase is P.DONE


def test_handover_asks_ready_cuts_resumes_then_stops_the_source():
    book, m, _ = start(S.HANDOVER)
    assert walk_to_target(m)[-1].handover
    assert kinds(m.target_prepared(2.0)) == ["AskReady"] and not m.past_point_of_no_return
    assert kinds(m.ready(3.0)) == ["Cut"] and m.phase is P.CUTTING and m.past_point_of_no_return
    assert kinds(m.cut(4.0)) == ["Resume"] and m.phase is P.RESUMING
    assert kinds(m.resumed(5.0)) == ["StopSource"]
    assert kinds(m.source_ended(6.0)) == ["Complete"]
    assert [h[0] for h in m.history] == [p.value for p in PATHS[S.HANDOVER]]


@pytest.mark.parametrize("strategy", list(S))
def test_an_abort_before_the_point_of_no_return_rolls_back_and_after_it_is_refused(strategy):
    book, m, _ = start(strategy)
    walk_to_target(m)
    out = m.abort("operator changed mind", 1.5)
    assert kinds(out) == ["StopTarget", "RollBack"] and m.phase is P.ABORTED
    assert out[-2] == StopTarget(m.migration_id, "job-1", "primary@bbbb", 9)
    with pytest.raises(MigrationError):
        m.abort("again", 1.6)  # ended
    book.settle(m)
    m2, _ = book.start("job-1", strategy, "src", "primary@aaaa", 7, 2.0, "t2")  # the job may move again
    walk_to_target(m2, 2.1)
    m2.target_prepared(2.2)
    if strategy is S.HANDOVER:
        m2.ready(2.3)
    assert m2.past_point_of_no_return
    with pytest.raises(MigrationError) as err:
        m2.abort("too late", 2.4)
    assert err.value.phase == m2.phase.value and m2.phase is POINT_OF_NO_RETURN[strategy]


def test_a_deadline_before_the_point_of_no_return_aborts_and_after_it_fails_forward():
    book, m, _ = start(S.HANDOVER)
    walk_to_target(m)
    m.target_prepared(2.0)  # ready_s = 5: the payload must come by 7
    assert m.expire(6.9) == [] and book.due(6.9) == []
    assert book.due(7.0) == [m]
    out = m.expire(7.0)
    assert kinds(out) == ["StopTarget", "RollBack"] and m.phase is P.ABORTED and "ready took longer" in m.reason
    book.settle(m)
    m, _ = book.start("job-1", S.HANDOVER, "src", "primary@aaaa", 7, 10.0, "t3")
    walk_to_target(m, 10.0)
    m.target_prepared(10.0)
    m.ready(10.0)
    m.cut(10.0)  # resume_s = 5
    out = m.expire(15.0)
    assert m.phase is P.LOST and kinds(out) == ["StopSource", "Complete"]  # the live target carries the job
    assert [i for i in out if isinstance(i, StopSource)][0].kill and "the target carries the job" in out[-1].reason


def test_a_slow_source_stop_is_finished_by_a_kill_and_the_saga_goes_on():
    book, m, _ = start(S.OVERLAP)
    walk_to_target(m)
    m.target_prepared(2.0)  # stop_source_s = 2
    out = m.expire(4.0)
    assert out == [StopSource(m.migration_id, "job-1", "primary@aaaa", kill=True)] and m.phase is P.STOPPING_SOURCE
    assert kinds(m.source_ended(4.5)) == ["Complete"]


def test_a_target_that_fails_before_the_point_of_no_return_aborts_and_the_source_keeps_running():
    book, m, _ = start(S.OVERLAP)
    walk_to_target(m)
    out = m.target_failed("InvalidSpecError: no", 2.0)
    assert kinds(out) == ["StopTarget", "RollBack"] and m.phase is P.ABORTED


def test_a_deferred_target_that_fails_after_the_stop_leaves_the_job_to_its_policy():
    book, m, _ = start(S.STOP_THEN_START)
    walk_to_target(m)
    m.target_prepared(2.0)
    m.source_ended(3.0)
    out = m.target_failed("init_failed", 4.0)
    assert m.phase is P.LOST and kinds(out) == ["StopTarget", "Orphaned"]
    assert out[-1] == Orphaned(m.migration_id, "job-1", "primary@aaaa", 9, "target failed: init_failed")


def test_a_source_that_dies_before_the_point_of_no_return_aborts_without_a_rollback():
    book, m, _ = start(S.HANDOVER)
    walk_to_target(m)
    m.target_prepared(2.0)
    out = m.source_ended(2.5)
    assert m.phase is P.ABORTED and kinds(out) == ["StopTarget"]  # the job's own death recovers it


def test_no_target_aborts_and_a_late_placement_gives_its_slot_back():
    book, m, _ = start(S.OVERLAP)
    out = m.target_unplaced("no capacity", 0.5)
    assert m.phase is P.ABORTED and "no target: no capacity" in m.reason and kinds(out) == ["StopTarget", "RollBack"]
    assert m.target_placed("dst", 4, "primary@cccc", 0.6) == [StopTarget(m.migration_id, "job-1", None, 4)]


def test_the_book_refuses_a_second_migration_and_the_jobs_own_node():
    book, m, _ = start(S.OVERLAP)
    with pytest.raises(MigrationError):
        book.start("job-1", S.OVERLAP, "src", "primary@aaaa", 7, 1.0, "t9")
    with pytest.raises(MigrationError):
        book.start("job-2", "handover", "src", "primary@dddd", 1, 1.0, "t9", target_node="src")
    with pytest.raises(ValueError):
        book.start("job-2", "teleport", "src", "primary@dddd", 1, 1.0, "t9")
    assert book.for_key("primary@aaaa") is m and book.in_flight() == 1 and book.in_flight(["job-2"]) == 0


def test_tables_name_the_point_of_no_return_and_refuse_skips():
    for s, table in LIFECYCLES.items():
        ponr = POINT_OF_NO_RETURN[s]
        assert P.ABORTED not in table.successors(ponr) and P.LOST in table.successors(ponr)
        assert not past_point_of_no_return(s, P.PREPARING) and past_point_of_no_return(s, ponr)
    with pytest.raises(TransitionError):
        LIFECYCLES[S.OVERLAP].check("m", P.PLACING, P.DONE)


EVENTS = st.lists(st.sampled_from(["placed", "unplaced", "prepared", "ready", "cut", "resumed", "source", "began",
                                   "tfail", "abort", "expire"]), max_size=12)


@settings(max_examples=200, deadline=None)
@given(strategy=st.sampled_from(list(S)), events=EVENTS)
def test_any_order_of_reports_keeps_the_saga_on_its_table(strategy, events):
    book, m, _ = start(strategy)
    now = 0.0
    for e in events:
        now += 3.0
        try:
            {"placed": lambda: m.target_placed("dst", 9, "primary@bbbb", now),
             "unplaced": lambda: m.target_unplaced("none", now), "prepared": lambda: m.target_prepared(now),
             "ready": lambda: m.ready(now), "cut": lambda: m.cut(now), "resumed": lambda: m.resumed(now),
             "source": lambda: m.source_ended(now), "began": lambda: m.target_began(now),
             "tfail": lambda: m.target_failed("x", now), "abort": lambda: m.abort("x", now),
             "expire": lambda: m.expire(now)}[e]()
        except MigrationError:
            assert m.terminal or m.past_point_of_no_return
    book.settle(m)
    assert not book.validate_state()
    if m.phase is P.DONE:
        assert m.target_key == "primary@bbbb"


# -- the job book's side of a move -----------------------------------------------------------------
def _book_with_running_job():
    from fabric.core.jobs import JobBook, JobSpec
    from fabric.core.settings import FailurePolicySettings

    book = JobBook(FailurePolicySettings(min_recovery_interval_s=0.0))
    book.add("j", JobSpec("enc"), 0.0)
    book.placed("j", "src", 7, "primary@aaaa", 1.0)
    book.started("j", "primary@aaaa", 2.0)
    return book


def test_the_book_moves_the_binding_at_done_and_gives_the_sources_slot_back():
    from fabric.core.jobs.book import ReleaseSlot

    book = _book_with_running_job()
    book.migrating("j", 3.0, "migrating")
    assert book.jobs["j"].state.value == "migrating" and not book.validate_state()
    out = book.migrated("j", "dst", "primary@bbbb", 9, 4.0, "source stopped")
    rec = book.jobs["j"]
    assert ReleaseSlot(7) in out and rec.binding.instance_key == "primary@bbbb" and rec.state.value == "running"
    assert rec.restarts == [] and not book.validate_state()


def test_a_rolled_back_job_runs_on_and_an_evicted_or_reclaimed_one_recovers():
    book = _book_with_running_job()
    book.migrating("j", 3.0, "migrating")
    book.migration_rolled_back("j", 4.0, "aborted")
    assert book.jobs["j"].state.value == "running" and book.jobs["j"].binding.node_id == "src"
    book.evicted("j", 5.0, reason="evicted", preempted=True)
    rec = book.jobs["j"]
    assert rec.state.value == "recovering" and rec.restarts[-1].counted is False and rec.exclude == {"src"}
    from fabric.core.errors import InvalidSpecError, JobNotFoundError
    with pytest.raises(InvalidSpecError):  # only a running job moves
        book.migrating("j", 6.0, "x")
    with pytest.raises(JobNotFoundError):
        book.migrating("nope", 6.0, "x")


def test_a_lost_node_skips_the_jobs_a_migration_owns():
    book = _book_with_running_job()
    assert book.node_lost("src", 3.0, skip={"j"}) == [] and book.jobs["j"].state.value == "running"
    assert book.node_lost("src", 3.0) and book.jobs["j"].state.value == "recovering"


def test_a_source_reported_ended_twice_moves_the_saga_once():
    book, m, _ = start(S.STOP_THEN_START)
    walk_to_target(m)
    m.target_prepared(2.0)
    m.expire(40.0)  # the graceful stop took too long: a kill is sent as well
    assert kinds(m.source_ended(40.5)) == ["BeginTarget"]
    assert m.source_ended(40.6) == [] and m.phase is P.STARTING_TARGET  # the graceful stop's late report

"""The jobs core's migration decisions: opening a saga, its steps' answers, a source's death, a lost
node, deadlines, ``fabric down`` and a restart (``fabric.core.jobs.migration`` holds each saga's
own rules; this module ties them to the job book).

``saga_out`` is where a saga's instructions meet the book: a rollback puts the job back to
running, a completion rebinds it to its target (and its target is watched as the job's instance),
an orphaned saga's job recovers by its policy; a stop of the source or of the target marks that
instance ``ignored`` (its death is nobody's recovery). The rest (place, create, ask ready, cut,
resume, stop, begin) goes on to the executor, which answers each with ``SagaStepAnswered``.
"""

from __future__ import annotations

from typing import Any, Callable

from fabric.core.errors import JobNotFoundError, MigrationError
from fabric.core.jobs.book import ReleaseSlot
from fabric.core.jobs.migration import (
    Complete, Migration, MigrationPhase, MigrationStrategy, Orphaned, PhaseEvent, RollBack, StopSource, StopTarget,
)
from fabric.core.jobs.state import JobsState, PlaceSoon, ReserveSlot, SagaEnded, WatchInstance, WatchTarget, event
from fabric.core.jobs.states import JobState
from fabric.core.jobs.stimuli import SagaStepAnswered

HANDOVER_HOOKS = ("__fabric_ready__", "__fabric_cut__", "__fabric_resume__")


def start_migration(st: JobsState, job_id: str, strategy: str | None, target_node: str | None, override: bool,
                    reason: str, token: str, now: float) -> tuple[Migration, list[Any]]:
    """Open a saga for the running job (its target is placed by the first instruction). Refused,
    with nothing changed, when it cannot move: ``MigrationError`` (or ``JobNotFoundError``)."""
    rec = st.book.jobs.get(job_id)
    if rec is None:
        raise JobNotFoundError(f"no job {job_id!r}", job_id=job_id)
    try:
        strat = MigrationStrategy(strategy or st.default_strategy)
    except ValueError:
        raise MigrationError(f"unknown strategy {strategy!r}: one of {', '.join(s.value for s in MigrationStrategy)}",
                             job_id=job_id) from None
    if rec.state != JobState.RUNNING or rec.binding is None:
        raise MigrationError(f"job {job_id} is {rec.state.value}: only a running job moves", job_id=job_id,
                             phase=rec.state.value)
    if strat is MigrationStrategy.HANDOVER and not st.world.can_hand_over(job_id):
        raise MigrationError(f"job {job_id}'s class has no handover hooks ({', '.join(HANDOVER_HOOKS)})", job_id=job_id)
    b = rec.binding
    m, first = st.migrations.start(job_id, strat, b.node_id, b.instance_key, b.allocation_id, now, token,
                                   target_node=target_node, override_reservation=override)
    out = st.book.migrating(job_id, now, f"migrating ({strat.value}, {reason})")
    return m, out + saga_out(st, m, first, now)


def saga_out(st: JobsState, m: Migration, instructions: list[Any], now: float) -> list[Any]:
    """A saga's instructions, with those that change the book carried out here (see the module
    docstring); a saga that ended is filed with the finished ones."""
    st.dirty_sagas.add(m.migration_id)
    out: list[Any] = []
    for ins in instructions:
        if isinstance(ins, PhaseEvent):
            out.append(event("migration_phase", ins.state.as_dict()))
        elif isinstance(ins, StopSource):
            st.ignored.add(ins.instance_key)
            out.append(ins)
        elif isinstance(ins, StopTarget):
            if ins.instance_key is not None:
                st.ignored.add(ins.instance_key)
            if ins.allocation_id is not None:
                out.append(ReleaseSlot(ins.allocation_id))
            out.append(ins)
        elif isinstance(ins, Complete):
            out += _complete(st, m, ins, now)
        elif isinstance(ins, RollBack):
            out += st.book.migration_rolled_back(ins.job_id, now, ins.reason)
        elif isinstance(ins, Orphaned):
            if ins.allocation_id is not None:
                out.append(ReleaseSlot(ins.allocation_id))
            st.ignored.discard(ins.source_key)
            out += st.book.died(ins.job_id, ins.source_key, now, reason=f"migration lost: {ins.reason}")
            out.append(PlaceSoon())
        else:
            out.append(ins)
    if m.terminal and m.migration_id in st.migrations.active:
        if len(st.migrations.finished) == st.migrations.finished.maxlen:  # the oldest kept leaves the store too
            st.stale_sagas.append(st.migrations.finished[0].migration_id)
        st.migrations.settle(m)
        kind = "migration_completed" if m.phase is MigrationPhase.DONE else "migration_aborted"
        out += [event(kind, m.state().as_dict()), SagaEnded(m.migration_id)]
    return out


def _complete(st: JobsState, m: Migration, ins: Complete, now: float) -> list[Any]:
    rec = st.book.jobs.get(ins.job_id)
    if rec is None or rec.state != JobState.MIGRATING:  # stopped meanwhile: the target goes too
        stop = StopTarget(m.migration_id, ins.job_id, ins.instance_key, ins.allocation_id)
        st.ignored.add(ins.instance_key)
        return ([ReleaseSlot(ins.allocation_id)] if ins.allocation_id is not None else []) + [stop]
    out = st.book.migrated(ins.job_id, ins.node_id, ins.instance_key, ins.allocation_id, now, ins.reason)
    st.last_moved[ins.job_id] = now
    return out + [WatchInstance(ins.job_id, ins.instance_key, migration_id=m.migration_id)]


_STEPS: dict[str, Callable[[Migration, float], list[Any]]] = {
    "prepared": Migration.target_prepared, "ready": Migration.ready, "cut": Migration.cut,
    "resumed": Migration.resumed, "began": Migration.target_began, "source_ended": Migration.source_ended,
}
"""Answers that move a saga on by themselves."""
_FAILURES: dict[str, Callable[[Migration, str, float], list[Any]]] = {
    "unplaced": Migration.target_unplaced, "target_failed": Migration.target_failed, "cut_failed": Migration.lose,
}
"""Answers that fail a step, with its reason."""


def step_answered(st: JobsState, s: SagaStepAnswered, now: float) -> list[Any]:
    """One step's answer moves its saga on (an answer for a saga no longer known is dropped)."""
    m = st.migrations.get(s.migration_id)
    if m is None:
        return []
    if s.answer == "placed":
        assert s.node_id is not None and s.instance_key is not None
        return saga_out(st, m, m.target_placed(s.node_id, s.allocation_id, s.instance_key, now), now)
    if s.answer == "source_stopped":  # the saga stopped its source on purpose: a stop asked meanwhile ends here too
        rec = st.book.jobs.get(m.job_id)
        out: list[Any] = []
        if rec is not None and rec.state == JobState.STOPPING and rec.binding is not None \
                and rec.binding.instance_key == m.source_key:
            out = st.book.died(m.job_id, m.source_key, now, reason="stopped")
        fenced = None if s.confirmed else fence_source(st, m, now, "the source was killed, not stopped")
        return out + (fenced if fenced is not None else saga_out(st, m, m.source_ended(now), now))
    fail = _FAILURES.get(s.answer)
    return saga_out(st, m, fail(m, s.reason, now) if fail is not None else _STEPS[s.answer](m, now), now)


def abort(st: JobsState, migration_id: str, reason: str, now: float) -> tuple[Migration, list[Any]]:
    m = st.migrations.get(migration_id)
    if m is None:
        raise MigrationError(f"no migration {migration_id!r}", migration_id=migration_id)
    return m, saga_out(st, m, m.abort(reason, now), now)


def source_died(st: JobsState, job_id: str, key: str, now: float, node_died: bool = False) -> tuple[bool, list[Any]]:
    """The job's instance ``key`` died. True when a saga owns that death (an instance stopped on
    purpose, or a source past its saga's point of no return); False when the job recovers as usual
    (a saga before its point of no return is rolled back first). ``node_died``: Ray holds it dead
    with its node, which may only be cut off and run it on: a saga past its point of no return is
    fenced on its lease (``fence_source``)."""
    if key in st.ignored:
        return True, []
    m = st.migrations.for_job(job_id)
    if m is None or m.source_key != key:
        return False, []
    fenced = fence_source(st, m, now, "Ray holds its node dead") if node_died else None
    if fenced is not None:
        return True, fenced
    owned = m.past_point_of_no_return
    return owned, saga_out(st, m, m.source_ended(now), now)


def node_lost(st: JobsState, node_id: str, now: float) -> tuple[set[str], list[Any]]:
    """Sagas with their target on the lost node fail, sagas with their source there learn it. The
    jobs whose loss the sagas own (past the point of no return) are returned: nobody recovers them."""
    owned: set[str] = set()
    out: list[Any] = []
    for m in list(st.migrations.active.values()):
        if m.target_node == node_id:
            out += saga_out(st, m, m.target_failed(f"node {node_id[:12]} lost", now), now)
        if m.source_node == node_id and not m.terminal:
            if m.past_point_of_no_return:
                owned.add(m.job_id)
                st.ignored.add(m.source_key)
            fenced = fence_source(st, m, now, f"node {node_id[:12]} lost")
            out += fenced if fenced is not None else saga_out(st, m, m.source_ended(now), now)
    return owned, out


def fence_source(st: JobsState, m: Migration, now: float, why: str) -> list[Any] | None:
    """A saga whose source's end is not sure (only a kill was sent, or its node was lost: a node cut
    off hears neither and runs it on), stopping its source or past its point of no return (a
    handover cutting or resuming): the target takes the job only once the source's lease has ended
    (``source_lease_ended``), and the source is refused renewals meanwhile. None when nothing holds
    the saga: the source is known stopped, holds no live lease, the saga is before its point of no
    return (it rolls back), or the strategy lets the two overlap anyway."""
    if m.strategy is MigrationStrategy.OVERLAP or m.source_stopped or not st.leases.live(m.source_key, now) \
            or not (m.phase is MigrationPhase.STOPPING_SOURCE or m.past_point_of_no_return):
        return None
    wait = (st.leases.ends(m.source_key) or now) - now
    st.ignored.add(m.source_key)
    st.leases.suspects[m.source_key] = m.source_node
    st.dirty_sagas.add(m.migration_id)
    m.history.append((m.phase.value, now, f"{why}: the target waits {wait:.1f} s for the source's lease to end"))
    return [event("job_fenced", {"job_id": m.job_id, "instance_key": m.source_key, "node_id": m.source_node,
                                 "wait_s": round(wait, 3), "reason": why, "migration_id": m.migration_id})]


def source_lease_ended(st: JobsState, key: str, now: float) -> list[Any] | None:
    """``key``'s lease ended without a renewal: when it is an active saga's source, that source has
    surely stopped, and a saga fenced on it (``fence_source``) goes on. None when no saga has it."""
    m = next((m for m in st.migrations.active.values() if m.source_key == key), None)
    if m is None:
        return None
    if m.source_stopped or not (m.phase is MigrationPhase.STOPPING_SOURCE or m.past_point_of_no_return):
        return []
    m.history.append((m.phase.value, now, "the source's lease ended: it stopped itself"))
    return saga_out(st, m, m.source_ended(now), now)


def stopping_source(st: JobsState, job_id: str, key: str) -> bool:
    """Whether ``key`` is the source a saga of ``job_id`` is stopping, or one fenced (``fence_source``):
    its lease is not renewed."""
    return any(m.job_id == job_id and m.source_key == key
               and (m.phase is MigrationPhase.STOPPING_SOURCE or key in st.leases.suspects)
               for m in st.migrations.active.values())


def expire_due(st: JobsState, now: float) -> list[Any]:
    """Sagas past their phase's deadline fail; one fenced on its source's lease waits for its end
    instead (``source_lease_ended``): failing forward would hand the job on while the source may serve."""
    out: list[Any] = []
    for m in st.migrations.due(now):
        if not m.source_stopped and m.source_key in st.leases.suspects:
            continue
        out += saga_out(st, m, m.expire(now), now)
    return out


def close(st: JobsState, now: float) -> list[Any]:
    """``fabric down``: each saga before its point of no return rolls back, the rest are lost
    (their targets carry the jobs)."""
    out: list[Any] = []
    for m in list(st.migrations.active.values()):
        ins = m.lose("the fabric went down", now) if m.past_point_of_no_return else m.abort("the fabric went down", now)
        out += saga_out(st, m, ins, now)
    return out


def restarted(st: JobsState, alive: frozenset[tuple[str, str]], now: float) -> tuple[set[str], list[Any]]:
    """After a restart each saga read back goes on by its phase (``Migration.restarted``): before its
    point of no return it rolls back (the job runs on at its source); from it on its target, found
    alive by name, is watched again and its slot reserved anew (gone: the saga fails forward), the
    source's death is the saga's, and the step in flight is asked again. Returns the jobs whose
    sagas go on (their instances are the sagas')."""
    owned: set[str] = set()
    out: list[Any] = []
    for m in list(st.migrations.active.values()):
        ins = m.restarted(now)
        if m.terminal:  # rolled back
            out += saga_out(st, m, ins, now)
            continue
        owned.add(m.job_id)
        st.ignored.add(m.source_key)
        rec = st.book.jobs.get(m.job_id)
        if rec is not None and rec.binding is not None and (m.job_id, m.source_key) in alive:
            out.append(ReserveSlot(m.job_id, rec.binding.node_id))  # its slot until the saga gives it back
        if m.target_key is None or (m.job_id, m.target_key) not in alive:
            ins = m.target_failed("the target is gone after a scheduler restart", now)
        else:
            if rec is not None and m.target_node is not None:
                out.append(ReserveSlot(m.job_id, m.target_node, m.migration_id))
            out.append(WatchTarget(m.migration_id, m.job_id, m.target_key))
        out += saga_out(st, m, ins, now)
    for rec in list(st.book.jobs.values()):  # migrating with no saga kept (a store older than sagas)
        if rec.state == JobState.MIGRATING and st.migrations.for_job(rec.job_id) is None:
            out += st.book.migration_rolled_back(rec.job_id, now, "the scheduler restarted mid-migration")
    return owned, out


def kept_targets(st: JobsState) -> set[tuple[str, str]]:
    """The ``(job id, instance key)`` of every saga's target in flight (a restart's sweep spares them)."""
    return {(m.job_id, m.target_key) for m in st.migrations.active.values() if m.target_key is not None}


__all__ = ["HANDOVER_HOOKS", "abort", "close", "expire_due", "kept_targets", "node_lost", "restarted", "saga_out",
           "source_died", "start_migration", "step_answered"]

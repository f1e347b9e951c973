"""The jobs core's node moves: drains, reclaim notices, evictions and rebalancing.

- **drain**: the node is cordoned in the task core (``Cordon``: its running tasks finish, nothing
  new lands), every job there is migrated by the strategy (the drain call's, else the job's
  ``drain_strategy``, else the settings' default), each job's place in the drain follows its saga
  on every tick (a ``drain_progress`` event on every change), a job that could not move is tried
  again while time is left, and once no job is left and the task core has handed the node off, Ray
  is asked to drain it (``AskRayToDrain``; ``drain.ask_ray`` false keeps drains reversible and
  Ray is not asked). At the timeout ``force`` stops what has not moved (each job recovers by its
  policy); without it the drain ends ``partial``.
- **reclaim notice**: a forced drain sized to the notice's deadline; a second notice tightens the
  drain in progress; what dies with the node is not counted against the restart ceiling.
- **evict**: cordon, then stop every job there at once; each recovers by its policy.
- **withdraw** (an uncordon): the drain and notice go; migrations in flight run on. Once Ray
  accepted there is no undrain (``TransitionError``).
- **rebalance**: after capacity joined and settled, jobs running below their ``min_tier`` move up
  by the strategy, at most ``rebalance.max_concurrent`` at a time, none within its cool-down.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fabric.core.errors import FabricError, TransitionError
from fabric.core.jobs import sagas
from fabric.core.jobs.drains import (
    FINAL_JOB_STATUSES, AskRayToDrain, DrainState, ForceStop, JobDrainStatus, NodeDrain, NodeDrainPhase,
    NodeInterruptionState, interruption_timeout,
)
from fabric.core.jobs.migration import MigrationPhase
from fabric.core.jobs.rebalance import Candidate, choose
from fabric.core.jobs.state import Cordon, JobsState, KillInstance, PlaceSoon, event
from fabric.core.jobs.states import JobState
from fabric.core.jobs.stimuli import DrainJobsRequested

RETRY_S = 2.0
"""How often a job that could not move is tried again while its drain has time left."""


def progress(d: NodeDrain) -> Any:
    return event("drain_progress", d.snapshot().as_dict())


# -- requests ---------------------------------------------------------------------------------------------
def drain(st: JobsState, s: DrainJobsRequested, now: float) -> tuple[DrainState, list[Any]]:
    """Start (or tighten) the node's drain; its snapshot."""
    ds = st.settings.drain
    timeout = ds.timeout_s if s.timeout_s is None else float(s.timeout_s)
    if s.interruption is not None:
        timeout = interruption_timeout(s.interruption, s.deadline, now, ds)
    d = st.drains.get(s.node_id)
    if d is not None:  # one drain per node: a second notice (or a sterner call) tightens it
        out: list[Any] = []
        if s.interruption is not None or s.force or s.timeout_s is not None:
            if d.tighten(timeout, now, force=s.force or s.interruption is not None, interruption=s.interruption,
                         interruption_deadline=s.deadline):
                out.append(progress(d))
        return d.snapshot(), out
    strategy = s.strategy  # None: each job's own drain_strategy, else the settings' default (``_move``)
    ids = [r.job_id for r in st.book.on_node(s.node_id)
           if r.state in (JobState.STARTING, JobState.RUNNING, JobState.MIGRATING)]
    d = st.drains.start(s.node_id, ids, now, timeout_s=timeout, force=s.force, strategy=strategy,
                        interruption=s.interruption, interruption_deadline=s.deadline)
    out = [Cordon(s.node_id, timeout)]
    for job_id in ids:
        out += _move(st, d, job_id, now)
    d.started_all(now)
    out.append(progress(d))
    out += step(st, now)
    return d.snapshot(), out


def interrupt(st: JobsState, s: DrainJobsRequested, now: float) -> tuple[NodeInterruptionState, list[Any]]:
    """A provider's reclaim notice: a forced drain sized to its deadline, the node under notice."""
    assert s.interruption is not None
    st.preempting.add(s.node_id)
    state, out = drain(st, s, now)
    notice = NodeInterruptionState(node_id=s.node_id, kind=s.interruption, deadline=s.deadline, noticed_at=now,
                                   drain=state)
    st.notices[s.node_id] = notice
    return notice, out + [event("node_interrupted", notice.as_dict())]


def evict(st: JobsState, node_id: str, now: float) -> tuple[list[str], list[Any]]:
    """Stop the node's jobs now (cordoned first); each recovers by its policy."""
    out: list[Any] = [Cordon(node_id)]
    stopped = []
    for rec in st.book.on_node(node_id):
        out += stop_on_node(st, rec.job_id, node_id, f"evicted from {node_id[:12]}", now)
        stopped.append(rec.job_id)
    return stopped, out + [PlaceSoon()]


def withdraw(st: JobsState, node_id: str, now: float) -> tuple[DrainState | None, list[Any]]:
    """An uncordon (see the module docstring)."""
    last = st.drains.status(node_id)
    if last is not None and last.ray_drain == "accepted":
        raise TransitionError(f"node {node_id[:12]}", "drained", "active",
                              "Ray drained it (there is no undrain): it stays cordoned until it goes")
    st.notices.pop(node_id, None)
    st.preempting.discard(node_id)
    st.asks.pop(node_id, None)
    try:
        state = st.drains.withdraw(node_id, now)
    except TransitionError:  # Ray was asked already: there is no undrain
        return st.drains.status(node_id), []
    return state, [] if state is None else [event("drain_progress", state.as_dict())]


def ray_answered(st: JobsState, node_id: str, accepted: bool, message: str, reason: str, now: float) -> list[Any]:
    """Ray's answer to the drain it was asked (``reason``): the drain ends ``done`` or ``failed``."""
    if st.drains.get(node_id) is None:
        return []
    state = st.drains.ray_answered(node_id, accepted, message, now)
    out = [event("drain_progress", state.as_dict())]
    if not accepted:
        out.append(event("drain_refused", {"node_id": node_id, "reason": reason, "message": message}))
    return out


def node_lost(st: JobsState, node_id: str, now: float) -> list[Any]:
    d = st.drains.get(node_id)
    out: list[Any] = []
    if d is not None and d.phase is not NodeDrainPhase.DRAINING:  # once Ray was asked, its answer ends it
        state = st.drains.fail(node_id, "the node left the fleet", now)
        if state is not None:
            out.append(event("drain_progress", state.as_dict()))
    st.notices.pop(node_id, None)
    return out


def stop_on_node(st: JobsState, job_id: str, node_id: str, reason: str, now: float) -> list[Any]:
    """Stop the job's instance there now; it recovers by its policy (not counted under a notice)."""
    out: list[Any] = []
    m = st.migrations.for_job(job_id)
    if m is not None and m.past_point_of_no_return:  # the saga is taking it off the node: evicting it
        return out                                   # too would start a second instance elsewhere
    if m is not None:
        out += sagas.saga_out(st, m, m.abort(reason, now), now)
    rec = st.book.jobs.get(job_id)
    if rec is None or rec.binding is None or rec.binding.node_id != node_id:
        return out
    key = rec.binding.instance_key
    st.ignored.add(key)
    out.append(KillInstance(job_id, key))
    return out + st.book.evicted(job_id, now, reason=reason, preempted=node_id in st.preempting)


# -- the tick -------------------------------------------------------------------------------------------
def step(st: JobsState, now: float) -> list[Any]:
    """Follow each job's saga, retry what could not move, act on the drains' deadlines, ask Ray once
    a node's jobs are off and its running tasks finished (the task core handed it off); then rebalance."""
    out: list[Any] = []
    for d in st.drains.active():
        before = d.snapshot()
        out += _follow(st, d, now)
        if d.snapshot() != before:
            out.append(progress(d))
    for action in st.drains.step(now, st.world.handed_off):
        d_state = st.drains.status(action.node_id)
        if isinstance(action, ForceStop):
            for job_id in action.job_ids:
                out += stop_on_node(st, job_id, action.node_id, f"still on {action.node_id[:12]} at the drain's timeout", now)
            out.append(PlaceSoon())
        elif isinstance(action, AskRayToDrain) and not st.settings.drain.ask_ray and action.reason != "PREEMPTION":
            kept = st.drains.get(action.node_id)
            if kept is not None:  # the operator keeps drains reversible: Ray is not asked
                kept.ray_answered(True, "Ray not asked (drain.ask_ray is false)", now)
                kept.ray_drain = "not asked"
                st.drains.sweep()
                d_state = kept.snapshot()
        elif isinstance(action, AskRayToDrain):
            st.asks[action.node_id] = action
        if d_state is not None:
            out.append(event("drain_progress", d_state.as_dict()))
    for node_id, ask in list(st.asks.items()):  # the drain waited for the node's tasks (or its deadline)
        del st.asks[node_id]
        out.append(ask)
    return out + rebalance(st, now)


def _follow(st: JobsState, d: NodeDrain, now: float) -> list[Any]:
    out: list[Any] = []
    for job_id in d.remaining():
        rec = st.book.jobs.get(job_id)
        entry = d.job(job_id)
        m = st.migrations.get(entry.migration_id) if entry.migration_id else None
        if rec is None or rec.binding is None or rec.binding.node_id != d.node_id:
            done = m is not None and m.phase is MigrationPhase.DONE and entry.status is JobDrainStatus.MIGRATING
            why = "migrated" if done else (f"left the node ({rec.state.value})" if rec is not None else "gone")
            d.set_job(job_id, JobDrainStatus.MIGRATED if done else JobDrainStatus.MOVED, reason=why)
            continue
        if entry.status is JobDrainStatus.MIGRATING and m is not None and m.terminal:
            d.set_job(job_id, JobDrainStatus.STUCK, reason=f"migration {m.phase.value}: {m.reason}")
        elif entry.status is JobDrainStatus.STUCK and now >= st.retry_at.get((d.node_id, job_id), 0.0):
            out += _move(st, d, job_id, now)
    return out


def _move(st: JobsState, d: NodeDrain, job_id: str, now: float) -> list[Any]:
    if d.terminal or d.job(job_id).status in FINAL_JOB_STATUSES:  # a tick moved it on meanwhile
        return []
    st.retry_at[(d.node_id, job_id)] = now + RETRY_S
    rec = st.book.jobs.get(job_id)
    running = st.migrations.for_job(job_id)
    if running is not None:
        d.set_job(job_id, JobDrainStatus.MIGRATING, migration_id=running.migration_id, reason="migrating")
        return []
    if rec is None or rec.state != JobState.RUNNING:
        if d.job(job_id).status is not JobDrainStatus.STUCK:
            d.set_job(job_id, JobDrainStatus.STUCK, reason=f"not running ({rec.state.value if rec else 'gone'}): tried again")
        return []
    try:
        strategy = d.strategy or rec.spec.drain_strategy or st.settings.migration.default_strategy
        m, out = sagas.start_migration(st, job_id, strategy, None, False, f"drain of {d.node_id[:12]}", st.tokens(), now)
    except FabricError as exc:
        if d.job(job_id).status is not JobDrainStatus.STUCK or d.job(job_id).reason != str(exc):
            d.set_job(job_id, JobDrainStatus.STUCK, reason=str(exc))
        return []
    d.set_job(job_id, JobDrainStatus.MIGRATING, migration_id=m.migration_id, reason="migrating")
    return out


# -- after a restart -------------------------------------------------------------------------------------
def resumed(st: JobsState, now: float) -> list[Any]:
    """Every drain in progress goes on: its node is cordoned again in the task core, a job whose
    migration the restart forgot is tried again, a drain Ray was asked about is asked again; a node
    that left meanwhile ends its drain (``done`` when Ray had been asked, else ``failed``)."""
    out: list[Any] = []
    for d in st.drains.active():
        if st.world.record(d.node_id) is None:
            if d.phase is NodeDrainPhase.DRAINING:
                st.drains.ray_answered(d.node_id, True, "the node left after Ray was asked to drain it "
                                       "(its answer was not seen: the scheduler restarted)", now)
            else:
                st.drains.fail(d.node_id, "the node left the fleet while the scheduler was away", now)
            out.append(progress(d))
            continue
        if d.phase is NodeDrainPhase.DRAINING:
            st.asks[d.node_id] = d.ray_ask()
        else:
            out.append(Cordon(d.node_id, max(0.0, d.deadline - now)))
        for job_id in d.remaining():
            entry = d.job(job_id)
            if entry.status is JobDrainStatus.MIGRATING and (
                    entry.migration_id is None or st.migrations.get(entry.migration_id) is None):
                d.set_job(job_id, JobDrainStatus.STUCK, reason="its migration was forgotten in a scheduler restart: tried again")
        out.append(progress(d))
    return out


# -- rebalance --------------------------------------------------------------------------------------------
def rebalance(st: JobsState, now: float) -> list[Any]:
    rs = st.settings.rebalance
    for job_id, mid in list(st.rebalancing.items()):
        m = st.migrations.get(mid)
        if m is None or m.terminal:
            del st.rebalancing[job_id]
    if not rs.enabled or st.rebalance_after is None or now < st.rebalance_after:
        return []
    st.rebalance_after = None
    candidates = []
    for rec in st.book.jobs.values():
        if rec.state != JobState.RUNNING or rec.binding is None or st.migrations.for_job(rec.job_id) is not None:
            continue
        node = st.world.record(rec.binding.node_id)
        if node is None or node.tier is None or rec.binding.node_id in st.drains:
            continue
        since = next((at for at, state, _ in reversed(rec.history) if state == "running"), rec.created_at)
        candidates.append(Candidate(rec.job_id, node.tier, rec.spec.requirement.min_tier,
                                    st.last_moved.get(rec.job_id), since))
    out: list[Any] = []
    for job_id in choose(candidates, in_flight=len(st.rebalancing), now=now, settings=rs):
        rec = st.book.jobs[job_id]
        assert rec.binding is not None
        ctx = replace(st.book.context(rec, st.where, exclude=[rec.binding.node_id]), recovering=False,
                      launch_policy="allow_spare")
        try:
            better = st.world.better_node(rec.spec.requirement, ctx)
        except Exception:
            continue
        if better is None or better[1] < rec.spec.requirement.min_tier:
            continue  # nothing better has room: it stays
        target, tier = better
        strategy = rs.strategy or ("handover" if st.world.can_hand_over(job_id) else "stop_then_start")
        old = st.world.record(rec.binding.node_id)
        from_node = rec.binding.node_id
        try:
            m, moved = sagas.start_migration(st, job_id, strategy, target, False, "rebalance", st.tokens(), now)
        except FabricError as exc:
            out.append(event("rebalance_skipped", {"job_id": job_id, "reason": str(exc)}))
            continue
        out += moved
        st.rebalancing[job_id] = m.migration_id
        out.append(event("job_rebalanced", {"job_id": job_id, "migration_id": m.migration_id, "strategy": strategy,
                                            "from_node": from_node, "from_tier": str(old.tier if old else None),
                                            "to_node": target, "to_tier": str(tier),
                                            "min_tier": str(rec.spec.requirement.min_tier)}))
    return out


__all__ = ["RETRY_S", "drain", "evict", "interrupt", "node_lost", "ray_answered", "rebalance", "resumed", "step",
           "stop_on_node", "withdraw"]

"""JobsCore: the long-running side's one way in, ``handle(stimulus) -> instructions``.

It composes the job book (jobs and bundles, ``fabric.core.jobs.book``), the migration book (sagas,
``fabric.core.jobs.migration`` via ``fabric.core.jobs.sagas``), the node drains and reclaim notices
and rebalancing (``fabric.core.jobs.node_moves``). One handler table maps each stimulus
(``fabric.core.jobs.stimuli``) to its handler; a bounded log keeps the last stimuli handled; every
instruction returned carries the ``stimulus_id`` of what caused it; ``validate_state`` checks every
invariant across the books. Every lifecycle goes through its transition table (a forbidden move
raises ``TransitionError``).

Pure, like the rest of ``fabric.core``: no Ray, no I/O; time and fresh tokens are injected, the
fleet is read through ``JobsWorld``. ``actors.jobs`` carries the instructions out and answers
each with the stimulus that says what came of it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any, Callable

from fabric.core.errors import InvalidSpecError, JobNotFoundError
from fabric.core.jobs import node_moves, sagas
from fabric.core.jobs.fence import GRANTED, REFUSED
from fabric.core.jobs.book import ReleaseSlot, StopInstance, summarize
from fabric.core.jobs.bundles import BundleStatus
from fabric.core.jobs.state import (
    DropPayload, JobsState, JobsWorld, KillInstance, PlaceSoon, Reply, ReserveSlot, StorePayload, WatchInstance, event,
)
from fabric.core.jobs.states import BundleState, JobState
from fabric.core.jobs import stimuli as js
from fabric.core.scheduling.invariants import InvalidStateError
from fabric.core.settings import FabricSettings

STIMULUS_LOG_SIZE = 1000


class JobsCore(JobsState):
    """The jobs core (see the module docstring): its state is ``JobsState``'s, its one way in ``handle``."""

    def __init__(self, settings: FabricSettings, world: JobsWorld, clock: Callable[[], float],
                 tokens: Callable[[], str], *, log_size: int = STIMULUS_LOG_SIZE) -> None:
        super().__init__(settings, world, clock, tokens)
        self.log: deque[tuple[str, str, float]] = deque(maxlen=max(1, log_size))
        """(kind, stimulus_id, at) of the last stimuli handled, oldest first."""
        self.stimuli_handled = 0
        self._handlers: dict[type, Callable[[Any, float], list[Any]]] = {
            js.JobSubmitted: self._submitted, js.StopRequested: self._stop, js.JobPlaced: self._placed,
            js.JobUnplaced: self._unplaced, js.InstanceStarted: self._started, js.InstanceEnded: self._ended,
            js.DormantSet: self._dormant, js.BundleCreated: self._bundle_created, js.BundleUpdated: self._bundle_updated,
            js.BundleDeleted: self._bundle_deleted, js.MigrateRequested: self._migrate, js.AbortRequested: self._abort,
            js.SagaStepAnswered: lambda s, now: sagas.step_answered(self, s, now),
            js.Closing: lambda s, now: sagas.close(self, now), js.DrainJobsRequested: self._drain,
            js.EvictRequested: self._evict, js.WithdrawRequested: self._withdraw,
            js.RayDrainAnswered: lambda s, now: node_moves.ray_answered(self, s.node_id, s.accepted, s.message, s.reason, now),
            js.DrainsFollowed: lambda s, now: node_moves.step(self, now),
            js.JobsNodeLost: self._node_lost, js.CapacityJoined: self._capacity_joined,
            js.PlacementsDue: self._placements_due, js.JobsTick: self._tick, js.Restarted: self._restarted,
            js.SlotReserved: self._slot_reserved, js.LeaseAsked: self._lease_asked,
        }

    # -- the one way in ---------------------------------------------------------------------------------
    def handle(self, stimulus: Any) -> list[Any]:
        """React to one stimulus; every instruction returned carries its ``stimulus_id``. A request
        that cannot be met with nothing changed raises its ``FabricError``."""
        handler = self._handlers.get(type(stimulus))
        if handler is None:
            raise TypeError(f"not a jobs stimulus: {type(stimulus).__name__}")
        now = self.clock()
        self.log.append((stimulus.kind, stimulus.stimulus_id, now))
        self.stimuli_handled += 1
        sid = stimulus.stimulus_id
        return [ins if getattr(ins, "stimulus_id", "") else replace(ins, stimulus_id=sid) for ins in handler(stimulus, now)]

    def stimulus_log(self) -> list[dict[str, Any]]:
        return [{"kind": kind, "stimulus_id": sid, "at": at} for kind, sid, at in self.log]

    def problems(self) -> list[str]:
        """Every broken invariant across the books, in words (empty when none)."""
        out = self.book.validate_state() + self.migrations.validate_state() + self.drains.problems()
        for m in self.migrations.active.values():
            rec = self.book.jobs.get(m.job_id)
            if rec is None:
                out.append(f"saga {m.migration_id} moves job {m.job_id}, which the book does not hold")
            elif rec.terminal and not m.past_point_of_no_return:
                out.append(f"saga {m.migration_id} is in flight for job {m.job_id}, which ended {rec.state.value}")
        for node_id in self.notices:
            if node_id not in self.preempting:
                out.append(f"node {node_id} has a reclaim notice but is not under notice")
        for job_id, mid in self.rebalancing.items():
            moving = self.migrations.get(mid)
            if moving is None or moving.job_id != job_id:
                out.append(f"rebalance of {job_id} names saga {mid}, which is not that job's")
        return out

    def validate_state(self) -> None:
        """Check every invariant; ``InvalidStateError`` lists each one broken."""
        found = self.problems()
        if found:
            raise InvalidStateError(found)

    # -- jobs -------------------------------------------------------------------------------------------
    def _submitted(self, s: js.JobSubmitted, now: float) -> list[Any]:
        known = self.book.jobs.get(s.job_id)
        if known is not None:  # a caller's retry of a submit whose answer it did not get: the same job
            if known.spec != s.spec or known.bundle_id != s.bundle_id:
                raise InvalidSpecError(f"a different job {s.job_id!r} exists already", field="job_id")
            return [Reply(s.job_id)]
        self.book.add(s.job_id, s.spec, now, bundle_id=s.bundle_id, replica=s.replica, dormant=s.dormant)
        return [Reply(s.job_id)] + ([PlaceSoon()] if self.resumed else [])

    def _stop(self, s: js.StopRequested, now: float) -> list[Any]:
        out = self.book.stop(s.job_id, now, reason=s.reason)
        return out + [Reply(self.book.job(s.job_id).state.value)]

    def _placed(self, s: js.JobPlaced, now: float) -> list[Any]:
        if s.job_id not in self.book.jobs:
            return []
        return self.book.placed(s.job_id, s.node_id, s.allocation_id, s.instance_key, now, self.where)

    def _unplaced(self, s: js.JobUnplaced, now: float) -> list[Any]:
        return self.book.unplaced(s.job_id, s.reason, now) if s.job_id in self.book.jobs else []

    def _started(self, s: js.InstanceStarted, now: float) -> list[Any]:
        return self.book.started(s.job_id, s.instance_key, now)

    def _ended(self, s: js.InstanceEnded, now: float) -> list[Any]:
        """An instance ended. A saga may own its end (an instance stopped on purpose, a source past
        its point of no return); a job stopping stops; else the job recovers by its policy (not
        counted when its node is under a reclaim notice)."""
        rec = self.book.jobs.get(s.job_id)
        bound_here = rec is not None and rec.binding is not None and rec.binding.instance_key == s.instance_key
        stopping = bound_here and rec is not None and rec.state == JobState.STOPPING
        owned, out = sagas.source_died(self, s.job_id, s.instance_key, now, s.node_died)
        if owned and not stopping:
            return out
        preempted = s.preempted or (bound_here and rec is not None and rec.binding is not None
                                    and rec.binding.node_id in self.preempting)
        out += self.book.died(s.job_id, s.instance_key, now, reason=s.reason, preempted=preempted, invalid_spec=s.invalid,
                              fenced=s.node_died)
        return out + [PlaceSoon()]

    # -- the fence (fabric.core.jobs.fence) -------------------------------------------------------------
    def _lease_asked(self, s: js.LeaseAsked, now: float) -> list[Any]:
        """Renew the lease of the instance the job is bound to, or of a migration's target; refuse
        any other (an instance replaced while cut off, a job that ended)."""
        rec = self.book.jobs.get(s.job_id)
        ok = rec is not None and rec.binding is not None and rec.binding.instance_key == s.instance_key
        ok = ok or any(m.job_id == s.job_id and m.target_key == s.instance_key for m in self.migrations.active.values())
        ok = ok and not sagas.stopping_source(self, s.job_id, s.instance_key)  # being stopped: it ends within its lease
        out: list[Any] = []
        if ok and s.instance_key in self.leases.suspects:
            out.append(event("job_reconnected", {"job_id": s.job_id, "instance_key": s.instance_key,
                                                 "node_id": self.leases.suspects[s.instance_key]}))
        if ok:
            self.leases.granted(s.instance_key, now)
        return out + [Reply(GRANTED if ok else REFUSED)]

    def _lapsed(self, now: float) -> list[Any]:
        """Instances whose leases ended without a renewal stopped themselves: their jobs recover."""
        out: list[Any] = []
        for key in self.leases.expired(now):
            last = self.leases.last_grant(key) or now
            self.leases.forget(key)
            saga = sagas.source_lease_ended(self, key, now)
            if saga is not None:  # a saga's source: the saga goes on (a fenced stop_then_start's target begins)
                out += saga
                continue
            rec = next((r for r in self.book.bound() if r.binding is not None and r.binding.instance_key == key), None)
            if rec is None or any(m.job_id == rec.job_id for m in self.migrations.active.values()):
                continue  # nobody's instance any more, or a saga's to settle
            self.ignored.add(key)
            out += self.book.died(rec.job_id, key, now, reason=f"no lease renewal for {now - last:.0f} s (it stopped itself)",
                                  fenced=True)
            out.append(KillInstance(rec.job_id, key))
        return out

    def _dormant(self, s: js.DormantSet, now: float) -> list[Any]:
        b = self._bundle(s.bundle_id)
        job_id = b.jobs.get((s.replica, s.job))
        if job_id is None:
            raise JobNotFoundError(f"bundle {s.bundle_id!r} has no job {s.job!r} in replica {s.replica}", job_id=s.job)
        rec = self.book.job(job_id)
        rec.dormant = s.dormant
        self.book.dirty.add(job_id)
        out = [] if s.dormant else self._due(now)
        return out + [Reply(rec.state.value)]

    # -- bundles ----------------------------------------------------------------------------------------
    def _bundle(self, bundle_id: str) -> Any:
        b = self.book.bundles.get(bundle_id)
        if b is None:
            raise JobNotFoundError(f"no bundle {bundle_id!r}", job_id=bundle_id)
        return b

    def _bundle_created(self, s: js.BundleCreated, now: float) -> list[Any]:
        bid = s.bundle.bundle_id
        if bid in self.book.bundles:
            raise InvalidSpecError(f"a bundle {bid!r} exists already (update_bundle changes it)", field="bundle_id")
        self.book.add_bundle(bid, s.bundle)
        out: list[Any] = []
        for job_id, spec, replica, dormant in s.jobs:
            self.book.add(job_id, spec, now, bundle_id=bid, replica=replica, dormant=dormant)
            out.append(StorePayload(job_id, replica, spec.name))
        out.append(event("bundle_updated", {"bundle_id": bid, "created": True}))
        return out + self._due(now)

    def _bundle_updated(self, s: js.BundleUpdated, now: float) -> list[Any]:
        """A bundle revived: histories and its broken mark cleared, jobs it no longer names stop, new
        ones are added, ended ones start again (a new id), running ones keep running with their new
        spec (it applies from their next placement)."""
        bid = s.bundle.bundle_id
        rec = self.book.bundles.get(bid)
        if rec is None or rec.state == BundleState.DELETING.value:
            raise JobNotFoundError(f"no bundle {bid!r} to update (create_bundle makes one)", job_id=bid)
        wanted = {(replica, name): (spec, manual, new_id) for replica, name, spec, manual, new_id in s.wanted}
        out: list[Any] = []
        self.book.add_bundle(bid, s.bundle)
        self.book.set_bundle_state(bid, BundleState.LIVE, reasons=[])
        added: list[tuple[str, Any, int, bool]] = []
        for key, job_id in list(rec.jobs.items()):
            job = self.book.jobs.get(job_id)
            if key not in wanted:
                if job is not None and not job.terminal:
                    out += self.book.stop(job_id, now, reason="no longer in its bundle")
                del rec.jobs[key]
                continue
            spec, manual, new_id = wanted.pop(key)
            if job is None or job.terminal:  # ended (broken, dropped, stopped): it starts again
                if job is not None:
                    self.book.forget(job_id)
                    out.append(DropPayload(job_id))
                del rec.jobs[key]
                added.append((new_id, spec, key[0], manual))
                continue
            job.spec, job.restarts = spec, []
            job.dormant = job.dormant and manual
            self.book.dirty.add(job_id)
            out.append(StorePayload(job_id, key[0], key[1]))
        added += [(new_id, spec, replica, manual) for (replica, _), (spec, manual, new_id) in wanted.items()]
        for job_id, spec, replica, manual in added:
            self.book.add(job_id, spec, now, bundle_id=bid, replica=replica, dormant=manual)
            out.append(StorePayload(job_id, replica, spec.name))
        self.book.dirty_bundles.add(bid)
        out.append(event("bundle_updated", {"bundle_id": bid, "created": False}))
        return out + self._due(now)

    def _bundle_deleted(self, s: js.BundleDeleted, now: float) -> list[Any]:
        rec = self._bundle(s.bundle_id)
        out: list[Any] = []
        self.book.set_bundle_state(s.bundle_id, BundleState.DELETING)
        for job_id in rec.jobs.values():
            if job_id in self.book.jobs:
                out += self.book.stop(job_id, now, reason="bundle deleted")
        return out + [Reply(self.bundle_status(s.bundle_id))] + self._reap()

    def _reap(self) -> list[Any]:
        """Forget deleted bundles whose jobs have all ended."""
        out: list[Any] = []
        for bundle_id, rec in list(self.book.bundles.items()):
            if rec.state != BundleState.DELETING.value:
                continue
            if all(j is None or j.terminal for j in (self.book.jobs.get(jid) for jid in rec.jobs.values())):
                for jid in rec.jobs.values():
                    self.book.forget(jid)
                    out.append(DropPayload(jid))
                del self.book.bundles[bundle_id]
                self.book.dirty_bundles.add(bundle_id)
                out.append(event("bundle_deleted", {"bundle_id": bundle_id}))
        return out

    # -- moves ------------------------------------------------------------------------------------------
    def _migrate(self, s: js.MigrateRequested, now: float) -> list[Any]:
        m, out = sagas.start_migration(self, s.job_id, s.strategy, s.target_node, s.override_reservation, s.reason,
                                       self.tokens(), now)
        return out + [Reply(m.migration_id)]

    def _abort(self, s: js.AbortRequested, now: float) -> list[Any]:
        m, out = sagas.abort(self, s.migration_id, s.reason, now)
        return out + [Reply(m.migration_id)]

    def _drain(self, s: js.DrainJobsRequested, now: float) -> list[Any]:
        if s.interruption is not None:
            notice, out = node_moves.interrupt(self, s, now)
            return out + [Reply(notice)]
        state, out = node_moves.drain(self, s, now)
        return out + [Reply(state)]

    def _evict(self, s: js.EvictRequested, now: float) -> list[Any]:
        stopped, out = node_moves.evict(self, s.node_id, now)
        return out + [Reply(stopped)]

    def _withdraw(self, s: js.WithdrawRequested, now: float) -> list[Any]:
        state, out = node_moves.withdraw(self, s.node_id, now)
        return out + [Reply(state)]

    # -- the fleet and the clock ------------------------------------------------------------------------
    def _node_lost(self, s: js.JobsNodeLost, now: float) -> list[Any]:
        owned, out = sagas.node_lost(self, s.node_id, now)
        for r in self.book.on_node(s.node_id):  # leases still live: kept, until they end or renew (fabric.core.jobs.fence)
            if r.binding is not None and r.job_id not in owned and self.leases.live(r.binding.instance_key, now):
                self.leases.suspects[r.binding.instance_key] = s.node_id
                owned.add(r.job_id)
                out.append(event("job_disconnected", {"job_id": r.job_id, "instance_key": r.binding.instance_key,
                                                      "node_id": s.node_id, "lease_ends_in_s": round(
                                                          (self.leases.ends(r.binding.instance_key) or now) - now, 3)}))
        fenced = [(r.job_id, r.binding.instance_key) for r in self.book.on_node(s.node_id)
                  if r.binding is not None and r.job_id not in owned]
        out += self.book.node_lost(s.node_id, now, skip=owned, preempted=s.node_id in self.preempting)
        for job_id, key in fenced:  # a node the fleet lost may still run it (heartbeats stalled, not dead): killed
            self.ignored.add(key)   # before its job runs elsewhere, so that it never runs twice
            out.append(KillInstance(job_id, key))
        self.preempting.discard(s.node_id)
        return out + node_moves.node_lost(self, s.node_id, now) + [PlaceSoon()]

    def _capacity_joined(self, s: js.CapacityJoined, now: float) -> list[Any]:
        self.rebalance_after = now + self.settings.rebalance.settle_s
        out: list[Any] = []
        for job_id, node_id in s.provisioned_for:
            out += self.book.provisioned_for(job_id, node_id, now)
        return out + ([PlaceSoon()] if self.book.capacity_joined(now) else [])

    def _due(self, now: float) -> list[Any]:
        return self.book.due(now, self.where) if self.resumed else []

    def _placements_due(self, s: js.PlacementsDue, now: float) -> list[Any]:
        return self._due(now)

    def _tick(self, s: js.JobsTick, now: float) -> list[Any]:
        if not self.resumed:
            return []
        out = sagas.expire_due(self, now) + node_moves.step(self, now) + self._lapsed(now)
        return out + self._due(now) + self._reap()

    # -- after a restart --------------------------------------------------------------------------------
    def _restarted(self, s: js.Restarted, now: float) -> list[Any]:
        """The state read back goes on: sagas by their phase first; then each bound instance found
        alive is watched again and its slot reserved anew, one that died meanwhile is recovered by
        its policy (not counted under a reclaim notice, nor when it died with a head node); a job stopping is stopped; instances bound
        to no job and no saga are killed (no job ever runs twice); drains in progress go on."""
        self.resumed = True
        self.leases.restarted(now, [r.binding.instance_key for r in self.book.bound() if r.binding is not None]
                              + [m.target_key for m in self.migrations.active.values() if m.target_key])
        for rec in self.book.bound():  # the old process's allocation ids mean nothing in the task core now
            b = rec.binding
            if b is not None and b.allocation_id is not None:
                rec.binding = replace(b, allocation_id=None)
                self.book.dirty.add(rec.job_id)
        owned, out = sagas.restarted(self, s.alive, now)
        if s.listed is not None:
            out += self._sweep(s.listed, sagas.kept_targets(self))
        for rec in self.book.bound():
            b = rec.binding
            assert b is not None
            if rec.state == JobState.STOPPING:  # asked again, also under a saga: its end is the job's
                out.append(StopInstance(rec.job_id, b, graceful=False))
            elif rec.job_id in owned:
                continue
            elif (rec.job_id, b.instance_key) not in s.alive and b.node_id in s.head_nodes:
                out += self.book.died(rec.job_id, b.instance_key, now, preempted=True,
                                      reason="instance gone with the head node (the fabric's control plane failed, not the job)")
            elif (rec.job_id, b.instance_key) not in s.alive:
                out += self.book.died(rec.job_id, b.instance_key, now, reason="instance gone while the scheduler was away",
                                      preempted=b.node_id in self.preempting)
            else:
                out += [ReserveSlot(rec.job_id, b.node_id),
                        WatchInstance(rec.job_id, b.instance_key, starting=rec.state == JobState.STARTING)]
        return out + node_moves.resumed(self, now)

    def _sweep(self, listed: frozenset[tuple[str, str]], spare: set[tuple[str, str]]) -> list[Any]:
        out: list[Any] = []
        for job_id, key in sorted(listed):
            rec = self.book.jobs.get(job_id)
            keep = rec.binding.instance_key if rec is not None and rec.binding is not None else None
            if key != keep and (job_id, key) not in spare:
                self.ignored.add(key)
                out += [KillInstance(job_id, key), event("instance_swept", {
                    "job_id": job_id, "instance_key": key, "reason": "bound to no job after a scheduler restart"})]
        return out

    def _slot_reserved(self, s: js.SlotReserved, now: float) -> list[Any]:
        """A slot reserved again after a restart goes to its saga's target or its job's binding; one
        that answers too late (the saga ended, the job was unbound or bound anew meanwhile) is given
        back, never held for nobody."""
        late = [ReleaseSlot(s.allocation_id)] if s.allocation_id is not None else []
        if s.migration_id is not None:
            m = self.migrations.get(s.migration_id)
            if m is None or m.terminal:
                return late
            m.target_allocation = s.allocation_id
            self.dirty_sagas.add(m.migration_id)
            return []
        rec = self.book.jobs.get(s.job_id)
        if rec is None or rec.binding is None or rec.binding.allocation_id is not None:
            return late
        rec.binding = replace(rec.binding, allocation_id=s.allocation_id)
        self.book.dirty.add(s.job_id)
        return []

    # -- reads ------------------------------------------------------------------------------------------
    def status(self, job_id: str) -> Any:
        return summarize(self.book.job(job_id), self.clock())

    def bundle_status(self, bundle_id: str) -> BundleStatus:
        rec = self._bundle(bundle_id)
        return BundleStatus(bundle_id=bundle_id, state=rec.state, replicas=rec.bundle.replica_count,
                            jobs={f"{r}/{n}": jid for (r, n), jid in sorted(rec.jobs.items())}, reasons=list(rec.reasons))

    def bundle_statuses(self) -> list[BundleStatus]:
        return [self.bundle_status(b) for b in sorted(self.book.bundles)]


__all__ = ["JobsCore", "STIMULUS_LOG_SIZE"]

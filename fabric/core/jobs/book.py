"""The jobs the scheduler keeps, as decisions: ``JobBook`` (pure; every call is given ``now``).

The book holds every job (``JobRecord``: its spec, state, binding to a node and instance, restart
history) and every bundle the jobs belong to. Each call says what happened (a job was added, the
engine placed it, its instance started, died, stopped; a node left; time passed) and returns the
instructions for the scheduler actor to carry out, in order: place a job, start or stop an
instance, give a slot back, end a single-use job's node, emit an event. The actor does the I/O
(Ray, the store) and reports what came of it with the next call; the book never waits and never
reads a clock.

Recovery follows ``fabric.core.jobs.restarts``: the node a job died on is excluded from its next
placement, spares are ranked by its policy, attempts are ``min_recovery_interval_s`` apart, and
past the ceiling an essential job breaks its bundle (every other job of it stops; nothing of it is
placed again until the bundle is updated) while a non-essential one is dropped alone.

Instance keys (``primary@3f9c1e2a``) name one instance of a job; a report about an instance that
is no longer the job's (a late death of an instance already replaced) changes nothing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from fabric.core.errors import InvalidSpecError, JobNotFoundError
from fabric.core.jobs.bundles import Bundle
from fabric.core.jobs.restarts import Restart, ceiling, restarts_last_hour, verdict
from fabric.core.jobs.spec import JobSpec
from fabric.core.jobs.start_at import placement_begins, waits
from fabric.core.jobs.states import BUNDLE_LIFECYCLE, JOB_LIFECYCLE, LIVE_STATES, BundleState, JobState
from fabric.core.placement import Peer, PlacementContext, Requirement
from fabric.core.settings import FabricSettings, FailurePolicySettings, template_artifacts

HISTORY = 50
"""State changes kept per job (its ``history``)."""
RETRY_S = 1.0
"""How soon a job no node could take is placed again (capacity may have come)."""
REPLICA_NAMES = ("primary", "backup")


@dataclass(frozen=True, slots=True)
class Binding:
    """Where a job's instance lives: the node, the instance's key, the engine's allocation."""

    node_id: str
    instance_key: str
    allocation_id: int | None = None


@dataclass
class JobRecord:
    job_id: str
    spec: JobSpec
    created_at: float
    bundle_id: str | None = None
    replica: int = 0
    state: JobState = JobState.PENDING
    binding: Binding | None = None
    restarts: list[Restart] = field(default_factory=list)
    history: deque[tuple[float, str, str]] = field(default_factory=lambda: deque(maxlen=HISTORY))
    """``(at, state, reason)`` per change, newest last."""
    not_before: float = 0.0
    """The next placement attempt waits until then."""
    exclude: frozenset[str] = frozenset()
    """Nodes the next placement keeps away from (where it just died)."""
    recovering: bool = False
    last_attempt: float | None = None
    dormant: bool = False
    """A ``start_mode="manual"`` job not started yet (or stopped for future placement)."""
    reason: str = ""
    started_at: float | None = None
    """When its current instance reached running (None: no instance running)."""
    first_started_at: float | None = None
    """When its first instance reached running."""

    @property
    def terminal(self) -> bool:
        return JOB_LIFECYCLE.is_terminal(self.state)

    def restarts_last_hour(self, now: float) -> int:
        return restarts_last_hour(self.restarts, now)


@dataclass
class BundleRecord:
    bundle_id: str
    bundle: Bundle
    """Its rules build each job's context."""
    state: str = "live"
    reasons: list[str] = field(default_factory=list)
    jobs: dict[tuple[int, str], str] = field(default_factory=dict)
    """``(replica, job name)`` -> job id."""


# -- instructions ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PlaceJob:
    """Place the job now. ``context`` None: build it (``JobBook.context``) when it is placed, not
    before: a job placed earlier in the same pass is then a placed peer (co-location, separation)."""

    job_id: str
    requirement: Requirement
    context: PlacementContext | None = None
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class StartInstance:
    job_id: str
    binding: Binding
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class StopInstance:
    job_id: str
    binding: Binding
    graceful: bool = True
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class ReleaseSlot:
    allocation_id: int
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class EndNode:
    """A single-use job ended for good: the node its instance ran on is ended too, when a provider
    made it (a node joined by hand is left as it is). Never for a job that recovers or moves."""

    job_id: str
    node_id: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class JobEvent:
    kind: str
    """``job_state``, ``job_dropped``, ``job_rejected``, ``bundle_broken``, ``resilience_degraded``, ``placement_failed``,
    ``restarts_cleared``
    (the executor records ``single_use_ended`` itself, when it carries out an ``EndNode``)."""
    data: dict[str, object]
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


Instruction = PlaceJob | StartInstance | StopInstance | ReleaseSlot | EndNode | JobEvent
Where = Callable[[str], tuple[str | None, str | None] | None]
"""A node's ``(zone, cloud)``, or None for a node the fleet does not hold."""


class JobBook:
    """Every job and bundle, and what to do next (see the module docstring)."""

    def __init__(self, failure_settings: FailurePolicySettings, settings: FabricSettings | None = None) -> None:
        self.failure = failure_settings
        self.settings = settings
        """The ``FabricSettings`` whose ``templates`` give a job's ``template_images`` (None: none listed)."""
        self.jobs: dict[str, JobRecord] = {}
        self.bundles: dict[str, BundleRecord] = {}
        self.dirty: set[str] = set()
        """Jobs changed since the actor last persisted (it clears the set)."""
        self.dirty_bundles: set[str] = set()
        self.interruptible: Callable[[str], bool] = lambda node_id: False
        """Whether a node is interruptible capacity (a spot pool tier): the actor sets it."""
        self.lease_ends: Callable[[str], float | None] = lambda instance_key: None
        """When an instance has surely stopped serving (``fabric.core.jobs.fence.Leases.ends``): the core sets it."""

    # -- lookups ----------------------------------------------------------------------------------
    def job(self, job_id: str) -> JobRecord:
        rec = self.jobs.get(job_id)
        if rec is None:
            raise JobNotFoundError(f"no job {job_id!r}", job_id=job_id)
        return rec

    def on_node(self, node_id: str) -> list[JobRecord]:
        return [j for j in self.jobs.values() if j.binding is not None and j.binding.node_id == node_id]

    def bound(self) -> list[JobRecord]:
        return [j for j in self.jobs.values() if j.binding is not None]

    # -- changes ----------------------------------------------------------------------------------
    def _move(self, rec: JobRecord, to: JobState, now: float, reason: str = "") -> list[Instruction]:
        if rec.state == to:
            return []
        JOB_LIFECYCLE.check(f"job {rec.job_id}", rec.state, to, reason)
        frm, rec.state, rec.reason = rec.state, to, reason
        rec.history.append((now, to.value, reason))
        self.dirty.add(rec.job_id)
        data: dict[str, object] = {"job_id": rec.job_id, "from": frm.value, "to": to.value, "reason": reason,
                                   "bundle_id": rec.bundle_id}
        if to == JobState.RUNNING:
            data.update(started_at=rec.started_at, first_started_at=rec.first_started_at)
        return [JobEvent("job_state", data)]

    def move(self, rec: JobRecord, to: JobState, now: float, reason: str = "") -> list[Instruction]:
        """Move ``rec`` to ``to`` (as the table allows), for a decision made beside the book: the
        jobs a new Ray cluster holds of another's store (``fabric.core.jobs.inherit``)."""
        return self._move(rec, to, now, reason)

    def add(self, job_id: str, spec: JobSpec, now: float, *, bundle_id: str | None = None, replica: int = 0,
            dormant: bool = False) -> list[Instruction]:
        """A new job: placed by the next ``due`` unless dormant (its first placement uses the launch
        spare policy). An id the book holds already is refused: the job it names keeps its binding."""
        if job_id in self.jobs:
            raise InvalidSpecError(f"a job {job_id!r} exists already", field="job_id")
        rec = JobRecord(job_id, spec, now, bundle_id=bundle_id, replica=replica, dormant=dormant)
        if waits(spec, self.settings, now):
            rec.state, rec.reason = JobState.SCHEDULED, f"scheduled: start_at {spec.start_at:.3f}"
        rec.history.append((now, rec.state.value, "created"))
        self.jobs[job_id] = rec
        self.dirty.add(job_id)
        if bundle_id is not None and bundle_id in self.bundles:
            self.bundles[bundle_id].jobs[(replica, spec.name)] = job_id
        return []

    def add_bundle(self, bundle_id: str, bundle: Bundle) -> BundleRecord:
        rec = self.bundles.get(bundle_id)
        if rec is None:
            rec = self.bundles[bundle_id] = BundleRecord(bundle_id, bundle)
        else:
            rec.bundle = bundle
        self.dirty_bundles.add(bundle_id)
        return rec

    def due(self, now: float, where: Where) -> list[Instruction]:
        """Placements to try now: pending or recovering jobs past their ``not_before`` whose
        bundle is live, primaries before backups (a backup's resilience rule needs its primary),
        each bundle's jobs in its order. Their contexts are built as each is placed (``PlaceJob``)."""
        out: list[Instruction] = self._scheduled_due(now)
        for rec in sorted(self.jobs.values(), key=lambda j: (j.replica, j.created_at, j.job_id)):
            if rec.state not in (JobState.PENDING, JobState.RECOVERING) or rec.dormant or now < rec.not_before:
                continue
            b = self.bundles.get(rec.bundle_id) if rec.bundle_id else None
            if b is not None and b.state != "live":
                continue
            rec.last_attempt = now
            out.append(PlaceJob(rec.job_id, rec.spec.requirement, None))
        return out

    def _scheduled_due(self, now: float) -> list[Instruction]:
        """Scheduled jobs whose placement begins now move to ``pending`` (``fabric.core.jobs.start_at``)."""
        out: list[Instruction] = []
        for rec in self.jobs.values():
            if rec.state == JobState.SCHEDULED:
                begins = placement_begins(rec.spec, self.settings)
                if begins is None or now >= begins:
                    out += self._move(rec, JobState.PENDING, now, f"start_at {rec.spec.start_at or now:.3f}: placement begins")
        return out

    def context(self, rec: JobRecord, where: Where, *, target_node: str | None = None,
                exclude: Iterable[str] = ()) -> PlacementContext:
        """The engine's context for ``rec``'s next placement."""
        excl = frozenset(rec.exclude) | frozenset(exclude)
        b = self.bundles.get(rec.bundle_id) if rec.bundle_id else None
        images = template_artifacts(self.settings, rec.spec.template) if self.settings is not None else ()
        if b is None:
            return PlacementContext(job=rec.spec.name, job_id=rec.job_id, recovering=rec.recovering,
                                    on_runtime_failure=rec.spec.on_runtime_failure if rec.recovering else "avoid_spare",
                                    template=rec.spec.template, template_images=images, exclude_nodes=excl, target_node=target_node)
        peers = []
        for (replica, name), jid in b.jobs.items():
            other = self.jobs.get(jid)
            if replica != rec.replica or jid == rec.job_id or other is None or other.binding is None:
                continue
            zone = (where(other.binding.node_id) or (None, None))[0]
            peers.append(Peer(name, other.binding.node_id, zone, other.spec.rule_less))
        twin = self.jobs.get(b.jobs.get((1 - rec.replica, rec.spec.name), ""))
        other_node = twin.binding.node_id if twin is not None and twin.binding is not None else None
        zone, cloud = (where(other_node) or (None, None)) if other_node else (None, None)
        ctx = b.bundle.context(rec.replica, rec.spec.name, peers=tuple(peers), other_node=other_node,
                               other_zone=zone, other_cloud=cloud, recovering=rec.recovering,
                               exclude_nodes=excl, target_node=target_node, spec=rec.spec, job_id=rec.job_id,
                               first_placement=not rec.restarts and not rec.recovering and target_node is None)
        group = [self.jobs.get(b.jobs.get((rec.replica, name), "")) for name in ctx.co_locate_with]
        if group and all(g is not None and g.binding is None for g in group):  # the first of its group placed
            reqs = [rec.spec.requirement] + [g.spec.requirement for g in group if g is not None]
            ctx = ctx.sized_for(reqs)
        images = template_artifacts(self.settings, ctx.template) if self.settings is not None else ()
        return replace(ctx, template_images=images) if images and not ctx.template_images else ctx

    def placed(self, job_id: str, node_id: str, allocation_id: int | None, instance_key: str, now: float,
               where: Where | None = None) -> list[Instruction]:
        """The engine placed the job: its instance is created on ``node_id``."""
        rec = self.job(job_id)
        if rec.state not in (JobState.PENDING, JobState.RECOVERING):  # stopped meanwhile: give it back
            return [ReleaseSlot(allocation_id)] if allocation_id is not None else []
        rec.binding = Binding(node_id, instance_key, allocation_id)
        out = self._move(rec, JobState.STARTING, now, f"placed on {node_id[:12]}")
        if where is not None:
            out += self._resilience(rec, where)
        return out + [StartInstance(job_id, rec.binding)]

    def _resilience(self, rec: JobRecord, where: Where) -> list[Instruction]:
        """A ``resilience_degraded`` event when this copy sits in a failure domain its bundle's
        policy forbids sharing with the other copy (best-effort: it was placed anyway), or when the
        primary sits on interruptible capacity with no durable backup."""
        b = self.bundles.get(rec.bundle_id) if rec.bundle_id else None
        if b is None or rec.binding is None:
            return []
        pol = getattr(b.bundle, "resilience", None)
        twin = self.jobs.get(b.jobs.get((1 - rec.replica, rec.spec.name), ""))
        twin_node = twin.binding.node_id if twin is not None and twin.binding is not None else None
        violated = []
        if pol is not None and twin_node is not None:
            mine, theirs = where(rec.binding.node_id) or (None, None), where(twin_node) or (None, None)
            if pol.same_node == "forbid" and rec.binding.node_id == twin_node:
                violated.append("same_node")
            if pol.same_zone == "forbid" and mine[0] is not None and mine[0] == theirs[0]:
                violated.append("same_zone")
            if pol.same_cloud == "forbid" and mine[1] is not None and mine[1] == theirs[1]:
                violated.append("same_cloud")
        primary_node = rec.binding.node_id if rec.replica == 0 else twin_node
        backup_node = twin_node if rec.replica == 0 else rec.binding.node_id
        exposed = (primary_node is not None and self.interruptible(primary_node)
                   and (backup_node is None or self.interruptible(backup_node))
                   and (rec.replica == 0 or pol is not None))
        if not violated and not exposed:
            return []
        return [JobEvent("resilience_degraded", {"bundle_id": rec.bundle_id, "job": rec.spec.name, "job_id": rec.job_id,
                                                 "replica": rec.replica, "violated": violated,
                                                 "primary_interruptible": exposed, "node_id": rec.binding.node_id})]

    def unplaced(self, job_id: str, reason: str, now: float) -> list[Instruction]:
        """No node could take the job now: it is tried again after ``RETRY_S``."""
        rec = self.job(job_id)
        if rec.state not in (JobState.PENDING, JobState.RECOVERING):  # stopped meanwhile: nothing to retry
            return []
        rec.not_before = now + RETRY_S
        rec.reason = f"waiting for a node: {reason}"
        return [JobEvent("placement_failed", {"job_id": job_id, "reason": reason, "bundle_id": rec.bundle_id})]

    def capacity_joined(self, now: float) -> int:
        """A node joined (a provisioned one registered, say): jobs waiting for a node are tried at
        once rather than after ``RETRY_S``; how many. A recovery's own spacing is left alone."""
        n = 0
        for rec in self.jobs.values():
            if (rec.state in (JobState.PENDING, JobState.RECOVERING) and rec.not_before > now
                    and rec.reason.startswith("waiting for a node")):
                rec.not_before = now
                n += 1
        return n

    def started(self, job_id: str, instance_key: str, now: float) -> list[Instruction]:
        rec = self.jobs.get(job_id)
        if rec is None or rec.binding is None or rec.binding.instance_key != instance_key or rec.state != JobState.STARTING:
            return []
        rec.exclude, rec.recovering = frozenset(), False
        self._began(rec, now)
        return self._move(rec, JobState.RUNNING, now, f"running on {rec.binding.node_id[:12]}")

    @staticmethod
    def _began(rec: JobRecord, now: float) -> None:
        """A new instance of ``rec`` runs from ``now`` (its first one, too, when none ran before)."""
        rec.started_at = now
        rec.first_started_at = now if rec.first_started_at is None else rec.first_started_at

    def provisioned_for(self, job_id: str, node_id: str, now: float) -> list[Instruction]:
        """A node provisioned for the job registered: its restart history is cleared (a fresh node,
        a fresh count against its ceiling), with a ``restarts_cleared`` event when there was one."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.terminal or not rec.restarts:
            return []
        cleared, rec.restarts = len(rec.restarts), []
        self.dirty.add(job_id)
        return [JobEvent("restarts_cleared", {"job_id": job_id, "node_id": node_id, "cleared": cleared,
                                              "reason": "a node provisioned for it registered", "bundle_id": rec.bundle_id})]

    def died(self, job_id: str, instance_key: str, now: float, *, reason: str = "", preempted: bool = False,
             invalid_spec: str | None = None, fenced: bool = False) -> list[Instruction]:
        """The job's instance ``instance_key`` died (its actor or its node): recover by its policy,
        or end it (and break its bundle, for an essential job). ``fenced``: its end is not known
        for sure (its node was lost, or died to Ray): a recovery waits until its lease has ended.
        A single-use job that ends for good (stopped, dropped, failed) ends its node too (``EndNode``)."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.binding is None or rec.binding.instance_key != instance_key:
            return []  # an instance already replaced, or a job already gone
        binding = rec.binding
        # a single-use job's node is ended before its slot goes back: nothing else lands there meanwhile
        end_node: list[Instruction] = [EndNode(job_id, binding.node_id)] if rec.spec.single_use else []
        out: list[Instruction] = [ReleaseSlot(binding.allocation_id)] if binding.allocation_id is not None else []
        rec.binding, rec.started_at = None, None
        self.dirty.add(job_id)
        if rec.state == JobState.STOPPING:
            return end_node + out + self._move(rec, JobState.STOPPED, now, "stopped")
        spec = rec.spec
        v = verdict(policy=spec.on_runtime_failure, essential=spec.essential, history=rec.restarts, now=now,
                    max_per_hour=ceiling(spec.max_restarts_per_hour, spec.on_runtime_failure, self.failure),
                    min_interval_s=getattr(self.failure, "min_recovery_interval_s", 5.0), preempted=preempted,
                    invalid_spec=invalid_spec, last_attempt=rec.restarts[-1].at if rec.restarts else None)
        if invalid_spec is not None:
            out.append(JobEvent("job_rejected", {"job_id": job_id, "reason": invalid_spec, "bundle_id": rec.bundle_id}))
        if v.action == "recover":
            rec.restarts.append(Restart(v.not_before, v.counted))
            rec.not_before, rec.recovering = v.not_before, True
            rec.exclude = frozenset({binding.node_id})
            ends = self.lease_ends(instance_key) if fenced else None
            why = f"{reason or 'died'}; {v.reason}"
            if ends is not None and ends > rec.not_before:
                rec.not_before = ends
                why += f"; fenced: its replacement waits {ends - now:.1f} s for the old instance's lease to end"
                out.append(JobEvent("job_fenced", {"job_id": job_id, "instance_key": instance_key, "node_id": binding.node_id,
                                                   "wait_s": round(ends - now, 3), "reason": reason or "died"}))
            return out + self._move(rec, JobState.RECOVERING, now, why)
        out = end_node + out  # it ends for good: dropped, or failed
        if v.action == "drop":
            return out + self._move(rec, JobState.DROPPED, now, v.reason) + [
                JobEvent("job_dropped", {"job_id": job_id, "reason": v.reason, "bundle_id": rec.bundle_id})]
        out += self._move(rec, JobState.FAILED, now, v.reason)
        if rec.bundle_id is None or rec.bundle_id not in self.bundles:  # a job of its own: it alone ends
            return out
        return out + self.break_bundle(rec.bundle_id, f"{spec.name} (replica {rec.replica}): {v.reason}", now)

    def set_bundle_state(self, bundle_id: str, to: BundleState, reasons: list[str] | None = None) -> None:
        """Move a bundle through ``BUNDLE_LIFECYCLE`` (live, broken, deleting; staying put is a no-op);
        ``reasons`` replace its reasons when given. A move the table refuses raises ``TransitionError``."""
        b = self.bundles[bundle_id]
        b.state = BUNDLE_LIFECYCLE.check(f"bundle {bundle_id}", BundleState(b.state), to).value
        if reasons is not None:
            b.reasons = list(reasons)
        self.dirty_bundles.add(bundle_id)

    def break_bundle(self, bundle_id: str, reason: str, now: float) -> list[Instruction]:
        """An essential job was lost: the bundle is broken, every other job of it stops, and
        nothing of it is placed until it is updated."""
        b = self.bundles[bundle_id]
        out: list[Instruction] = []
        if b.state != "broken":
            self.set_bundle_state(bundle_id, BundleState.BROKEN)
            b.reasons.append(reason)
            self.dirty_bundles.add(bundle_id)
            out.append(JobEvent("bundle_broken", {"bundle_id": bundle_id, "reason": reason}))
        for jid in b.jobs.values():
            rec = self.jobs.get(jid)
            if rec is not None and not rec.terminal:
                out += self.stop(jid, now, reason="bundle broken")
        return out

    def node_lost(self, node_id: str, now: float, *, preempted: bool = False, skip: Iterable[str] = ()) -> list[Instruction]:
        """A node left the fleet: every job bound there died with it (but those in ``skip``: a
        migration past its point of no return owns their source's end). The node may only be cut
        off, its instances still running: each replacement waits for the old lease to end."""
        out: list[Instruction] = []
        skip = set(skip)
        for rec in self.on_node(node_id):
            if rec.job_id in skip:
                continue
            assert rec.binding is not None
            out += self.died(rec.job_id, rec.binding.instance_key, now, reason=f"node {node_id[:12]} lost",
                             preempted=preempted, fenced=True)
        return out

    def stop(self, job_id: str, now: float, *, reason: str = "stopped by request") -> list[Instruction]:
        """Stop the job: its instance ends (gracefully); a job with none stops at once."""
        rec = self.job(job_id)
        if rec.terminal or rec.state == JobState.STOPPING:
            return []
        out = self._move(rec, JobState.STOPPING, now, reason)
        if rec.binding is None:
            return out + self._move(rec, JobState.STOPPED, now, reason)
        return out + [StopInstance(job_id, rec.binding)]

    def stopped(self, job_id: str, instance_key: str, now: float) -> list[Instruction]:
        """A stopped instance ended (the same as its death, for a job that is stopping)."""
        return self.died(job_id, instance_key, now, reason="stopped")

    # -- moves on purpose (fabric.core.jobs.migration) -----------------------------------------------
    def migrating(self, job_id: str, now: float, reason: str) -> list[Instruction]:
        """A migration of the running job began: it keeps its source binding until it is done."""
        rec = self.job(job_id)
        if rec.state != JobState.RUNNING or rec.binding is None:
            raise InvalidSpecError(f"job {job_id} is {rec.state.value}: only a running job moves", field="job_id")
        return self._move(rec, JobState.MIGRATING, now, reason)

    def migrated(self, job_id: str, node_id: str, instance_key: str, allocation_id: int | None, now: float,
                 reason: str) -> list[Instruction]:
        """The migration is done: the job's binding is the target's; the source's slot goes back.
        The move does not count as a restart."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.state != JobState.MIGRATING or rec.binding is None:
            return [ReleaseSlot(allocation_id)] if allocation_id is not None else []
        old = rec.binding
        rec.binding = Binding(node_id, instance_key, allocation_id)
        rec.exclude, rec.recovering = frozenset(), False
        self._began(rec, now)
        self.dirty.add(job_id)
        out: list[Instruction] = [ReleaseSlot(old.allocation_id)] if old.allocation_id is not None else []
        return out + self._move(rec, JobState.RUNNING, now, f"running on {node_id[:12]} ({reason})")

    def migration_rolled_back(self, job_id: str, now: float, reason: str) -> list[Instruction]:
        """The migration aborted: the job runs on where it was."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.state != JobState.MIGRATING:
            return []
        return self._move(rec, JobState.RUNNING, now, f"running on {rec.binding.node_id[:12] if rec.binding else '?'} ({reason})")

    def evicted(self, job_id: str, now: float, *, reason: str, preempted: bool = False) -> list[Instruction]:
        """The job's instance is stopped on purpose (an eviction, a forced drain): it recovers by
        its policy. ``preempted`` (a provider's reclaim) does not count against its ceiling."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.binding is None or rec.state not in LIVE_STATES:
            return []
        return self.died(job_id, rec.binding.instance_key, now, reason=reason, preempted=preempted)

    def forget(self, job_id: str) -> None:
        """Drop a terminal job from the book (a deleted bundle's)."""
        self.jobs.pop(job_id, None)
        self.dirty.add(job_id)

    def adopt(self, rec: JobRecord) -> None:
        """A job read back from the store (a scheduler restart)."""
        self.jobs[rec.job_id] = rec
        if rec.bundle_id is not None and rec.bundle_id in self.bundles:
            self.bundles[rec.bundle_id].jobs[(rec.replica, rec.spec.name)] = rec.job_id

    def validate_state(self) -> list[str]:
        """What is inconsistent (empty when nothing): every live job is bound, no terminal or
        waiting job is, at most one job per instance key, a bundle's jobs point back at it."""
        problems = []
        keys: dict[str, str] = {}
        for rec in self.jobs.values():
            if rec.state in LIVE_STATES and rec.binding is None:
                problems.append(f"job {rec.job_id} is {rec.state} with no binding")
            if rec.binding is not None and (rec.terminal or rec.state in (JobState.SCHEDULED, JobState.PENDING, JobState.RECOVERING)):
                problems.append(f"job {rec.job_id} is {rec.state} but bound to {rec.binding.node_id}")
            if rec.binding is not None:
                other = keys.setdefault(rec.binding.instance_key, rec.job_id)
                if other != rec.job_id:
                    problems.append(f"instance key {rec.binding.instance_key} bound to {other} and {rec.job_id}")
        for b in self.bundles.values():
            for (replica, name), jid in b.jobs.items():
                member = self.jobs.get(jid)
                if member is not None and (member.bundle_id != b.bundle_id or member.replica != replica
                                           or member.spec.name != name):
                    problems.append(f"bundle {b.bundle_id} names job {jid} as {replica}/{name} but it is not")
        return problems


def instance_key(replica: int, token: str) -> str:
    """``primary@3f9c1e2a``: the replica's name and a token for one instance."""
    return f"{REPLICA_NAMES[replica] if 0 <= replica < len(REPLICA_NAMES) else replica}@{token}"


@dataclass(frozen=True)
class JobStatus:
    """A job as the operator sees it (``FabricHandle.jobs()`` / ``.job(id)``)."""

    job_id: str
    name: str
    state: JobState
    bundle_id: str | None = None
    replica: int = 0
    binding: Binding | None = None
    restarts_last_hour: int = 0
    reason: str = ""
    history: tuple[tuple[float, str, str], ...] = ()
    started_at: float | None = None
    """When the current instance reached running (epoch seconds; None: none runs)."""
    first_started_at: float | None = None
    """When the job's first instance reached running."""
    start_at: float | None = None
    """The job's ``start_at`` (None: it started when submitted)."""

    @property
    def node_id(self) -> str | None:
        return self.binding.node_id if self.binding else None

    @property
    def instance_key(self) -> str | None:
        return self.binding.instance_key if self.binding else None


def summarize(rec: JobRecord, now: float) -> JobStatus:
    """The ``JobStatus`` of one record."""
    return JobStatus(rec.job_id, rec.spec.name, rec.state, rec.bundle_id, rec.replica, rec.binding,
                     rec.restarts_last_hour(now), rec.reason,
                     tuple((at, state, reason) for at, state, reason in rec.history),
                     rec.started_at, rec.first_started_at, rec.spec.start_at)

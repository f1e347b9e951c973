"""The scheduler's decision core (pure): seed 002's adaptive scheduler and reconfiguration engine.

The ``SchedulerActor`` turns Ray and registry facts into calls on ``SchedulerCore`` and carries out
what comes back; everything that decides lives here, so hours of queueing, draining and node churn
replay in milliseconds with an injected clock (Dask's ``handle_stimulus`` habit).

What it owns:
- a ``FleetView`` kept current by node events (joined, changed, lost, cordoned, drained);
- the allocations of work it placed (released when the work ends, dropped with a lost node);
- the deferred queue: priority first, then FIFO; retried on every capacity event (a node joins,
  work ends, a node is uncordoned) and expired at its deadline;
- the counters behind ``handle.metrics()`` and seed 002's ``fallback_count``.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from fabric.core.errors import CapacityError, NodeNotFoundError, RequirementError
from fabric.core.lifecycle import NodeStatus
from fabric.core.names import TIER_LABEL
from fabric.core.placement import Allocation, Decision, FleetView, NodeRecord, PlacementContext, Requirement, place
from fabric.core.settings import FabricSettings
from fabric.core.tiers import TIERS_BEST_FIRST, ComputeTier

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class NodeAssignment:
    """Seed 002's ``select_worker`` answer: ``assigned`` to a node, or ``deferred`` with a reason."""

    status: str
    """``assigned`` or ``deferred``."""
    node_id: str | None = None
    tier: ComputeTier | None = None
    """The compute level the work was placed at (``fallback_levels`` below its ``min_tier``)."""
    reason: str = ""
    node_name: str | None = None
    node_tier: ComputeTier | None = None
    """The chosen node's own tier (at or above ``tier``)."""
    fallback_levels: int = 0
    allocation_id: int | None = None
    """Set when the assignment holds a reservation that must be released."""
    ray_gpus: float = 0.0
    """GPUs to ask Ray for on this node (see ``SchedulerCore.ray_gpus``)."""

    @classmethod
    def from_decision(cls, d: Decision, *, reserved: bool) -> "NodeAssignment":
        if d.status == "placed":
            return cls("assigned", d.node_id, d.tier, d.reason, d.node_name, d.node_tier, d.fallback_levels,
                       d.allocation.allocation_id if (reserved and d.allocation is not None) else None)
        reason = d.reason if d.status == "deferred" else f"needs a new node ({d.shape.name if d.shape else '?'}); {d.reason}".rstrip("; ")
        return cls("deferred", None, d.tier, reason or "no capacity")


# -- instructions the core hands back to the actor ------------------------------------------------
@dataclass(frozen=True, slots=True)
class Placed:
    """A queued request found a node: dispatch it there."""

    request_id: str
    assignment: NodeAssignment


@dataclass(frozen=True, slots=True)
class Expired:
    """A queued request waited past its deadline: fail it with this error."""

    request_id: str
    error: CapacityError


@dataclass(frozen=True, slots=True)
class MarkDraining:
    """A drained node has no fabric work left (or its grace ran out): set its registry status."""

    node_id: str


Instruction = Placed | Expired | MarkDraining


# -- placement leases (the fast path, issue 6) ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LeaseSlot:
    """How many calls of one requirement class a client may have in flight on one node."""

    node_id: str
    capacity: int
    """Calls in flight allowed on the node, the client's running ones included (0: none new)."""
    level: ComputeTier | None = None
    """The compute level the slots were placed at."""
    fallback_levels: int = 0
    ray_gpus: float = 0.0
    """GPUs each call asks Ray for on this node (see ``SchedulerCore.ray_gpus``)."""


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """A client's right, for one health tick, to place calls of one requirement class itself.

    ``slots`` were placed by the engine, best first, and are reserved in the scheduler's view;
    ``spill`` is a Ray label selector for every node inside the floor that may take work now
    (cordoned, draining, held and demoted nodes excluded): calls beyond the slots go there and Ray
    runs them on whichever of those nodes frees a slot first. None when no such node exists or the
    requirement cannot be expressed as labels: those calls take the queued path."""

    lease_id: str
    slots: tuple[LeaseSlot, ...]
    spill: dict[str, str] | None
    ttl_s: float
    spill_via: str | None = None
    """The node, among ``spill``'s, whose raylet spilled calls are sent to first (see
    ``SchedulerCore.spill_target``); None with no ``spill``."""


@dataclass
class _LeaseState:
    allocations: list[Allocation]
    expires: float


@dataclass(order=True)
class _Queued:
    sort_key: tuple
    request_id: str = field(compare=False)
    requirement: Requirement = field(compare=False)
    context: PlacementContext | None = field(compare=False)
    deadline: float = field(compare=False)
    enqueued_at: float = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


@dataclass
class _Drain:
    node_id: str
    deadline: float


class SchedulerCore:
    """Placement with memory: the fleet, what was placed on it, and what is waiting."""

    def __init__(self, settings: FabricSettings | None = None, *, clock: Clock = time.monotonic) -> None:
        self.settings = settings if settings is not None else FabricSettings()
        self.clock = clock
        self.fleet = FleetView(settings=self.settings)
        self.allocations: dict[int, Allocation] = {}
        self._by_node: dict[str, set[int]] = {}
        self._queue: list[_Queued] = []
        self._queued: dict[str, _Queued] = {}
        self._seq = itertools.count()
        self._drains: dict[str, _Drain] = {}
        self._leases: dict[str, _LeaseState] = {}
        self._outsiders: dict[str, ComputeTier] = {}
        self.lease_ttl_s = self.settings.health.monitor_interval_s
        self.counters = {
            "placements_attempted": 0, "placements_succeeded": 0, "placements_failed": 0,
            "placements_deferred": 0, "queue_expired": 0, "released": 0, "fallbacks": 0,
            "nodes_joined": 0, "nodes_lost": 0, "work_lost_with_node": 0, "select_worker_calls": 0,
            "leases_granted": 0, "leases_expired": 0, "calls_reported": 0, "call_reports": 0,
        }

    # -- reading ------------------------------------------------------------------------------
    @property
    def fallback_count(self) -> int:
        """Decisions placed below their ``min_tier`` since start (seed 002's verification)."""
        return self.counters["fallbacks"]

    @property
    def queue_depth(self) -> int:
        return len(self._queued)

    def node(self, node_id: str) -> NodeRecord:
        return self.fleet.node(node_id)

    def metrics(self) -> dict:
        """Counters since start plus gauges computed now: per-tier nodes, running, utilisation."""
        tiers: dict[str, dict] = {}
        for rec in self.fleet.records():
            t = tiers.setdefault(rec.tier.value, {"nodes": 0, "placeable": 0, "running": 0, "slots": 0})
            t["nodes"] += 1
            t["placeable"] += int(rec.placeable)
            t["running"] += rec.running
            t["slots"] += rec.slots
        for t in tiers.values():
            t["utilization"] = round(t["running"] / t["slots"], 4) if t["slots"] else 0.0
        ordered = {tier.value: tiers[tier.value] for tier in TIERS_BEST_FIRST if tier.value in tiers}
        return {**self.counters, "queue_depth": self.queue_depth, "nodes": len(self.fleet),
                "running": sum(len(v) for v in self._by_node.values()), "tiers": ordered}

    # -- work -----------------------------------------------------------------------------------
    def check_requirement(self, req: Requirement) -> Requirement:
        """``req`` if everything it names exists in the settings in force (its pool); else the
        ``RequirementError`` that names the field. Never a silent ``deferred`` (API.md)."""
        if not isinstance(req, Requirement):
            raise RequirementError("requirement", f"must be a fabric.Requirement, got {type(req).__name__}", req)
        return req.validate_against(self.settings)

    def place(self, req: Requirement, ctx: PlacementContext | None = None, *, request_id: str | None = None,
              queue: bool = False, priority: int = 0, timeout_s: float | None = None) -> NodeAssignment:
        """Place ``req`` now and reserve the node. Deferred work with ``queue`` waits in the
        deferred queue under ``request_id`` (``timeout_s`` defaults to the settings' queue timeout).

        A hard requirement (no fallback) that no node in the fleet serves at all raises
        ``CapacityError`` at once: waiting would not help unless a new node joins, and seed 002
        says such work hard-fails. Busy is not absent: a full CUDA node means wait."""
        self.check_requirement(req)
        self.counters["placements_attempted"] += 1
        d = place(self.fleet, req, ctx)
        if d.status == "placed":
            self._commit(d)
            return self._assignment(d, req)
        if req.hard and not self.any_node_serves(req.min_tier, req.pool):
            self.counters["placements_failed"] += 1
            raise CapacityError(
                f"no node serves {req.min_tier} and the requirement may not fall back (fallback=False)",
                requirement=repr(req), reason="no node serves the tier",
            )
        self.counters["placements_deferred"] += 1
        assignment = NodeAssignment.from_decision(d, reserved=False)
        if queue:
            if request_id is None:
                raise ValueError("queued placement needs a request_id")
            self._enqueue(request_id, req, ctx, priority, timeout_s)
        return assignment

    def select_worker(self, req: Requirement) -> NodeAssignment:
        """Seed 002's ``select_worker``: where would this run now? Counts fallbacks like a real
        placement but holds no reservation (nothing will release it)."""
        self.check_requirement(req)
        self.counters["select_worker_calls"] += 1
        d = place(self.fleet, req)
        if d.status == "placed" and d.fallback_levels > 0:
            self.counters["fallbacks"] += 1
        return NodeAssignment.from_decision(d, reserved=False)

    def lease(self, lease_id: str, req: Requirement, holding: dict[str, int] | None = None, want: int = 64) -> LeaseGrant:
        """Grant (or renew) a client's lease for ``req``'s class: the slots it still has running
        (``holding``, node -> calls) stay reserved, and up to ``want`` more are placed by the engine.
        The previous grant under ``lease_id`` is replaced. Seeing no renewal for a few ticks, the
        scheduler takes the lease back (``tick``).

        A grant is not a call: it counts in ``leases_granted`` only. The calls made under it count
        where they run (``report_calls``), as a fallback when they ran below ``min_tier``."""
        self.check_requirement(req)
        self._drop_lease(lease_id)
        allocations: list[Allocation] = []
        running: dict[str, int] = {}
        for node_id, n in (holding or {}).items():
            if node_id not in self.fleet or n <= 0:
                continue
            for _ in range(n):  # still running there: keep it counted, whatever the node's state
                a = Allocation(node_id=node_id, cpus=req.num_cpus, memory_mib=req.memory_mib)
                self.fleet.reserve(a)
                allocations.append(a)
            running[node_id] = n
        granted: dict[str, int] = {}
        levels: dict[str, Decision] = {}
        for _ in range(max(0, want)):
            d = place(self.fleet, req)
            if d.status != "placed":
                break
            self.fleet.commit(d)
            allocations.append(d.allocation)
            granted[d.node_id] = granted.get(d.node_id, 0) + 1
            levels.setdefault(d.node_id, d)
        slots = [LeaseSlot(n, running.get(n, 0) + k, levels[n].tier, levels[n].fallback_levels, self.ray_gpus(n, req))
                 for n, k in granted.items()]
        slots += [LeaseSlot(n, 0, ray_gpus=self.ray_gpus(n, req)) for n in running if n not in granted]
        self._leases[lease_id] = _LeaseState(allocations, self.clock() + 2 * self.lease_ttl_s)
        for a in allocations:
            self._track(a)
        self.counters["leases_granted"] += 1
        spill, via = self.spill_target(req)
        return LeaseGrant(lease_id, tuple(slots), spill, self.lease_ttl_s, via)

    def grant_lease(self, lease_id: str, req: Requirement, holding: dict[str, int] | None = None, want: int = 64,
                    release: Iterable[str] = ()) -> tuple[LeaseGrant, list[Instruction]]:
        """A client's lease request as the scheduler receives it: give back its idle leases
        (``release``), then grant or renew ``lease_id`` (``lease``). A hard requirement that no node
        of its pool serves at all raises ``CapacityError`` (waiting would not help; seed 002 says
        it hard-fails), as ``place`` does. Returns the grant and what the releases let run. A
        requirement the settings refuse is refused before anything is given back."""
        self.check_requirement(req)
        out: list[Instruction] = []
        for idle in release:
            if idle != lease_id:
                out.extend(self.end_lease(idle))
        grant = self.lease(lease_id, req, holding, want)
        if not grant.slots and grant.spill is None and req.hard and not self.any_node_serves(req.min_tier, req.pool):
            self._drop_lease(lease_id)
            self.counters["placements_failed"] += 1
            raise CapacityError(f"no node serves {req.min_tier} and the requirement may not fall back (fallback=False)",
                                requirement=repr(req), reason="no node serves the tier")
        return grant, out

    def end_lease(self, lease_id: str) -> list[Instruction]:
        """A client gave its lease back (nothing of it runs any more)."""
        if self._drop_lease(lease_id):
            return self.drain_queue()
        return []

    def report_calls(self, placed: int = 0, fallbacks: int = 0) -> None:
        """Calls that ran under leases (on a leased slot or spilled) since their workers' last
        report, and how many of them ran below their ``min_tier`` (seed 002's counters): each call
        counts once, where it ran, like a call the scheduler placed itself."""
        self.counters["calls_reported"] += placed
        self.counters["placements_attempted"] += placed
        self.counters["placements_succeeded"] += placed
        self.counters["call_reports"] += 1
        self.counters["fallbacks"] += fallbacks

    def spill_target(self, req: Requirement) -> tuple[dict[str, str] | None, str | None]:
        """Where a lease's spilled calls go: a Ray label selector for the nodes inside ``req``'s
        floor (its best level only, for ``when_full="wait"``) that may take new work now, and the
        node of them the engine's tier preference ranks first (node id breaks ties). (None, None)
        when there is no such node or ``req`` needs more than labels can say (ports, exclusivity,
        GPUs, capability tags, another pool).

        A spilled call carries a soft affinity to that node that spills when the node is busy:
        Ray runs it there when a slot is free, else on any node of the selector, and the caller's
        lease requests wait in that node's raylet. With the selector alone, a caller on a node
        that cannot run the call (a head without slots) has its lease requests refused and sends
        them again: 6 to 10 per call during a burst on Ray 2.60, which ran at 35-50% of the speed
        (README, "How a call is dispatched")."""
        if req.ports or req.exclusive or req.num_gpus or req.capabilities or req.num_cores or req.gpu_model:
            return None, None
        if req.pool is not None and req.pool != self.fleet.default_pool:
            return None, None
        if len(self.settings.pools) > 1:
            return None, None
        lowest = req.min_tier if req.when_full == "wait" else req.floor
        allowed = [t for t in TIERS_BEST_FIRST if t >= lowest]
        usable, excluded = [], []
        for r in self.fleet.records():
            if r.label_tier < lowest:
                continue  # its Ray label is outside the selector already
            # A demoted node's label still says its old tier: it is left out by id even where its new
            # tier is inside the floor, since a spilled call learns its fallback from that label.
            ok = (r.status is NodeStatus.ACTIVE and not r.cordoned and not r.flap_held and not r.unhealthy
                  and r.tier == r.label_tier and not r.launching and r.slots > 0)
            if ok:
                usable.append(r)
            else:
                excluded.append(r.node_id)
        # Raylets Ray runs that the fleet does not hold (offline by missed heartbeats while Ray
        # still sees them, not yet registered, collected): their labels match, their ids must not.
        excluded += [n for n, t in self._outsiders.items() if t >= lowest and n not in self.fleet]
        if not usable or len(excluded) > 64:
            return None, None
        selector = {TIER_LABEL: f"in({','.join(t.value for t in allowed)})"}
        if excluded:
            selector["ray.io/node-id"] = f"!in({','.join(sorted(excluded))})"
        sign = -1 if req.prefer == "highest" else 1  # as the engine's tier component, level by level
        via = min(usable, key=lambda r: (r.tier < req.min_tier, sign * r.tier.rank, r.node_id))
        return selector, via.node_id

    def release(self, allocation_ids: Iterable[int]) -> list[Instruction]:
        """Work ended: give its reservations back, then let the queue try again."""
        freed = False
        for aid in allocation_ids:
            a = self.allocations.pop(aid, None)
            if a is None:
                continue  # already dropped with its node, or released twice
            self._by_node.get(a.node_id, set()).discard(aid)
            self.fleet.release(a)
            self.counters["released"] += 1
            freed = True
        out: list[Instruction] = []
        out.extend(self._check_drains())
        if freed:
            out.extend(self.drain_queue())
        return out

    def cancel(self, request_id: str) -> bool:
        """Forget a queued request (its caller went away)."""
        q = self._queued.pop(request_id, None)
        if q is None:
            return False
        q.cancelled = True
        return True

    # -- fleet events (seed 002's reconfiguration engine) ------------------------------------------
    def node_joined(self, rec: NodeRecord) -> list[Instruction]:
        """New (or returning) capacity: add it and drain the queue onto it."""
        fresh = rec.node_id not in self.fleet
        self.fleet.add(rec)
        if fresh:
            self.counters["nodes_joined"] += 1
        return self.drain_queue()

    def node_changed(self, node_id: str, **changes) -> list[Instruction]:
        """A node's facts changed (re-probe, demotion to a lower tier, status, flap hold...)."""
        if node_id not in self.fleet:
            return []
        self.fleet.update(node_id, **changes)
        return self.drain_queue()

    def node_lost(self, node_id: str) -> list[Instruction]:
        """Capacity removed: forget the node and its reservations. Work that was running there is
        re-placed by the dispatch layer (Ray retries it within the floor); the queue is unaffected."""
        rec = self.fleet.remove(node_id)
        if rec is not None:
            self.counters["nodes_lost"] += 1
        for aid in self._by_node.pop(node_id, set()):
            if self.allocations.pop(aid, None) is not None:
                self.counters["work_lost_with_node"] += 1
        self._drains.pop(node_id, None)
        return []

    def ray_gpus(self, node_id: str, req: Requirement) -> float:
        """GPUs a call of ``req`` asks Ray for on ``node_id``: its ``num_gpus`` on a node with CUDA
        devices (those are what the node declared to Ray, ``NodeCapabilities.ray_gpus``), so Ray
        reserves them and sets ``CUDA_VISIBLE_DEVICES``; 0 elsewhere (a VA-API GPU is the engine's
        to account for: asking Ray would leave the call unschedulable there)."""
        if not req.num_gpus or node_id not in self.fleet:
            return 0.0
        return float(req.num_gpus) if self.fleet.node(node_id).capabilities.ray_gpus else 0.0

    def _assignment(self, d: Decision, req: Requirement) -> NodeAssignment:
        a = NodeAssignment.from_decision(d, reserved=True)
        gpus = self.ray_gpus(a.node_id, req) if a.node_id else 0.0
        return replace(a, ray_gpus=gpus) if gpus else a

    def ray_outsiders(self, nodes: dict[str, ComputeTier]) -> None:
        """Ray's alive raylets with a fabric tier label that the fleet does not hold, and the tier
        their labels say: whatever routes by label must leave them out (``spill_target``)."""
        self._outsiders = dict(nodes)

    def cordon(self, node_id: str) -> None:
        """No new placements on the node; running work is left alone."""
        self.fleet.update(node_id, cordoned=True)

    def uncordon(self, node_id: str) -> list[Instruction]:
        """The node takes work again (a pending drain is withdrawn)."""
        self._drains.pop(node_id, None)
        self.fleet.update(node_id, cordoned=False)
        return self.drain_queue()

    def drain(self, node_id: str, grace_s: float | None = None) -> list[Instruction]:
        """Cordon now; when the node's fabric work has ended, or ``grace_s`` (default: the
        settings' drain grace) has passed, mark it draining."""
        self.cordon(node_id)
        grace = self.settings.health.drain_grace_s if grace_s is None else grace_s
        self._drains[node_id] = _Drain(node_id, self.clock() + grace)
        return self._check_drains()

    def running_on(self, node_id: str) -> int:
        """Fabric work this scheduler placed on the node and has not seen end."""
        return len(self._by_node.get(node_id, ()))

    # -- time ------------------------------------------------------------------------------------
    def tick(self) -> list[Instruction]:
        """Expire queued work past its deadline and finish drains whose grace ran out."""
        now = self.clock()
        out: list[Instruction] = []
        for q in list(self._queued.values()):
            if q.deadline <= now:
                self._queued.pop(q.request_id, None)
                q.cancelled = True
                self.counters["queue_expired"] += 1
                waited = now - q.enqueued_at
                out.append(Expired(q.request_id, CapacityError(
                    f"no node at or above {q.requirement.floor} took the work within {waited:.1f}s "
                    f"(asked for {q.requirement.min_tier})",
                    requirement=repr(q.requirement), reason="queue timeout", waited_s=round(waited, 3),
                )))
        expired = [lid for lid, st in self._leases.items() if st.expires <= now]
        for lid in expired:
            self._drop_lease(lid)
            self.counters["leases_expired"] += 1
        out.extend(self._check_drains())
        if expired:
            out.extend(self.drain_queue())
        return out

    def drain_queue(self) -> list[Instruction]:
        """Place what the queue can now hold, in priority-then-FIFO order. Once one request of a
        requirement class fails in this pass, the rest of that class is skipped: the fleet only
        fills up during a pass, so they would fail too."""
        if not self._queued:
            return []
        out: list[Instruction] = []
        failed_classes: set[tuple] = set()
        keep: list[_Queued] = []
        while self._queue:
            q = heapq.heappop(self._queue)
            if q.cancelled:
                continue
            key = (q.requirement.class_key, q.context)
            if key in failed_classes:
                keep.append(q)
                continue
            d = place(self.fleet, q.requirement, q.context)
            if d.status == "placed":
                self._commit(d)
                self._queued.pop(q.request_id, None)
                out.append(Placed(q.request_id, self._assignment(d, q.requirement)))
            else:
                failed_classes.add(key)
                keep.append(q)
        for q in keep:
            heapq.heappush(self._queue, q)
        return out

    # -- restart reconciliation -------------------------------------------------------------------
    def adopt(self, allocation: Allocation) -> bool:
        """Re-learn an allocation after a restart (work that reported in as still running)."""
        if allocation.node_id not in self.fleet or allocation.allocation_id in self.allocations:
            return False
        self.fleet.reserve(allocation)
        self._track(allocation)
        return True

    # -- internals ------------------------------------------------------------------------------------
    def _commit(self, d: Decision, *, track: bool = True) -> None:
        a = self.fleet.commit(d)
        self.counters["placements_succeeded"] += 1
        if d.fallback_levels > 0:
            self.counters["fallbacks"] += 1
        if a is not None and track:
            self._track(a)

    def _drop_lease(self, lease_id: str) -> bool:
        state = self._leases.pop(lease_id, None)
        if state is None:
            return False
        for a in state.allocations:
            if self.allocations.pop(a.allocation_id, None) is not None:
                self._by_node.get(a.node_id, set()).discard(a.allocation_id)
                self.fleet.release(a)
        return True

    def _track(self, a: Allocation) -> None:
        self.allocations[a.allocation_id] = a
        self._by_node.setdefault(a.node_id, set()).add(a.allocation_id)

    def _enqueue(self, request_id: str, req: Requirement, ctx: PlacementContext | None, priority: int,
                 timeout_s: float | None) -> None:
        now = self.clock()
        timeout = self.settings.queue_timeout_s if timeout_s is None else timeout_s
        q = _Queued((-priority, next(self._seq)), request_id, req, ctx, now + timeout, now)
        old = self._queued.get(request_id)
        if old is not None:
            old.cancelled = True
        self._queued[request_id] = q
        heapq.heappush(self._queue, q)

    def any_node_serves(self, tier: ComputeTier, pool: str | None) -> bool:
        """Some active or draining node of the pool serves ``tier`` (busy or cordoned counts)."""
        pool = pool or self.fleet.default_pool
        return any(
            r.tier >= tier and r.pool == pool and r.status in (NodeStatus.ACTIVE, NodeStatus.DRAINING)
            for r in self.fleet.records()
        )

    def _check_drains(self) -> list[Instruction]:
        if not self._drains:
            return []
        now = self.clock()
        out: list[Instruction] = []
        for node_id, dr in list(self._drains.items()):
            if node_id not in self.fleet:
                self._drains.pop(node_id)
                continue
            if self.running_on(node_id) == 0 or dr.deadline <= now:
                self._drains.pop(node_id)
                try:
                    self.fleet.update(node_id, status=NodeStatus.DRAINING)
                except NodeNotFoundError:  # pragma: no cover - removed concurrently
                    continue
                out.append(MarkDraining(node_id))
        return out

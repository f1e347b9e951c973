"""``SchedulerCore``: the scheduler's decisions, one stimulus at a time (the adaptive
scheduler and the reconfiguration engine).

``handle(stimulus) -> instructions`` is the one way in (Dask's ``handle_stimulus`` habit): the
``SchedulerActor`` turns Ray and registry facts and its callers' requests into stimuli
(``stimuli.py``) and carries out what comes back (``instructions.py``); everything that decides
lives here, so hours of queueing, draining and node churn replay in milliseconds with an injected
clock. The state is composed of small parts, each with its own invariants:

- a ``FleetView`` kept current by node stimuli (joined, changed, lost, cordoned, drained);
- the ``AllocationLedger``: every reservation, by node and owner (released when the work ends,
  dropped with a lost node);
- the ``DeferredQueue`` (priority, then FIFO; retried on every capacity event, expired at deadlines);
- the ``LeaseBook`` (the fast path's leases: renewals, expiry);
- the ``DrainBook`` (the drain saga, ``DrainPhase``);
- the ``ProvisionBook``, kept by the ``Cascade`` (``cascade.py``: provisions and the prospective
  nodes they put in the fleet);
- the ``LeaseDesk`` (``lease_desk.py``: a lease's reservations from grant to end, and the slots
  an expired lease's calls may still hold);
- the counters behind ``handle.metrics()`` and the ``fallback_count``, and a bounded log
  of the stimuli handled.

The parts keep their books and say what changed; the handlers here decide what follows (a refusal,
the queue placed again). ``validate_state()`` checks the invariants of all of them together; every
scheduler test runs it. The call-style entry points (``place``, ``lease``, ``drain``...) are thin
wrappers that build a stimulus, ``handle`` it and give back its reply.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping

from fabric.core.clock import Clock
from fabric.core.decisions.tap import DecisionTap
from fabric.core.errors import CapacityError, NodeNotFoundError, RequirementError
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import Allocation, Decision, FleetView, NodeRecord, PlacementContext, Requirement, place
from fabric.core.settings import FabricSettings
from fabric.core.tiers import ComputeTier

from fabric.core.scheduling import stimuli as st
from fabric.core.scheduling.cascade import Cascade
from fabric.core.scheduling.drain import DrainBook
from fabric.core.scheduling.instructions import (
    Answer, Expired, Instruction, MarkDraining, Placed, Refused, SetCordoned, reply,
)
from fabric.core.scheduling.invariants import InvalidStateError, state_problems
from fabric.core.scheduling.lease_desk import LeaseDesk
from fabric.core.scheduling.leases import LeaseBook
from fabric.core.scheduling.provisions import ProvisionBook
from fabric.core.scheduling.ledger import AllocationLedger
from fabric.core.scheduling.queue import DeferredQueue, QueuedRequest
from fabric.core.scheduling.readout import core_metrics, explain_placement
from fabric.core.scheduling.replies import LeaseGrant, NodeAssignment
from fabric.core.scheduling.spill import spill_target

STIMULUS_LOG_SIZE = 512
"""Stimuli kept in the core's log (``stimulus_log``), newest last."""


def hard_fail(req: Requirement) -> CapacityError:
    """Work whose tier no node serves and that may not fall back fails at once."""
    return CapacityError(f"no node serves {req.min_tier} and the requirement may not fall back (fallback=False)",
                         requirement=repr(req), reason="no node serves the tier")


def _others(out: list[Instruction], sid: str) -> list[Instruction]:
    """``out`` without the stimulus's own reply and the cordon writes; a ``Refused`` is raised."""
    reply(out, sid)
    return [i for i in out if not isinstance(i, (Answer, Refused, SetCordoned))]


class SchedulerCore:
    """Placement with memory: the fleet, what was placed on it, and what is waiting."""

    def __init__(self, settings: FabricSettings | None = None, *, clock: Clock, log_size: int = STIMULUS_LOG_SIZE) -> None:
        self.settings = settings if settings is not None else FabricSettings()
        self.clock = clock
        """The time (seconds, monotonic): injected, never read from the system here."""
        self.fleet = FleetView(settings=self.settings)
        self.ledger = AllocationLedger()
        self.queue = DeferredQueue()
        self.leases = LeaseBook(self.settings.health.monitor_interval_s)
        self.drains = DrainBook()
        self.provisions = ProvisionBook()
        self.decision_tap = DecisionTap(self.settings.decisions.enabled, self.settings.decisions.sample_one_in)
        self._outsiders: dict[str, ComputeTier] = {}
        self.counters = {
            "placements_attempted": 0, "placements_succeeded": 0, "placements_failed": 0,
            "placements_deferred": 0, "queue_expired": 0, "released": 0, "fallbacks": 0,
            "nodes_joined": 0, "nodes_lost": 0, "work_lost_with_node": 0, "select_worker_calls": 0,
            "leases_granted": 0, "leases_expired": 0, "calls_reported": 0, "call_reports": 0,
            "provisions_requested": 0, "provisions_registered": 0, "provisions_failed": 0, "provisions_abandoned": 0,
            "nodes_marked_unhealthy": 0, "nodes_unhealthy": 0,  # the scheduler's NodeStrikes keeps these two
        }
        self.cascade = Cascade(self.settings, self.fleet, self.ledger, self.provisions, self.counters, clock)
        self.lease_desk = LeaseDesk(self.fleet, self.ledger, self.leases, self.counters, clock, self.ray_gpus)
        self.stimuli_handled = 0
        self._log: deque[tuple[str, str, float]] = deque(maxlen=max(1, log_size))
        """(kind, stimulus_id, at) of the last stimuli handled (tuples: the log is on every call's path)."""
        self._handlers: dict[type, Callable[[Any, float], list[Instruction]]] = {
            st.NodeJoined: self._node_joined, st.NodeChanged: self._node_changed, st.NodeLost: self._node_lost,
            st.OutsidersSeen: self._outsiders_seen, st.PlaceRequested: self._place_requested,
            st.SelectRequested: self._select_requested, st.LeaseRequested: self._lease_requested,
            st.LeaseEnded: self._lease_ended, st.CallsReported: self._calls_reported,
            st.SlotsReleased: self._slots_released, st.PlacementUnclaimed: self._placement_unclaimed,
            st.Cancelled: self._cancelled, st.Cordoned: self._cordoned, st.Uncordoned: self._uncordoned,
            st.DrainRequested: self._drain_requested, st.Tick: self._tick,
            st.ProvisionStarted: self.cascade.started, st.ProvisionFailed: self._provision_failed,
            st.ProvisionRequested: self._provision_requested, st.SlotsObserved: self._slots_observed,
            st.ProvisionsAdopted: self.cascade.adopt,
        }

    # -- the one way in -----------------------------------------------------------------------------
    def handle(self, stimulus: st.Stimulus) -> list[Instruction]:
        """React to one stimulus; every instruction returned carries its ``stimulus_id``."""
        handler = self._handlers.get(type(stimulus))
        if handler is None:
            raise TypeError(f"not a scheduler stimulus: {type(stimulus).__name__}")
        now = stimulus.now if isinstance(stimulus, st.Tick) and stimulus.now is not None else self.clock()
        self._log.append((stimulus.kind, stimulus.stimulus_id, now))
        self.stimuli_handled += 1
        return handler(stimulus, now)

    def stimulus_log(self) -> list[dict[str, Any]]:
        """The last ``STIMULUS_LOG_SIZE`` stimuli handled, oldest first: kind, id and time."""
        return [{"kind": kind, "stimulus_id": sid, "at": at} for kind, sid, at in self._log]

    def validate_state(self) -> None:
        """Check every invariant of the core; ``InvalidStateError`` lists each one broken."""
        problems = state_problems(self)
        if problems:
            raise InvalidStateError(problems)

    # -- reading ------------------------------------------------------------------------------------
    @property
    def fallback_count(self) -> int:
        """Decisions placed below their ``min_tier`` since start (for verification)."""
        return self.counters["fallbacks"]

    @property
    def queue_depth(self) -> int:
        return len(self.queue)

    @property
    def lease_ttl_s(self) -> float:
        return self.leases.ttl_s

    @property
    def allocations(self) -> dict[int, Allocation]:
        """Every reservation held, by allocation id (a copy)."""
        return self.ledger.allocations()

    @property
    def outsiders(self) -> dict[str, ComputeTier]:
        return dict(self._outsiders)

    def node(self, node_id: str) -> NodeRecord:
        return self.fleet.node(node_id)

    def running_on(self, node_id: str) -> int:
        """Fabric work this scheduler placed on the node and has not seen end."""
        return self.ledger.running_on(node_id)

    def resolve_node(self, node: str) -> str:
        """The id of the node known by id or by (unique) name; ``NodeNotFoundError`` otherwise."""
        if node in self.fleet:
            return node
        matches = [r.node_id for r in self.fleet.records() if r.name == node]
        if len(matches) == 1:
            return matches[0]
        raise NodeNotFoundError(node)

    def metrics(self) -> dict[str, Any]:
        """Counters since start plus gauges computed now: per-tier nodes, running, utilisation."""
        return core_metrics(self)

    def check_requirement(self, req: Requirement) -> Requirement:
        """``req`` if everything it names exists in the settings in force (its pool); else the
        ``RequirementError`` that names the field. Never a silent ``deferred``."""
        if not isinstance(req, Requirement):
            raise RequirementError("requirement", f"must be a fabric.Requirement, got {type(req).__name__}", req)
        return req.validate_against(self.settings)

    def any_node_serves(self, tier: ComputeTier, pool: str | None) -> bool:
        """Some active or draining node of the pool serves ``tier`` (busy or cordoned counts)."""
        pool = pool or self.fleet.default_pool
        return any(r.tier is not None and r.tier >= tier and r.pool == pool
                   and r.status in (NodeStatus.ACTIVE, NodeStatus.DRAINING) for r in self.fleet.records())

    def ray_gpus(self, node_id: str, req: Requirement) -> float:
        """GPUs a call of ``req`` asks Ray for on ``node_id``: its ``num_gpus`` on a node with CUDA
        devices (those are what the node declared to Ray, ``NodeCapabilities.ray_gpus``), so Ray
        reserves them and sets ``CUDA_VISIBLE_DEVICES``; 0 elsewhere (a VA-API GPU is the engine's
        to account for: asking Ray would leave the call unschedulable there)."""
        if not req.num_gpus or node_id not in self.fleet:
            return 0.0
        return float(req.num_gpus) if self.fleet.node(node_id).capabilities.ray_gpus else 0.0

    def could_provision(self, req: Requirement) -> bool:
        """Some elastic pool tier of ``req``'s pool may provision a node for it now (``Cascade``)."""
        return self.cascade.could_provision(req)

    def take_served(self) -> list[tuple[str, str]]:
        """``(job id, node id)`` of the nodes that registered for a job's provision since the last call."""
        served, self.cascade.served = self.cascade.served, []
        return served

    def provisions_view(self) -> dict[str, list[dict[str, object]]]:
        """Open provisions and held pool tiers, for ``fabric status`` and ``h.metrics()``."""
        return self.cascade.view()

    def spill_target(self, req: Requirement) -> tuple[dict[str, str] | None, str | None]:
        """Where a lease's spilled calls go (``spill.spill_target`` over this core's fleet); nowhere
        while an elastic pool tier may still provision for them (they queue, and provision)."""
        if self.could_provision(req):
            return None, None
        return spill_target(self.fleet, self.settings, self._outsiders, req)

    def explain(self, req: Requirement, ctx: PlacementContext | None = None, verbose: bool = False) -> dict[str, Any]:
        """A dry-run placement against the fleet, with its trace (``readout.explain_placement``). Changes nothing."""
        return explain_placement(self.fleet, self.check_requirement(req), ctx, verbose)

    # -- fleet stimuli (the reconfiguration engine) ---------------------------------------------------
    def _node_joined(self, s: st.NodeJoined, now: float) -> list[Instruction]:
        """New (or returning) capacity: add it and drain the queue onto it."""
        rec = s.record
        fresh = rec.node_id not in self.fleet
        if rec.node_id in self.drains and not rec.cordoned:
            rec = rec.evolve(cordoned=True)  # a drain in progress keeps its cordon until an uncordon
        rec = self.fleet.add(rec)
        self.ledger.note_cap(rec.node_id, rec.slots)
        if fresh:
            self.counters["nodes_joined"] += 1
        out = self.cascade.match(rec, s.stimulus_id) if fresh else []
        return out + self._place_waiting(s.stimulus_id)

    def _node_changed(self, s: st.NodeChanged, now: float) -> list[Instruction]:
        """A node's facts changed (re-probe, demotion to a lower tier, status, flap hold...)."""
        if s.node_id not in self.fleet:
            return []
        changes = dict(s.changes)
        if s.node_id in self.drains and changes.get("cordoned") is False:
            del changes["cordoned"]  # a stale read racing the drain's own cordon: only an uncordon withdraws it
        rec = self.fleet.update(s.node_id, **changes)
        self.ledger.note_cap(rec.node_id, rec.slots)
        return self._place_waiting(s.stimulus_id)

    def _node_lost(self, s: st.NodeLost, now: float) -> list[Instruction]:
        """Capacity removed: forget the node and its reservations. Work that was running there is
        re-placed by the dispatch layer (Ray retries it within the floor); the queue is unaffected."""
        if self.fleet.remove(s.node_id) is not None:
            self.counters["nodes_lost"] += 1
        self.counters["work_lost_with_node"] += self.ledger.drop_node(s.node_id)
        self.drains.abandon(s.node_id, now)
        return []

    def _outsiders_seen(self, s: st.OutsidersSeen, now: float) -> list[Instruction]:
        """Whatever routes by label must leave these raylets out (``spill_target``)."""
        self._outsiders = dict(s.nodes)
        return []

    # -- work -----------------------------------------------------------------------------------------
    def _refusal(self, req: Requirement, sid: str) -> list[Instruction]:
        """[Refused] when the settings in force do not know what ``req`` names, else []."""
        try:
            self.check_requirement(req)
        except RequirementError as exc:
            return [Refused(exc, stimulus_id=sid)]
        return []

    def _place_requested(self, s: st.PlaceRequested, now: float) -> list[Instruction]:
        """Place now and reserve the node. A deferred call with ``queue`` waits in the deferred queue.

        A hard requirement (no fallback) that no node in the fleet serves at all is refused at once
        (``CapacityError``): waiting would not help unless a new node joins, so such work
        hard-fails. Busy is not absent: a full CUDA node means wait."""
        sid, req = s.stimulus_id, s.requirement
        refused = self._refusal(req, sid)
        if refused:
            return refused
        out = self._end_leases(s.release, sid)
        self.counters["placements_attempted"] += 1
        d = self.cascade.settle(self._decided(place(self.fleet, req, s.context), s.context, sid, s.queue), req, s.context, sid, now, out)
        prospective = self.cascade.on_prospective(d)
        if d.status == "placed" and not prospective:
            self._commit(d)
            return out + [Answer(self._assignment(d, req), stimulus_id=sid)]
        if not prospective and req.hard and not self.any_node_serves(req.min_tier, req.pool) and not self.could_provision(req):
            self.counters["placements_failed"] += 1
            return out + [Refused(hard_fail(req), stimulus_id=sid)]
        self.counters["placements_deferred"] += 1
        if s.queue and s.request_id is not None:
            timeout = self.settings.queue_timeout_s if s.timeout_s is None else s.timeout_s
            q = self.queue.push(s.request_id, req, s.context, priority=s.priority, deadline=now + timeout, now=now)
            if prospective:
                q.held = self._hold(d)
        if prospective:
            return out + [Answer(NodeAssignment("deferred", None, d.tier, self.cascade.provision_reason(d)), stimulus_id=sid)]
        return out + [Answer(NodeAssignment.from_decision(d, reserved=False), stimulus_id=sid)]

    def _select_requested(self, s: st.SelectRequested, now: float) -> list[Instruction]:
        """``select_worker``: where would this run now? Counts fallbacks like a real
        placement but holds no reservation (nothing will release it)."""
        refused = self._refusal(s.requirement, s.stimulus_id)
        if refused:
            return refused
        self.counters["select_worker_calls"] += 1
        d = place(self.fleet, s.requirement)
        if self.cascade.on_prospective(d):
            return [Answer(NodeAssignment("deferred", None, d.tier, self.cascade.provision_reason(d)), stimulus_id=s.stimulus_id)]
        if d.status == "placed" and d.fallback_levels > 0:
            self.counters["fallbacks"] += 1
        return [Answer(NodeAssignment.from_decision(d, reserved=False), stimulus_id=s.stimulus_id)]

    def _lease_requested(self, s: st.LeaseRequested, now: float) -> list[Instruction]:
        """Give back the client's idle leases, then grant (or renew) ``lease_id``: the slots it
        still has running stay reserved and up to ``want`` more are placed; the previous grant under
        the id is replaced. A hard requirement that no node of its pool serves is refused
        (``CapacityError``), as a placement is. A requirement the settings refuse is refused before
        anything is given back."""
        sid, req = s.stimulus_id, s.requirement
        refused = self._refusal(req, sid)
        if refused:
            return refused
        out = self._end_leases([idle for idle in s.release if idle != s.lease_id], sid)
        grant = self._grant(s.lease_id, req, s.holding, s.want, now, sid)
        if (not grant.slots and grant.spill is None and req.hard and not self.any_node_serves(req.min_tier, req.pool)
                and not self.could_provision(req)):  # a node the cascade may provision is worth the wait
            self.lease_desk.drop(s.lease_id)
            self.counters["placements_failed"] += 1
            return out + [Refused(hard_fail(req), stimulus_id=sid)]
        return out + [Answer(grant, stimulus_id=sid)]

    def _lease_ended(self, s: st.LeaseEnded, now: float) -> list[Instruction]:
        return self._end_leases([s.lease_id], s.stimulus_id)

    def _calls_reported(self, s: st.CallsReported, now: float) -> list[Instruction]:
        """Calls that ran under leases (on a leased slot or spilled) since their workers' last
        report, and how many of them ran below their ``min_tier`` (the fallback counters): each call
        counts once, where it ran, like a call the scheduler placed itself."""
        self.counters["calls_reported"] += s.placed
        self.counters["placements_attempted"] += s.placed
        self.counters["placements_succeeded"] += s.placed
        self.counters["call_reports"] += 1
        self.counters["fallbacks"] += s.fallbacks
        return []

    def _slots_observed(self, s: st.SlotsObserved, now: float) -> list[Instruction]:
        """Ray's view of slots in use. A lease that expired while its calls ran left its slots as
        ``OBSERVED`` reservations (``LeaseDesk``): those Ray no longer counts go, and the queue moves."""
        return self._place_waiting(s.stimulus_id) if self.lease_desk.observe(s.used, now) else []

    def _slots_released(self, s: st.SlotsReleased, now: float) -> list[Instruction]:
        """Work ended: give its reservations back, then let drains and the queue move on."""
        return self._release(s.allocation_ids, s.stimulus_id, now)

    def _placement_unclaimed(self, s: st.PlacementUnclaimed, now: float) -> list[Instruction]:
        """Nobody will run a queued call where it was placed: its slot is free again."""
        return self._release(() if s.allocation_id is None else (s.allocation_id,), s.stimulus_id, now)

    def _cancelled(self, s: st.Cancelled, now: float) -> list[Instruction]:
        self.queue.cancel(s.request_id)
        return []

    def _provision_requested(self, s: st.ProvisionRequested, now: float) -> list[Instruction]:
        """The burst scaler's worker group: its provisions opened, and the queue placed onto them."""
        out = self.cascade.requested(s, now)
        return out + self._place_waiting(s.stimulus_id) if out else []

    def _provision_failed(self, s: st.ProvisionFailed, now: float) -> list[Instruction]:
        """The provider could not start it: the work it held is placed again (the cascade spills on)."""
        return self._place_waiting(s.stimulus_id) if self.cascade.failed(s, now) else []

    # -- the operator ---------------------------------------------------------------------------------
    def _unknown(self, node_id: str, sid: str) -> list[Instruction]:
        return [] if node_id in self.fleet else [Refused(NodeNotFoundError(node_id), stimulus_id=sid)]

    def _cordoned(self, s: st.Cordoned, now: float) -> list[Instruction]:
        """No new placements on the node; running work is left alone; the registry records it."""
        unknown = self._unknown(s.node_id, s.stimulus_id)
        if unknown:
            return unknown
        self.fleet.update(s.node_id, cordoned=True)
        return [SetCordoned(s.node_id, True, reason="operator cordon", stimulus_id=s.stimulus_id)]

    def _uncordoned(self, s: st.Uncordoned, now: float) -> list[Instruction]:
        """The node takes work again (a drain in progress is withdrawn)."""
        unknown = self._unknown(s.node_id, s.stimulus_id)
        if unknown:
            return unknown
        self.drains.withdraw(s.node_id, now)
        self.fleet.update(s.node_id, cordoned=False)
        out: list[Instruction] = [SetCordoned(s.node_id, False, reason="operator uncordon", stimulus_id=s.stimulus_id)]
        return out + self._place_waiting(s.stimulus_id)

    def _drain_requested(self, s: st.DrainRequested, now: float) -> list[Instruction]:
        """Cordon now; when the node's fabric work has ended, or the grace has passed, mark it draining."""
        unknown = self._unknown(s.node_id, s.stimulus_id)
        if unknown:
            return unknown
        self.fleet.update(s.node_id, cordoned=True)
        grace = self.settings.health.drain_grace_s if s.grace_s is None else s.grace_s
        self.drains.start(s.node_id, now + grace, now, s.stimulus_id)
        out: list[Instruction] = [SetCordoned(s.node_id, True, reason="operator drain", stimulus_id=s.stimulus_id)]
        return out + self._advance_drains(now, s.stimulus_id)

    # -- time -----------------------------------------------------------------------------------------
    def _tick(self, s: st.Tick, now: float) -> list[Instruction]:
        """Expire queued work past its deadline and leases not renewed; finish drains whose grace ran out."""
        sid = s.stimulus_id
        out: list[Instruction] = []
        for q in self.queue.expire(now):
            self.counters["queue_expired"] += 1
            out.append(Expired(q.request_id, self._timeout_error(q, now), stimulus_id=sid))
        expired, freed = self.lease_desk.expire(now)
        if freed:  # what Ray last counted in use stays; the rest is free now
            out.extend(self._place_waiting(sid))
        out.extend(self._advance_drains(now, sid))
        abandoned, moved = self.cascade.expire(now, sid) if len(self.provisions) or self.fleet.provision_held else ([], False)
        out.extend(abandoned)
        if expired or moved:
            out.extend(self._place_waiting(sid))
        return out

    @staticmethod
    def _timeout_error(q: QueuedRequest, now: float) -> CapacityError:
        waited = now - q.enqueued_at
        return CapacityError(
            f"no node at or above {q.requirement.floor} took the work within {waited:.1f}s "
            f"(asked for {q.requirement.min_tier})",
            requirement=repr(q.requirement), reason="queue timeout", waited_s=round(waited, 3))

    # -- internals ------------------------------------------------------------------------------------
    def _place_waiting(self, sid: str) -> list[Instruction]:
        """Place what the queue can now hold, in priority-then-FIFO order (one pass)."""
        out: list[Instruction] = []

        now = self.clock()

        def try_place(q: QueuedRequest) -> bool | None:
            if q.held is not None:  # its place on a prospective node is taken again below if still best
                self.ledger.give_back(q.held, self.fleet)
                q.held = None
            d = self.cascade.settle(self._decided(place(self.fleet, q.requirement, q.context), q.context, sid, True),
                                    q.requirement, q.context, sid, now, out)
            if d.status != "placed":
                return False
            if self.cascade.on_prospective(d):
                q.held = self._hold(d)
                return None
            self._commit(d)
            out.append(Placed(q.request_id, self._assignment(d, q.requirement), stimulus_id=sid))
            return True

        self.queue.place_waiting(try_place, lambda q: (q.requirement.class_key, q.context))
        return out

    def _release(self, allocation_ids: Iterable[int], sid: str, now: float) -> list[Instruction]:
        freed = False
        for aid in allocation_ids:
            if self.ledger.give_back(aid, self.fleet) is None:
                continue  # already dropped with its node, or released twice
            self.counters["released"] += 1
            freed = True
        out = self._advance_drains(now, sid)
        if freed:
            out.extend(self._place_waiting(sid))
        return out

    def _advance_drains(self, now: float, sid: str) -> list[Instruction]:
        if not len(self.drains):
            return []
        out: list[Instruction] = []
        for d in self.drains.advance(now, self.ledger.running_on, self.fleet.__contains__):
            self.fleet.update(d.node_id, status=NodeStatus.DRAINING)
            left = self.ledger.running_on(d.node_id)
            why = f"drain grace ran out with {left} call(s) running" if left else "drained: no fabric work left"
            out.append(MarkDraining(d.node_id, reason=why, stimulus_id=sid))
        return out

    def _hold(self, d: Decision) -> int | None:
        """Reserve a prospective node for a queued call (not a placement: nothing runs there yet)."""
        cap = self.fleet.node(d.node_id).slots if d.node_id is not None else 0
        a = self.fleet.commit(d)
        if a is None:
            return None
        self.ledger.track(a, slots=cap)
        return a.allocation_id

    def _commit(self, d: Decision) -> None:
        """Reserve a placed decision's node for one call and count it."""
        cap = self.fleet.node(d.node_id).slots if d.node_id is not None else 0
        a = self.fleet.commit(d)
        self.counters["placements_succeeded"] += 1
        if d.fallback_levels > 0:
            self.counters["fallbacks"] += 1
        if a is not None:
            self.ledger.track(a, slots=cap)

    def _assignment(self, d: Decision, req: Requirement) -> NodeAssignment:
        a = NodeAssignment.from_decision(d, reserved=True)
        gpus = self.ray_gpus(a.node_id, req) if a.node_id else 0.0
        return replace(a, ray_gpus=gpus) if gpus else a

    def _grant(self, lease_id: str, req: Requirement, holding: Mapping[str, int], want: int, now: float, sid: str) -> LeaseGrant:
        slots = self.lease_desk.grant(lease_id, req, holding or {}, want, now, self.decision_tap.lease(self.fleet, sid))
        spill, via = self.spill_target(req)  # where the calls beyond its slots go, once they are reserved
        grant = LeaseGrant(lease_id, slots, spill, self.leases.ttl_s, via)
        self.decision_tap.granted(grant)
        return grant

    def _decided(self, d: Decision, ctx: PlacementContext | None, sid: str, placed_only: bool = False) -> Decision:
        """``d`` as the engine made it, shown first to the decision tap (which records it when due);
        ``placed_only``: a queued call's is recorded once it is placed, not each time it waits."""
        if self.decision_tap.enabled and (d.status == "placed" or not placed_only):
            self.decision_tap.decided("job" if ctx is not None and ctx.job_id else "task", d, self.fleet, sid)
        return d

    def _end_leases(self, lease_ids: Iterable[str], sid: str) -> list[Instruction]:
        """Give leases back, one by one; the queue tries again after each one that freed slots."""
        out: list[Instruction] = []
        for lid in lease_ids:
            if self.lease_desk.end(lid):
                out.extend(self._place_waiting(sid))
        return out

    # -- call-style entry points: each builds a stimulus, handles it, gives back its reply ----------------
    # The registry writes a cordon asks for (``SetCordoned``) are left out: the actor, which carries
    # them out, calls ``handle`` itself. Tests and the fuzz surfaces use these for brevity.
    def _ask(self, stimulus: st.Stimulus) -> Any:
        return reply(self.handle(stimulus), stimulus.stimulus_id)

    def place(self, req: Requirement, ctx: PlacementContext | None = None, *, request_id: str | None = None,
              queue: bool = False, priority: int = 0, timeout_s: float | None = None) -> NodeAssignment:
        """Place ``req`` now and reserve the node; deferred work with ``queue`` waits under
        ``request_id``. ``CapacityError`` for a hard requirement no node serves (``PlaceRequested``)."""
        return self._ask(st.PlaceRequested(req, ctx, request_id, queue, priority, timeout_s))

    def select_worker(self, req: Requirement) -> NodeAssignment:
        return self._ask(st.SelectRequested(req))

    def grant_lease(self, lease_id: str, req: Requirement, holding: Mapping[str, int] | None = None, want: int = 64,
                    release: Iterable[str] = ()) -> tuple[LeaseGrant, list[Instruction]]:
        """The grant and what the releases let run (``LeaseRequested``); ``CapacityError`` for a
        hard requirement no node of its pool serves."""
        s = st.LeaseRequested(lease_id, req, dict(holding or {}), want, tuple(release))
        out = self.handle(s)
        grant = reply(out, s.stimulus_id)
        return grant, _others(out, s.stimulus_id)

    def lease(self, lease_id: str, req: Requirement, holding: Mapping[str, int] | None = None, want: int = 64) -> LeaseGrant:
        """``grant_lease`` with nothing given back first: the grant alone."""
        return self.grant_lease(lease_id, req, holding, want)[0]

    def end_lease(self, lease_id: str) -> list[Instruction]:
        return self.handle(st.LeaseEnded(lease_id))

    def report_calls(self, placed: int = 0, fallbacks: int = 0) -> None:
        self.handle(st.CallsReported(placed, fallbacks))

    def release(self, allocation_ids: Iterable[int]) -> list[Instruction]:
        return self.handle(st.SlotsReleased(tuple(allocation_ids)))

    def cancel(self, request_id: str) -> bool:
        """Forget a queued request; False when it was not queued."""
        queued = request_id in self.queue
        self.handle(st.Cancelled(request_id))
        return queued

    def node_joined(self, rec: NodeRecord) -> list[Instruction]:
        return self.handle(st.NodeJoined(rec))

    def node_changed(self, node_id: str, **changes: Any) -> list[Instruction]:
        return self.handle(st.NodeChanged(node_id, changes))

    def node_lost(self, node_id: str) -> list[Instruction]:
        return self.handle(st.NodeLost(node_id))

    def ray_outsiders(self, nodes: Mapping[str, ComputeTier]) -> None:
        self.handle(st.OutsidersSeen(dict(nodes)))

    def cordon(self, node_id: str) -> None:
        s = st.Cordoned(node_id)
        _others(self.handle(s), s.stimulus_id)

    def uncordon(self, node_id: str) -> list[Instruction]:
        s = st.Uncordoned(node_id)
        return _others(self.handle(s), s.stimulus_id)

    def drain(self, node_id: str, grace_s: float | None = None) -> list[Instruction]:
        s = st.DrainRequested(node_id, grace_s)
        return _others(self.handle(s), s.stimulus_id)

    def tick(self) -> list[Instruction]:
        return self.handle(st.Tick())

__all__ = ["Clock", "STIMULUS_LOG_SIZE", "SchedulerCore", "hard_fail"]

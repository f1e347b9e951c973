"""The cascade acts: the core's side of provisioning (``provisions.py`` holds the book).

``Cascade`` is a part of ``SchedulerCore``, built over the same fleet, ledger, provision book and
counters. A placement that answers ``provision`` opens a provision (``ProvisionNode`` for the actor,
a prospective record in the fleet) and is placed again, now onto the prospective node; the caller's
work waits there (queued work holds a reservation on it) until the node registers.
``scale="provision_first"`` never makes a call wait while a booted node inside its floor fits: the
provision is opened for the calls to come, and this one runs on that node now
(degrade-before-provision, the default, never reaches here while such a node fits).

Every provision moves through ``PROVISION_LIFECYCLE`` (``fabric.core.provision_phase``): opened
``asked``, ``started`` when its provider answers, closed ``registered``, ``failed`` or
``abandoned``; the book makes each move (``ProvisionBook.started`` / ``close`` / ``abandon``).

The cascade keeps its books and answers what changed; placing the queue again afterwards is the
core's (it says when: ``requested`` answered instructions, ``failed`` answered True, ``expire``'s
flag).
"""

from __future__ import annotations

from dataclasses import replace

from fabric.core.clock import Clock
from fabric.core.placement import Decision, FleetView, NodeRecord, PlacementContext, Requirement, place
from fabric.core.placement import walk
from fabric.core.placement.context import TASK_CONTEXT
from fabric.core.placement.filters import provision_shape
from fabric.core.provision_phase import ProvisionPhase
from fabric.core.scheduling import stimuli as st
from fabric.core.scheduling.instructions import Instruction, ProvisionNode, TerminateNode
from fabric.core.scheduling.ledger import AllocationLedger
from fabric.core.scheduling.provision_rows import shifted
from fabric.core.scheduling.provisions import (
    MAX_PENDING, PendingProvision, ProvisionBook, find_pool_tier, is_prospective, shape_record,
)
from fabric.core.settings import FabricSettings


class Cascade:
    """Provisioning, prospective nodes and their end (a part of ``SchedulerCore``)."""

    def __init__(self, settings: FabricSettings, fleet: FleetView, ledger: AllocationLedger, provisions: ProvisionBook,
                 counters: dict[str, int], clock: Clock) -> None:
        self.settings = settings
        self.fleet = fleet
        self.ledger = ledger
        self.provisions = provisions
        self.counters = counters
        """The core's counters (``provisions_*``), shared."""
        self.clock = clock
        self.served: list[tuple[str, str]] = []
        """``(job id, node id)`` of each node that registered for a provision a job's placement
        opened, until the scheduler takes them (``SchedulerCore.take_served``)."""

    def on_prospective(self, d: Decision) -> bool:
        """A placed decision that landed on a node still coming up."""
        return d.status == "placed" and d.node_id is not None and is_prospective(d.node_id)

    def settle(self, d: Decision, req: Requirement, ctx: PlacementContext | None, sid: str,
               now: float, out: list[Instruction]) -> Decision:
        """Turn a ``provision`` decision into an open provision (appending its ``ProvisionNode`` to
        ``out``) and the decision the call follows now: on a booted node (``provision_first`` with
        one inside the floor), else on the prospective node; anything else is returned as it is."""
        if d.status != "provision" or d.shape is None or d.pool is None or d.pool_tier is None:
            return d
        pt = find_pool_tier(self.settings, d.pool, d.pool_tier)
        if pt is None or pt.provider == "static":  # nobody could start it: it stays a deferral
            return walk.deferred(f"{d.reason} (pool tier {d.pool_tier} has no provider)", req, ctx or TASK_CONTEXT,
                                 d.pool, None)
        p = self.provisions.open(d.pool, d.pool_tier, pt.provider, d.shape, now, pt.provision_timeout_s, d.reason,
                                 job_id=(ctx.job_id or None) if ctx is not None else None)
        rec = self.fleet.add(shape_record(p.node_id, d.shape, d.pool, d.pool_tier))
        self.ledger.note_cap(rec.node_id, rec.slots)
        self.counters["provisions_requested"] += 1
        out.append(ProvisionNode(p.provision_id, pt.provider, d.pool, d.pool_tier, d.shape, reason=d.reason,
                                 stimulus_id=sid))
        self._refresh_held(now)
        if req.scale == "provision_first":
            booted = self._booted_placement(req, ctx)
            if booted is not None:
                return booted
        again = place(self.fleet, req, ctx)
        return again if again.status == "placed" else d

    def _booted_placement(self, req: Requirement, ctx: PlacementContext | None) -> Decision | None:
        """Where the call runs now on a booted node inside its floor, degrading if need be (None: nowhere)."""
        launching = frozenset(r.node_id for r in self.fleet.records() if r.launching)
        base = ctx if ctx is not None else TASK_CONTEXT
        d = place(self.fleet, req.replace(scale="degrade_first"),
                  replace(base, exclude_nodes=base.exclude_nodes | launching))
        return d if d.status == "placed" else None

    def could_provision(self, req: Requirement) -> bool:
        """Some elastic pool tier of ``req``'s pool may provision a node for it now (not held, not
        saturated, under ``max_nodes``, a shape fits at some level): then calls beyond a lease's
        slots queue here, where they provision, instead of spilling onto busy nodes."""
        pool = req.pool or self.fleet.default_pool
        held = self.fleet.provision_held
        for pt in self.fleet.pool_tiers.get(pool, ()):
            if pt.scale_out != "elastic" or pt.provider == "static" or (pool, pt.name) in held:
                continue
            count = self.fleet.counts.get((pool, pt.name), 0)
            if any(provision_shape(pt, count, req, TASK_CONTEXT, level) is not None for level in req.levels):
                return True
        return False

    def _refresh_held(self, now: float) -> None:
        """Pool tiers that may not provision now: held after a failure, or with ``MAX_PENDING`` provisions open."""
        saturated = {k for k, n in self.provisions.by_tier().items() if n >= MAX_PENDING}
        self.fleet.provision_held = self.provisions.held(now) | frozenset(saturated)

    def provision_reason(self, d: Decision) -> str:
        rec = self.fleet.get(d.node_id) if d.node_id else None
        shape = rec.name if rec is not None else "a new node"
        return f"waiting for {shape} in pool tier {d.pool_tier} to register (provisioning)"

    # -- stimuli ------------------------------------------------------------------------------------
    def started(self, s: st.ProvisionStarted, now: float) -> list[Instruction]:
        """The provider started the node: remember its instance id; it registers next. One that was
        abandoned meanwhile is terminated now; one that registered first is done."""
        p, registered = self.provisions.started(s.provision_id, s.instance_id)
        if p is None:
            if self.provisions.take_abandoned(s.provision_id):
                return [TerminateNode(s.provider, s.instance_id, reason="abandoned before it started",
                                      stimulus_id=s.stimulus_id)]
            return []
        if registered:
            node_id = self.provisions.early_node(s.instance_id)
            if p.job_id and node_id:
                self.served.append((p.job_id, node_id))
            return self._registered(p, s.stimulus_id)
        return []

    def requested(self, s: st.ProvisionRequested, now: float) -> list[Instruction]:
        """A worker group asked for by the burst scaler: ``count`` prospective nodes, each a
        ``ProvisionNode`` (none for a pool tier nobody could start); the core places the queue onto
        them at once (it waits there)."""
        pt = find_pool_tier(self.settings, s.pool, s.pool_tier)
        if pt is None or pt.provider == "static" or s.count < 1:
            return []
        out: list[Instruction] = []
        for _ in range(s.count):
            p = self.provisions.open(s.pool, s.pool_tier, pt.provider, s.shape, now, pt.provision_timeout_s, s.reason)
            rec = self.fleet.add(shape_record(p.node_id, s.shape, s.pool, s.pool_tier))
            self.ledger.note_cap(rec.node_id, rec.slots)
            self.counters["provisions_requested"] += 1
            out.append(ProvisionNode(p.provision_id, pt.provider, s.pool, s.pool_tier, s.shape, reason=s.reason,
                                     stimulus_id=s.stimulus_id))
        self._refresh_held(now)
        return out

    def failed(self, s: st.ProvisionFailed, now: float) -> bool:
        """The provider could not start it: no phantom node; the pool tier is held for the backoff.
        True when a provision closed: the work it held is to be placed again (the cascade spills on)."""
        p = self.provisions.close(s.provision_id, ProvisionPhase.FAILED)
        if p is None:
            return False
        self.counters["provisions_failed"] += 1
        self.provisions.hold(p.pool, p.pool_tier, now)
        self._drop_prospective(p)
        return True

    def match(self, rec: NodeRecord, sid: str) -> list[Instruction]:
        """A node joined: if it fulfils an open provision, the prospective record gives way to it."""
        if rec.instance_id is None and rec.provider is None:
            return []
        p = self.provisions.match(rec)
        if p is None:
            return []
        if p.job_id:
            self.served.append((p.job_id, rec.node_id))
        return self._registered(p, sid)

    def adopt(self, s: st.ProvisionsAdopted, now: float) -> list[Instruction]:
        """Provisions a scheduler before this one opened, taken back after a restart: each open again
        with its instance id, its deadline (moved into this clock) and its prospective record, so a
        burst waits on it instead of provisioning again and its node is matched when it joins; each
        hold restored until its end. Nothing is asked of a provider (the queue is empty at a restart).
        One whose node is in the fleet already registered: it is not opened again."""
        by = now - s.wall
        here = {r.instance_id for r in self.fleet.records() if r.instance_id and not r.launching}
        for p in s.provisions:
            q = shifted(p, by)
            if q.instance_id in here or q.node_id in self.fleet or not self.provisions.adopt(q):
                continue
            rec = self.fleet.add(shape_record(q.node_id, q.shape, q.pool, q.pool_tier))
            self.ledger.note_cap(rec.node_id, rec.slots)
        for pool, pool_tier, until in s.holds:
            if until + by > now:
                self.provisions.restore_hold(pool, pool_tier, until + by)
        self._refresh_held(now)
        return []

    def _registered(self, p: PendingProvision, sid: str) -> list[Instruction]:
        self.provisions.close(p.provision_id, ProvisionPhase.REGISTERED)
        self.counters["provisions_registered"] += 1
        self._drop_prospective(p)
        return []  # the caller places the queue once the booted node is in the fleet

    def expire(self, now: float, sid: str) -> tuple[list[Instruction], bool]:
        """Provisions past their pool tier's ``provision_timeout_s``: abandoned, their nodes
        terminated. Also ends holds whose backoff passed. The flag: their work (or work a hold
        kept back) is to be placed again."""
        out: list[Instruction] = []
        before = self.fleet.provision_held
        for p in self.provisions.expired(now):
            self.provisions.abandon(p.provision_id)
            self.counters["provisions_abandoned"] += 1
            self._drop_prospective(p)
            if p.instance_id is not None:
                out.append(TerminateNode(p.provider, p.instance_id, reason="provision_timeout", stimulus_id=sid))
        self._refresh_held(now)
        return out, bool(out) or self.fleet.provision_held != before

    def _drop_prospective(self, p: PendingProvision) -> None:
        self.fleet.remove(p.node_id)
        self.ledger.drop_node(p.node_id)
        self._refresh_held(self.clock())

    def view(self) -> dict[str, list[dict[str, object]]]:
        """Open provisions and held pool tiers, for ``fabric status`` and ``h.metrics()``."""
        now = self.clock()
        return {"pending": [p.to_dict(now) for p in self.provisions],
                "held": [{"pool": pool, "pool_tier": pt, "until_s": round(max(0.0, until - now), 3)}
                         for (pool, pt), until in sorted(self.provisions.held_until().items()) if until > now]}


__all__ = ["Cascade"]

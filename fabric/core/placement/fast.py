"""The fast placement engine: the reference's decisions, from the fleet's indexes.

Why it can stop early: within one pool tier the key of a plain task (no resilience, template
or soft-zone peers: ``PlacementContext.simple``) reduces to (launching, avoided spare, tier,
packing, node id), and the fleet keeps each (pool, pool tier, tier, launching) segment sorted
by (packing, node id). Walking the segments in key order, the first node that passes the
remaining filters *is* the minimum key: nothing after it can rank better. Nodes that fail a
request-independent filter (status, cordon, no free slot) are not in the segments at all.

Why a lower level only looks at one tier: every node above it was already tried at the
levels above with the same filters, which do not depend on the level, and failed.

Contexts that are not simple (resilience, warmth, reservations, soft zone, a pin) take the
general path: the same segments, every survivor keyed by ``_make_key`` (``keys.placement_key``
with the context's parts worked out once per step; the property tests hold the two equal).
"""

from __future__ import annotations

from typing import Callable, Iterable

from fabric.core.placement import reference, walk
from fabric.core.placement.context import TASK_CONTEXT, PlacementContext
from fabric.core.placement.decision import Decision
from fabric.core.placement.filters import SLOT_FILTERS, Query, choose_gpus, first_failing, may_provision, provision_shape
from fabric.core.placement.fleet import CPU_CLASSES, FleetView, cpu_classes_for
from fabric.core.placement.keys import resilience_violations
from fabric.core.placement.ray_terms import ACCELERATOR_PREFIX
from fabric.core.placement.records import EPS, NodeRecord
from fabric.core.placement.requirement import Requirement
from fabric.core.placement.trace import PlacementTrace
from fabric.core.tiers import ComputeTier

_TIER = {t.rank: t for t in ComputeTier}


def place(fleet: FleetView, req: Requirement, ctx: PlacementContext | None = None, *, trace: bool = False) -> Decision:
    """Decide where ``req`` goes; pure (call ``fleet.commit(decision)`` to act on it).

    With ``trace=True`` the decision carries a ``PlacementTrace`` replayed lazily from a
    snapshot of the fleet taken now."""
    if ctx is None:
        ctx = TASK_CONTEXT
    pool_name = req.pool or fleet.default_pool
    pts = fleet.pool_tiers.get(pool_name)
    if pts is None:
        d = walk.deferred(walk.unknown_pool_reason(pool_name), req, ctx, pool_name, None)
    elif ctx is TASK_CONTEXT or (ctx.target_node is None and ctx.simple):
        d = _place_simple(fleet, req, ctx, pool_name, pts)
    else:
        d = _place_general(fleet, req, ctx, pool_name, pts)
    if trace:
        snap = fleet.snapshot()
        d.trace = PlacementTrace(compute=lambda: _replay(snap, req, ctx))
    return d


def dry_run(fleet: FleetView, req: Requirement, ctx: PlacementContext | None = None) -> Decision:
    """``place`` with a trace, documented as never acting (no commit, no counters)."""
    return place(fleet, req, ctx, trace=True)


def place_many(fleet: FleetView, requests: Iterable, *, trace: bool = False,
               engine: "Callable[..., Decision] | None" = None) -> list[Decision]:
    """Place a burst or a bundle in order, committing each placed decision to ``fleet`` itself
    so later ones see earlier reservations (never double-booked). Items are ``Requirement``s or
    ``(Requirement, PlacementContext)`` pairs. Pass ``fleet.copy()`` to leave a fleet untouched."""
    return walk.place_in_order(fleet, requests, engine or place, trace=trace)


def _replay(snap, req: Requirement, ctx: PlacementContext):
    _, steps, decided = reference.walk_fleet(snap, req, ctx, trace=True)
    return steps, decided


# -- the simple path ---------------------------------------------------------------------------
def _make_fits(req: Requirement, ctx: PlacementContext) -> Callable[[NodeRecord], "tuple[int, ...] | None"]:
    """The filters the segments do not already imply, fused; returns the GPU choice or None."""
    excl = ctx.exclude_nodes
    caps = req.capabilities
    need_cpu, need_mem, need_slots = ctx.need(req)  # a co-location group's first mover: the whole group's
    need_cores = req.num_cores
    ports = req.ports
    gpus = req.num_gpus
    exclusive = req.exclusive
    co = ctx.co_locate_nodes
    sep = ctx.separate_nodes
    zones = ctx.peer_zones if ctx.intra_zone == "hard" else frozenset()
    override = ctx.override_reservation
    template = ctx.template
    res = req.resources
    accel = None if req.accelerator_type is None else f"{ACCELERATOR_PREFIX}{req.accelerator_type}"
    terms = req.label_selector

    def fits(rec: NodeRecord):
        nid = rec.node_id
        if excl and nid in excl:
            return None
        if rec.spare_exclusive and rec.spare_reserved_for and rec.spare and rec.running == 0 and not rec.jobs:
            if not override and (template is None or template not in rec.spare_reserved_for):
                return None
        if caps and not caps <= rec._tags:
            return None
        if res:
            have = rec.ray_resources
            for name, amount in res:
                if have.get(name, 0.0) + EPS < amount:
                    return None
        if accel is not None and accel not in rec.ray_resources:
            return None
        if terms:
            labels = rec.ray_labels
            for term in terms:
                if not term.matches(labels):
                    return None
        if rec.reserved_cpus + need_cpu > rec._cpu_total + EPS:
            return None
        if need_slots > 1 and rec.running + need_slots > rec._slots:
            return None
        if rec.reserved_memory_mib + need_mem > rec._mem_total + EPS:
            return None
        if need_cores > rec._cores:
            return None
        if ports and not rec.ports.isdisjoint(ports):
            return None
        if rec.exclusive_job is not None or exclusive:
            peer_here = nid in co
            if rec.exclusive_job is not None and not peer_here:
                return None
            if exclusive and not peer_here and (rec.running > 0 or rec.jobs):
                return None
        if co and not (len(co) == 1 and nid in co):
            return None
        if sep and nid in sep:
            return None
        if zones and rec.zone not in zones:
            return None
        if gpus:
            return choose_gpus(rec, req)
        return ()

    return fits


_PLAN_CACHE_MAX = 4096


def _plan(fleet: FleetView, req: Requirement, avoid: bool, pool: str, pts) -> list:
    """Per walk step ``(rank, pool tier, groups)``: the groups in key order — booted before
    launching, and with ``avoid`` ordinary nodes before unconsumed spares — each one tuple per
    tier (in key order) of the bucket lists (free-CPU classes that may fit; both spare kinds
    when not avoiding). Bucket lists are long-lived objects of the fleet, so a plan stays
    valid; it is cached on the fleet per (requirement, avoid)."""
    key = req.class_id * 2 + avoid
    plan = fleet._plans.get(key)
    if plan is not None:
        return plan
    classes = cpu_classes_for(req.num_cpus)
    spare_groups = ((False,), (True,)) if avoid else ((False, True),)
    plan = []
    for rank in range(req.min_tier.rank, req.floor.rank - 1, -1):
        ranks = _first_level_ranks(req) if rank == req.min_tier.rank else (rank,)
        for pt in pts:
            groups = tuple(
                tuple(
                    tuple(fleet.bucket((pool, pt.name, r, launching, spare, c)) for spare in spares for c in classes)
                    for r in ranks
                )
                for launching in (False, True) for spares in spare_groups
            )
            plan.append((rank, pt, groups))
    if len(fleet._plans) >= _PLAN_CACHE_MAX:
        fleet._plans.clear()
    fleet._plans[key] = plan
    return plan


def _search(records: dict, groups: tuple, fits) -> "tuple[NodeRecord, tuple] | None":
    """The first node in key order (launching, avoided spare, tier, packing, id) that fits.

    Within one tier each bucket list is sorted by (packing, id); the first fit of each list is
    found and the smallest of those wins (a merge without merging)."""
    for tiers in groups:
        for lists in tiers:
            best = None
            for lst in lists:
                if not lst:
                    continue
                for entry in lst:
                    if best is not None and entry > best[0]:
                        break
                    rec = records[entry[1]]
                    g = fits(rec)
                    if g is not None:
                        best = (entry, rec, g)
                        break
            if best is not None:
                return best[1], best[2]
    return None




def _first_level_ranks(req: Requirement) -> range:
    if req.prefer == "highest":
        return range(10, req.min_tier.rank - 1, -1)
    return range(req.min_tier.rank, 11)


def _place_simple(fleet: FleetView, req: Requirement, ctx: PlacementContext, pool: str, pts) -> Decision:
    if ctx is TASK_CONTEXT:
        fits = _TASK_FITS.get(req.class_id)
        if fits is None:
            if len(_TASK_FITS) >= _PLAN_CACHE_MAX:
                _TASK_FITS.clear()
            fits = _TASK_FITS[req.class_id] = _make_fits(req, ctx)
        avoid = True
    else:
        fits = _make_fits(req, ctx)
        avoid = ctx.avoid_spares
    records = fleet._records
    min_rank = req.min_tier.rank
    provision_first = req.scale == "provision_first"
    last_pt = pts[-1]
    for rank, pt, groups in _plan(fleet, req, avoid, pool, pts):
        hit = _search(records, groups, fits)
        if hit is not None:
            rec, gpus = hit
            return walk.placed(rec, req, ctx, _TIER[rank], pool, pt.name, gpus, (), None)
        if pt is last_pt:
            if rank == min_rank and req.when_full == "wait":
                d = _provision_level(fleet, req, ctx, _TIER[rank], pool, pts)
                if d is not None:
                    return d
                if _some_node_only_full(fleet, req, ctx, pool, pts):
                    return walk.deferred(walk.waiting_reason(req), req, ctx, pool, None)
            if provision_first:
                d = _provision_level(fleet, req, ctx, _TIER[rank], pool, pts)
                if d is not None:
                    return d
    return _provision_or_defer(fleet, req, ctx, pool, pts, provision_first)


#: ``fits`` closures for plain tasks (``TASK_CONTEXT``), per requirement: they read only the
#: requirement, so they are shared by every fleet.
_TASK_FITS: dict = {}


def _provision_level(fleet: FleetView, req, ctx, level: ComputeTier, pool: str, pts) -> Decision | None:
    if not may_provision(ctx):
        return None
    held = fleet.provision_held
    for pt in pts:
        if held and (pool, pt.name) in held:
            continue
        shape = provision_shape(pt, fleet.counts.get((pool, pt.name), 0), req, ctx, level)
        if shape is not None:
            return walk.provision(shape, req, ctx, level, pool, pt.name, None)
    return None


def _provision_or_defer(fleet: FleetView, req, ctx, pool: str, pts, provision_first: bool) -> Decision:
    if not provision_first:
        for level in req.levels:
            d = _provision_level(fleet, req, ctx, level, pool, pts)
            if d is not None:
                return d
    return walk.deferred(walk.no_capacity_reason(req, ctx, pool), req, ctx, pool, None)


def _some_node_only_full(fleet: FleetView, req, ctx, pool: str, pts) -> bool:
    records = fleet._records
    for pt in pts:
        q = Query(req, ctx, req.min_tier, pool, pt)
        for rank in range(req.min_tier.rank, 11):
            for nid in fleet.members.get((pool, pt.name, rank), ()):
                if first_failing(records[nid], q, SLOT_FILTERS) is None:
                    return True
    return False


# -- the general path ------------------------------------------------------------------------------
def _candidates(fleet: FleetView, ctx: PlacementContext, pool: str, pt: str, ranks: Iterable[int]) -> list[NodeRecord]:
    records = fleet._records
    if ctx.target_node is not None:
        rec = records.get(ctx.target_node)
        if rec is None or rec.pool != pool or rec.pool_tier != pt or rec._rank not in ranks or not rec.placeable:
            return []
        return [rec]
    out = []
    for r in ranks:
        for launching in (False, True):
            for spare in (False, True):
                for c in range(CPU_CLASSES):
                    for _, nid in fleet.buckets.get((pool, pt, r, launching, spare, c), ()):
                        out.append(records[nid])
    return out


def _make_key(q: Query) -> Callable[[NodeRecord], tuple]:
    """``keys.placement_key`` for one step with the context's parts worked out once (the
    property tests hold the two equal)."""
    ctx = q.ctx
    other = ctx.other_node
    f_node = other is not None and ctx.same_node == "forbid"
    f_az = other is not None and ctx.same_az == "forbid"
    f_cloud = other is not None and ctx.same_cloud == "forbid"
    oz, oc = ctx.other_zone, ctx.other_cloud
    avoid, prefer_sp = ctx.avoid_spares, ctx.prefer_spares
    template = ctx.template
    images = q.images
    highest = q.req.prefer == "highest"
    spread = q.packing == "spread"
    zones = q.peer_zones if ctx.intra_zone == "soft" else frozenset()

    def key(rec: NodeRecord) -> tuple:
        viol = 0
        if other is not None:
            viol = ((f_node and rec.node_id == other) + (f_az and rec.zone is not None and rec.zone == oz)
                    + (f_cloud and rec.cloud is not None and rec.cloud == oc))
        unconsumed = rec.spare and rec.running == 0 and not rec.jobs
        warm = rec.warm
        return (
            viol,
            1 if rec.launching else 0,
            1 if (unconsumed and avoid) else 0,
            -rec._rank if highest else rec._rank,
            -sum(1 for image in images if image in warm) if images else 0,
            0 if (unconsumed and template is not None and template in rec.spare_reserved_for) else 1,
            0 if (unconsumed and prefer_sp) else 1,
            rec._load if spread else -rec._load,
            0 if (zones and rec.zone in zones) else 1,
            rec.node_id,
        )

    return key


def _best_in_step(fleet: FleetView, req: Requirement, ctx: PlacementContext, pool: str, pt, level: ComputeTier,
                  ranks, fits, key_of) -> "tuple[tuple, NodeRecord] | None":
    """(key, record) of the smallest key among the step's survivors. Candidates come in the
    order of key components 2-4 (launching, avoided spare, tier), tier by tier; once the best so
    far breaks no resilience rule, nothing in a later tier can beat it, so the scan stops there."""
    if ctx.target_node is not None:
        top = None
        for rec in _candidates(fleet, ctx, pool, pt.name, ranks):
            if fits(rec) is not None:
                key = key_of(rec)
                if top is None or key < top[0]:
                    top = (key, rec)
        return top
    records = fleet._records
    plan = _plan(fleet, req, ctx.avoid_spares, pool, fleet.pool_tiers[pool])
    groups = next(g for rank, p, g in plan if rank == level.rank and p is pt)
    top = None
    for tiers in groups:
        for lists in tiers:
            for lst in lists:
                for _, nid in lst:
                    rec = records[nid]
                    if fits(rec) is not None:
                        key = key_of(rec)
                        if top is None or key < top[0]:
                            top = (key, rec)
            if top is not None and top[0][0] == 0:
                return top
    return top


def _place_general(fleet: FleetView, req: Requirement, ctx: PlacementContext, pool: str, pts) -> Decision:
    best = None  # (violations, key, rec, query)
    min_rank = req.min_tier.rank
    waited = False
    fits = _make_fits(req, ctx)  # == every filter the candidate lists do not already imply
    for kind, level, pt in walk.steps(req, pts):
        if kind == "existing":
            q = Query(req, ctx, level, pool, pt)
            key_of = _make_key(q)
            ranks = _first_level_ranks(req) if level.rank == min_rank else (level.rank,)
            top = _best_in_step(fleet, req, ctx, pool, pt, level, ranks, fits, key_of)
            if top is not None:
                key, rec = top
                if best is None or key[0] < best[0]:
                    best = (key[0], key, rec, q)
                if key[0] == 0:
                    break
            if not waited and best is None and req.when_full == "wait" and level.rank == min_rank and pt is pts[-1]:
                waited = True
                d = _provision_level(fleet, req, ctx, level, pool, pts)
                if d is not None:
                    return d
                if _some_node_only_full(fleet, req, ctx, pool, pts):
                    return walk.deferred(walk.waiting_reason(req), req, ctx, pool, None)
        else:
            if best is not None or not may_provision(ctx):
                continue
            shape = provision_shape(pt, fleet.counts.get((pool, pt.name), 0), req, ctx, level)
            if shape is not None:
                return walk.provision(shape, req, ctx, level, pool, pt.name, None)
    if best is None:
        return walk.deferred(walk.no_capacity_reason(req, ctx, pool), req, ctx, pool, None)
    _, key, rec, q = best
    gpus = choose_gpus(rec, req)
    assert gpus is not None, "a survivor passed gpu_capacity"
    return walk.placed(rec, req, ctx, q.level, pool, q.pool_tier.name, gpus, resilience_violations(rec, q), None)

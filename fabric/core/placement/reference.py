"""The reference placement engine: the placement rules, written down plainly.

Walk the steps (``walk.steps``); at an existing-node step run every node through the named
filter chain and rank the survivors by the key; at a provision step ask the pool tier for a
shape. No indexes, no shortcuts: this is what the fast engine is tested against, and what
replays a trace. It reads any fleet that offers ``settings`` and ``records()``.
"""

from __future__ import annotations

from fabric.core.placement import walk
from fabric.core.placement.context import TASK_CONTEXT, PlacementContext
from fabric.core.placement.decision import Decision
from fabric.core.placement.filters import SLOT_FILTERS, Query, choose_gpus, counts_toward_max, first_failing, may_provision, provision_shape
from fabric.core.placement.keys import placement_key, resilience_violations
from fabric.core.placement.requirement import Requirement
from fabric.core.placement.trace import PlacementTrace, TraceStep


def place(fleet, req: Requirement, ctx: PlacementContext | None = None, *, trace: bool = False) -> Decision:
    """Decide where ``req`` goes on ``fleet``; pure (the fleet is not changed)."""
    decision, steps, decided = walk_fleet(fleet, req, ctx or TASK_CONTEXT, trace=trace)
    if trace:
        decision.trace = PlacementTrace(steps, decided)
    return decision


def walk_fleet(fleet, req: Requirement, ctx: PlacementContext, *, trace: bool):
    """(decision, trace steps, (level, pool tier) decided at)."""
    settings = fleet.settings
    pool_name = req.pool or settings.default_pool.name
    pool_tiers = next((p.tiers for p in settings.pools if p.name == pool_name), None)
    if pool_tiers is None:
        return walk.deferred(walk.unknown_pool_reason(pool_name), req, ctx, pool_name, None), [], None
    records = fleet.records()
    tsteps: list[TraceStep] = []
    best = None  # (violations, key, rec, query)
    waited = False
    for kind, level, pt in walk.steps(req, pool_tiers):
        if kind == "existing":
            q = Query(req, ctx, level, pool_name, pt)
            verdicts: dict[str, str] = {}
            survivors = []
            for rec in records:
                failed = first_failing(rec, q)
                if failed is None:
                    survivors.append((placement_key(rec, q), rec))
                else:
                    verdicts[rec.node_id] = failed
            survivors.sort(key=lambda s: s[0])
            if trace:
                note = f"{len(survivors)} of {len(records)} nodes fit"
                tsteps.append(TraceStep("existing", level, pool_name, pt.name, verdicts,
                                        tuple((k, r.node_id) for k, r in survivors), note))
            if survivors:
                key, rec = survivors[0]
                if best is None or key[0] < best[0]:
                    best = (key[0], key, rec, q)
                if key[0] == 0:
                    break
            if (not waited and best is None and req.when_full == "wait" and level is req.min_tier
                    and pt is pool_tiers[-1]):
                waited = True
                decision = _provision_at(fleet, req, ctx, level, pool_name, pool_tiers, tsteps, trace)
                if decision is not None:
                    return decision, tsteps, (level.value, decision.pool_tier)
                if _some_node_only_full(records, req, ctx, level, pool_name, pool_tiers):
                    if trace:
                        tsteps.append(TraceStep("wait", level, pool_name, "", note=walk.waiting_reason(req)))
                    return walk.deferred(walk.waiting_reason(req), req, ctx, pool_name, None), tsteps, None
        else:
            if best is not None or not may_provision(ctx):
                continue
            shape = _shape(fleet, pt, records, pool_name, req, ctx, level)
            if trace:
                tsteps.append(TraceStep("provision", level, pool_name, pt.name,
                                        note=f"provision {shape.name}" if shape else _why_not(pt, records, pool_name, fleet)))
            if shape is not None:
                return walk.provision(shape, req, ctx, level, pool_name, pt.name, None), tsteps, (level.value, pt.name)
    if best is None:
        return walk.deferred(walk.no_capacity_reason(req, ctx, pool_name), req, ctx, pool_name, None), tsteps, None
    _, key, rec, q = best
    gpus = choose_gpus(rec, req)
    assert gpus is not None, "a survivor passed gpu_capacity"
    decision = walk.placed(rec, req, ctx, q.level, pool_name, q.pool_tier.name, gpus, resilience_violations(rec, q), None)
    return decision, tsteps, (q.level.value, q.pool_tier.name)


def _count(records, pool: str, pt: str) -> int:
    return sum(1 for r in records if r.pool == pool and r.pool_tier == pt and counts_toward_max(r))


def _shape(fleet, pt, records, pool: str, req, ctx, level):
    if (pool, pt.name) in getattr(fleet, "provision_held", ()):
        return None
    return provision_shape(pt, _count(records, pool, pt.name), req, ctx, level)


def _why_not(pt, records, pool: str, fleet=None) -> str:
    if fleet is not None and (pool, pt.name) in getattr(fleet, "provision_held", ()):
        return "provisioning held (a failed provision's backoff, or as many provisions open as allowed)"
    if pt.scale_out != "elastic":
        return "fixed pool tier: cannot provision"
    if pt.max_nodes is not None and _count(records, pool, pt.name) >= pt.max_nodes:
        return f"at max_nodes ({pt.max_nodes})"
    return "no candidate shape fits"


def _provision_at(fleet, req, ctx, level, pool_name, pool_tiers, tsteps, trace) -> Decision | None:
    if not may_provision(ctx):
        return None
    records = fleet.records()
    for pt in pool_tiers:
        shape = _shape(fleet, pt, records, pool_name, req, ctx, level)
        if trace:
            tsteps.append(TraceStep("provision", level, pool_name, pt.name,
                                    note=f"provision {shape.name}" if shape else _why_not(pt, records, pool_name, fleet)))
        if shape is not None:
            return walk.provision(shape, req, ctx, level, pool_name, pt.name, None)
    return None


def _some_node_only_full(records, req, ctx, level, pool_name, pool_tiers) -> bool:
    """A node at the best level that fails nothing but the slot filters: worth waiting for."""
    for pt in pool_tiers:
        q = Query(req, ctx, level, pool_name, pt)
        if any(first_failing(rec, q, SLOT_FILTERS) is None for rec in records):
            return True
    return False


def dry_run(fleet, req: Requirement, ctx: PlacementContext | None = None) -> Decision:
    """``place`` with a trace; never acts."""
    return place(fleet, req, ctx, trace=True)


def place_many(fleet, requests, *, trace: bool = False) -> list[Decision]:
    """Like ``fabric.core.placement.place_many`` but deciding with the reference engine."""
    return walk.place_in_order(fleet, requests, place, trace=trace)

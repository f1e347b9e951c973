"""The order of the walk and the decisions it ends in, shared by both implementations.

Steps: for each compute level from ``min_tier`` down to the floor,
and within a level for each pool tier in cost order, an *existing-node* step; then
*provision* steps over the same levels and pool tiers. ``scale="provision_first"`` puts a
level's provision steps right after its existing-node steps instead.

Rules the walk applies on top of the steps:

- The first existing-node step with a survivor decides, unless its best survivor breaks a
  resilience ``forbid``: then the walk goes on and keeps the first step whose best survivor
  breaks strictly fewer (best-effort: violated only when nothing compliant fits anywhere).
- ``when_full="wait"``: when nothing fits at ``min_tier``, the provision steps at
  ``min_tier`` run at once; if none provisions and some node at ``min_tier`` fails only the
  slot filters (cpu, memory, concurrency, GPU capacity), the result is
  ``deferred("waiting for a slot at <tier>")`` instead of a spill down.
- Provision steps run only when no existing node was found, never for a pinned placement.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from fabric.core.placement.context import PlacementContext
from fabric.core.placement.decision import ALLOC_IDS, Allocation, Decision
from fabric.core.placement.trace import PlacementTrace
from fabric.core.placement.records import NodeRecord
from fabric.core.placement.requirement import Requirement
from fabric.core.settings import NodeShape, PoolTier
from fabric.core.tiers import ComputeTier


def steps(req: Requirement, pool_tiers: tuple[PoolTier, ...]) -> Iterator[tuple[str, ComputeTier, PoolTier]]:
    """``(kind, level, pool tier)`` in walk order; kind is ``existing`` or ``provision``."""
    levels = req.levels
    if req.scale == "provision_first":
        for level in levels:
            for pt in pool_tiers:
                yield "existing", level, pt
            for pt in pool_tiers:
                yield "provision", level, pt
    else:
        for level in levels:
            for pt in pool_tiers:
                yield "existing", level, pt
        for level in levels:
            for pt in pool_tiers:
                yield "provision", level, pt


def placed(rec: NodeRecord, req: Requirement, ctx: PlacementContext, level: ComputeTier, pool: str, pt: str,
           gpus: tuple[int, ...], violations: tuple[str, ...], trace: PlacementTrace | None) -> Decision:
    """A placed decision with its allocation (one slot, the request's amounts, chosen GPUs)."""
    if gpus:
        gpu_index = rec.capabilities.gpus[gpus[0]].index
        frac = 1.0 if req.num_gpus > 1 else req.num_gpus
    else:
        gpu_index, frac = None, 0.0
    alloc = Allocation(rec.node_id, req.num_cpus, req.memory_mib, gpu_index, frac, gpus, req.ports, 1,
                       ctx.job_id, ctx.template, req.exclusive, next(ALLOC_IDS))
    # built slot by slot: this is the hot path, and keyword parsing is a measurable share of it
    d = object.__new__(Decision)
    d.status = "placed"
    d.requirement = req
    d.context = ctx
    d.node_id = rec.node_id
    d.node_name = rec.name
    d.tier = level
    d.node_tier = rec.tier
    d.fallback_levels = req.min_tier.rank - level.rank
    d.reason = ""
    d.pool = pool
    d.pool_tier = pt
    d.shape = None
    d.allocation = alloc
    d.gpu_index = gpu_index
    d.resilience_violations = violations
    d.trace = trace
    return d


def provision(shape: NodeShape, req: Requirement, ctx: PlacementContext, level: ComputeTier, pool: str, pt: str,
              trace: PlacementTrace | None) -> Decision:
    return Decision("provision", req, ctx, tier=level, node_tier=shape.tier, pool=pool, pool_tier=pt, shape=shape,
                    reason=f"no existing node fits; provision {shape.name} in pool tier {pt}", trace=trace)


def deferred(reason: str, req: Requirement, ctx: PlacementContext, pool: str | None, trace: PlacementTrace | None) -> Decision:
    return Decision("deferred", req, ctx, reason=reason, pool=pool, trace=trace)


def no_capacity_reason(req: Requirement, ctx: PlacementContext, pool: str) -> str:
    if ctx.target_node is not None:
        return f"no capacity: pinned node {ctx.target_node} cannot take it"
    return f"no capacity: no node at or above {req.floor} fits in pool {pool}"


def waiting_reason(req: Requirement) -> str:
    return f"waiting for a slot at {req.min_tier}"


def unknown_pool_reason(pool: str) -> str:
    return f"no capacity: unknown pool {pool!r}"


def place_in_order(fleet: Any, requests: Iterable, engine: Callable[..., Decision], *, trace: bool = False) -> list[Decision]:
    """Place a burst or a bundle in order with ``engine`` (either implementation's ``place``),
    committing each decision to ``fleet`` itself so that later ones see earlier reservations.
    Items are ``Requirement``s or ``(Requirement, PlacementContext)`` pairs."""
    out = []
    for item in requests:
        req, ctx = (item, None) if isinstance(item, Requirement) else item
        d = engine(fleet, req, ctx, trace=trace)
        fleet.commit(d)
        out.append(d)
    return out

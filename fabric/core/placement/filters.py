"""The hard filter chain, one named predicate per rule.

A node survives a walk step only if every filter passes; the first one that fails is the
node's verdict in a trace. The order is fixed: cheap structural checks first, then
what the node can do, then what it has free, then the relations to other work.

Each filter is ``f(rec, q) -> bool`` over a ``NodeRecord`` and a ``Query`` (one requirement
and context at one walk step: compute level, pool, pool tier). ``choose_gpus`` is shared by
both implementations so that they pick the same device.
"""

from __future__ import annotations

import math
from typing import Callable

from fabric.core.capabilities import normalise_gpu_name
from fabric.core.lifecycle import NodeStatus
from fabric.core.names import TIER_LABEL
from fabric.core.placement.context import PlacementContext
from fabric.core.placement.ray_terms import ACCELERATOR_PREFIX
from fabric.core.placement.records import EPS, NodeRecord, gpu_model_matches
from fabric.core.placement.requirement import Requirement
from fabric.core.settings import NodeShape, PoolTier
from fabric.core.tiers import ComputeTier


class Query:
    """One requirement + context at one step of the walk, with the context's derived sets."""

    __slots__ = ("req", "ctx", "level", "pool", "pool_tier", "packing", "co_nodes", "sep_nodes", "peer_zones", "images",
                 "need_cpu", "need_mem", "need_slots")

    def __init__(self, req: Requirement, ctx: PlacementContext, level: ComputeTier, pool: str, pool_tier: PoolTier) -> None:
        self.req = req
        self.ctx = ctx
        self.level = level
        self.pool = pool
        self.pool_tier = pool_tier
        self.packing = pool_tier.packing
        self.co_nodes = ctx.co_locate_nodes
        self.sep_nodes = ctx.separate_nodes
        self.peer_zones = ctx.peer_zones
        self.images = ctx.images
        self.need_cpu, self.need_mem, self.need_slots = ctx.need(req)


# -- the filters ---------------------------------------------------------------------------------
def target_node(rec: NodeRecord, q: Query) -> bool:
    """A pinned placement (migration target) considers only that node."""
    return q.ctx.target_node is None or rec.node_id == q.ctx.target_node


def pool(rec: NodeRecord, q: Query) -> bool:
    return rec.pool == q.pool


def pool_tier(rec: NodeRecord, q: Query) -> bool:
    return rec.pool_tier == q.pool_tier.name


def excluded(rec: NodeRecord, q: Query) -> bool:
    """Recovery exclusion: the node the job failed on, a migration source."""
    return rec.node_id not in q.ctx.exclude_nodes


def status(rec: NodeRecord, q: Query) -> bool:
    """Active, not held off by flap damping, not marked unhealthy."""
    return rec.status is NodeStatus.ACTIVE and not rec.flap_held and not rec.unhealthy


def cordoned(rec: NodeRecord, q: Query) -> bool:
    return not rec.cordoned


def spare_reserved(rec: NodeRecord, q: Query) -> bool:
    """An unconsumed spare exclusively reserved for other templates is off limits."""
    if not (rec.spare_exclusive and rec.spare_reserved_for and rec.unconsumed_spare):
        return True
    return q.ctx.override_reservation or (q.ctx.template is not None and q.ctx.template in rec.spare_reserved_for)


def capabilities(rec: NodeRecord, q: Query) -> bool:
    return q.req.capabilities <= rec._tags


def resources(rec: NodeRecord, q: Query) -> bool:
    """The node joined Ray with every custom resource asked for (``resources``), in that amount."""
    if not q.req.resources:
        return True
    have = rec.ray_resources
    return all(have.get(name, 0.0) + EPS >= amount for name, amount in q.req.resources)


def accelerator_type(rec: NodeRecord, q: Query) -> bool:
    """The node has Ray's resource ``accelerator_type:<T>`` (Ray's ``accelerator_type``)."""
    return q.req.accelerator_type is None or f"{ACCELERATOR_PREFIX}{q.req.accelerator_type}" in rec.ray_resources


def label_selector(rec: NodeRecord, q: Query) -> bool:
    """The node's Ray labels match every term of the requirement's ``label_selector``."""
    return not q.req.label_selector or all(t.matches(rec.ray_labels) for t in q.req.label_selector)


def level(rec: NodeRecord, q: Query) -> bool:
    """The node serves a tier at or above the step's compute level."""
    return rec._rank >= q.level.rank


def cpu(rec: NodeRecord, q: Query) -> bool:
    """``cpu_usable × utilization_cap − reserved`` covers the request (the whole co-location
    group's, for the first of it placed)."""
    return rec.reserved_cpus + q.need_cpu <= rec._cpu_total + EPS


def memory(rec: NodeRecord, q: Query) -> bool:
    return rec.reserved_memory_mib + q.need_mem <= rec._mem_total + EPS


def cores(rec: NodeRecord, q: Query) -> bool:
    return q.req.num_cores <= rec._cores


def concurrency(rec: NodeRecord, q: Query) -> bool:
    """Never past ``max_concurrent_tasks`` (no capacity oversubscription); the first of a
    co-location group needs a slot for each of its jobs."""
    return rec.running + q.need_slots <= rec._slots


def ports(rec: NodeRecord, q: Query) -> bool:
    """Host ports are exclusive per node."""
    return not q.req.ports or rec.ports.isdisjoint(q.req.ports)


def gpu(rec: NodeRecord, q: Query) -> bool:
    """Enough devices of the wanted model exist (free or not)."""
    return q.req.num_gpus == 0 or len(matching_gpus(rec, q.req)) >= gpus_needed(q.req)


def gpu_capacity(rec: NodeRecord, q: Query) -> bool:
    """A device (or enough whole devices) has the fraction free."""
    return q.req.num_gpus == 0 or choose_gpus(rec, q.req) is not None


def exclusive(rec: NodeRecord, q: Query) -> bool:
    """An exclusive job gets an empty node; a node held exclusively takes only co-located peers."""
    peer_here = rec.node_id in q.co_nodes
    if rec.exclusive_job is not None and not peer_here:
        return False
    if q.req.exclusive and not peer_here and (rec.running > 0 or rec.jobs):
        return False
    return True


def co_location(rec: NodeRecord, q: Query) -> bool:
    """Hard intra-replica rule: on the node of every placed ``co_locate_with`` peer."""
    return not q.co_nodes or (len(q.co_nodes) == 1 and rec.node_id in q.co_nodes)


def separation(rec: NodeRecord, q: Query) -> bool:
    """Hard intra-replica rule: never on a placed ``separate_from`` peer's node."""
    return rec.node_id not in q.sep_nodes


def zone(rec: NodeRecord, q: Query) -> bool:
    """Hard intra-replica zone: share a zone with the placed peers."""
    return q.ctx.intra_zone != "hard" or not q.peer_zones or rec.zone in q.peer_zones


FILTERS: tuple[tuple[str, Callable[[NodeRecord, Query], bool]], ...] = (
    ("target_node", target_node),
    ("pool", pool),
    ("pool_tier", pool_tier),
    ("excluded", excluded),
    ("status", status),
    ("cordoned", cordoned),
    ("spare_reserved", spare_reserved),
    ("capabilities", capabilities),
    ("resources", resources),
    ("accelerator_type", accelerator_type),
    ("label_selector", label_selector),
    ("level", level),
    ("cpu", cpu),
    ("memory", memory),
    ("cores", cores),
    ("concurrency", concurrency),
    ("ports", ports),
    ("gpu", gpu),
    ("gpu_capacity", gpu_capacity),
    ("exclusive", exclusive),
    ("co_location", co_location),
    ("separation", separation),
    ("zone", zone),
)
FILTER_NAMES: tuple[str, ...] = tuple(name for name, _ in FILTERS)

#: Filters that say "full", not "cannot serve": what ``when_full="wait"`` waits on.
SLOT_FILTERS = frozenset({"cpu", "memory", "concurrency", "gpu_capacity"})


def first_failing(rec: NodeRecord, q: Query, ignore: frozenset[str] = frozenset()) -> str | None:
    """Name of the first filter ``rec`` fails at this step, or None when it survives."""
    for name, check in FILTERS:
        if name not in ignore and not check(rec, q):
            return name
    return None


# -- GPUs --------------------------------------------------------------------------------------
def gpus_needed(req: Requirement) -> int:
    """Devices the request occupies: one for a fraction, N for N whole devices."""
    return max(1, math.ceil(req.num_gpus - EPS)) if req.num_gpus > 0 else 0


def matching_gpus(rec: NodeRecord, req: Requirement) -> list[int]:
    """Device positions of the wanted model (every device when no model is asked for)."""
    n = len(rec.gpu_reserved)
    if req.gpu_model is None:
        return list(range(n))
    return [i for i in range(n) if gpu_model_matches(rec, i, req.gpu_model)]


def choose_gpus(rec: NodeRecord, req: Requirement) -> tuple[int, ...] | None:
    """Device positions to reserve: for a fraction, the fullest matching device it still fits
    (fewest fragments; lowest position on ties); for N devices, the first N wholly free ones.
    None when nothing fits. Both implementations call this, so they pick the same device."""
    if req.num_gpus == 0:
        return ()
    reserved = rec.gpu_reserved
    cands = matching_gpus(rec, req)
    if req.num_gpus <= 1:
        best = None
        for i in cands:
            if reserved[i] + req.num_gpus <= 1 + EPS and (best is None or reserved[i] > reserved[best]):
                best = i
        return None if best is None else (best,)
    free = [i for i in cands if reserved[i] <= EPS]
    need = gpus_needed(req)
    return tuple(free[:need]) if len(free) >= need else None


# -- provisioning --------------------------------------------------------------------------------
def shape_fits(shape: NodeShape, req: Requirement, ctx: PlacementContext, level: ComputeTier) -> bool:
    """A node of ``shape`` would serve ``level`` and fit ``req`` once up (the whole co-location
    group's CPUs and memory, for the first of it placed; its slots are what its probe will find)."""
    if shape.tier.rank < level.rank:
        return False
    need_cpu, need_mem, _ = ctx.need(req)
    if shape.num_cpus + EPS < need_cpu or shape.memory_mib + EPS < need_mem or int(shape.num_cpus) < req.num_cores:
        return False
    if req.num_gpus > 0:
        if shape.gpus < gpus_needed(req):
            return False
        if req.gpu_model is not None:
            if shape.gpu_model is None:
                return False
            if normalise_gpu_name(shape.gpu_model).lower() != normalise_gpu_name(req.gpu_model).lower():
                return False
    if not shape_has_ray_terms(shape, req):
        return False
    if req.capabilities:
        tags = set(shape.capabilities)
        tags.add(f"tier:{shape.tier.value}")
        if not req.capabilities <= tags:
            return False
    return True


def shape_has_ray_terms(shape: NodeShape, req: Requirement) -> bool:
    """Whether a node of ``shape`` would meet ``req``'s Ray terms. A shape says nothing of custom
    resources or accelerator types, so a requirement naming them never provisions; of the labels a
    selector may name, a new node's ``fabric.io/tier`` is the shape's tier and every other label is
    unknown, so only a selector on the tier alone may provision."""
    if req.resources or req.accelerator_type is not None:
        return False
    for term in req.label_selector:
        if term.key != TIER_LABEL or not term.matches({TIER_LABEL: shape.tier.value}):
            return False
    return True


def may_provision(ctx: PlacementContext) -> bool:
    """A new node cannot honour a pin, a placed co-location peer or a hard zone rule."""
    if ctx.target_node is not None or ctx.co_locate_nodes:
        return False
    return not (ctx.intra_zone == "hard" and ctx.peer_zones)


def provision_shape(pt: PoolTier, count: int, req: Requirement, ctx: PlacementContext, level: ComputeTier) -> NodeShape | None:
    """The first candidate shape of elastic pool tier ``pt`` (holding ``count`` nodes) that serves
    ``level`` and fits, or None (fixed, at ``max_nodes``, or no shape fits)."""
    if pt.scale_out != "elastic" or (pt.max_nodes is not None and count >= pt.max_nodes):
        return None
    for shape in pt.candidate_shapes:
        if shape_fits(shape, req, ctx, level):
            return shape
    return None


def counts_toward_max(rec: NodeRecord) -> bool:
    """Nodes that occupy a pool tier's ``max_nodes`` (launching ones included; dead ones not)."""
    return rec.status is not NodeStatus.DEAD

"""Where a lease's spilled calls go: a Ray label selector and the node they are sent to first.

A spilled call carries a soft affinity to that node that spills when the node is busy: Ray runs
it there when a slot is free, else on any node of the selector, and the caller's lease requests
wait in that node's raylet. With the selector alone, a caller on a node that cannot run the call
(a head without slots) has its lease requests refused and sends them again: 6 to 10 per call
during a burst on Ray 2.60, which ran at 35-50% of the speed (README, "How a call is dispatched")."""

from __future__ import annotations

from typing import Mapping

from fabric.core.lifecycle import NodeStatus
from fabric.core.names import RAY_NODE_ID_LABEL, TIER_LABEL
from fabric.core.placement import FleetView, NodeRecord, Requirement
from fabric.core.settings import FabricSettings
from fabric.core.tiers import TIERS_BEST_FIRST, ComputeTier

MAX_EXCLUDED = 64
"""A selector leaving out more nodes than this by id is not worth its length: the calls queue instead."""


def spill_target(fleet: FleetView, settings: FabricSettings, outsiders: Mapping[str, ComputeTier],
                 req: Requirement) -> tuple[dict[str, str] | None, str | None]:
    """A Ray label selector for the nodes inside ``req``'s floor (its best level only, for
    ``when_full="wait"``) that may take new work now, and the node of them the engine's tier
    preference ranks first (node id breaks ties). (None, None) when there is no such node or
    ``req`` needs more than labels can say (ports, exclusivity, GPUs, capability tags, another pool,
    Ray custom resources, an accelerator type or a label selector of its own).
    ``outsiders``: raylets Ray runs with a tier label that the fleet does not hold."""
    if req.ports or req.exclusive or req.num_gpus or req.capabilities or req.num_cores or req.gpu_model:
        return None, None
    if req.resources or req.label_selector or req.accelerator_type is not None:
        return None, None
    if req.pool is not None and req.pool != fleet.default_pool:
        return None, None
    if len(settings.pools) > 1:
        return None, None
    lowest = req.min_tier if req.when_full == "wait" else req.floor
    allowed = [t for t in TIERS_BEST_FIRST if t >= lowest]
    usable: list[NodeRecord] = []
    excluded: list[str] = []
    for r in fleet.records():
        label = r.label_tier if r.label_tier is not None else r.tier
        if label is None or label < lowest:
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
    excluded += [n for n, t in outsiders.items() if t >= lowest and n not in fleet]
    if not usable or len(excluded) > MAX_EXCLUDED:
        return None, None
    selector = {TIER_LABEL: f"in({','.join(t.value for t in allowed)})"}
    if excluded:
        selector[RAY_NODE_ID_LABEL] = f"!in({','.join(sorted(excluded))})"
    sign = -1 if req.prefer == "highest" else 1  # as the engine's tier component, level by level

    def rank(r: NodeRecord) -> tuple[bool, int, str]:
        tier = r.tier if r.tier is not None else req.min_tier
        return (tier < req.min_tier, sign * tier.rank, r.node_id)

    via = min(usable, key=rank)
    return selector, via.node_id

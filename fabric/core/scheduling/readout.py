"""What the scheduler core reports about itself: its metrics and a placement explained (pure).

Both only read: ``core_metrics`` reads a core through ``invariants.CoreState`` (the parts the
invariants read too), ``explain_placement`` a fleet view. ``SchedulerCore.metrics`` and
``SchedulerCore.explain`` answer with them; ``metrics_view`` builds ``h.metrics()`` on the first.
"""

from __future__ import annotations

from typing import Any

from fabric.core.placement import FleetView, PlacementContext, Requirement, dry_run
from fabric.core.scheduling.invariants import CoreState
from fabric.core.tiers import TIERS_BEST_FIRST


def core_metrics(core: CoreState) -> dict[str, Any]:
    """Counters since start plus gauges computed now: per-tier nodes, running, utilisation."""
    tiers: dict[str, dict[str, Any]] = {}
    for (tier, _pool), (nodes, placeable, running, slots, *_rest) in core.fleet.group_sums().items():
        t = tiers.setdefault(tier, {"nodes": 0, "placeable": 0, "running": 0, "slots": 0})
        t["nodes"] += nodes
        t["placeable"] += placeable
        t["running"] += running
        t["slots"] += slots
    for t in tiers.values():
        t["utilization"] = round(t["running"] / t["slots"], 4) if t["slots"] else 0.0
    ordered = {tier.value: tiers[tier.value] for tier in TIERS_BEST_FIRST if tier.value in tiers}
    return {**core.counters, "queue_depth": len(core.queue), "nodes": len(core.fleet),
            "running": len(core.ledger), "tiers": ordered, "leases": len(core.leases),
            "drains": len(core.drains), "stimuli_handled": core.stimuli_handled,
            "provisions_pending": len(core.provisions)}


def explain_placement(fleet: FleetView, req: Requirement, ctx: PlacementContext | None = None,
                      verbose: bool = False) -> dict[str, Any]:
    """A dry-run placement of ``req`` against ``fleet``, with its trace: the decision, each node's
    first failing filter, each survivor's key, and the text a person reads. Changes nothing."""
    d = dry_run(fleet, req, ctx)
    names = {r.node_id: r.name for r in fleet.records()}
    trace = d.trace
    verdicts = {f"{names.get(k, k)} ({k[:12]})": v for k, v in trace.verdicts().items()} if trace else {}
    survivors = [{"node": names.get(node_id, node_id), "node_id": node_id, "key": list(map(str, key))}
                 for key, node_id in trace.survivors()] if trace else []
    return {"decision": {**d.to_dict(), "node_name": d.node_name}, "verdicts": verdicts, "survivors": survivors,
            "text": d.explain(verbose=verbose)}


__all__ = ["core_metrics", "explain_placement"]

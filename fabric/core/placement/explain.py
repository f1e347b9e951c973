"""``Decision.explain()``: a placement decision rendered for a person.

Modelled on ``nomad alloc status -verbose``: the outcome first, then the requirement, then
each step of the walk with how many nodes each filter removed, then the best survivors'
keys component by component. ``verbose=True`` adds every node's verdict.

It reads the decision's parts (its one-line summary, requirement, context, trace and node),
not the ``Decision`` itself, so that ``decision`` may call it without an import cycle.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fabric.core.placement.context import PlacementContext
from fabric.core.placement.keys import KEY_COMPONENTS
from fabric.core.placement.requirement import Requirement
from fabric.core.placement.trace import PlacementTrace
from fabric.core.tiers import ComputeTier

_SHORT = ("viol", "launching", "avoid_spare", "tier", "warmth", "reserved", "pref_spare", "packing", "zone", "node")


def _fmt_key(key: tuple) -> str:
    parts = []
    for name, v in zip(_SHORT, key):
        if name == "node":
            continue
        if name == "tier":
            v = ComputeTier.from_rank(abs(v)).value
        elif isinstance(v, float):
            v = f"{v:.3f}"
        parts.append(f"{name}={v}")
    return " ".join(parts)


def summarize_trace(trace: PlacementTrace, top: int = 5) -> dict:
    """What the report prints of ``trace``, as plain JSON-ready values: each step (existing steps with
    how many nodes fit of how many and how many each filter removed, the others with their note),
    where it was decided, the survivor count and the best ``top`` survivors' keys. A recorded
    decision keeps this, so its report reads as it did when it was made."""
    steps = []
    for step in trace.steps:
        row: dict[str, Any] = {"kind": step.kind, "level": step.level.value, "pool": step.pool, "pool_tier": step.pool_tier,
                               "note": step.note}
        if step.kind == "existing":
            counts = Counter(step.verdicts.values())
            row["fit"] = len(step.survivors)
            row["total"] = len(step.verdicts) + len(step.survivors)
            row["removed"] = [[name, n] for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        steps.append(row)
    survivors = trace.survivors()
    return {"steps": steps, "decided_at": list(trace.decided_at) if trace.decided_at is not None else None,
            "survivors": len(survivors), "best": [[list(key), nid] for key, nid in survivors[:top]]}


def explain(summary: str, req: Requirement, ctx: PlacementContext, trace: PlacementTrace | None, node_id: str | None,
            *, verbose: bool = False, top: int = 5) -> str:
    """The report: ``summary`` (``Decision.summary()``) first, then what ``trace`` saw; the
    survivor placed on (``node_id``) is starred."""
    if trace is None:
        return render(summary, req, ctx, None, node_id)
    return render(summary, req, ctx, summarize_trace(trace, top), node_id, trace.verdicts() if verbose else None)


def render(summary: str, req: Requirement, ctx: PlacementContext, walked: dict | None, node_id: str | None,
           every_node: "dict[str, str] | None" = None) -> str:
    """The report's words from ``summarize_trace``'s values (``walked``; None: no trace); with
    ``every_node`` (node id -> verdict) each node's verdict too."""
    lines = [summary]
    lines.append(f"  requirement: {req!r}")
    ctx_bits = []
    if ctx.target_node:
        ctx_bits.append(f"pinned to {ctx.target_node}")
    if ctx.exclude_nodes:
        ctx_bits.append(f"excluding {', '.join(sorted(ctx.exclude_nodes))}")
    if ctx.other_node:
        ctx_bits.append(f"other replica on {ctx.other_node} (same_node={ctx.same_node}, same_az={ctx.same_az}, same_cloud={ctx.same_cloud})")
    if ctx.template:
        ctx_bits.append(f"template {ctx.template}")
    if ctx.recovering:
        ctx_bits.append(f"recovering ({ctx.on_runtime_failure})")
    if ctx_bits:
        lines.append(f"  context: {'; '.join(ctx_bits)}")
    if walked is None:
        lines.append("  (no trace: place(..., trace=True) or dry_run() records one)")
        return "\n".join(lines)
    lines.append("  walk:")
    for step in walked["steps"]:
        if step["kind"] == "existing":
            lines.append(f"    level {step['level']}, pool tier {step['pool']}/{step['pool_tier']}: {step['fit']} of {step['total']} nodes fit")
            for name, n in step["removed"]:
                lines.append(f"      filter {name:<15} removed {n} node{'s' if n != 1 else ''}")
        elif step["kind"] == "provision":
            lines.append(f"    provision at level {step['level']}, pool tier {step['pool']}/{step['pool_tier']}: {step['note']}")
        else:
            lines.append(f"    {step['note']}")
    if walked["decided_at"] is not None:
        lines.append(f"  decided at level {walked['decided_at'][0]}, pool tier {walked['decided_at'][1]}")
    if walked["survivors"]:
        lines.append(f"  best survivors (of {walked['survivors']}; key components in order: {', '.join(KEY_COMPONENTS)}):")
        for key, nid in walked["best"]:
            mark = "*" if nid == node_id else " "
            lines.append(f"    {mark} {nid:<24} {_fmt_key(tuple(key))}")
    if every_node is not None:
        lines.append("  every node:")
        for nid, verdict in sorted(every_node.items()):
            lines.append(f"    {nid:<24} {verdict}")
    return "\n".join(lines)

"""The fleet's node events in the fabric's one event log, from the fleet feed's changes.

For each change the scheduler's fleet feed reports (``actors.fleet_feed.FleetChange``: ``joined``,
``changed`` or ``lost``), ``fleet_events`` names the events the log gets: ``node_joined``,
``node_lost`` or ``node_changed`` (with the changed fields as plain data), then ``node_unhealthy``
/ ``node_healthy`` when the health monitor's verdict on the node began or ended: a flap hold
(``flap_held``: flap damping) or a demotion (``demoted``: its probe found it lost something,
so it serves a lower tier than its Ray label says). The scheduler emits them with the stimulus's
``stimulus_id``. Pure: no Ray, no I/O.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

__all__ = ["fleet_events", "plain", "unwell"]


def plain(value: Any) -> Any:
    """A record field's value as plain, JSON-able data (enums by value, sets sorted, models dumped)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=str)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value.value if isinstance(value, Enum) else value


def unwell(rec: Any) -> set[str]:
    """Why the health monitor keeps ``rec`` (a ``NodeRecord``) off placement: ``flap_held``,
    ``demoted`` (its tier below its label's), or nothing."""
    out = {"flap_held"} if rec.flap_held else set()
    if rec.label_tier is not None and rec.tier < rec.label_tier:
        out.add("demoted")
    return out


def fleet_events(change: Any, old: Any) -> list[tuple[str, dict[str, Any]]]:
    """``(kind, data)`` for one fleet change, in log order; ``old`` is the scheduler's record of the
    node before it (None: not in its fleet). A kind the feed does not know gives nothing."""
    rec = change.record if change.record is not None else old
    base = {"node_id": change.node_id, "name": getattr(rec, "name", None), "cause": change.cause or ""}
    if change.kind == "lost":
        return [("node_lost", base)]
    if rec is None:
        return []
    if change.kind == "joined":
        out = [("node_joined", {**base, "tier": plain(rec.tier), "pool": rec.pool})]
    elif change.kind == "changed":
        out = [("node_changed", {**base, "fields": {str(k): plain(v) for k, v in dict(change.fields).items()}})]
    else:
        return []
    was = unwell(old) if old is not None else set()
    now = unwell(rec)
    tiers = {"tier": plain(rec.tier), "label_tier": plain(rec.label_tier)}
    out += [("node_unhealthy", {**base, "reason": r, **tiers}) for r in sorted(now - was)]
    out += [("node_healthy", {**base, "reason": r, **tiers}) for r in sorted(was - now)]
    return out

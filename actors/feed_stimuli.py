"""The scheduler's stimulus for one change its fleet feed reports (``actors.fleet_feed.FleetChange``)."""

from __future__ import annotations

from typing import Any

from fabric.core.scheduling import NodeChanged, NodeJoined, NodeLost, Stimulus
from fabric.core.scheduling.stimuli import new_stimulus_id

__all__ = ["stimulus_for"]


def stimulus_for(change: Any) -> Stimulus | None:
    """The stimulus a fleet feed change (``FleetChange``) stands for; None for a kind it does not know.
    It keeps the change's ``stimulus_id`` (what caused it in the registry) and ``cause`` when it has them."""
    sid = getattr(change, "stimulus_id", None) or new_stimulus_id("feed")
    cause = getattr(change, "cause", "") or ""
    if change.kind == "lost":
        return NodeLost(change.node_id, cause, stimulus_id=sid)
    if change.kind == "joined":
        return NodeJoined(change.record, cause, stimulus_id=sid)
    if change.kind == "changed":
        return NodeChanged(change.node_id, dict(change.fields), cause, stimulus_id=sid)
    return None

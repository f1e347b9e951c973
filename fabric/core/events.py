"""Fleet events: what the health monitor tells the rest of the fabric about membership and health.

The health monitor has four triggers (node added, lost, degraded, burst); the fabric adds the two
that its drain grace and flap damping imply (flap-held, collected) and the way back (recovered).
The operator's changes (cordon, uncordon, drain) are events too, so that every status change
reaches the registry through one writer (``Registry.apply``) with a cause and a stimulus id.
Each event is a small frozen pydantic model carrying the node it is about and a ``stimulus_id``
naming what caused it (Dask's habit), so a subscriber can log, dedupe and replay them. Pure: no
Ray, no I/O.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from fabric.core.lifecycle import NodeStatus


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node_id: str
    """Ray's node id (hex)."""
    name: str
    """The node's stable name (its ``fabric.io/name`` label, else the registered name)."""
    at: float
    """When the monitor decided it (epoch seconds, the injected clock)."""
    stimulus_id: str
    """What caused it (e.g. ``ray-nodes-1712``, ``heartbeat-...``, ``tick-...``)."""
    status: NodeStatus | None = None
    """The node's registry status after the event, when the event changes it."""


class NodeAdded(_Event):
    """A fabric node appeared in Ray's node table (alive): new capacity ("node added")."""

    kind: Literal["node_added"] = "node_added"
    status: NodeStatus | None = NodeStatus.ACTIVE


class NodeLost(_Event):
    """A node stopped answering: Ray declared it dead, or its heartbeats stopped (a partition).
    It goes ``offline`` and stays there for the drain grace; it is not ``dead`` yet."""

    kind: Literal["node_lost"] = "node_lost"
    status: NodeStatus | None = NodeStatus.OFFLINE
    reason: str
    """``ray: node dead`` or ``missed heartbeats for N s``."""
    ray_dead: bool = False
    """True when Ray itself declared the node dead (it can never come back under this id)."""


class NodeRecovered(_Event):
    """A lost node answers again (heartbeats resumed), or a degradation cleared."""

    kind: Literal["node_recovered"] = "node_recovered"
    reason: str


class NodeDegraded(_Event):
    """The node's probe found it lost something it had (a GPU vanished, an encoder stopped working).
    Ray cannot change a live node's resources, so the fabric demotes it in its own view."""

    kind: Literal["node_degraded"] = "node_degraded"
    reasons: tuple[str, ...]


class NodeFlapHeld(_Event):
    """The node's name toggled online/offline too often (by default 3 times in 300 s) and is held off
    placement until ``until``."""

    kind: Literal["node_flap_held"] = "node_flap_held"
    until: float
    toggles: int


class NodeFlapReleased(_Event):
    """A flap hold ended."""

    kind: Literal["node_flap_released"] = "node_flap_released"


class NodeCollected(_Event):
    """A lost node outlived the drain grace: it is ``dead`` and its record is garbage-collected."""

    kind: Literal["node_collected"] = "node_collected"
    status: NodeStatus | None = NodeStatus.DEAD
    lost_for_s: float


class NodeCordoned(_Event):
    """An operator (or the scheduler, starting a drain) cordoned the node: no new placements;
    running work is left alone. The status does not change."""

    kind: Literal["node_cordoned"] = "node_cordoned"
    reason: str = "operator cordon"


class NodeUncordoned(_Event):
    """The node takes work again. An uncordon withdraws an operator drain: a
    ``draining`` node is ``active`` again, and one that comes back from ``offline`` later returns
    to ``active``, not ``draining``."""

    kind: Literal["node_uncordoned"] = "node_uncordoned"
    reason: str = "operator uncordon"


class NodeDrainRequested(_Event):
    """An operator drain, or the scheduler marking a node whose drain finished: the node is
    ``draining`` and cordoned, and the drain holds across a partition (only an uncordon withdraws it)."""

    kind: Literal["node_drain_requested"] = "node_drain_requested"
    status: NodeStatus | None = NodeStatus.DRAINING
    reason: str = "operator drain"


FleetEvent = Annotated[
    Union[NodeAdded, NodeLost, NodeRecovered, NodeDegraded, NodeFlapHeld, NodeFlapReleased, NodeCollected,
          NodeCordoned, NodeUncordoned, NodeDrainRequested],
    Field(discriminator="kind"),
]
"""Any fleet event; ``parse_event`` reads one from its dict form."""

EVENT_TYPES = (NodeAdded, NodeLost, NodeRecovered, NodeDegraded, NodeFlapHeld, NodeFlapReleased, NodeCollected,
               NodeCordoned, NodeUncordoned, NodeDrainRequested)
"""Every fleet event class, for ``isinstance`` checks at a boundary (``fabric.core.messages``)."""

OPERATOR_EVENTS = (NodeCordoned, NodeUncordoned, NodeDrainRequested)
"""The events an operator's change makes (the registry's ``set_cordoned`` and ``mark_draining``)."""

_ADAPTER: TypeAdapter = TypeAdapter(FleetEvent)


def parse_event(data: dict) -> "_Event":
    """The event ``data`` (``event.model_dump()``) describes."""
    return _ADAPTER.validate_python(data)


def event_cause(event: "_Event") -> str:
    """Why ``event`` changed a record, in a few words: its ``reason`` when it has one, else what it
    says (a flap hold and until when, a degradation, a collection)."""
    reason = getattr(event, "reason", "")
    if reason:
        return str(reason)
    if isinstance(event, NodeFlapHeld):
        return f"flap hold until {event.until:.0f} ({event.toggles} toggles)"
    if isinstance(event, NodeFlapReleased):
        return "flap hold ended"
    if isinstance(event, NodeDegraded):
        return "degraded: " + "; ".join(event.reasons)
    if isinstance(event, NodeCollected):
        return f"collected after {event.lost_for_s:.0f} s offline"
    if isinstance(event, NodeAdded):
        return "seen alive in Ray's node table"
    return str(getattr(event, "kind", type(event).__name__)).replace("_", " ")


__all__ = [
    "EVENT_TYPES", "FleetEvent", "NodeAdded", "NodeLost", "NodeRecovered", "NodeDegraded", "NodeFlapHeld",
    "NodeFlapReleased", "NodeCollected", "NodeCordoned", "NodeUncordoned", "NodeDrainRequested", "OPERATOR_EVENTS",
    "event_cause", "parse_event",
]

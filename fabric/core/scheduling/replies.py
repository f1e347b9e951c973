"""What a caller of the scheduler waits for: a ``NodeAssignment`` (one call placed or deferred) or a
``LeaseGrant`` (the fast path: slots a client may fill itself). They travel to the driver over the
actor boundary, so they are small frozen dataclasses that pickle as they are."""

from __future__ import annotations

from dataclasses import dataclass

from fabric.core.placement import Decision
from fabric.core.tiers import ComputeTier


@dataclass(frozen=True, slots=True)
class NodeAssignment:
    """The ``select_worker`` answer: ``assigned`` to a node, or ``deferred`` with a reason."""

    status: str
    """``assigned`` or ``deferred``."""
    node_id: str | None = None
    tier: ComputeTier | None = None
    """The compute level the work was placed at (``fallback_levels`` below its ``min_tier``)."""
    reason: str = ""
    node_name: str | None = None
    node_tier: ComputeTier | None = None
    """The chosen node's own tier (at or above ``tier``)."""
    fallback_levels: int = 0
    allocation_id: int | None = None
    """Set when the assignment holds a reservation that must be released."""
    ray_gpus: float = 0.0
    """GPUs to ask Ray for on this node (see ``SchedulerCore.ray_gpus``)."""

    @classmethod
    def from_decision(cls, d: Decision, *, reserved: bool) -> "NodeAssignment":
        if d.status == "placed":
            return cls("assigned", d.node_id, d.tier, d.reason, d.node_name, d.node_tier, d.fallback_levels,
                       d.allocation.allocation_id if (reserved and d.allocation is not None) else None)
        reason = d.reason if d.status == "deferred" else f"needs a new node ({d.shape.name if d.shape else '?'}); {d.reason}".rstrip("; ")
        return cls("deferred", None, d.tier, reason or "no capacity")


@dataclass(frozen=True, slots=True)
class LeaseSlot:
    """How many calls of one requirement class a client may have in flight on one node."""

    node_id: str
    capacity: int
    """Calls in flight allowed on the node, the client's running ones included (0: none new)."""
    level: ComputeTier | None = None
    """The compute level the slots were placed at."""
    fallback_levels: int = 0
    ray_gpus: float = 0.0
    """GPUs each call asks Ray for on this node (see ``SchedulerCore.ray_gpus``)."""


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """A client's right, for one health tick, to place calls of one requirement class itself.

    ``slots`` were placed by the engine, best first, and are reserved in the scheduler's view;
    ``spill`` is a Ray label selector for every node inside the floor that may take work now
    (cordoned, draining, held and demoted nodes excluded): calls beyond the slots go there and Ray
    runs them on whichever of those nodes frees a slot first. None when no such node exists or the
    requirement cannot be expressed as labels: those calls take the queued path."""

    lease_id: str
    slots: tuple[LeaseSlot, ...]
    spill: dict[str, str] | None
    ttl_s: float
    spill_via: str | None = None
    """The node, among ``spill``'s, whose raylet spilled calls are sent to first (see
    ``SchedulerCore.spill_target``); None with no ``spill``."""

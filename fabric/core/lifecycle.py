"""Node lifecycle: seed 002's registry statuses and the transitions allowed between them.

``active`` -> ``offline`` (missed heartbeats / Ray lost it) -> ``dead`` (after the drain grace);
``active`` -> ``draining`` (operator drain, or Ray saw it go) -> ``offline``/``dead``; a node that
comes back from ``offline`` or ``draining`` returns to ``active``. ``dead`` is terminal: a node
that rejoins is a new record (seed 002: "new node appears before old node drains").
"""

from __future__ import annotations

from enum import Enum

from fabric.core.errors import TransitionError


class NodeStatus(str, Enum):
    """Registry status of one node record."""

    ACTIVE = "active"
    DRAINING = "draining"
    OFFLINE = "offline"
    DEAD = "dead"

    def __str__(self) -> str:
        return self.value


ALLOWED_TRANSITIONS: dict[NodeStatus, frozenset[NodeStatus]] = {
    NodeStatus.ACTIVE: frozenset({NodeStatus.DRAINING, NodeStatus.OFFLINE, NodeStatus.DEAD}),
    NodeStatus.DRAINING: frozenset({NodeStatus.ACTIVE, NodeStatus.OFFLINE, NodeStatus.DEAD}),
    NodeStatus.OFFLINE: frozenset({NodeStatus.ACTIVE, NodeStatus.DRAINING, NodeStatus.DEAD}),
    NodeStatus.DEAD: frozenset(),
}


def check_transition(what: str, current: NodeStatus, target: NodeStatus, why: str = "") -> NodeStatus:
    """``target`` if ``current -> target`` is allowed (or a no-op); else ``TransitionError``."""
    if current == target:
        return target
    if target not in ALLOWED_TRANSITIONS[current]:
        reason = why or ("dead is terminal: a rejoining node is a new record" if current is NodeStatus.DEAD else "not an allowed transition")
        raise TransitionError(what, current.value, target.value, reason)
    return target

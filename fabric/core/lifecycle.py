"""Lifecycles: a ``str`` enum of states and the set of ``(from, to)`` moves allowed between them.

``Lifecycle`` is the one way the fabric writes a state machine down (STYLE.md habit 4): node status
uses it now; the scheduler's drain saga (``fabric.core.scheduling.drain.DrainPhase``) and, later,
jobs, migrations and spares use it too. A move outside the table raises ``TransitionError``
naming what moved, from, to and why; staying in the same state is always allowed (a no-op).

Node status is the registry's lifecycle:
``active`` -> ``offline`` (missed heartbeats / Ray lost it) -> ``dead`` (after the drain grace);
``active`` -> ``draining`` (operator drain, or Ray saw it go) -> ``offline``/``dead``; a node that
comes back from ``offline`` or ``draining`` returns to ``active``. ``dead`` is terminal: a node
that rejoins is a new record (the new node may appear before the old one drains).
"""

from __future__ import annotations

from enum import Enum
from typing import Generic, Iterable, Mapping, TypeVar

from fabric.core.errors import TransitionError

S = TypeVar("S", bound=Enum)


class Lifecycle(Generic[S]):
    """The allowed moves of one ``str`` enum of states.

    ``allowed`` is the set of ``(from, to)`` pairs; a state with no move out is terminal.
    ``reasons`` gives, per *from* state, the ``why`` a refused move out of it reports (default:
    "<state> is terminal" for a terminal state, else "not an allowed transition")."""

    def __init__(self, states: type[S], allowed: Iterable[tuple[S, S]], *, reasons: Mapping[S, str] | None = None) -> None:
        self.states = states
        self.allowed: frozenset[tuple[S, S]] = frozenset(allowed)
        for frm, to in self.allowed:
            if not (isinstance(frm, states) and isinstance(to, states)):
                raise TypeError(f"({frm!r}, {to!r}) is not a pair of {states.__name__} members")
        self.reasons: dict[S, str] = dict(reasons or {})
        self._next: dict[S, frozenset[S]] = {
            s: frozenset(to for frm, to in self.allowed if frm == s) for s in states}

    def successors(self, state: S) -> frozenset[S]:
        """The states ``state`` may move to."""
        return self._next[state]

    def table(self) -> dict[S, frozenset[S]]:
        """``{from: {to, ...}}`` for every state (terminal ones map to an empty set)."""
        return dict(self._next)

    def is_terminal(self, state: S) -> bool:
        return not self._next[state]

    @property
    def terminal(self) -> frozenset[S]:
        return frozenset(s for s, nxt in self._next.items() if not nxt)

    def allows(self, current: S, target: S) -> bool:
        """Whether ``current -> target`` is allowed (staying put always is)."""
        return current == target or target in self._next[current]

    def check(self, what: str, current: S, target: S, why: str = "") -> S:
        """``target`` if ``current -> target`` is allowed (or a no-op); else ``TransitionError``
        saying ``what`` moved, from, to and why."""
        if self.allows(current, target):
            return target
        reason = why or self.reasons.get(current) or (
            f"{current.value} is terminal" if self.is_terminal(current) else "not an allowed transition")
        raise TransitionError(what, current.value, target.value, reason)


class NodeStatus(str, Enum):
    """Registry status of one node record."""

    ACTIVE = "active"
    DRAINING = "draining"
    OFFLINE = "offline"
    DEAD = "dead"

    def __str__(self) -> str:
        return self.value


NODE_LIFECYCLE: Lifecycle[NodeStatus] = Lifecycle(
    NodeStatus,
    [
        (NodeStatus.ACTIVE, NodeStatus.DRAINING), (NodeStatus.ACTIVE, NodeStatus.OFFLINE), (NodeStatus.ACTIVE, NodeStatus.DEAD),
        (NodeStatus.DRAINING, NodeStatus.ACTIVE), (NodeStatus.DRAINING, NodeStatus.OFFLINE), (NodeStatus.DRAINING, NodeStatus.DEAD),
        (NodeStatus.OFFLINE, NodeStatus.ACTIVE), (NodeStatus.OFFLINE, NodeStatus.DRAINING), (NodeStatus.OFFLINE, NodeStatus.DEAD),
    ],
    reasons={NodeStatus.DEAD: "dead is terminal: a rejoining node is a new record"},
)

ALLOWED_TRANSITIONS: dict[NodeStatus, frozenset[NodeStatus]] = NODE_LIFECYCLE.table()


def check_transition(what: str, current: NodeStatus, target: NodeStatus, why: str = "") -> NodeStatus:
    """``target`` if ``current -> target`` is allowed (or a no-op); else ``TransitionError``."""
    return NODE_LIFECYCLE.check(what, current, target, why)

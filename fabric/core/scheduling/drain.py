"""The drain saga: an operator's drain, from the command to the registry.

``requested`` -> ``cordoned`` (no new work; the cordon is written to the registry) ->
``waiting`` (fabric work still runs there) -> ``handed_off`` (its work ended or the grace ran out:
the node is marked draining in the registry, which owns it from here). An uncordon withdraws a
drain at any step before the hand-off (``cancelled``); a node that leaves the fleet first ends it
(``abandoned``). ``handed_off``, ``cancelled`` and ``abandoned`` are terminal.

``DrainBook`` holds the sagas in progress (at most one per node: a second drain of the same node
starts over) and the last few that ended, for the operator's eyes."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterator

from fabric.core.lifecycle import Lifecycle


class DrainPhase(str, Enum):
    REQUESTED = "requested"
    CORDONED = "cordoned"
    WAITING = "waiting"
    """Cordoned; fabric work still runs on the node."""
    HANDED_OFF = "handed_off"
    """Marked draining in the registry (``MarkDraining``): done, as far as the scheduler goes."""
    CANCELLED = "cancelled"
    """Withdrawn by an uncordon."""
    ABANDONED = "abandoned"
    """The node left the fleet before the hand-off."""

    def __str__(self) -> str:
        return self.value


P = DrainPhase
DRAIN_LIFECYCLE: Lifecycle[DrainPhase] = Lifecycle(DrainPhase, [
    (P.REQUESTED, P.CORDONED), (P.REQUESTED, P.CANCELLED), (P.REQUESTED, P.ABANDONED),
    (P.CORDONED, P.WAITING), (P.CORDONED, P.HANDED_OFF), (P.CORDONED, P.CANCELLED), (P.CORDONED, P.ABANDONED),
    (P.WAITING, P.HANDED_OFF), (P.WAITING, P.CANCELLED), (P.WAITING, P.ABANDONED),
])

IN_PROGRESS = frozenset({P.CORDONED, P.WAITING})
"""The phases a saga rests in between stimuli."""

FINISHED_KEPT = 32
"""Ended sagas kept for ``DrainBook.recent``."""


@dataclass
class Drain:
    """One node's drain."""

    node_id: str
    deadline: float
    """When the grace runs out: handed off then, whatever still runs."""
    requested_at: float
    stimulus_id: str
    """The stimulus that requested it."""
    phase: DrainPhase = DrainPhase.REQUESTED
    history: list[tuple[DrainPhase, float]] = field(default_factory=list)

    def move(self, target: DrainPhase, at: float) -> None:
        """Go to ``target``; ``TransitionError`` when the table does not allow it."""
        self.phase = DRAIN_LIFECYCLE.check(f"drain of {self.node_id[:12]}", self.phase, target)
        self.history.append((target, at))

    def as_dict(self) -> dict:
        return {"node_id": self.node_id, "phase": self.phase.value, "deadline": self.deadline,
                "requested_at": self.requested_at, "stimulus_id": self.stimulus_id,
                "history": [(p.value, at) for p, at in self.history]}


class DrainBook:
    """The drains in progress, one per node, and the last ``FINISHED_KEPT`` that ended."""

    def __init__(self) -> None:
        self._active: dict[str, Drain] = {}
        self._finished: deque[Drain] = deque(maxlen=FINISHED_KEPT)

    def __len__(self) -> int:
        return len(self._active)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._active

    def __iter__(self) -> Iterator[Drain]:
        return iter(list(self._active.values()))

    def get(self, node_id: str) -> Drain | None:
        return self._active.get(node_id)

    def recent(self) -> list[Drain]:
        """Sagas that ended, oldest first."""
        return list(self._finished)

    def start(self, node_id: str, deadline: float, now: float, stimulus_id: str) -> Drain:
        """A drain is requested and the node cordoned (a drain already in progress there starts over)."""
        old = self._active.pop(node_id, None)
        if old is not None:
            self._end(old, DrainPhase.CANCELLED, now)
        d = Drain(node_id, deadline, now, stimulus_id)
        d.history.append((DrainPhase.REQUESTED, now))
        d.move(DrainPhase.CORDONED, now)
        self._active[node_id] = d
        return d

    def withdraw(self, node_id: str, now: float) -> Drain | None:
        """An uncordon: the drain in progress (if any) is cancelled."""
        d = self._active.pop(node_id, None)
        if d is not None:
            self._end(d, DrainPhase.CANCELLED, now)
        return d

    def abandon(self, node_id: str, now: float) -> Drain | None:
        """The node left the fleet."""
        d = self._active.pop(node_id, None)
        if d is not None:
            self._end(d, DrainPhase.ABANDONED, now)
        return d

    def advance(self, now: float, running_on: Callable[[str], int], in_fleet: Callable[[str], bool]) -> list[Drain]:
        """Move every drain on: handed off when its node runs no fabric work or its grace ran out,
        else waiting. A node no longer in the fleet abandons its drain. Returns the drains handed off."""
        out: list[Drain] = []
        for node_id, d in list(self._active.items()):
            if not in_fleet(node_id):
                self.abandon(node_id, now)
            elif running_on(node_id) == 0 or d.deadline <= now:
                del self._active[node_id]
                self._end(d, DrainPhase.HANDED_OFF, now)
                out.append(d)
            elif d.phase is not DrainPhase.WAITING:
                d.move(DrainPhase.WAITING, now)
        return out

    def _end(self, d: Drain, phase: DrainPhase, now: float) -> None:
        d.move(phase, now)
        self._finished.append(d)

    def problems(self, in_fleet: Callable[[str], bool], cordoned: Callable[[str], bool]) -> list[str]:
        """What is inconsistent (empty when nothing): each drain in progress rests in a phase
        between stimuli, is filed under its node, its node is in the fleet and cordoned, and its
        history follows the table."""
        out: list[str] = []
        for node_id, d in self._active.items():
            if d.node_id != node_id:
                out.append(f"drains: the drain of {d.node_id} is filed under {node_id}")
            if d.phase not in IN_PROGRESS:
                out.append(f"drains: {node_id} rests in phase {d.phase.value}")
            if not in_fleet(node_id):
                out.append(f"drains: {node_id} is draining but not in the fleet")
            elif not cordoned(node_id):
                out.append(f"drains: {node_id} is draining but not cordoned")
            if d.deadline < d.requested_at:
                out.append(f"drains: {node_id} has its deadline before its request")
        for d in list(self._active.values()) + list(self._finished):
            phases = [p for p, _ in d.history]
            if not phases or phases[0] is not DrainPhase.REQUESTED or phases[-1] is not d.phase:
                out.append(f"drains: {d.node_id}'s history {[p.value for p in phases]} does not end in {d.phase.value}")
            for a, b in zip(phases, phases[1:]):
                if not DRAIN_LIFECYCLE.allows(a, b) or a is b:
                    out.append(f"drains: {d.node_id} went {a.value} -> {b.value}, which the table does not allow")
        return out

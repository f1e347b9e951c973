"""Nodes that keep failing to start jobs (pure): ``Strikes`` counts each node's rejections and says
when one is to be marked unhealthy, and when it is healthy again.

A rejection is a job instance that ended on its node before it ever ran. ``escalation_count`` of
them inside ``window_s`` (``RejectionSettings``) make the node unhealthy: placement leaves it out
(``NodeRecord.unhealthy``). It is healthy again when a job reaches running on it (``ran``), or
once ``unhealthy_cooldown_s`` has passed since it was marked (``expired``). The caller owns the
clock and the fleet; this only keeps the counts."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Marked:
    """A node just marked unhealthy: how many rejections inside the window did it, and until when
    it stays out at most (a job running on it clears it sooner)."""

    node_id: str
    rejections: int
    window_s: float
    until: float


class Strikes:
    """Rejections per node inside the window, and the nodes marked unhealthy (node id -> until).
    ``settings``: a ``RejectionSettings`` (read at every call, so a live update applies at once)."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.recent: dict[str, deque[float]] = {}
        self.unhealthy: dict[str, float] = {}

    def rejected(self, node_id: str, now: float) -> Marked | None:
        """One rejection by ``node_id`` at ``now``: the ``Marked`` when it makes the node unhealthy,
        else None (below the count, or unhealthy already)."""
        s = self.settings
        times = self.recent.setdefault(node_id, deque())
        times.append(now)
        while times and now - times[0] > s.window_s:
            times.popleft()
        if node_id in self.unhealthy or len(times) < s.escalation_count:
            return None
        n = len(times)
        times.clear()
        until = now + s.unhealthy_cooldown_s
        self.unhealthy[node_id] = until
        return Marked(node_id, n, s.window_s, until)

    def ran(self, node_id: str) -> bool:
        """A job reached running on ``node_id``: its count starts over; whether it was unhealthy
        (and is no longer)."""
        self.recent.pop(node_id, None)
        return self.unhealthy.pop(node_id, None) is not None

    def expired(self, now: float) -> list[str]:
        """The unhealthy nodes whose cooldown has passed, no longer unhealthy (sorted)."""
        done = sorted(n for n, until in self.unhealthy.items() if until <= now)
        for n in done:
            del self.unhealthy[n]
        return done

    def forget(self, node_id: str) -> None:
        """The node left the fleet: nothing of it is kept."""
        self.recent.pop(node_id, None)
        self.unhealthy.pop(node_id, None)

    def is_unhealthy(self, node_id: str) -> bool:
        return node_id in self.unhealthy


__all__ = ["Marked", "Strikes"]

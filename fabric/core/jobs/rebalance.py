"""Which jobs move up a tier when better capacity joins (the reconfiguration engine: a node
added -> rebalance; issue 16). Pure: the runner builds the candidates and carries out the moves.

A job that fallback placed below its ``min_tier`` (its node's tier is lower) is a candidate; one
moved (by any migration) less than ``cooldown_s`` ago is not. The furthest below its
``min_tier`` goes first, then the longest running, then by job id; at most
``max_concurrent`` rebalancing migrations are in flight at once. ``rebalance.enabled: false``
moves nothing. Tasks need none of this: new calls already go to the best tier."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from fabric.core.errors import RequirementError
from fabric.core.settings_moves import RebalanceSettings
from fabric.core.tiers import ComputeTier


@dataclass(frozen=True)
class Candidate:
    """A running job and what the runner knows of its place."""

    job_id: str
    node_tier: ComputeTier
    """The tier of the node it runs on."""
    min_tier: ComputeTier
    """The best tier it asks for."""
    last_moved_at: float | None
    """When its latest migration ended (None: never moved)."""
    running_since: float
    """When it started running where it is."""

    @property
    def shortfall(self) -> int:
        """How many tiers below its ``min_tier`` it runs (0 or less: not below)."""
        return self.min_tier.rank - self.node_tier.rank


def _cooled(c: Candidate, now: float, cooldown_s: float) -> bool:
    return c.last_moved_at is None or now - c.last_moved_at >= cooldown_s


def choose(candidates: Iterable[Candidate], *, in_flight: int, now: float, settings: RebalanceSettings) -> list[str]:
    """The ids of the jobs to move up now, first to move first: those below their ``min_tier``,
    not moved within ``cooldown_s``, furthest below first, then longest running, then by id; at
    most ``max_concurrent - in_flight`` of them (none when rebalancing is off)."""
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 0:
        raise RequirementError("in_flight", "must be a count of migrations, 0 or more", in_flight)
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise RequirementError("now", "must be a finite time (epoch seconds)", now)
    room = settings.max_concurrent - in_flight
    if not settings.enabled or room <= 0:
        return []
    seen: set[str] = set()
    eligible: list[Candidate] = []
    for c in candidates:
        if c.job_id in seen:
            raise RequirementError("candidates", f"job {c.job_id!r} is a candidate twice", c.job_id)
        seen.add(c.job_id)
        if c.node_tier < c.min_tier and _cooled(c, now, settings.cooldown_s):
            eligible.append(c)
    eligible.sort(key=lambda c: (-c.shortfall, c.running_since, c.job_id))
    return [c.job_id for c in eligible[:room]]


__all__ = ["Candidate", "choose"]

"""``DecisionTap``: the scheduler's core hands it each decision the engine made; it keeps those worth
recording (``why``), each with a frozen snapshot of the fleet the engine read, until the scheduler
takes them (``take``) to number them in the event log."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from fabric.core.placement import Decision, FleetSnapshot, FleetView
from fabric.core.settings import FabricSettings

CAPTURED_MAX = 1024
"""Captures kept until taken (a core nobody takes them from forgets the oldest)."""


@dataclass(slots=True)
class Capture:
    """One decision to record, as the engine made it."""

    subject: str
    """``job`` (a job's placement), ``task`` (a call placed through the scheduler) or ``lease`` (a grant)."""
    why: str
    """``job``, ``fallback`` (placed below ``min_tier``), ``refused`` (not placed) or ``sampled``."""
    decision: Decision
    fleet: FleetSnapshot
    """The fleet the engine read (a snapshot: later changes do not reach it)."""
    settings: FabricSettings
    stimulus_id: str
    grant: "dict[str, Any] | None" = None
    """A lease grant's slots and spill target (filled in once the grant is made)."""


class DecisionTap:
    """Which decisions are recorded: every job placement, every fallback, every refusal, and one in
    ``sample_one_in`` of the rest. ``enabled`` may be changed at any time."""

    def __init__(self, enabled: bool = True, sample_one_in: int = 100) -> None:
        self.enabled = enabled
        self.sample_one_in = max(1, int(sample_one_in))
        self._seen = 0
        self.captured: deque[Capture] = deque(maxlen=CAPTURED_MAX)
        self._lease: Capture | None = None

    def why(self, subject: str, d: Decision) -> str | None:
        """Why ``d`` is recorded, or None (not sampled)."""
        if subject == "job":
            return "job"
        if d.status != "placed":
            return "refused"
        if d.fallback_levels > 0:
            return "fallback"
        self._seen += 1
        if self._seen >= self.sample_one_in:
            self._seen = 0
            return "sampled"
        return None

    def decided(self, subject: str, d: Decision, fleet: FleetView, stimulus_id: str) -> Capture | None:
        """Record ``d`` (placed on ``fleet``, before it is committed) when it is due; the capture."""
        why = self.why(subject, d) if self.enabled else None
        if why is None:
            return None
        c = Capture(subject, why, d, fleet.snapshot(), fleet.settings, stimulus_id)
        self.captured.append(c)
        return c

    def lease(self, fleet: FleetView, stimulus_id: str) -> "Callable[[Decision], None] | None":
        """For a lease grant about to be made: the callback its first engine decision is shown to
        (None while recording is off); ``granted`` then adds the grant to that capture."""
        if not self.enabled:
            return None
        self._lease = None

        def first(d: Decision) -> None:
            self._lease = self.decided("lease", d, fleet, stimulus_id)
        return first

    def granted(self, grant: Any) -> None:
        """The lease grant (a ``LeaseGrant``) whose first decision was just captured, if it was. A
        grant is refused only when it has neither slots nor a spill target: one whose calls go to
        Ray's choice among the floor set is sampled like the rest."""
        c, self._lease = self._lease, None
        if c is not None and c.why == "refused" and (grant.slots or grant.spill):
            c.why = "sampled"
            self._seen += 1
            if self._seen < self.sample_one_in:
                self.captured.remove(c)
                return
            self._seen = 0
        if c is not None:
            c.grant = {"lease_id": grant.lease_id, "spill": grant.spill,
                       "slots": [{"node_id": s.node_id, "capacity": s.capacity} for s in grant.slots]}

    def take(self) -> list[Capture]:
        """The captures since the last take, oldest first."""
        out = list(self.captured)
        self.captured.clear()
        return out

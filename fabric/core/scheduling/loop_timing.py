"""How long the scheduler's loop takes a tick: the latest ticks' durations, kept bounded, read as
percentiles (``SchedulerApi.loop_stats``). Pure: the caller measures and hands in milliseconds."""

from __future__ import annotations

from collections import deque

TICKS_KEPT = 4096
"""The latest ticks the figures are over."""


class TickTimes:
    """The durations of the latest ``TICKS_KEPT`` ticks, and how many there were in all."""

    def __init__(self, kept: int = TICKS_KEPT) -> None:
        self.ticks = 0
        self._ms: deque[float] = deque(maxlen=kept)

    def record(self, ms: float) -> None:
        self.ticks += 1
        self._ms.append(float(ms))

    def reset(self) -> None:
        """Start the window afresh (the count of ticks goes on)."""
        self._ms.clear()

    def figures(self) -> dict[str, float | int]:
        """``tick_p50_ms``, ``tick_p99_ms``, ``tick_max_ms`` over the window (0.0 when empty),
        ``window`` (its length) and ``ticks``."""
        ms = sorted(self._ms)
        if not ms:
            return {"ticks": self.ticks, "tick_p50_ms": 0.0, "tick_p99_ms": 0.0, "tick_max_ms": 0.0, "window": 0}

        def q(f: float) -> float:
            return round(ms[min(len(ms) - 1, int(f * len(ms)))], 3)

        return {"ticks": self.ticks, "tick_p50_ms": q(0.5), "tick_p99_ms": q(0.99), "tick_max_ms": round(ms[-1], 3),
                "window": len(ms)}


__all__ = ["TICKS_KEPT", "TickTimes"]

"""The clock, injected: the core reads no system clock. Production passes ``time.time`` (or
``time.monotonic``); tests pass a ``ManualClock`` (hours of policy in milliseconds)."""

from __future__ import annotations

from typing import Callable

Clock = Callable[[], float]
"""Seconds since the epoch, now."""


class ManualClock:
    """A clock that moves only when told: ``clock()`` is the time, ``advance(s)`` moves it."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now

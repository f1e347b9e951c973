"""What happens when a job's instance dies: the runtime-failure policy (pure, clock given).

``verdict(...)`` says ``recover`` (not before a time: consecutive recoveries of one job are at
least ``min_recovery_interval_s`` apart), ``drop`` (the job ends alone) or ``break`` (it ends and
takes its bundle with it). The restart ceiling is a rate: restarts counted over a trailing hour,
at most the job's own ``max_restarts_per_hour``, else its policy's, else the flat setting. A death
marked preempted (a provider took the node back) is recovered but not counted. ``drop`` never
restarts; an invalid spec is terminal on the first time. Whether the end is ``drop`` or
``break`` is the job's ``essential`` flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

HOUR_S = 3600.0


@dataclass(frozen=True, slots=True)
class Restart:
    """One recovery a job took: when, and whether it counts against the ceiling."""

    at: float
    counted: bool = True


@dataclass(frozen=True, slots=True)
class Verdict:
    action: str
    """``recover`` | ``drop`` | ``break``."""
    reason: str
    not_before: float = 0.0
    """For ``recover``: the earliest time the next attempt may start."""
    counted: bool = True
    """For ``recover``: whether this restart counts against the ceiling."""


def restarts_last_hour(history: Iterable[Restart], now: float) -> int:
    """Counted restarts in the trailing hour before ``now``."""
    return sum(1 for r in history if r.counted and now - r.at < HOUR_S)


def ceiling(job_ceiling: int | None, policy: str, failure_settings: object) -> int:
    """The job's own ceiling, else its policy's (``<policy>_max_restarts_per_hour``), else the flat one."""
    if job_ceiling is not None:
        return job_ceiling
    per_policy = getattr(failure_settings, f"{policy}_max_restarts_per_hour", None)
    return per_policy if per_policy is not None else getattr(failure_settings, "max_restarts_per_hour", 6)


def verdict(*, policy: str, essential: bool, history: Iterable[Restart], now: float, max_per_hour: int,
            min_interval_s: float = 5.0, preempted: bool = False, invalid_spec: str | None = None,
            last_attempt: float | None = None) -> Verdict:
    """What to do with a job whose instance just died (see the module docstring)."""
    end = "break" if essential else "drop"
    if invalid_spec is not None:
        return Verdict(end, f"invalid spec: {invalid_spec}")
    if policy == "drop":
        return Verdict(end, "on_runtime_failure is 'drop'")
    history = list(history)
    if not preempted:
        done = restarts_last_hour(history, now)
        if done >= max_per_hour:
            return Verdict(end, f"restart ceiling: {done} restarts in the last hour (at most {max_per_hour})")
    last = last_attempt if last_attempt is not None else max((r.at for r in history), default=None)
    not_before = now if last is None else max(now, last + min_interval_s)
    return Verdict("recover", "preempted: recovered, not counted" if preempted else "recovering",
                   not_before=not_before, counted=not preempted)

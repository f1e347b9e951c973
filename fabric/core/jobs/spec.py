"""What a job is, as the fabric keeps it: ``JobSpec`` (pure, validated, picklable).

A class decorated with ``@adaptive.remote`` and each ``BundleJob`` of a bundle become one
``JobSpec``: its requirement (placed by the same engine as a task), its runtime-failure policy and
restart ceiling, whether losing it breaks its bundle, its template, its intra-replica rules, how
its health is checked, how long a call waits for an instance, when it starts (``start_at``) and how a
drain moves it (``drain_strategy``). The class itself and its
constructor arguments travel beside it, pickled (the scheduler never imports user code).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from fabric.core.errors import RequirementError
from fabric.core.placement import Requirement
from fabric.core.settings_moves import STRATEGIES

FAILURE_POLICIES = ("prefer_spare", "avoid_spare", "drop")
START_MODES = ("auto", "manual")
MAX_NAME = 128
MAX_RULES = 64
MAX_HOURLY_RESTARTS = 10_000
MAX_SECONDS = 86_400.0


def _name(field_name: str, value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME or not value.isprintable():
        raise RequirementError(field_name, f"must be a non-empty printable string of at most {MAX_NAME} characters", value)
    return value


def _seconds(field_name: str, value: object, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        raise RequirementError(field_name, f"must be a number of seconds in (0, {MAX_SECONDS:g}]", value)
    return float(value)


def start_at_seconds(value: object) -> float | None:
    """``start_at`` as epoch seconds: a timezone-aware ``datetime`` or a number of seconds since the epoch."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise RequirementError("start_at", "a datetime must carry its timezone (datetime.now(timezone.utc), ...)", value)
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise RequirementError("start_at", "must be a timezone-aware datetime or epoch seconds (a positive number)", value)
    return float(value)


def _names(field_name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)) or len(value) > MAX_RULES:
        raise RequirementError(field_name, f"must be a list of at most {MAX_RULES} job names", value)
    return tuple(_name(f"{field_name}[{i}]", v) for i, v in enumerate(value))


@dataclass(frozen=True)
class JobSpec:
    """One job: what the engine places and the policy that keeps it (see the module docstring)."""

    name: str
    """The job's name in its replica (a decorated class: the class's name, or ``name=``)."""
    requirement: Requirement = field(default_factory=Requirement)
    on_runtime_failure: str = "avoid_spare"
    """``prefer_spare`` | ``avoid_spare`` (re-place, spares ranked by the policy) | ``drop``."""
    max_restarts_per_hour: int | None = None
    """The job's own restart ceiling (None: its policy's in the settings, else the flat one)."""
    essential: bool = True
    """Losing it for good breaks its bundle (else it is dropped alone)."""
    template: str | None = None
    co_locate_with: tuple[str, ...] = ()
    separate_from: tuple[str, ...] = ()
    single_use: bool = False
    start_mode: str = "auto"
    """``manual``: expanded but dormant until started (``start_bundle_job``)."""
    health_period_s: float = 10.0
    """How often ``__fabric_health__`` is called when the class has one."""
    health_timeout_s: float = 10.0
    health_failures: int = 3
    """Consecutive failed or timed-out health checks that mark the instance unhealthy."""
    call_timeout_s: float = 30.0
    """How long a call made while the job has no running instance waits for one."""
    start_at: float | None = None
    """When the job starts (epoch seconds; a timezone-aware ``datetime`` is taken too). Until then it
    is ``scheduled``; placement begins its pool tier's ``placement_lead_s`` before. None, or a time
    passed: at once."""
    drain_strategy: str | None = None
    """How a drain of its node moves it (a migration strategy); None: the settings' default. A
    strategy given to the drain call itself wins."""

    def __post_init__(self) -> None:
        _name("name", self.name)
        if not isinstance(self.requirement, Requirement):
            raise RequirementError("requirement", "must be a fabric Requirement", self.requirement)
        if self.on_runtime_failure not in FAILURE_POLICIES:
            raise RequirementError("on_runtime_failure", f"must be one of {', '.join(FAILURE_POLICIES)}", self.on_runtime_failure)
        m = self.max_restarts_per_hour
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or not 0 <= m <= MAX_HOURLY_RESTARTS):
            raise RequirementError("max_restarts_per_hour", f"must be a whole number in [0, {MAX_HOURLY_RESTARTS}]", m)
        for flag in ("essential", "single_use"):
            if not isinstance(getattr(self, flag), bool):
                raise RequirementError(flag, "must be True or False", getattr(self, flag))
        if self.template is not None:
            _name("template", self.template)
        object.__setattr__(self, "co_locate_with", _names("co_locate_with", self.co_locate_with))
        object.__setattr__(self, "separate_from", _names("separate_from", self.separate_from))
        if set(self.co_locate_with) & set(self.separate_from):
            raise RequirementError("separate_from", "names a job it also co-locates with", self.separate_from)
        for rule in ("co_locate_with", "separate_from"):
            if self.name in getattr(self, rule):
                raise RequirementError(rule, "a job's rules cannot name the job itself", self.name)
        if self.single_use and not self.requirement.exclusive:
            raise RequirementError("single_use", "requires exclusive=True (a single-use job holds its node alone)", True)
        if self.start_mode not in START_MODES:
            raise RequirementError("start_mode", "must be 'auto' or 'manual'", self.start_mode)
        for name in ("health_period_s", "health_timeout_s", "call_timeout_s"):
            object.__setattr__(self, name, _seconds(name, getattr(self, name)))
        object.__setattr__(self, "start_at", start_at_seconds(self.start_at))
        if self.drain_strategy is not None and self.drain_strategy not in STRATEGIES:
            raise RequirementError("drain_strategy", f"must be one of {', '.join(STRATEGIES)} (or None)", self.drain_strategy)
        f = self.health_failures
        if isinstance(f, bool) or not isinstance(f, int) or not 1 <= f <= 1000:
            raise RequirementError("health_failures", "must be a whole number in [1, 1000]", f)

    @property
    def rule_less(self) -> bool:
        """Declares neither ``co_locate_with`` nor ``separate_from`` (``same_node_default``)."""
        return not self.co_locate_with and not self.separate_from

    def with_requirement(self, **changes: Any) -> "JobSpec":
        """The same job with its requirement changed (a backup's overrides)."""
        return replace(self, requirement=self.requirement.replace(**changes))

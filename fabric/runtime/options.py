"""What an ``@adaptive.remote`` call asks for and how it is carried out: the ``Requirement`` built
from the decorator's arguments and the ``DispatchOptions``, both checked when decorating (a typo
fails then, not at call time).

Ray's own option names are accepted for what they mean in Ray (``docs/ray-options.md`` maps every
one): ``memory`` (bytes), ``resources``, ``accelerator_type`` and ``label_selector`` join the
requirement (placement filters); ``runtime_env``, ``num_returns``, ``retry_exceptions`` and, on a
class, ``max_concurrency`` and ``max_task_retries`` travel in it to Ray as they are
(``Requirement.ray``). Ray options whose decision the fabric owns are refused with the fabric's
option named (``RAY_REFUSED``). Kept apart from ``fabric.runtime.client`` so that dispatch and jobs,
which the client imports, can import these without importing the client back.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fabric.core.errors import RequirementError
from fabric.core.placement import Requirement
from fabric.core.placement.ray_terms import ACTOR_ONLY_ARGS, RAY_REFUSED, ray_call_options, refuse_ray_option
from fabric.core.placement.requirement import MAX_AMOUNT, MAX_NAME, shown
from fabric.core.scheduling.messages import MAX_SECONDS, read_priority, read_timeout
from fabric.core.settings import FabricSettings
from fabric.runtime.session import settings_in_force

__all__ = ["ACTOR_ONLY_ARGS", "DispatchOptions", "MAX_QUEUE_TIMEOUT_S", "RAY_REFUSED", "build_dispatch_options",
           "build_requirement", "merged_options", "refuse_ray_option"]

#: Decorator arguments that build the ``Requirement``.
_REQUIREMENT_ARGS = frozenset({
    "min_tier", "floor", "fallback", "num_cpus", "memory_mib", "num_cores", "num_gpus", "gpu_model",
    "capabilities", "ports", "pool", "prefer", "exclusive", "payload_size", "when_full", "scale",
    "resources", "label_selector", "accelerator_type",
})
#: Ray's ``memory`` (bytes): the requirement's ``memory_mib`` in Ray's unit.
_MEMORY_BYTES = "memory"
#: Ray options passed to Ray as they are (``Requirement.ray``).
_RAY_CALL_ARGS = frozenset({"runtime_env", "num_returns", "retry_exceptions", "max_concurrency", "max_task_retries"})
#: Decorator arguments that say how the call is carried out.
_DISPATCH_ARGS = frozenset({"on_no_capacity", "queue_timeout_s", "max_retries", "priority", "name"})
_ALL_ARGS = _REQUIREMENT_ARGS | _DISPATCH_ARGS | _RAY_CALL_ARGS | {"operation", _MEMORY_BYTES}
#: Longest queue wait one may ask for (about 31 years): past it a number is a mistake, and an
#: int past 1e308 would overflow the float arithmetic of the deadline. The scheduler's bound
#: (``wait_for_placement``'s ``timeout_s``, read by ``fabric.core.scheduling.messages.read_timeout``).
MAX_QUEUE_TIMEOUT_S = MAX_SECONDS
#: Ray keeps a task's retry count in 32 bits.
_MAX_RETRIES = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class DispatchOptions:
    """How a call is carried out (validated when decorating)."""

    on_no_capacity: str = "queue"
    """``queue``: wait for capacity (``ray.get`` raises ``CapacityError`` after ``queue_timeout_s``);
    ``raise``: ``.remote()`` raises ``CapacityError`` at once."""
    queue_timeout_s: float | None = None
    """How long queued work waits; None: the fabric settings' ``queue_timeout_s``."""
    max_retries: int = 3
    """Times a task is placed again when its node dies (at-least-once, like Ray's retries)."""
    priority: int = 0
    """Higher runs first out of the deferred queue."""
    name: str | None = None
    """Task name shown in Ray's dashboard (default: the function's name)."""

    def __post_init__(self) -> None:
        # Types first, then ranges: comparing or converting a hostile value is what would raise.
        if not isinstance(self.on_no_capacity, str) or self.on_no_capacity not in ("queue", "raise"):
            raise RequirementError("on_no_capacity", f"must be 'queue' or 'raise', got {shown(self.on_no_capacity)}", self.on_no_capacity)
        # The queue wait and the priority go to the scheduler's wait_for_placement: read here, when
        # decorating, with the readers it reads them with on arrival (a MessageError naming the field).
        read_timeout("queue_timeout_s", self.queue_timeout_s)
        r = self.max_retries
        if isinstance(r, bool) or not isinstance(r, int) or not -1 <= r <= _MAX_RETRIES:
            raise RequirementError("max_retries", f"must be an integer from -1 (retry forever) to {_MAX_RETRIES}, got {shown(r)}", r)
        read_priority("priority", self.priority)
        n = self.name
        if n is not None and (not isinstance(n, str) or not n.strip() or len(n) > MAX_NAME):
            raise RequirementError("name", f"must be a non-empty task name of at most {MAX_NAME} characters, got {shown(n)}", n)


def build_requirement(options: dict[str, Any], settings: FabricSettings | None = None) -> Requirement:
    """The ``Requirement`` for decorator ``options`` (an ``operation`` preset plus overrides),
    checked against ``settings`` (default: those ``fabric.up`` handed to this process's session
    with the fabric, else the defaults)."""
    settings = settings if settings is not None else settings_in_force()
    for key in sorted(options):
        refuse_ray_option(key, options[key])
    unknown = sorted(set(options) - _ALL_ARGS)
    if unknown:
        raise RequirementError(unknown[0][:MAX_NAME], f"unknown argument; valid arguments: {', '.join(sorted(_ALL_ARGS))}",
                               options[unknown[0]])
    req_kwargs = {k: v for k, v in options.items() if k in _REQUIREMENT_ARGS}
    if _MEMORY_BYTES in options:
        req_kwargs["memory_mib"] = _memory_mib(options[_MEMORY_BYTES], "memory_mib" in options)
    ray = ray_call_options(**{k: v for k, v in options.items() if k in _RAY_CALL_ARGS})
    if not ray.plain:
        req_kwargs["ray"] = ray
    operation = options.get("operation")
    if operation is not None:
        if not isinstance(operation, str):
            raise RequirementError("operation", f"must be an operation name, got {shown(operation)}", operation)
        return Requirement.from_operation(operation, settings, **req_kwargs)
    if "min_tier" not in req_kwargs:
        raise RequirementError("min_tier", "say what the work needs: min_tier=... or operation=...", None)
    req = Requirement(**req_kwargs)
    return req.validate_against(settings) if settings is not None else req


def _memory_mib(value: Any, with_mib: bool) -> float:
    """Ray's ``memory`` (bytes) as MiB; refused next to ``memory_mib`` (one amount, one name)."""
    if with_mib:
        raise RequirementError("memory", "give memory (bytes, Ray's meaning) or memory_mib (MiB), not both", value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0 \
            or value > MAX_AMOUNT * (1 << 20):
        raise RequirementError("memory", f"must be a number of bytes (Ray's meaning), got {shown(value)}", value)
    return float(value) / (1 << 20)


def merged_options(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` applied as ``.options(...)`` applies them: a new preset or tier
    drops the old floor (and a new preset the old tier); ``memory`` replaces ``memory_mib`` and
    the other way round (one amount under two names)."""
    merged = dict(base)
    if "operation" in overrides or "min_tier" in overrides:
        # A new preset or tier: the old floor/fallback no longer follow from it.
        if "floor" not in overrides:
            merged.pop("floor", None)
        if "operation" in overrides and "min_tier" not in overrides:
            merged.pop("min_tier", None)
    if "memory" in overrides and "memory_mib" not in overrides:
        merged.pop("memory_mib", None)
    if "memory_mib" in overrides and "memory" not in overrides:
        merged.pop("memory", None)
    merged.update(overrides)
    return merged


def build_dispatch_options(options: dict[str, Any], base: DispatchOptions | None = None) -> DispatchOptions:
    kw = {k: v for k, v in options.items() if k in _DISPATCH_ARGS}
    return replace(base, **kw) if base is not None else DispatchOptions(**kw)

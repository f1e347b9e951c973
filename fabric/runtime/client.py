"""``@adaptive.remote``: Ray tasks that land on the best node available at call time.

    from fabric import adaptive

    @adaptive.remote(min_tier="gpu_apu")            # degrades down the tiers when nothing better is up
    def transcode(data: bytes) -> bytes: ...

    ref = transcode.remote(b"...")                  # a Ray ObjectRef; ray.get as usual

Arguments are validated when decorating (a typo fails then, not at call time). Each call asks the
scheduler for a node, then submits the task to that node itself: the result flows from the node
to the caller through Ray's object store, never through the scheduler. See ``fabric.runtime.dispatch``
for how a call is carried out.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any, Callable

from fabric.core.errors import RequirementError
from fabric.core.placement import Requirement
from fabric.core.placement.requirement import MAX_NAME, shown
from fabric.core.settings import FabricSettings
from fabric.runtime.session import settings_in_force

#: Decorator arguments that build the ``Requirement``.
_REQUIREMENT_ARGS = frozenset({
    "min_tier", "floor", "fallback", "num_cpus", "memory_mib", "num_cores", "num_gpus", "gpu_model",
    "capabilities", "ports", "pool", "prefer", "exclusive", "payload_size", "when_full", "scale",
})
#: Decorator arguments that say how the call is carried out.
_DISPATCH_ARGS = frozenset({"on_no_capacity", "queue_timeout_s", "max_retries", "priority", "name"})
_ALL_ARGS = _REQUIREMENT_ARGS | _DISPATCH_ARGS | {"operation"}
#: Longest queue wait one may ask for (about 31 years): past it a number is a mistake, and an
#: int past 1e308 would overflow the float arithmetic of the deadline.
MAX_QUEUE_TIMEOUT_S = 1e9
#: Ray keeps a task's retry count in 32 bits.
_MAX_RETRIES = (1 << 31) - 1
_INT64 = 1 << 63


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
        t = self.queue_timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or (isinstance(t, float) and math.isnan(t))
                              or not 0 < t <= MAX_QUEUE_TIMEOUT_S):
            raise RequirementError("queue_timeout_s", f"must be a positive number of seconds, at most {MAX_QUEUE_TIMEOUT_S:g}; "
                                   f"got {shown(t)}", t)
        r = self.max_retries
        if isinstance(r, bool) or not isinstance(r, int) or not -1 <= r <= _MAX_RETRIES:
            raise RequirementError("max_retries", f"must be an integer from -1 (retry forever) to {_MAX_RETRIES}, got {shown(r)}", r)
        p = self.priority
        if isinstance(p, bool) or not isinstance(p, int) or not -_INT64 <= p < _INT64:
            raise RequirementError("priority", f"must be a 64-bit integer, got {shown(p)}", p)
        n = self.name
        if n is not None and (not isinstance(n, str) or not n.strip() or len(n) > MAX_NAME):
            raise RequirementError("name", f"must be a non-empty task name of at most {MAX_NAME} characters, got {shown(n)}", n)


def build_requirement(options: dict[str, Any], settings: FabricSettings | None = None) -> Requirement:
    """The ``Requirement`` for decorator ``options`` (an ``operation`` preset plus overrides),
    checked against ``settings`` (default: those ``fabric.up`` handed to this process's session
    with the fabric, else the defaults)."""
    settings = settings if settings is not None else settings_in_force()
    unknown = sorted(set(options) - _ALL_ARGS)
    if unknown:
        raise RequirementError(unknown[0][:MAX_NAME], f"unknown argument; valid arguments: {', '.join(sorted(_ALL_ARGS))}",
                               options[unknown[0]])
    req_kwargs = {k: v for k, v in options.items() if k in _REQUIREMENT_ARGS}
    operation = options.get("operation")
    if operation is not None:
        if not isinstance(operation, str):
            raise RequirementError("operation", f"must be an operation name, got {shown(operation)}", operation)
        return Requirement.from_operation(operation, settings, **req_kwargs)
    if "min_tier" not in req_kwargs:
        raise RequirementError("min_tier", "say what the work needs: min_tier=... or operation=...", None)
    req = Requirement(**req_kwargs)
    return req.validate_against(settings) if settings is not None else req


def build_dispatch_options(options: dict[str, Any], base: DispatchOptions | None = None) -> DispatchOptions:
    kw = {k: v for k, v in options.items() if k in _DISPATCH_ARGS}
    return replace(base, **kw) if base is not None else DispatchOptions(**kw)


def _task_name(fn: Callable, dispatch: DispatchOptions) -> str:
    return dispatch.name or getattr(fn, "__qualname__", getattr(fn, "__name__", "adaptive_task"))


class AdaptiveFunction:
    """A function decorated with ``@adaptive.remote``: call ``.remote(...)`` to run it on the fabric."""

    def __init__(self, fn: Callable, options: dict[str, Any], settings: FabricSettings | None = None) -> None:
        if not callable(fn):
            raise RequirementError("function", "@adaptive.remote decorates a function", fn)
        self._fn = fn
        self._options = dict(options)
        self.requirement = build_requirement(self._options, settings)
        self.dispatch = build_dispatch_options(self._options)
        self._name = _task_name(fn, self.dispatch)
        functools.update_wrapper(self, fn)

    @property
    def function(self) -> Callable:
        """The undecorated function."""
        return self._fn

    @property
    def task_name(self) -> str:
        return self._name

    def options(self, **overrides: Any) -> "AdaptiveFunction":
        """A copy with some arguments replaced (validated now), like Ray's ``.options``."""
        merged = dict(self._options)
        if "operation" in overrides or "min_tier" in overrides:
            # A new preset or tier: the old floor/fallback no longer follow from it.
            if "floor" not in overrides:
                merged.pop("floor", None)
            if "operation" in overrides and "min_tier" not in overrides:
                merged.pop("min_tier", None)
        merged.update(overrides)
        clone = AdaptiveFunction.__new__(AdaptiveFunction)
        clone._fn = self._fn
        clone._options = merged
        clone.requirement = build_requirement(merged)
        clone.dispatch = build_dispatch_options(merged)
        clone._name = _task_name(self._fn, clone.dispatch)
        functools.update_wrapper(clone, self._fn)
        return clone

    def remote(self, *args: Any, **kwargs: Any):
        """Place the call on the live fleet and run it there; returns a Ray ``ObjectRef``."""
        return (_submit or _load_submit())(self._fn, self.requirement, self.dispatch, self._name, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any):
        raise TypeError(
            f"{self.task_name} is an adaptive remote function: call {self.task_name}.remote(...) "
            f"(or .function(...) to run it here)"
        )

    def __repr__(self) -> str:
        return f"<adaptive function {self.task_name} {self.requirement!r}>"


_submit: Callable | None = None


def _load_submit() -> Callable:
    """``fabric.runtime.dispatch.submit``, imported on the first call (it imports Ray)."""
    global _submit
    from fabric.runtime.dispatch import submit

    _submit = submit
    return submit


class _Adaptive:
    """The ``adaptive`` namespace: ``adaptive.remote`` mirrors ``ray.remote``."""

    def remote(self, *args: Any, **options: Any):
        """``@adaptive.remote(min_tier=...)`` or ``@adaptive.remote(operation=...)``; the bare form
        ``@adaptive.remote`` is refused because a task must say what it needs."""
        if args:
            if len(args) == 1 and callable(args[0]) and not options:
                raise RequirementError("min_tier", "@adaptive.remote needs arguments: min_tier=... or operation=...", None)
            raise RequirementError("arguments", "pass decorator arguments by keyword", args)
        from fabric.runtime.jobs import JOB_ARGS

        task_options = {k: v for k, v in options.items() if k not in JOB_ARGS or k == "name"}
        build_requirement(task_options)  # fail at decoration time on any bad argument
        build_dispatch_options(task_options)

        def decorate(target: Callable) -> Any:
            if isinstance(target, type):  # a class: a long-running job (fabric.runtime.jobs)
                from fabric.runtime.jobs import AdaptiveClass, job_spec, unknown_for_jobs

                unknown_for_jobs(options)
                req = build_requirement({k: v for k, v in options.items() if k not in JOB_ARGS})
                return AdaptiveClass(target, job_spec(target, req, options), options)
            job_only = sorted(set(options) & (JOB_ARGS - {"name"}))
            if job_only:
                raise RequirementError(job_only[0], "is a job argument: it applies to a decorated class, not a function",
                                       options[job_only[0]])
            return AdaptiveFunction(target, options)

        return decorate


adaptive = _Adaptive()

"""``@adaptive.remote``: Ray tasks that land on the best node available at call time.

    from fabric import adaptive

    @adaptive.remote(min_tier="gpu_apu")            # degrades down the tiers when nothing better is up
    def transcode(data: bytes) -> bytes: ...

    ref = transcode.remote(b"...")                  # a Ray ObjectRef; ray.get as usual

Arguments are validated when decorating (a typo fails then, not at call time). Each call asks the
scheduler for a node, then submits the task to that node itself: the result flows from the node
to the caller through Ray's object store, never through the scheduler. See ``fabric.runtime.dispatch``
for how a call is carried out.

For type checkers the decorator keeps what it decorates: ``transcode.remote`` takes ``transcode``'s
parameters (a ``ParamSpec``) and returns ``ray.ObjectRef[bytes]``; a decorated class gives an
``AdaptiveClass[C]`` whose ``.remote`` returns a ``JobHandle[C]``. Ray's own hints also let an
``ObjectRef`` stand for any argument; a ``ParamSpec`` cannot say that, so passing one where the function
takes a plain value needs a ``typing.cast`` (Ray resolves it at run time either way).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Generic, NoReturn, ParamSpec, Protocol, TypeVar, overload

from fabric.core.errors import RequirementError
from fabric.core.placement.ray_terms import refuse_actor_options
from fabric.core.settings import FabricSettings
from fabric.runtime.options import (  # re-exported: the decorator's arguments are checked there
    MAX_QUEUE_TIMEOUT_S, DispatchOptions, build_dispatch_options, build_requirement, merged_options,
)

if TYPE_CHECKING:
    from ray import ObjectRef

    from fabric.runtime.jobs import AdaptiveClass

__all__ = ["AdaptiveDecorator", "AdaptiveFunction", "DispatchOptions", "MAX_QUEUE_TIMEOUT_S", "adaptive",
           "build_dispatch_options", "build_requirement"]

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C")


def _task_name(fn: Callable[..., object], dispatch: DispatchOptions) -> str:
    return dispatch.name or str(getattr(fn, "__qualname__", getattr(fn, "__name__", "adaptive_task")))


class AdaptiveFunction(Generic[P, R]):
    """A function decorated with ``@adaptive.remote``: call ``.remote(...)`` to run it on the fabric.
    ``P`` and ``R`` are the function's parameters and return type, for type checkers."""

    def __init__(self, fn: Callable[P, R], options: dict[str, Any], settings: FabricSettings | None = None) -> None:
        if not callable(fn):
            raise RequirementError("function", "@adaptive.remote decorates a function", fn)
        refuse_actor_options(options)
        self._fn = fn
        self._options = dict(options)
        self.requirement = build_requirement(self._options, settings)
        self.dispatch = build_dispatch_options(self._options)
        self._name = _task_name(fn, self.dispatch)
        functools.update_wrapper(self, fn)

    @property
    def function(self) -> Callable[P, R]:
        """The undecorated function."""
        return self._fn

    @property
    def task_name(self) -> str:
        return self._name

    def options(self, **overrides: Any) -> AdaptiveFunction[P, R]:
        """A copy with some arguments replaced (validated now), like Ray's ``.options``."""
        merged = merged_options(self._options, overrides)
        refuse_actor_options(merged)
        clone: AdaptiveFunction[P, R] = AdaptiveFunction.__new__(AdaptiveFunction)
        clone._fn = self._fn
        clone._options = merged
        clone.requirement = build_requirement(merged)
        clone.dispatch = build_dispatch_options(merged)
        clone._name = _task_name(self._fn, clone.dispatch)
        functools.update_wrapper(clone, self._fn)
        return clone

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> ObjectRef[R]:
        """Place the call on the live fleet and run it there; returns a Ray ``ObjectRef`` (with
        ``num_returns=N`` > 1, a list of N, as Ray's ``.remote()`` does)."""
        ref: ObjectRef[R] = (_submit or _load_submit())(self._fn, self.requirement, self.dispatch, self._name, args,
                                                        kwargs)
        return ref

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> NoReturn:
        raise TypeError(
            f"{self.task_name} is an adaptive remote function: call {self.task_name}.remote(...) "
            f"(or .function(...) to run it here)"
        )

    def __repr__(self) -> str:
        return f"<adaptive function {self.task_name} {self.requirement!r}>"


_submit: Callable[..., Any] | None = None


def _load_submit() -> Callable[..., Any]:
    """``fabric.runtime.dispatch.submit``, imported on the first call (it imports Ray)."""
    global _submit
    from fabric.runtime.dispatch import submit

    _submit = submit
    return submit


class AdaptiveDecorator(Protocol):
    """What ``adaptive.remote(...)`` returns, as type checkers see it: a class becomes an
    ``AdaptiveClass`` of it (a long-running job), a function an ``AdaptiveFunction`` of its signature."""

    @overload  # a class is also a Callable: this one is tried first, so it wins for classes
    def __call__(self, target: type[C]) -> AdaptiveClass[C]: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(self, target: Callable[P, R]) -> AdaptiveFunction[P, R]: ...


class _Adaptive:
    """The ``adaptive`` namespace: ``adaptive.remote`` mirrors ``ray.remote``."""

    def remote(self, *args: object, **options: Any) -> AdaptiveDecorator:
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

        def decorate(target: Callable[..., Any]) -> Any:
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

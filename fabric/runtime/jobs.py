"""``@adaptive.remote`` on a class: long-running jobs the fabric places and keeps alive.

    @adaptive.remote(min_tier="gpu_vaapi", floor="cpu_ffmpeg", on_runtime_failure="prefer_spare")
    class Encoder:
        def __init__(self, channel): ...
        def encode(self, frame): ...

    job = Encoder.remote("ch1")            # a JobHandle: placed now by the engine, an actor on that node
    ray.get(job.encode.remote(frame))      # method calls as on a Ray actor handle

``Encoder.remote`` sends the class (pickled by value: the scheduler need not import the user's
module) and the constructor arguments to the scheduler, which places the job, starts its
instance and supervises it (``actors.jobs.JobRunner``). The handle calls whichever instance is
running now: it asks the scheduler where the job runs at most every ``RESOLVE_S`` and whenever the
instance it knows is gone, so it follows the job across a recovery; a call made while the job has
no running instance waits for one, at most the job's ``call_timeout_s``, then raises
``JobUnavailableError`` (at once for a job that ended). A call already in flight on an instance
that dies fails as Ray fails it (``ActorDiedError``): it never hangs. ``job.result(ref)`` reads
one call's result and turns that death into ``JobUnavailableError``.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

from fabric.core.errors import JobUnavailableError, RequirementError, SchedulerUnavailableError
from fabric.core.jobs import JobSpec, JobState
from fabric.core.scheduler_api import JobInstance
from fabric.runtime import session as sessions
from fabric.runtime.lifecycle import connected

if TYPE_CHECKING:
    from ray import ObjectRef

    from fabric.core.jobs.book import JobStatus
    from fabric.core.placement import Requirement

SUBMIT_ATTEMPTS = 3
"""Times a submit is sent (with the same job id) before the caller is told the scheduler is away."""
RESOLVE_S = 0.5
"""How long a handle uses the instance it last resolved before asking the scheduler again."""
POLL_S = 0.05

#: Decorator arguments a class takes besides the requirement's (``JobSpec`` fields).
JOB_ARGS = frozenset({"on_runtime_failure", "max_restarts_per_hour", "essential", "template", "health_period_s",
                      "health_timeout_s", "health_failures", "call_timeout_s", "single_use", "name", "start_at",
                      "drain_strategy"})


C = TypeVar("C")
"""The decorated class: a ``JobHandle[C]`` runs an instance of it."""
R = TypeVar("R")


def job_spec(cls: type, requirement: Requirement, options: dict[str, Any]) -> JobSpec:
    """The ``JobSpec`` of a decorated class (validated: a bad argument names its field)."""
    kw = {k: v for k, v in options.items() if k in JOB_ARGS and k != "name"}
    name: str = options.get("name") or cls.__name__
    return JobSpec(name=name, requirement=requirement, **kw)


class AdaptiveClass(Generic[C]):
    """A class decorated with ``@adaptive.remote``: ``.remote(*args)`` starts a job of it. Its
    constructor arguments are not typed (they travel pickled to the instance the scheduler starts)."""

    def __init__(self, cls: type[C], spec: JobSpec, options: dict[str, Any]) -> None:
        self._cls = cls
        self.spec = spec
        self._options = dict(options)
        self._blob: bytes | None = None
        self.__name__ = getattr(cls, "__name__", "job")
        self.__qualname__ = getattr(cls, "__qualname__", self.__name__)
        self.__doc__ = getattr(cls, "__doc__", None)
        self.__module__ = getattr(cls, "__module__", __name__)

    @property
    def cls(self) -> type[C]:
        """The undecorated class."""
        return self._cls

    @property
    def requirement(self) -> Requirement:
        return self.spec.requirement

    def options(self, **overrides: Any) -> AdaptiveClass[C]:
        """A copy with some arguments replaced (validated now), like Ray's ``.options``."""
        from fabric.runtime.options import build_requirement, merged_options

        merged = merged_options(self._options, overrides)
        unknown_for_jobs(merged)
        req = build_requirement({k: v for k, v in merged.items() if k not in JOB_ARGS})
        clone = AdaptiveClass(self._cls, job_spec(self._cls, req, merged), merged)
        clone._blob = self._blob
        return clone

    def class_blob(self) -> bytes:
        if self._blob is None:
            from fabric.rayio.instances import pickle_by_value

            self._blob = pickle_by_value(self._cls)
        return self._blob

    def remote(self, *args: Any, **kwargs: Any) -> JobHandle[C]:
        """Start a job of this class with these constructor arguments; returns its ``JobHandle``."""
        from ray import cloudpickle

        from fabric.rayio.driver import AnswerTimeout

        s = connected()
        args_blob = cloudpickle.dumps((args, kwargs))
        job_id = f"job-{uuid.uuid4().hex[:12]}"  # named here: a retry of an unanswered submit is the same job
        for attempt in range(SUBMIT_ATTEMPTS):
            try:
                s.api().submit_job(self.spec, self.class_blob(), args_blob, job_id)
                break
            except AnswerTimeout:
                if attempt == SUBMIT_ATTEMPTS - 1:
                    raise SchedulerUnavailableError(
                        f"{self.__name__}: the fabric's scheduler did not take job {job_id} within "
                        f"{SUBMIT_ATTEMPTS} x {s.answer_timeout_s:g} s (see `fabric status`); it may still start: "
                        f"`fabric jobs {job_id}` says", waited_s=SUBMIT_ATTEMPTS * s.answer_timeout_s, what="submit") from None
        return JobHandle(job_id, self.spec.name, self.spec.call_timeout_s)

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"{self.__name__} is an adaptive job class: start one with {self.__name__}.remote(...)")

    def __repr__(self) -> str:
        return f"<adaptive job class {self.__name__} {self.spec.requirement!r}>"


def unknown_for_jobs(options: dict[str, Any]) -> None:
    """Task-only arguments make no sense on a class: refused, naming the first."""
    for k in ("on_no_capacity", "queue_timeout_s", "max_retries", "priority"):
        if k in options:
            raise RequirementError(k, "is a task argument; a job class takes "
                                      f"{', '.join(sorted(JOB_ARGS))} besides its requirement", options[k])
    for k in ("num_returns", "retry_exceptions"):
        if k in options:
            raise RequirementError(k, "is a Ray task option; a job's methods return one value each, and a failed "
                                      "method call is not retried (a job class takes max_concurrency and max_task_retries)",
                                   options[k])


class JobMethod:
    """``job.method``: ``.remote(*args)`` calls it on the job's running instance."""

    __slots__ = ("_job", "_name")

    def __init__(self, job: JobHandle[Any], name: str) -> None:
        self._job, self._name = job, name

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef[Any]:
        """The method's ``ObjectRef``; its arguments and result are the job class's, untyped here."""
        ref: ObjectRef[Any] = getattr(self._job.instance_actor(), self._name).remote(*args, **kwargs)
        return ref

    def options(self, **options: Any) -> Any:
        return getattr(self._job.instance_actor(), self._name).options(**options)


class JobHandle(Generic[C]):
    """A job of the fabric (see the module docstring). Picklable: pass it to tasks and jobs. ``C``
    (for type checkers) is the job's class; ``FabricHandle.job_handle`` gives a ``JobHandle[Any]``."""

    def __init__(self, job_id: str, name: str = "", call_timeout_s: float = 30.0) -> None:
        self.job_id = job_id
        self.name = name
        self.call_timeout_s = call_timeout_s
        self._lock = threading.Lock()
        self._actor: Any = None
        self._key: str | None = None
        self._checked = 0.0

    def __reduce__(self) -> tuple[type[JobHandle[Any]], tuple[str, str, float]]:
        return (JobHandle, (self.job_id, self.name, self.call_timeout_s))

    def __getattr__(self, name: str) -> JobMethod:
        if name.startswith("_"):
            raise AttributeError(name)
        return JobMethod(self, name)

    def __repr__(self) -> str:
        return f"<JobHandle {self.name} {self.job_id}>"

    # -- where it runs ------------------------------------------------------------------------------
    def _where(self) -> JobInstance:
        return connected().api().job_instance(self.job_id)

    def instance_actor(self) -> Any:
        """The running instance's actor handle, waiting for one up to ``call_timeout_s``."""
        now = time.monotonic()
        with self._lock:
            if self._actor is not None and now - self._checked < RESOLVE_S:
                return self._actor
        deadline = now + self.call_timeout_s
        while True:
            info = self._where()
            if info["actor"] is not None:
                with self._lock:
                    if info["instance_key"] != self._key or self._actor is None:
                        actor = sessions.driver().get_actor(info["actor"])
                        if actor is None:  # it died a moment ago: the scheduler will know soon
                            info = {**info, "actor": None}
                        else:
                            self._actor, self._key = actor, info["instance_key"]
                    if info["actor"] is not None:
                        self._checked = time.monotonic()
                        return self._actor
            if info["terminal"]:
                raise JobUnavailableError(f"job {self.name} ({self.job_id}) is {info['state']}: {info['reason']}",
                                          job_id=self.job_id, state=info["state"])
            if time.monotonic() >= deadline:
                raise JobUnavailableError(
                    f"job {self.name} ({self.job_id}) had no running instance within {self.call_timeout_s:g} s "
                    f"(it is {info['state']}: {info['reason']})", job_id=self.job_id, state=info["state"])
            time.sleep(POLL_S)

    @property
    def state(self) -> JobState:
        return JobState(self._where()["state"])

    @property
    def node_id(self) -> str | None:
        return self._where()["node_id"]

    def status(self) -> JobStatus:
        """The job's ``JobStatus`` (state, binding, restarts in the last hour, history)."""
        return connected().api().job_status(self.job_id)

    def wait_running(self, timeout_s: float | None = None) -> JobHandle[C]:
        """Wait until the job has a running instance (``JobUnavailableError`` past the timeout)."""
        saved = self.call_timeout_s
        self.call_timeout_s = saved if timeout_s is None else timeout_s
        try:
            with self._lock:
                self._actor = None
            self.instance_actor()
        finally:
            self.call_timeout_s = saved
        return self

    def result(self, ref: ObjectRef[R], timeout_s: float | None = None) -> R:
        """``ray.get(ref)`` for a call of this job, the instance's death raised as ``JobUnavailableError``."""
        import ray

        try:
            return ray.get(ref, timeout=timeout_s)
        except ray.exceptions.RayActorError as exc:
            with self._lock:
                self._actor = None
            raise JobUnavailableError(f"job {self.name} ({self.job_id}): the instance the call ran on died: "
                                      f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                                      job_id=self.job_id, state="recovering") from exc

    def stop(self, wait: bool = True, timeout_s: float = 60.0) -> JobState:
        """Stop the job gracefully (``__fabric_stop__`` if defined, then its actor ends)."""
        state = JobState(connected().api().stop_job(self.job_id))
        deadline = time.monotonic() + timeout_s
        while wait and state != JobState.STOPPED and not _terminal(state) and time.monotonic() < deadline:
            time.sleep(POLL_S)
            state = self.state
        return state


def _terminal(state: JobState) -> bool:
    return state in (JobState.STOPPED, JobState.DROPPED, JobState.FAILED)

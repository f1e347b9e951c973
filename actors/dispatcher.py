"""DispatcherActor: carries out the calls that found no capacity at call time.

A deferred call's ObjectRef is this actor's method result: the method waits in the scheduler's
deferred queue (priority, then FIFO, retried on every capacity event), then runs the task on the
node it was given and returns its result, or raises ``CapacityError`` after the queue timeout.
Async, so thousands of queued calls cost coroutines, not worker processes. Detached, restartable,
and its method retried on restart: a crash mid-wait re-queues the call (at-least-once).

``Dispatcher`` is the logic, over the Ray seam (``fabric.rayio``: the adapter finds the scheduler
and reads what a caught Ray error means, ``fabric.rayio.tasks.launch`` submits the task);
``DispatcherActor`` is the thin Ray actor around it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from fabric.core import names
from fabric.core.errors import CapacityError
from fabric.rayio.adapter import RayAdapter
from fabric.rayio.tasks import launch

SCHEDULER_RETRY_S = 0.2
"""The wait before looking the scheduler up again after it died or restarted mid-wait."""


class Dispatcher:
    """The dispatcher's logic over a Ray seam (default: a ``RayAdapter``)."""

    def __init__(self, adapter: Any = None) -> None:
        self.adapter = adapter if adapter is not None else RayAdapter()
        self._functions: dict[str, tuple] = {}  # digest -> (function, remote cache)
        self._scheduler: Any = None

    def _sched(self) -> Any:
        if self._scheduler is None:
            handle = self.adapter.get_actor(names.SCHEDULER)
            if handle is None:
                raise ValueError(f"no actor {names.SCHEDULER!r} in namespace {names.NAMESPACE!r}: is the fabric up?")
            self._scheduler = handle
        return self._scheduler

    def function(self, digest: str, blob: bytes) -> tuple[Any, dict]:
        """The function shipped as ``blob`` (unpickled once per ``digest``) and its remote cache."""
        entry = self._functions.get(digest)
        if entry is None:
            entry = self._functions[digest] = (self.adapter.loads(blob), {})
        return entry

    async def placement(self, request_id: str, req: Any, priority: int, timeout_s: float | None) -> Any:
        """The scheduler's assignment for the deferred call, once it has one. A scheduler that died
        or restarted mid-wait is looked up again and the call queued again; its ``CapacityError``
        (the queue timed out) is raised as itself, not wrapped in Ray's error."""
        while True:
            try:
                return await self._sched().wait_for_placement.remote(request_id, req, priority, timeout_s)
            except Exception as exc:
                cause = self.adapter.remote_cause(exc)
                if isinstance(cause, CapacityError):
                    raise cause from None
                if cause is not None or not self.adapter.is_actor_gone(exc):
                    raise
                self._scheduler = None
                await asyncio.sleep(SCHEDULER_RETRY_S)

    async def run(self, request_id: str, digest: str, blob: bytes, req: Any, args: tuple, kwargs: dict, priority: int,
                  timeout_s: float | None, max_retries: int, name: str) -> Any:
        fn, cache = self.function(digest, blob)
        assignment = await self.placement(request_id, req, priority, timeout_s)
        ref = launch(fn, cache, assignment, req, args, kwargs, max_retries, name)
        return await ref


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=100_000)
class DispatcherActor:
    def __init__(self, adapter: Any = None) -> None:
        self.dispatcher = Dispatcher(adapter)

    async def run(self, request_id: str, digest: str, blob: bytes, req, args: tuple, kwargs: dict, priority: int,
                  timeout_s: float | None, max_retries: int, name: str):
        return await self.dispatcher.run(request_id, digest, blob, req, args, kwargs, priority, timeout_s, max_retries, name)

    def ping(self) -> str:
        return "ok"

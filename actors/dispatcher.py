"""DispatcherActor: carries out the calls that found no capacity at call time.

A deferred call's ObjectRef is this actor's method result: the method waits in the scheduler's
deferred queue (priority, then FIFO, retried on every capacity event), then runs the task on the
node it was given and returns its result, or raises ``CapacityError`` after the queue timeout.
Async, so thousands of queued calls cost coroutines, not worker processes. Detached, restartable,
and its method retried on restart: a crash mid-wait re-queues the call (at-least-once).
"""

from __future__ import annotations

import asyncio

import ray
from ray import cloudpickle

from fabric.core import names
from fabric.rayio.tasks import launch
from fabric.core.errors import CapacityError


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=100_000)
class DispatcherActor:
    def __init__(self) -> None:
        self._functions: dict[str, tuple] = {}  # digest -> (function, remote cache)
        self._scheduler = None

    def _sched(self):
        if self._scheduler is None:
            self._scheduler = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
        return self._scheduler

    async def run(self, request_id: str, digest: str, blob: bytes, req, args: tuple, kwargs: dict, priority: int,
                  timeout_s: float | None, max_retries: int, name: str):
        entry = self._functions.get(digest)
        if entry is None:
            entry = self._functions[digest] = (cloudpickle.loads(blob), {})
        fn, cache = entry
        while True:
            try:
                assignment = await self._sched().wait_for_placement.remote(request_id, req, priority, timeout_s)
                break
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, CapacityError):
                    raise exc.cause from None
                raise
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                # the scheduler restarted: look it up again and re-queue the call
                self._scheduler = None
                await asyncio.sleep(0.2)
        ref = launch(fn, cache, assignment, req, args, kwargs, max_retries, name)
        return await ref

    def ping(self) -> str:
        return "ok"

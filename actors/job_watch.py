"""The watch of one job instance (``JobRunner.watch``): its start checked, then one outstanding
``__fabric_watch__`` call at a time (and ``__fabric_health__`` pings when the class has the hook)
until it ends; what came of it goes to the runner's core (``InstanceStarted``, ``InstanceEnded``).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Protocol

from fabric.core.jobs import JobBook, JobSpec
from fabric.core.jobs.stimuli import InstanceStarted
from fabric.rayio.instances import died_with_its_node


class WatchHost(Protocol):
    """What a watch needs of its runner (``actors.jobs.JobRunner``)."""

    counters: collections.Counter
    launcher: Any
    """The instance launcher (``fabric.rayio.instances.InstanceLauncher``, or a test's fake)."""

    @property
    def book(self) -> JobBook: ...

    def handle(self, stimulus: Any, *, answered: bool = True) -> Any: ...

    def payload_of(self, job_id: str) -> tuple[bytes, bytes] | None: ...

    def instance_died(self, job_id: str, key: str, preempted: bool, reason: str, invalid: str | None = None,
                      node_died: bool = False) -> None: ...

WATCH_S = 30.0
"""How long one watch call waits before it returns ``alive`` and is asked again."""
START_TIMEOUT_S = 120.0
"""How long an instance may take to come up (Ray's placement and the constructor) before it is
counted as failed to start."""


async def watch_instance(runner: WatchHost, job_id: str, key: str, handle: Any, starting: bool) -> None:
    """Watch one instance until it ends; tell the core what happened."""
    if starting:
        try:
            err = await asyncio.wait_for(handle.__fabric_started__.remote(), START_TIMEOUT_S)
        except asyncio.TimeoutError:  # the cluster's trouble, not the job's: not counted against its ceiling
            runner.counters["dispatch_failed"] += 1
            runner.launcher.kill(handle)
            return runner.instance_died(job_id, key, True, f"did not come up within {START_TIMEOUT_S:g} s (not counted)")
        except Exception as exc:  # the instance died before it came up
            runner.counters["dispatch_failed"] += 1
            fate = runner.launcher.death(exc)
            return runner.instance_died(job_id, key, fate[1] if fate else False, fate[2] if fate else str(exc),
                                        node_died=died_with_its_node(exc))
        if err is not None:
            kind, message = err
            runner.launcher.kill(handle)
            return runner.instance_died(job_id, key, False, message, invalid=message if kind == "invalid_spec" else None)
        runner.handle(InstanceStarted(job_id, key), answered=False)
    rec = runner.book.jobs.get(job_id)
    spec = rec.spec if rec is not None else JobSpec("job")
    payload = runner.payload_of(job_id)
    has_health = payload is not None and runner.launcher.has_health(payload[0])
    failures = 0
    while True:
        watch = handle.__fabric_watch__.remote(min(WATCH_S, spec.health_period_s) if has_health else WATCH_S)
        try:
            answer = await watch
        except Exception as exc:
            fate = runner.launcher.death(exc)
            if fate is None:  # unavailable for a moment: look again
                await asyncio.sleep(0.5)
                continue
            return runner.instance_died(job_id, key, fate[1], fate[2], node_died=died_with_its_node(exc))
        if answer == "stopped":
            runner.launcher.kill(handle)
            return runner.instance_died(job_id, key, False, "stopped")
        if has_health:
            try:
                await asyncio.wait_for(handle.__fabric_ping__.remote(), spec.health_timeout_s)
                failures = 0
            except Exception:
                failures += 1
                if failures >= spec.health_failures:
                    runner.launcher.kill(handle)
                    return runner.instance_died(job_id, key, False, f"unhealthy: {failures} health checks failed")

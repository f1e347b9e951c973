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
    tasks: Any
    """The task core port (``actors.job_ports.TaskCorePort``): rejections and runs, per node."""
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


def node_of(runner: WatchHost, job_id: str, key: str) -> str | None:
    """The node instance ``key`` of ``job_id`` was placed on (None: no longer the job's instance)."""
    rec = runner.book.jobs.get(job_id)
    b = rec.binding if rec is not None else None
    return b.node_id if b is not None and b.instance_key == key else None


def refused_by_node(runner: WatchHost, job_id: str, key: str, reason: str) -> None:
    """The instance failed before its constructor ran, on a node that is still there: a rejection
    by that node (``TaskCorePort.start_refused``). A node that died took the instance with it: not
    a rejection, a node lost."""
    node_id = node_of(runner, job_id, key)
    if node_id is not None:
        runner.tasks.start_refused(node_id, job_id, reason)


async def watch_instance(runner: WatchHost, job_id: str, key: str, handle: Any, starting: bool) -> None:
    """Watch one instance until it ends; tell the core what happened."""
    if starting:
        try:
            err = await asyncio.wait_for(handle.__fabric_started__.remote(), START_TIMEOUT_S)
        except asyncio.TimeoutError:  # the cluster's trouble, not the job's: not counted against its ceiling
            runner.counters["dispatch_failed"] += 1
            runner.launcher.kill(handle)
            why = f"did not come up within {START_TIMEOUT_S:g} s (not counted)"
            refused_by_node(runner, job_id, key, why)
            return runner.instance_died(job_id, key, True, why)
        except Exception as exc:  # the instance died before it came up
            runner.counters["dispatch_failed"] += 1
            fate = runner.launcher.death(exc)
            why, node_died = fate[2] if fate else str(exc), died_with_its_node(exc)
            if not node_died:
                refused_by_node(runner, job_id, key, why)
            return runner.instance_died(job_id, key, fate[1] if fate else False, why, node_died=node_died)
        if err is not None:  # its constructor ran and failed (or found its arguments invalid): the job's fault, not the node's
            kind, message = err
            runner.launcher.kill(handle)
            return runner.instance_died(job_id, key, False, message, invalid=message if kind == "invalid_spec" else None)
        node_id = node_of(runner, job_id, key)
        runner.handle(InstanceStarted(job_id, key), answered=False)
        if node_id is not None:
            runner.tasks.ran_on(node_id)
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

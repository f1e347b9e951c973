"""The fakes the job state machine (``test_jobs_state_machine``) runs the real scheduler over: Ray's
actors (their calls answered by the machine), the instance launcher, Ray's drain call, the fleet feed,
an executor that holds calls until a rule lands them, and the ``stimulus`` rule wrapper."""


from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import io
import itertools
import os
import shutil
import tempfile
import traceback
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from actors.fleet_feed import FleetChange
from actors.jobs import JobRunner
from actors.scheduler import Scheduler
from fabric.core.errors import MigrationError, TransitionError
from fabric.core.jobs import JobSpec, JobState
from fabric.core.jobs.drains import INTERRUPTION_KINDS
from fabric.core.jobs.migration import MigrationStrategy
from fabric.core.placement import Requirement
from fabric.core.placement import decision as placement_decision
from fabric.core.placement import walk as placement_walk
from fabric.rayio.metrics import RecordingMetrics
from fabric.store.jobs import JobStore
from test_scheduler_actor import FakeFeed, joined
from test_scheduling import Clock


# -- the fakes: Ray's actors, its launcher and its drain call ------------------------------------------
class Died(Exception):
    """Ray's ``RayActorError``: the actor is gone (killed, its node lost, its process dead)."""


class HookFailed(Exception):
    """Ray's ``RayTaskError``: the user's hook raised."""


ANSWERED_HOOKS = ("__fabric_started__", "__fabric_shutdown__", "__fabric_begin__", "__fabric_ready__",
                  "__fabric_cut__", "__fabric_resume__")
"""The hooks the machine answers (``__fabric_watch__`` ends with the instance; no class has a health hook)."""


def _resolve(fut: asyncio.Future, outcome: Any) -> None:
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
        fut.exception()  # a reply nobody reads is not logged as never retrieved
    else:
        fut.set_result(outcome)


class Method:
    """One actor method: ``remote()`` returns a future on the calling scheduler's loop."""

    def __init__(self, inst: "Actor", name: str) -> None:
        self.inst, self.name = inst, name
        self.pending: list[asyncio.Future] = []

    def remote(self, *args: Any) -> asyncio.Future:
        inst = self.inst
        fut = asyncio.get_running_loop().create_future()
        if self.name == "__fabric_begin__" and not inst.dead:
            inst.begun = True  # the deferred constructor runs from now on
        if inst.dead:
            _resolve(fut, Died(f"the actor {inst.key} is dead"))
        elif self.name == "__fabric_watch__" and inst.stopped:
            fut.set_result("stopped")
        elif self.name in inst.answers:  # the hooks answer a second call as they did the first
            _resolve(fut, inst.answers[self.name])
        else:
            self.pending.append(fut)
        return fut

    def waiting(self, loop: asyncio.AbstractEventLoop) -> list[asyncio.Future]:
        """The calls in flight from the scheduler on ``loop`` (a dead scheduler's replies reach nobody)."""
        return [f for f in self.pending if not f.done() and f.get_loop() is loop]


class Actor:
    """One job instance (a named, detached Ray actor): it outlives the scheduler that made it."""

    def __init__(self, job_id: str, key: str, node_id: str, deferred: bool) -> None:
        self.job_id, self.key, self.node_id, self.deferred = job_id, key, node_id, deferred
        self.dead = self.stopped = self.begun = False
        self.answers: dict[str, Any] = {}
        self.methods = {name: Method(self, name) for name in (*ANSWERED_HOOKS, "__fabric_watch__", "__fabric_ping__")}

    def __getattr__(self, name: str) -> Method:
        methods = self.__dict__.get("methods", {})
        if name in methods:
            return methods[name]
        raise AttributeError(name)

    @property
    def running_user_code(self) -> bool:
        """Alive, and its user's constructor ran (a deferred target's runs at ``__fabric_begin__``)."""
        return not self.dead and (not self.deferred or self.begun)

    def answer(self, hook: str, outcome: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.answers.setdefault(hook, outcome)
        for fut in self.methods[hook].waiting(loop):
            _resolve(fut, self.answers[hook])
        if hook == "__fabric_shutdown__":  # its stop event is set (in a finally: even when the hook raised)
            self.stopped = True
            for fut in self.methods["__fabric_watch__"].waiting(loop):
                fut.set_result("stopped")

    def die(self, why: str, loop: asyncio.AbstractEventLoop) -> None:
        self.dead = True
        for method in self.methods.values():
            for fut in method.waiting(loop):
                _resolve(fut, Died(f"the actor {self.key} died: {why}"))

    def forget_calls_of_dead_loops(self, loop: asyncio.AbstractEventLoop) -> None:
        for method in self.methods.values():
            method.pending = [f for f in method.pending if f.get_loop() is loop and not f.done()]


class Hooked:
    """The user's class as the launcher 'loads' it: it has the handover hooks."""

    def __fabric_ready__(self): ...

    def __fabric_cut__(self, payload): ...

    def __fabric_resume__(self, position): ...


class Launcher:
    """``fabric.rayio.instances.InstanceLauncher`` over fake actors. A name is taken while its actor
    lives (Ray refuses a second one); an actor pinned to a node that is gone never runs."""

    def __init__(self) -> None:
        self.started: list[Actor] = []
        self.live: dict[tuple[str, str], Actor] = {}
        self.down: set[str] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        """The live scheduler's loop (its calls in flight are the ones that get answers)."""

    def start(self, job_id: str, key: str, node_id: str, cls_blob: bytes, args_blob: bytes, req: Any,
              gpus: float = 0.0, *, deferred: bool = False, handover_target: bool = False) -> Actor:
        if (job_id, key) in self.live:
            raise ValueError(f"the actor name {job_id}.{key} is taken")
        inst = Actor(job_id, key, node_id, deferred)
        self.started.append(inst)
        if node_id in self.down:
            inst.dead = True  # hard node affinity to a node that left: it dies unscheduled
        else:
            self.live[(job_id, key)] = inst
        return inst

    def find(self, job_id: str, key: str) -> Actor | None:
        return self.live.get((job_id, key))

    def instances(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for job_id, key in self.live:
            out.setdefault(job_id, []).append(key)
        return out

    def kill(self, handle: Actor) -> None:
        self.crash(handle, "killed")

    def crash(self, inst: Actor, why: str) -> None:
        if self.live.get((inst.job_id, inst.key)) is inst:
            del self.live[(inst.job_id, inst.key)]
        if not inst.dead:
            assert self.loop is not None
            inst.die(why, self.loop)

    def node_down(self, node_id: str) -> None:
        self.down.add(node_id)
        for inst in [i for i in self.live.values() if i.node_id == node_id]:
            self.crash(inst, f"its node {node_id} was lost")

    def has_health(self, cls_blob: bytes) -> bool:
        return False

    def loaded(self, cls_blob: bytes) -> tuple[type, Any]:
        return Hooked, None

    _loaded = loaded

    @staticmethod
    def death(exc: BaseException) -> tuple[bool, bool, str] | None:
        return True, False, f"{type(exc).__name__}: {exc}"


class FakeRay:
    """The Ray seam a drain asks at its end (``ray_adapter()``): no health actor; Ray's answer is
    the machine's choice."""

    def __init__(self) -> None:
        self.accepts = True
        self.drained: set[str] = set()

    def get_actor(self, name: str) -> None:
        return None

    def drain_node(self, node_id: str, reason: str, message: str, deadline: Any) -> tuple[bool, str]:
        if not self.accepts:
            return False, "refused: the fake says no"
        self.drained.add(node_id)
        return True, ""


class RayFeed(FakeFeed):
    def __init__(self, ray: FakeRay, *batches: Any) -> None:
        super().__init__(*batches)
        self.adapter = ray


class HeldExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's executor: what the runner hands off the loop (a launch, Ray's drain) waits here
    until ``land`` runs it. No thread is started."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.held: list[tuple[functools.partial[Any], concurrent.futures.Future]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self.held.append((functools.partial(fn, *args, **kwargs), fut))
        return fut

    def land(self) -> int:
        held, self.held = self.held, []
        for call, fut in held:
            try:
                fut.set_result(call())
            except Exception as exc:
                fut.set_exception(exc)
        return len(held)

    def launches(self) -> set[tuple[str, str]]:
        """The ``(job id, instance key)`` of the launches held."""
        out = set()
        for call, _ in self.held:  # a partial of the runner's partial is flattened: launcher.start, its arguments
            if getattr(call.func, "__name__", "") == "start":
                out.add((call.args[0], call.args[1]))
        return out


def stimulus(fn: Callable[..., None]) -> Callable[..., None]:
    """A rule: its product calls run with stdout caught (the runner prints what fails in its tasks and
    callbacks: each such line is a problem), then the loop runs until nothing is ready."""

    @functools.wraps(fn)
    def wrapped(self: "JobsMachine", *args: Any, **kwargs: Any) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            fn(self, *args, **kwargs)
            self._settle()
        self.problems += [f"printed: {line}" for line in out.getvalue().splitlines() if line.startswith("[fabric.")]

    return wrapped

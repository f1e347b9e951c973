"""The ports the job side's executor (``actors.jobs.JobRunner``) works through.

The jobs core decides; its executor carries the decisions out through these typed ports and holds
no reference to the scheduler actor itself:

- ``TaskCorePort``: the task core, as far as long-running work uses it — place an instance (the
  same engine, filters and key as a task), reserve a pinned slot again after a restart, give slots
  back, cordon a node, end a single-use job's node, read the fleet; ``SchedulerTaskCore`` is it over
  the scheduler actor's core.
- ``RayDrainPort``: Ray's drain of a node (``SchedulerRayDrain``: the probe actor leaves first for an
  idle termination, which Ray refuses while any actor runs there).
- ``CoreWorld``: what the pure jobs core reads (``fabric.core.jobs.state.JobsWorld``), over the task
  core port and the job classes' hooks.

The instance launcher (``fabric.rayio.instances``), the job store (``fabric.store.jobs``) and the
event log (``JobRunner.emit``) are the other ports; the provisioner is the scheduler's, reached by
the task core's own instructions.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable, Protocol

from fabric.core.jobs.drains import AskRayToDrain
from fabric.core.names import HEALTH
from fabric.core.placement import FleetView, NodeRecord, PlacementContext, Requirement, dry_run
from fabric.core.scheduling import Cordoned, DrainRequested, PlaceRequested, SlotsReleased, reply
from fabric.core.settings import FabricSettings
from fabric.core.tiers import ComputeTier

SINGLE_USE_REASON = "single-use job ended"
"""Why a single-use job's node is terminated (the provider's ``node_terminated`` note says it)."""
IDLE_RETRIES = 10
"""Tries of Ray's idle termination while the probe's worker is still going away (0.5 s apart)."""


class TaskCorePort(Protocol):
    """The task core as the job side uses it (see the module docstring)."""

    @property
    def settings(self) -> FabricSettings: ...

    @property
    def fleet(self) -> FleetView: ...

    def place(self, requirement: Requirement, ctx: PlacementContext) -> Any:
        """An assignment (``NodeAssignment``) or None; what the placement opened (a provision, queued
        calls it placed) is carried out. Raises the task core's refusal."""

    def decided(self, job_id: str, seq: int) -> None:
        """The job's placement is event ``seq`` (``placement_decision``): its decision is kept under it."""

    def reserve(self, requirement: Requirement, ctx: PlacementContext) -> Any:
        """A pinned placement (``ctx.target_node``) whose instance already runs: the assignment, or None."""

    def release(self, allocation_id: int) -> None: ...

    def cordon(self, node_id: str, timeout_s: float | None) -> "asyncio.Task[Any] | None":
        """Cordon the node: with ``timeout_s`` the task core's drain (running tasks finish), without a
        plain cordon. The registry write, for a caller that answers once it is in."""

    def handed_off(self, node_id: str) -> bool:
        """Whether the task core is done with a draining node: its part of the drain (running tasks
        finish, the node is marked draining in the registry) is not in progress and no call runs there."""

    def end_node(self, node_id: str) -> bool:
        """A single-use job on ``node_id`` ended for good: have the provider that made the node end
        it (cordoned first, so nothing lands there meanwhile). Whether a termination was started:
        False for a node no provider made (joined by hand) or one the fleet no longer holds."""

    def resolve_node(self, node: str) -> str: ...

    def check_requirement(self, requirement: Requirement) -> Requirement: ...

    def start_refused(self, node_id: str, job_id: str, reason: str) -> None:
        """An instance placed on ``node_id`` failed before its constructor ran, for the node's sake
        (its worker died at start, its runtime environment could not be set up, it never came up):
        a rejection that counts toward marking the node unhealthy."""

    def ran_on(self, node_id: str) -> None:
        """A job reached running on ``node_id``: the node's rejections are forgotten."""


class RayDrainPort(Protocol):
    async def drain(self, ask: AskRayToDrain) -> tuple[bool, str]:
        """Ray's answer to draining the node: accepted, and its message."""


class SchedulerTaskCore:
    """``TaskCorePort`` over a scheduler actor (``actors.scheduler.Scheduler``): its core and the
    carrying out of what its core answers (``handle_stimulus``)."""

    def __init__(self, scheduler: Any) -> None:
        self._scheduler = scheduler

    @property
    def settings(self) -> FabricSettings:
        settings: FabricSettings = self._scheduler.settings
        return settings

    @property
    def fleet(self) -> FleetView:
        fleet: FleetView = self._scheduler.core.fleet
        return fleet

    def place(self, requirement: Requirement, ctx: PlacementContext) -> Any:
        s = PlaceRequested(requirement, ctx)
        out, _ = self._scheduler.handle_stimulus(s)
        return reply(out, s.stimulus_id)

    def decided(self, job_id: str, seq: int) -> None:
        self._scheduler.decisions.job_placed(job_id, seq)

    def reserve(self, requirement: Requirement, ctx: PlacementContext) -> Any:
        s = PlaceRequested(requirement, ctx)
        return reply(self._scheduler.core.handle(s), s.stimulus_id)

    def release(self, allocation_id: int) -> None:
        self._scheduler.handle_stimulus(SlotsReleased((allocation_id,)))

    def cordon(self, node_id: str, timeout_s: float | None) -> "asyncio.Task[Any] | None":
        s = Cordoned(node_id) if timeout_s is None else DrainRequested(node_id, timeout_s)
        _, writes = self._scheduler.handle_stimulus(s)
        return writes if timeout_s is not None else None

    def handed_off(self, node_id: str) -> bool:
        core = self._scheduler.core  # no tasks part in progress and no call running there (a part not yet started counts)
        return node_id not in core.drains and core.ledger.running_on(node_id) == 0

    def end_node(self, node_id: str) -> bool:
        rec = self.fleet.get(node_id)
        if rec is None or not rec.provider or not rec.instance_id:
            return False
        self.cordon(node_id, None)
        ending = self._scheduler.terminate_instance(rec.provider, rec.instance_id, SINGLE_USE_REASON, node_id)
        asyncio.get_event_loop().create_task(ending).add_done_callback(
            functools.partial(say_if_failed, what=f"terminating node {node_id[:12]} ({rec.provider}/{rec.instance_id})"))
        return True

    def resolve_node(self, node: str) -> str:
        node_id: str = self._scheduler.core.resolve_node(node)
        return node_id

    def check_requirement(self, requirement: Requirement) -> Requirement:
        checked: Requirement = self._scheduler.core.check_requirement(requirement)
        return checked

    def start_refused(self, node_id: str, job_id: str, reason: str) -> None:
        self._scheduler.strikes.rejected(node_id, job_id, reason)

    def ran_on(self, node_id: str) -> None:
        self._scheduler.strikes.ran(node_id)


class SchedulerRayDrain:
    """``RayDrainPort`` through the scheduler's Ray seam (its fleet feed's adapter)."""

    def __init__(self, scheduler: Any) -> None:
        self._scheduler = scheduler

    async def drain(self, ask: AskRayToDrain) -> tuple[bool, str]:
        adapter = self._scheduler.ray_adapter()
        loop = asyncio.get_event_loop()
        accepted, message = False, "no Ray seam"
        try:
            if ask.reason == "IDLE_TERMINATION":  # Ray counts the probe actor as work: it leaves first
                health = adapter.get_actor(HEALTH)
                if health is not None:
                    await health.release_node.remote(ask.node_id)
            for _ in range(IDLE_RETRIES if ask.reason == "IDLE_TERMINATION" else 1):
                accepted, message = await loop.run_in_executor(None, adapter.drain_node, ask.node_id, ask.reason,
                                                               ask.message, ask.deadline)
                if accepted or "no longer idle" not in message:
                    break
                await asyncio.sleep(0.5)
        except Exception as exc:
            accepted, message = False, f"{type(exc).__name__}: {exc}"
        return accepted, message


class CoreWorld:
    """What the pure jobs core reads (``JobsWorld``): the task core's fleet, whether it handed a
    drained node off, a dry run, a job class's handover hooks."""

    def __init__(self, tasks: TaskCorePort, can_hand_over: Callable[[str], bool]) -> None:
        self.tasks = tasks
        self._can_hand_over = can_hand_over

    def record(self, node_id: str) -> NodeRecord | None:
        return self.tasks.fleet.get(node_id)

    def handed_off(self, node_id: str) -> bool:
        return self.tasks.handed_off(node_id)

    def better_node(self, requirement: Requirement, ctx: PlacementContext) -> tuple[str, ComputeTier] | None:
        d = dry_run(self.tasks.fleet, self.tasks.check_requirement(requirement), ctx)
        tier = d.node_tier or d.tier
        return None if d.status != "placed" or d.node_id is None or tier is None else (d.node_id, tier)

    def can_hand_over(self, job_id: str) -> bool:
        return self._can_hand_over(job_id)


def say_if_failed(task: "asyncio.Task[Any]", what: str, who: str = "fabric.jobs") -> None:
    """Log a background task's failure (nobody awaits it): ``[who] what failed: the error``."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        print(f"[{who}] {what} failed: {type(exc).__name__}: {exc}")


__all__ = ["CoreWorld", "RayDrainPort", "SchedulerRayDrain", "SchedulerTaskCore", "SINGLE_USE_REASON", "TaskCorePort", "say_if_failed"]

"""The jobs core's state, and the executor's instructions that are not one book's own.

``JobsState`` holds every book the jobs core composes: the job book (jobs and bundles), the
migration book (sagas), the node drains, the reclaim notices, and what rebalancing and the sagas
remember between stimuli. ``JobsCore`` (``fabric.core.jobs.core``) is this state plus the one way
in, ``handle``; the handlers of sagas (``fabric.core.jobs.sagas``) and of node moves
(``fabric.core.jobs.node_moves``) work on it.

``JobsWorld`` is what the core reads of the world and never writes: the fleet's records (the
task core's), whether the task core has handed a drained node off (its running tasks ended), a
dry run of a placement, and whether a job's class has the handover hooks. Everything the core
wants done comes back as instructions, carried out by ``actors.jobs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from fabric.core.jobs.book import JobBook, JobEvent
from fabric.core.jobs.drains import AskRayToDrain, NodeDrains, NodeInterruptionState
from fabric.core.jobs.fence import Leases
from fabric.core.jobs.migration import MigrationBook
from fabric.core.placement import NodeRecord, PlacementContext, Requirement
from fabric.core.settings import FabricSettings
from fabric.core.settings_fence import FenceSettings
from fabric.core.tiers import ComputeTier

MIGRATION_DEADLINES = ("place_s", "prepare_s", "ready_s", "cut_s", "resume_s", "stop_source_s", "start_target_s")


class JobsWorld(Protocol):
    """What the jobs core reads and never writes (``actors.jobs`` gives the task core's)."""

    def record(self, node_id: str) -> NodeRecord | None:
        """The fleet's record of the node; None for a node the fleet does not hold."""

    def handed_off(self, node_id: str) -> bool:
        """Whether the task core is done with a draining node: its part of the drain (running tasks
        finish, the node is marked draining in the registry) is not in progress and no call runs there."""

    def better_node(self, requirement: Requirement, ctx: PlacementContext) -> tuple[str, ComputeTier] | None:
        """Where a dry run would place ``requirement`` now, and that node's tier (None: nowhere)."""

    def can_hand_over(self, job_id: str) -> bool:
        """Whether the job's class has the handover hooks."""


# -- instructions of the executor ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class WatchInstance:
    """Watch this live instance until it ends (found again after a restart, or a saga's target that
    now carries the job: ``migration_id`` names the saga whose handle it is)."""

    job_id: str
    instance_key: str
    starting: bool = False
    migration_id: str | None = None
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class WatchTarget:
    """After a restart: find the saga's target by name and watch it until the saga ends."""

    migration_id: str
    job_id: str
    instance_key: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class KillInstance:
    """Kill the instance now (an eviction, a forced drain's timeout, a stray after a restart); its
    death reaches nobody's recovery (the core already decided what follows)."""

    job_id: str
    instance_key: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class ReserveSlot:
    """A pinned placement on ``node_id`` for the job (a live instance or a saga's target found again
    after a restart); answered with ``SlotReserved``."""

    job_id: str
    node_id: str
    migration_id: str | None = None
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Cordon:
    """Cordon the node in the task core: with ``timeout_s`` a drain (running tasks finish), without
    a plain cordon (an eviction)."""

    node_id: str
    timeout_s: float | None = None
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class PlaceSoon:
    """Place what is due right after this step (``PlacementsDue``), not at the next tick."""

    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class SagaEnded:
    """The saga ended: the executor lets go of its handles and refs."""

    migration_id: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class StorePayload:
    """Keep the job's class and arguments (a bundle's job by ``(replica, name)``) in the store."""

    job_id: str
    replica: int
    name: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class DropPayload:
    job_id: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Reply:
    """The stimulus's answer to its caller, or the error it fails with (after its changes stand)."""

    value: Any = None
    error: Exception | None = None
    stimulus_id: str = field(default="", compare=False, kw_only=True)


class JobsState:
    """Every book of the jobs core and what it remembers between stimuli (see the module docstring).
    ``clock`` is wall time, injected (restart histories and deadlines outlive a process)."""

    def __init__(self, settings: FabricSettings, world: JobsWorld, clock: Callable[[], float],
                 tokens: Callable[[], str]) -> None:
        self.settings = settings
        self.world = world
        self.clock = clock
        self.tokens = tokens
        """Fresh tokens for saga ids and instance keys (injected: the core draws no randomness)."""
        self.book = JobBook(settings.failure, settings)
        self.book.interruptible = self.interruptible
        moves = getattr(settings, "migration", None)
        self.migrations = MigrationBook({k: getattr(moves, k) for k in MIGRATION_DEADLINES if hasattr(moves, k)})
        self.default_strategy = str(getattr(moves, "default_strategy", "stop_then_start"))
        self.drains = NodeDrains()
        self.notices: dict[str, NodeInterruptionState] = {}
        """Per node: the reclaim notice in force."""
        self.preempting: set[str] = set()
        """Nodes under a reclaim notice: what dies with them is not counted against a ceiling."""
        self.ignored: set[str] = set()
        """Instance keys stopped on purpose: their deaths are nobody's recovery."""
        self.last_moved: dict[str, float] = {}
        """Per job: when its last migration completed (the rebalance cool-down)."""
        self.rebalancing: dict[str, str] = {}
        """Job id -> migration id of the rebalance moves in flight."""
        self.rebalance_after: float | None = None
        self.retry_at: dict[tuple[str, str], float] = {}
        """Per (node, job) of a drain: when a job that could not move is tried again."""
        self.asks: dict[str, AskRayToDrain] = {}
        """Per node: Ray's drain, asked once the task core has handed the node off."""
        self.dirty_sagas: set[str] = set()
        """Sagas changed since the store last wrote them."""
        self.stale_sagas: list[str] = []
        """Finished sagas no longer kept: their rows go with the next write."""
        self.resumed = False
        """Whether the state read back was resumed (``Restarted``); nothing is placed before."""
        self.leases = Leases(getattr(settings, "fence", None) or FenceSettings())
        """The instances' leases (``fabric.core.jobs.fence``)."""
        self.book.lease_ends = self.leases.ends

    # -- reads of the world ---------------------------------------------------------------------------
    def where(self, node_id: str) -> tuple[str | None, str | None] | None:
        rec = self.world.record(node_id)
        return None if rec is None else (rec.zone, rec.cloud)

    def interruptible(self, node_id: str) -> bool:
        """A node of a pool tier whose capacity may be taken back (``launch_mode: spot``)."""
        rec = self.world.record(node_id)
        if rec is None:
            return False
        try:
            tiers = self.settings.pool(rec.pool).tiers
        except KeyError:
            return False
        tier = next((t for t in tiers if t.name == rec.pool_tier), None)
        return tier is not None and tier.effective_reliability == "interruptible"


def event(kind: str, data: dict[str, object]) -> JobEvent:
    """One event of the fabric's log (numbered and timed by the executor)."""
    return JobEvent(kind, dict(data))


__all__ = ["Cordon", "DropPayload", "JobsState", "JobsWorld", "KillInstance", "MIGRATION_DEADLINES", "PlaceSoon",
           "Reply", "ReserveSlot", "SagaEnded", "StorePayload", "WatchInstance", "WatchTarget", "event"]

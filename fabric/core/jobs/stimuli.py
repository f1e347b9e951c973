"""What the jobs core reacts to: every request and every fact about long-running work is one small
frozen stimulus, handed to ``JobsCore.handle`` (``fabric.core.jobs.core``).

Three kinds arrive:

- **requests** from the scheduler's endpoints, arguments already read: submit, stop, migrate,
  abort, drain, reclaim notice, evict, withdraw, bundle changes;
- **facts** the fleet reports: a node lost, capacity joined, the clock's tick, a restart with what
  was found alive by name;
- **answers** to what the executor was asked to do: a job placed (or not), an instance started or
  ended, a saga's step answered, Ray's answer to a drain, a slot reserved again.

Each carries a ``stimulus_id`` (fresh when not given); every instruction the core answers with
carries the id of the stimulus that caused it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fabric.core.jobs.bundles import Bundle
from fabric.core.jobs.spec import JobSpec
from fabric.core.scheduling.stimuli import Stimulus


# -- jobs -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobSubmitted(Stimulus):
    """A new job (or a caller's retry of one: the same id and spec answer the same job)."""

    job_id: str
    spec: JobSpec
    bundle_id: str | None = None
    replica: int = 0
    dormant: bool = False


@dataclass(frozen=True)
class StopRequested(Stimulus):
    job_id: str
    reason: str = "stopped by request"


@dataclass(frozen=True)
class JobPlaced(Stimulus):
    """The task core placed the job (``PlaceJob``): its node, slot and a fresh instance key."""

    job_id: str
    node_id: str
    allocation_id: int | None
    instance_key: str


@dataclass(frozen=True)
class JobUnplaced(Stimulus):
    job_id: str
    reason: str


@dataclass(frozen=True)
class InstanceStarted(Stimulus):
    """The instance's constructor returned."""

    job_id: str
    instance_key: str


@dataclass(frozen=True)
class InstanceEnded(Stimulus):
    """The instance is gone: died, killed, stopped, failed to start. ``preempted``: its node was
    taken back (not counted against the job's ceiling); ``invalid``: the job's spec cannot run."""

    job_id: str
    instance_key: str
    reason: str
    preempted: bool = False
    invalid: str | None = None
    node_died: bool = False
    """Ray reported it dead because its node died: that side may be cut off and still run it, so
    its replacement waits for its lease to end (``fabric.core.jobs.fence``)."""


@dataclass(frozen=True)
class LeaseAsked(Stimulus):
    """An instance asks to renew its lease (answered ``granted`` or ``refused``)."""

    job_id: str
    instance_key: str


@dataclass(frozen=True)
class DormantSet(Stimulus):
    """A bundle job's manual start (``dormant`` False) or stop for future placements (True)."""

    bundle_id: str
    replica: int
    job: str
    dormant: bool


# -- bundles --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BundleCreated(Stimulus):
    """A validated bundle, expanded: ``jobs`` is ``(job id, spec, replica, dormant)`` per job."""

    bundle: Bundle
    jobs: tuple[tuple[str, JobSpec, int, bool], ...]


@dataclass(frozen=True)
class BundleUpdated(Stimulus):
    """A validated new version of a bundle: ``wanted`` is ``(replica, name, spec, manual, new id)``
    per job it names (the new id is used when the job is added or starts again)."""

    bundle: Bundle
    wanted: tuple[tuple[int, str, JobSpec, bool, str], ...]


@dataclass(frozen=True)
class BundleDeleted(Stimulus):
    bundle_id: str


# -- migrations ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MigrateRequested(Stimulus):
    """Move a running job. ``strategy`` None: the settings' default. ``target_node`` is resolved."""

    job_id: str
    strategy: str | None = None
    target_node: str | None = None
    override_reservation: bool = False
    reason: str = "requested"


@dataclass(frozen=True)
class AbortRequested(Stimulus):
    migration_id: str
    reason: str = ""


SagaAnswer = Literal["placed", "unplaced", "prepared", "ready", "cut", "cut_failed", "resumed", "began",
                     "target_failed", "source_stopped", "source_ended"]


@dataclass(frozen=True)
class SagaStepAnswered(Stimulus):
    """What came of one step of a saga (``fabric.core.jobs.migration``'s instructions): ``answer``
    names it; a placement gives the target's node, slot and key; a failure its ``reason``."""

    migration_id: str
    answer: SagaAnswer
    reason: str = ""
    node_id: str | None = None
    allocation_id: int | None = None
    instance_key: str | None = None
    confirmed: bool = True
    """``source_stopped``: the source answered its shutdown (it ends its own process on its node).
    False when only a kill was sent, which a node cut off never hears: the saga's next step waits for
    the source's lease to end (``fabric.core.jobs.fence``)."""


@dataclass(frozen=True)
class Closing(Stimulus):
    """``fabric down``: every saga rolls back (before its point of no return) or is marked lost."""


# -- nodes ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DrainJobsRequested(Stimulus):
    """Drain a node's jobs (resolved id); ``interruption`` a provider's notice kind, with its deadline."""

    node_id: str
    timeout_s: float | None = None
    force: bool = False
    strategy: str | None = None
    interruption: str | None = None
    deadline: float | None = None


@dataclass(frozen=True)
class EvictRequested(Stimulus):
    node_id: str


@dataclass(frozen=True)
class WithdrawRequested(Stimulus):
    """An uncordon: the node's drain and notice are withdrawn."""

    node_id: str


@dataclass(frozen=True)
class RayDrainAnswered(Stimulus):
    node_id: str
    accepted: bool
    message: str
    reason: str = "IDLE_TERMINATION"
    """What Ray was asked (``IDLE_TERMINATION`` or ``PREEMPTION``)."""


@dataclass(frozen=True)
class JobsNodeLost(Stimulus):
    node_id: str


@dataclass(frozen=True)
class CapacityJoined(Stimulus):
    """A node joined: waiting jobs are tried at once, and rebalancing looks after it settles."""

    provisioned_for: tuple[tuple[str, str], ...] = ()
    """``(job id, node id)`` of each node that joined for a provision a job's placement opened: the
    job's restart history is cleared."""


@dataclass(frozen=True)
class PlacementsDue(Stimulus):
    """Place what is due now (right after a step that freed or queued something)."""


@dataclass(frozen=True)
class DrainsFollowed(Stimulus):
    """Right after a drain started: each job's place follows its saga's first step (placed or not)."""


@dataclass(frozen=True)
class JobsTick(Stimulus):
    """The scheduler's tick: deadlines, drains, rebalance, and placements that are due."""


@dataclass(frozen=True)
class Restarted(Stimulus):
    """A restarted scheduler read the state back and looked every instance up by name: ``alive``
    holds ``(job id, instance key)`` of each one found (``listed``: whether the whole listing was
    read, so instances bound to nothing may be swept); ``head_nodes``: the ids of Ray's head nodes,
    alive or dead (an instance that died with a head died with the fabric's control plane, not by
    its own fault: recovered by its policy, not counted against its restart ceiling)."""

    alive: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    listed: frozenset[tuple[str, str]] | None = None
    head_nodes: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class SlotReserved(Stimulus):
    """The task core's answer to ``ReserveSlot``: the allocation id, or None when it would not give one."""

    job_id: str
    allocation_id: int | None
    migration_id: str | None = None


JobsStimulus = (JobSubmitted | StopRequested | JobPlaced | JobUnplaced | InstanceStarted | InstanceEnded | DormantSet
                | BundleCreated | BundleUpdated | BundleDeleted | MigrateRequested | AbortRequested | SagaStepAnswered
                | Closing | DrainJobsRequested | EvictRequested | WithdrawRequested | RayDrainAnswered | JobsNodeLost
                | CapacityJoined | DrainsFollowed | PlacementsDue | JobsTick | Restarted | SlotReserved | LeaseAsked)


__all__ = ["AbortRequested", "BundleCreated", "BundleDeleted", "BundleUpdated", "CapacityJoined", "Closing", "DormantSet",
           "DrainJobsRequested", "DrainsFollowed", "EvictRequested", "InstanceEnded", "InstanceStarted", "JobPlaced", "JobSubmitted",
           "JobUnplaced", "JobsNodeLost", "JobsStimulus", "JobsTick", "LeaseAsked", "MigrateRequested", "PlacementsDue", "RayDrainAnswered", "Restarted",
           "SagaAnswer", "SagaStepAnswered", "SlotReserved", "StopRequested", "WithdrawRequested"]

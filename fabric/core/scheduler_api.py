"""The scheduler actor's remote surface, as types (issue 21, item 3).

``SchedulerApi`` names every method a caller may send to the scheduler actor (``fabric.scheduler``
in namespace ``fabric``: ``actors.scheduler.Scheduler``, its moves handed to
``actors.moves.MoveRequests``), with the names, argument order and defaults the actor has, and the
plain value each one answers (what a Ray call's ``ObjectRef`` resolves to). ``AsyncSchedulerApi`` is
the same surface awaited, for callers on an event loop (the operator API's servicer). Callers hold one of these and
call methods by name in code, never by a name in a string: the typed clients that carry the calls
to a Ray actor handle are ``fabric.rayio.scheduler_client``'s.

Its arguments are read on arrival by the actor, with the readers of
``fabric.core.scheduling.messages`` and ``fabric.core.scheduler_args``; an edge that reads one
before sending it calls the same reader.

It lives in the core because it needs nothing but the core's types (no Ray): any layer may type
against it. ``tests/unit/test_scheduler_api.py`` holds it to the actor's real signatures and the
two protocols to each other; mypy holds the clients and their callers to it.
"""

from __future__ import annotations

from typing import Mapping, NotRequired, Protocol, Sequence, TypedDict

from fabric.core.jobs.book import JobStatus
from fabric.core.jobs.bundles import BundleStatus
from fabric.core.jobs.drains import DrainState, NodeInterruptionState
from fabric.core.jobs.migration import MigrationState
from fabric.core.jobs.spec import JobSpec
from fabric.core.jobs.validation import Admission, ValidationReport
from fabric.core.placement import Decision, NodeRecord, PlacementContext, Requirement
from fabric.core.scheduling.replies import LeaseGrant, NodeAssignment
from fabric.core.settings import NodeShape

__all__ = ["AsyncSchedulerApi", "ExplainAnswer", "FabricEvent", "JobInstance", "LoopStats", "NodeTermination",
           "ProvisionedInfo", "SchedulerApi", "IN_PROCESS_ONLY", "TERMINATE_WAIT_S"]

IN_PROCESS_ONLY = frozenset({"ray_adapter", "handle_stimulus", "answered"})
"""Public methods of the scheduler class that are not part of its remote surface: its in-process
collaborators (the job runner, drains, sagas, the provisioner) call them on the scheduler object
itself. A new public method of the actor belongs either in ``SchedulerApi`` or here."""


class FabricEvent(TypedDict):
    """One event of the fabric's log (``actors.jobs.JobRunner.emit``), as ``events`` answers it."""

    seq: int
    kind: str
    at: float
    stimulus_id: NotRequired[str]
    """Absent only from events written before stimulus ids were kept."""
    data: dict[str, object]


class JobInstance(TypedDict):
    """Where a job runs now (``job_instance``): what a ``JobHandle`` needs to call it."""

    state: str
    terminal: bool
    reason: str
    actor: str | None
    """The running instance's actor name; None while the job has none."""
    instance_key: str | None
    node_id: str | None
    call_timeout_s: float


class ExplainAnswer(TypedDict):
    """A dry-run placement with its trace (``explain``)."""

    decision: dict[str, object]
    verdicts: dict[str, str]
    """``"name (node id prefix)"`` -> that node's first failing filter."""
    survivors: list[dict[str, object]]
    text: str
    """The report a person reads."""


class ProvisionedInfo(TypedDict):
    """One node a provider started (``provision_node``)."""

    instance_id: str
    provider: str
    pool: str
    pool_tier: str
    shape: str
    spare: bool
    name: str


TERMINATE_WAIT_S = 120.0
"""How long a caller waits for ``terminate_node`` at least: the node's jobs are stopped, then its
provider is asked to end it (a cloud API call can take a minute)."""


class NodeTermination(TypedDict):
    """A node ended on request (``terminate_node``)."""

    node_id: str
    provider: str
    instance_id: str
    jobs_stopped: list[str]
    """The jobs that were on it, stopped first: each recovers elsewhere by its policy."""


class LoopStats(TypedDict):
    """How the scheduler's loop keeps up (``loop_stats``): its last ticks' durations (one tick:
    follow the fleet feed, let time pass in the core, scale, the jobs' tick), wall milliseconds."""

    ticks: int
    """Ticks since the actor started."""
    tick_p50_ms: float
    tick_p99_ms: float
    tick_max_ms: float
    window: int
    """How many of the latest ticks the figures are over (at most ``TICKS_KEPT``)."""
    fleet: int
    """Nodes in the scheduler's fleet view now."""
    feed_resyncs: int
    """Full resyncs of the fleet feed so far (the first poll is one)."""


class SchedulerApi(Protocol):
    """The scheduler actor's methods, each answering its plain value (see the module docstring)."""

    # -- placement ----------------------------------------------------------------------------------
    def place_task(self, req: Requirement, release: Sequence[str] = ()) -> NodeAssignment:
        """Place one call now (a slot reserved), or say it is deferred; ``release``: idle leases given back first."""
    def wait_for_placement(self, request_id: str, req: Requirement, priority: int = 0,
                           timeout_s: float | None = None) -> NodeAssignment:
        """Queue a call until a node can take it (``CapacityError`` at the deadline)."""
    def lease(self, lease_id: str, req: Requirement, holding: Mapping[str, int] | None = None, want: int = 64,
              release: Sequence[str] = ()) -> LeaseGrant:
        """Grant or renew a client's placement lease for ``req``'s class."""
    def end_lease(self, lease_id: str) -> None: ...
    def report_calls(self, placed: int = 0, fallbacks: int = 0, job_id: str | None = None, refused: int = 0) -> None:
        """Calls a client placed on its leased slots, and how many ran below their ``min_tier``; a worker's
        spilled calls name their Ray job, with those it refused past their queue deadline."""
    def spilled_seen(self, job_id: str) -> int:
        """How many spilled calls of Ray job ``job_id`` its workers have reported, run or refused."""
    def queue_timeout_s(self) -> float: ...
    def release(self, allocation_ids: Sequence[int]) -> None:
        """Work ended on its node: its slots are free again."""
    def select_worker(self, req: Requirement) -> NodeAssignment:
        """Where this would go now (nothing reserved)."""
    def explain(self, req: Requirement, ctx: PlacementContext | None = None, verbose: bool = False) -> ExplainAnswer:
        """A dry-run placement against the live fleet, with its trace."""
    def explain_event(self, seq: int, replay: bool = False, settings_now: bool = False,
                      verbose: bool = False) -> dict[str, object]:
        """Why the decision on the record under event ``seq`` was made (``text``); with ``replay`` (or
        ``settings_now``: today's settings) whether the engine decides the same on its recorded inputs."""
    def decision_recording(self, enabled: bool | None = None) -> bool:
        """Turn decision recording on or off (None: leave it); whether it is on."""

    # -- the operator's view ------------------------------------------------------------------------
    def fallback_count(self) -> int: ...
    def metrics(self) -> dict[str, object]:
        """Counters, per-pool gauges and per-tier figures (``fabric.core.scheduling.metrics_view``)."""
    def nodes(self) -> list[NodeRecord]:
        """The scheduler's fleet view."""
    def provisions(self) -> dict[str, object]:
        """Open provisions, held pool tiers, the nodes providers made, provision-to-serving times."""
    def reservations(self) -> dict[str, dict[str, int]]:
        """Per node: reservations by owner kind (``task``, ``lease``, ``observed``)."""
    def stimulus_log(self) -> list[dict[str, object]]: ...
    def loop_stats(self, reset: bool = False) -> LoopStats:
        """The loop's tick durations over its latest ticks; ``reset`` starts the window afresh."""
    def fleet_node(self, node: str) -> NodeRecord | None:
        """One node of the scheduler's fleet view (by id or name), or None when it is not in it."""
    def sync_now(self) -> int:
        """Refresh the fleet at once; the number of nodes."""
    def ping(self) -> str: ...
    def pid(self) -> int: ...

    # -- nodes --------------------------------------------------------------------------------------
    def cordon(self, node: str) -> str:
        """Keep new work off ``node`` (id or name); its id."""
    def uncordon(self, node: str) -> str: ...
    def drain(self, node: str, grace_s: float | None = None) -> str:
        """The core's plain drain (no job moved); its id. ``FabricHandle.drain`` is ``drain_jobs``."""

    # -- long-running jobs --------------------------------------------------------------------------
    def submit_job(self, spec: JobSpec, cls_blob: bytes, args_blob: bytes, job_id: str | None = None) -> str:
        """Add a job; its id (a retry with the same id is the same job)."""
    def stop_job(self, job_id: str) -> str:
        """Stop a job gracefully; its state (a ``JobState`` value)."""
    def renew_lease(self, job_id: str, instance_key: str) -> str:
        """Renew the lease of a job's instance (asked by the instance itself): ``granted`` or ``refused``."""
    def job_status(self, job_id: str) -> JobStatus: ...
    def job_statuses(self) -> list[JobStatus]: ...
    def job_instance(self, job_id: str) -> JobInstance: ...
    def inherited_store(self, resume: bool = False) -> dict[str, object] | None:
        """What the scheduler found of another Ray cluster's jobs in its store (held), resumed first with ``resume``."""
    def events(self, since: int = 0, kinds: list[str] | None = None, limit: int = 1000) -> list[FabricEvent]:
        """The log after number ``since``: the first ``limit`` (negative: the newest ``-limit``), of ``kinds`` only."""
    def job_events(self, since: int = 0, kinds: list[str] | None = None) -> list[FabricEvent]: ...
    def record_event(self, kind: str, data: Mapping[str, object]) -> None: ...

    # -- bundles ------------------------------------------------------------------------------------
    def create_bundle(self, blob: bytes) -> BundleStatus: ...
    def update_bundle(self, blob: bytes) -> BundleStatus: ...
    def delete_bundle(self, bundle_id: str) -> BundleStatus: ...
    def bundle_status(self, bundle_id: str) -> BundleStatus: ...
    def bundle_statuses(self) -> list[BundleStatus]: ...
    def validate_bundle(self, blob: bytes) -> ValidationReport: ...
    def validate_bundle_admission(self, blob: bytes) -> Admission: ...
    def place_dry_run(self, blob: bytes, replica: int, job: str) -> Decision: ...
    def start_bundle_job(self, bundle_id: str, replica: int, job: str) -> str: ...
    def stop_bundle_job(self, bundle_id: str, replica: int, job: str) -> str: ...

    # -- providers and spares -----------------------------------------------------------------------
    def provision_node(self, provider: str, shape: NodeShape | Mapping[str, object], pool: str, pool_tier: str,
                       spare: bool = False, provision_id: str | None = None) -> ProvisionedInfo:
        """Have ``provider`` start one node; ``provision_id`` (a spare reconciler's) keeps it in the job
        store until it registers, and asking again for that id answers the same node."""
    def terminate_instance(self, provider: str, instance_id: str, reason: str = "", node_id: str | None = None) -> None: ...
    def set_spare_tags(self, node_id: str, spare: bool, reserved_for: Sequence[str] = (), exclusive: bool = False,
                       reason: str = "") -> bool:
        """Write a node's spare tags into the fabric's view (False: no such node)."""
    def close_providers(self) -> int:
        """Terminate every node this fabric's providers made (``fabric.down``)."""

    # -- moving work on purpose (actors.moves.SchedulerMoves) ---------------------------------------
    def migrate_job(self, job_id: str, strategy: str | None = None, target_node: str | None = None,
                    override_reservation: bool = False) -> str:
        """Open a migration; its id. ``strategy`` None: the settings' default."""
    def migration(self, migration_id: str) -> MigrationState: ...
    def migrations(self) -> list[MigrationState]: ...
    def abort_migration(self, migration_id: str, reason: str = "") -> MigrationState: ...
    def drain_jobs(self, node: str, timeout_s: float | None = None, force: bool = False,
                   strategy: str | None = None) -> DrainState:
        """Cordon the node, migrate its jobs, then have Ray drain it; answers when the drain ends."""
    def drain_status(self, node: str) -> DrainState | None: ...
    def evict(self, node: str) -> list[str]:
        """Stop the node's jobs now; the ids stopped."""
    def terminate_node(self, node: str) -> NodeTermination:
        """Evict the node, then have its provider end it (``TransitionError`` for a node joined by hand)."""
    def handle_node_interruption(self, node: str, kind: str = "spot-interruption",
                                 deadline: float | None = None) -> NodeInterruptionState:
        """A reclaim notice: a forced drain sized to ``deadline`` (epoch seconds)."""
    def close_migrations(self, grace_s: float = 5.0) -> int:
        """``fabric.down``: roll back or mark lost every saga in flight."""


class AsyncSchedulerApi(Protocol):
    """``SchedulerApi`` awaited: the same methods, arguments and answers (a unit test holds them equal)."""

    async def place_task(self, req: Requirement, release: Sequence[str] = ()) -> NodeAssignment: ...
    async def wait_for_placement(self, request_id: str, req: Requirement, priority: int = 0,
                                 timeout_s: float | None = None) -> NodeAssignment: ...
    async def lease(self, lease_id: str, req: Requirement, holding: Mapping[str, int] | None = None, want: int = 64,
                    release: Sequence[str] = ()) -> LeaseGrant: ...
    async def end_lease(self, lease_id: str) -> None: ...
    async def report_calls(self, placed: int = 0, fallbacks: int = 0, job_id: str | None = None,
                           refused: int = 0) -> None: ...
    async def spilled_seen(self, job_id: str) -> int: ...
    async def queue_timeout_s(self) -> float: ...
    async def release(self, allocation_ids: Sequence[int]) -> None: ...
    async def select_worker(self, req: Requirement) -> NodeAssignment: ...
    async def explain(self, req: Requirement, ctx: PlacementContext | None = None,
                      verbose: bool = False) -> ExplainAnswer: ...
    async def explain_event(self, seq: int, replay: bool = False, settings_now: bool = False,
                            verbose: bool = False) -> dict[str, object]: ...
    async def decision_recording(self, enabled: bool | None = None) -> bool: ...
    async def fallback_count(self) -> int: ...
    async def metrics(self) -> dict[str, object]: ...
    async def nodes(self) -> list[NodeRecord]: ...
    async def provisions(self) -> dict[str, object]: ...
    async def reservations(self) -> dict[str, dict[str, int]]: ...
    async def stimulus_log(self) -> list[dict[str, object]]: ...
    async def loop_stats(self, reset: bool = False) -> LoopStats: ...
    async def fleet_node(self, node: str) -> NodeRecord | None: ...
    async def sync_now(self) -> int: ...
    async def ping(self) -> str: ...
    async def pid(self) -> int: ...
    async def cordon(self, node: str) -> str: ...
    async def uncordon(self, node: str) -> str: ...
    async def drain(self, node: str, grace_s: float | None = None) -> str: ...
    async def submit_job(self, spec: JobSpec, cls_blob: bytes, args_blob: bytes, job_id: str | None = None) -> str: ...
    async def stop_job(self, job_id: str) -> str: ...
    async def renew_lease(self, job_id: str, instance_key: str) -> str: ...
    async def job_status(self, job_id: str) -> JobStatus: ...
    async def job_statuses(self) -> list[JobStatus]: ...
    async def job_instance(self, job_id: str) -> JobInstance: ...
    async def inherited_store(self, resume: bool = False) -> dict[str, object] | None: ...
    async def events(self, since: int = 0, kinds: list[str] | None = None, limit: int = 1000) -> list[FabricEvent]: ...
    async def job_events(self, since: int = 0, kinds: list[str] | None = None) -> list[FabricEvent]: ...
    async def record_event(self, kind: str, data: Mapping[str, object]) -> None: ...
    async def create_bundle(self, blob: bytes) -> BundleStatus: ...
    async def update_bundle(self, blob: bytes) -> BundleStatus: ...
    async def delete_bundle(self, bundle_id: str) -> BundleStatus: ...
    async def bundle_status(self, bundle_id: str) -> BundleStatus: ...
    async def bundle_statuses(self) -> list[BundleStatus]: ...
    async def validate_bundle(self, blob: bytes) -> ValidationReport: ...
    async def validate_bundle_admission(self, blob: bytes) -> Admission: ...
    async def place_dry_run(self, blob: bytes, replica: int, job: str) -> Decision: ...
    async def start_bundle_job(self, bundle_id: str, replica: int, job: str) -> str: ...
    async def stop_bundle_job(self, bundle_id: str, replica: int, job: str) -> str: ...
    async def provision_node(self, provider: str, shape: NodeShape | Mapping[str, object], pool: str, pool_tier: str,
                             spare: bool = False, provision_id: str | None = None) -> ProvisionedInfo: ...
    async def terminate_instance(self, provider: str, instance_id: str, reason: str = "",
                             node_id: str | None = None) -> None: ...
    async def set_spare_tags(self, node_id: str, spare: bool, reserved_for: Sequence[str] = (), exclusive: bool = False,
                             reason: str = "") -> bool: ...
    async def close_providers(self) -> int: ...
    async def migrate_job(self, job_id: str, strategy: str | None = None, target_node: str | None = None,
                          override_reservation: bool = False) -> str: ...
    async def migration(self, migration_id: str) -> MigrationState: ...
    async def migrations(self) -> list[MigrationState]: ...
    async def abort_migration(self, migration_id: str, reason: str = "") -> MigrationState: ...
    async def drain_jobs(self, node: str, timeout_s: float | None = None, force: bool = False,
                         strategy: str | None = None) -> DrainState: ...
    async def drain_status(self, node: str) -> DrainState | None: ...
    async def evict(self, node: str) -> list[str]: ...
    async def terminate_node(self, node: str) -> NodeTermination: ...
    async def handle_node_interruption(self, node: str, kind: str = "spot-interruption",
                                       deadline: float | None = None) -> NodeInterruptionState: ...
    async def close_migrations(self, grace_s: float = 5.0) -> int: ...

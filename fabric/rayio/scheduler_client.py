"""Typed clients of the scheduler actor (``fabric.core.scheduler_api``), over a Ray actor handle.

Each method calls the actor method of its own name explicitly (``handle.<name>.remote(...)``), so
a renamed or re-ordered method is a type error where it is called, not a string that fails at run
time. The clients check nothing: the actor reads every argument on arrival, with the one set of
readers (``fabric.core.scheduling.messages``, ``fabric.core.scheduler_args``) that an edge calls
when it reads an argument first (a ``FabricHandle`` drain, the gRPC request's node); the client
only carries it.

- ``SchedulerClient`` (``SchedulerApi``): blocking. Every call's ``ObjectRef`` goes to ``answer(ref,
  least_wait_s)``, which waits for it the caller's way (``FabricHandle``: its timeout, the scheduler's
  error unwrapped; the CLI: ``ray.get``; the session: its answer timeout). ``least_wait_s`` is None, or
  how long this call may legitimately take (a drain answers when it ends), so the waiter can wait longer.
- ``AsyncSchedulerClient`` (``AsyncSchedulerApi``): awaited, for code on an event loop (the operator
  actor's gRPC server). ``handle()`` gives the actor handle, looked up when a call first needs it.

Neither imports Ray: the handle is passed in (a fake in unit tests).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from fabric.core.jobs.book import JobStatus
from fabric.core.jobs.bundles import BundleStatus
from fabric.core.jobs.drains import DrainState, NodeInterruptionState
from fabric.core.jobs.migration import MigrationState
from fabric.core.jobs.spec import JobSpec
from fabric.core.jobs.validation import Admission, ValidationReport
from fabric.core.placement import Decision, NodeRecord, PlacementContext, Requirement
from fabric.core.scheduler_api import (TERMINATE_WAIT_S, ExplainAnswer, FabricEvent, JobInstance, LoopStats, NodeTermination,
                                        ProvisionedInfo)
from fabric.core.scheduling.replies import LeaseGrant, NodeAssignment
from fabric.core.settings import NodeShape

__all__ = ["ANSWER_MARGIN_S", "Answer", "AsyncSchedulerClient", "SchedulerClient"]

Answer = Callable[[Any, float | None], Any]
"""``answer(ref, least_wait_s)``: the value of an actor call's ``ObjectRef`` (its error raised)."""
ANSWER_MARGIN_S = 30.0
"""Added to how long a drain or an interruption may take, for the wait on the scheduler's answer."""


class SchedulerClient:
    """``SchedulerApi`` over ``handle`` (the scheduler's Ray actor handle, untyped: Ray types a handle
    per actor class, which this layer does not import), each answer waited for by ``answer``.
    ``clock``: epoch seconds, to size the wait on an interruption's deadline."""

    def __init__(self, handle: Any, answer: Answer, *, clock: Callable[[], float] = time.time) -> None:
        self._handle = handle
        self._answer = answer
        self._clock = clock

    def _within(self, seconds: float | None) -> float | None:
        return None if seconds is None else max(0.0, seconds) + ANSWER_MARGIN_S

    # -- placement ----------------------------------------------------------------------------------
    def place_task(self, req: Requirement, release: Sequence[str] = ()) -> NodeAssignment:
        return self._answer(self._handle.place_task.remote(req, release), None)

    def wait_for_placement(self, request_id: str, req: Requirement, priority: int = 0,
                           timeout_s: float | None = None) -> NodeAssignment:
        return self._answer(self._handle.wait_for_placement.remote(request_id, req, priority, timeout_s),
                            self._within(timeout_s))

    def lease(self, lease_id: str, req: Requirement, holding: Mapping[str, int] | None = None, want: int = 64,
              release: Sequence[str] = ()) -> LeaseGrant:
        return self._answer(self._handle.lease.remote(lease_id, req, holding, want, release), None)

    def end_lease(self, lease_id: str) -> None:
        self._answer(self._handle.end_lease.remote(lease_id), None)

    def report_calls(self, placed: int = 0, fallbacks: int = 0, job_id: str | None = None, refused: int = 0) -> None:
        self._answer(self._handle.report_calls.remote(placed, fallbacks, job_id, refused), None)

    def spilled_seen(self, job_id: str) -> int:
        return self._answer(self._handle.spilled_seen.remote(job_id), None)

    def queue_timeout_s(self) -> float:
        return self._answer(self._handle.queue_timeout_s.remote(), None)

    def release(self, allocation_ids: Sequence[int]) -> None:
        self._answer(self._handle.release.remote(allocation_ids), None)

    def select_worker(self, req: Requirement) -> NodeAssignment:
        return self._answer(self._handle.select_worker.remote(req), None)

    def explain(self, req: Requirement, ctx: PlacementContext | None = None, verbose: bool = False) -> ExplainAnswer:
        return self._answer(self._handle.explain.remote(req, ctx, verbose), None)

    def explain_event(self, seq: int, replay: bool = False, settings_now: bool = False,
                      verbose: bool = False) -> dict[str, object]:
        return self._answer(self._handle.explain_event.remote(seq, replay, settings_now, verbose), None)

    def decision_recording(self, enabled: bool | None = None) -> bool:
        return self._answer(self._handle.decision_recording.remote(enabled), None)

    # -- the operator's view ------------------------------------------------------------------------
    def fallback_count(self) -> int:
        return self._answer(self._handle.fallback_count.remote(), None)

    def metrics(self) -> dict[str, object]:
        return self._answer(self._handle.metrics.remote(), None)

    def nodes(self) -> list[NodeRecord]:
        return self._answer(self._handle.nodes.remote(), None)

    def provisions(self) -> dict[str, object]:
        return self._answer(self._handle.provisions.remote(), None)

    def reservations(self) -> dict[str, dict[str, int]]:
        return self._answer(self._handle.reservations.remote(), None)

    def stimulus_log(self) -> list[dict[str, object]]:
        return self._answer(self._handle.stimulus_log.remote(), None)

    def loop_stats(self, reset: bool = False) -> LoopStats:
        return self._answer(self._handle.loop_stats.remote(reset), None)

    def fleet_node(self, node: str) -> NodeRecord | None:
        return self._answer(self._handle.fleet_node.remote(node), None)

    def sync_now(self) -> int:
        return self._answer(self._handle.sync_now.remote(), None)

    def ping(self) -> str:
        return self._answer(self._handle.ping.remote(), None)

    def pid(self) -> int:
        return self._answer(self._handle.pid.remote(), None)

    # -- nodes --------------------------------------------------------------------------------------
    def cordon(self, node: str) -> str:
        return self._answer(self._handle.cordon.remote(node), None)

    def uncordon(self, node: str) -> str:
        return self._answer(self._handle.uncordon.remote(node), None)

    def drain(self, node: str, grace_s: float | None = None) -> str:
        return self._answer(self._handle.drain.remote(node, grace_s), None)

    # -- long-running jobs --------------------------------------------------------------------------
    def submit_job(self, spec: JobSpec, cls_blob: bytes, args_blob: bytes, job_id: str | None = None) -> str:
        return self._answer(self._handle.submit_job.remote(spec, cls_blob, args_blob, job_id), None)

    def stop_job(self, job_id: str) -> str:
        return self._answer(self._handle.stop_job.remote(job_id), None)

    def renew_lease(self, job_id: str, instance_key: str) -> str:
        return self._answer(self._handle.renew_lease.remote(job_id, instance_key), None)

    def job_status(self, job_id: str) -> JobStatus:
        return self._answer(self._handle.job_status.remote(job_id), None)

    def job_statuses(self) -> list[JobStatus]:
        return self._answer(self._handle.job_statuses.remote(), None)

    def job_instance(self, job_id: str) -> JobInstance:
        return self._answer(self._handle.job_instance.remote(job_id), None)

    def inherited_store(self, resume: bool = False) -> dict[str, object] | None:
        return self._answer(self._handle.inherited_store.remote(resume), None)

    def events(self, since: int = 0, kinds: list[str] | None = None, limit: int = 1000) -> list[FabricEvent]:
        return self._answer(self._handle.events.remote(since, kinds, limit), None)

    def job_events(self, since: int = 0, kinds: list[str] | None = None) -> list[FabricEvent]:
        return self._answer(self._handle.job_events.remote(since, kinds), None)

    def record_event(self, kind: str, data: Mapping[str, object]) -> None:
        self._answer(self._handle.record_event.remote(kind, data), None)

    # -- bundles ------------------------------------------------------------------------------------
    def create_bundle(self, blob: bytes) -> BundleStatus:
        return self._answer(self._handle.create_bundle.remote(blob), None)

    def update_bundle(self, blob: bytes) -> BundleStatus:
        return self._answer(self._handle.update_bundle.remote(blob), None)

    def delete_bundle(self, bundle_id: str) -> BundleStatus:
        return self._answer(self._handle.delete_bundle.remote(bundle_id), None)

    def bundle_status(self, bundle_id: str) -> BundleStatus:
        return self._answer(self._handle.bundle_status.remote(bundle_id), None)

    def bundle_statuses(self) -> list[BundleStatus]:
        return self._answer(self._handle.bundle_statuses.remote(), None)

    def validate_bundle(self, blob: bytes) -> ValidationReport:
        return self._answer(self._handle.validate_bundle.remote(blob), None)

    def validate_bundle_admission(self, blob: bytes) -> Admission:
        return self._answer(self._handle.validate_bundle_admission.remote(blob), None)

    def place_dry_run(self, blob: bytes, replica: int, job: str) -> Decision:
        return self._answer(self._handle.place_dry_run.remote(blob, replica, job), None)

    def start_bundle_job(self, bundle_id: str, replica: int, job: str) -> str:
        return self._answer(self._handle.start_bundle_job.remote(bundle_id, replica, job), None)

    def stop_bundle_job(self, bundle_id: str, replica: int, job: str) -> str:
        return self._answer(self._handle.stop_bundle_job.remote(bundle_id, replica, job), None)

    # -- providers and spares -----------------------------------------------------------------------
    def provision_node(self, provider: str, shape: NodeShape | Mapping[str, object], pool: str, pool_tier: str,
                       spare: bool = False, provision_id: str | None = None) -> ProvisionedInfo:
        return self._answer(self._handle.provision_node.remote(provider, shape, pool, pool_tier, spare, provision_id),
                            None)

    def terminate_instance(self, provider: str, instance_id: str, reason: str = "", node_id: str | None = None) -> None:
        self._answer(self._handle.terminate_instance.remote(provider, instance_id, reason, node_id), None)

    def set_spare_tags(self, node_id: str, spare: bool, reserved_for: Sequence[str] = (), exclusive: bool = False,
                       reason: str = "") -> bool:
        return self._answer(self._handle.set_spare_tags.remote(node_id, spare, reserved_for, exclusive, reason), None)

    def close_providers(self) -> int:
        return self._answer(self._handle.close_providers.remote(), None)

    # -- moving work on purpose ---------------------------------------------------------------------
    def migrate_job(self, job_id: str, strategy: str | None = None, target_node: str | None = None,
                    override_reservation: bool = False) -> str:
        # No strategy is left out rather than sent as None: the actor's own default then applies.
        if strategy is None:
            ref = self._handle.migrate_job.remote(job_id, target_node=target_node,
                                                  override_reservation=override_reservation)
        else:
            ref = self._handle.migrate_job.remote(job_id, strategy=strategy, target_node=target_node,
                                                  override_reservation=override_reservation)
        return self._answer(ref, None)

    def migration(self, migration_id: str) -> MigrationState:
        return self._answer(self._handle.migration.remote(migration_id), None)

    def migrations(self) -> list[MigrationState]:
        return self._answer(self._handle.migrations.remote(), None)

    def abort_migration(self, migration_id: str, reason: str = "") -> MigrationState:
        return self._answer(self._handle.abort_migration.remote(migration_id, reason), None)

    def drain_jobs(self, node: str, timeout_s: float | None = None, force: bool = False,
                   strategy: str | None = None) -> DrainState:
        return self._answer(self._handle.drain_jobs.remote(node, timeout_s, force, strategy), self._within(timeout_s))

    def drain_status(self, node: str) -> DrainState | None:
        return self._answer(self._handle.drain_status.remote(node), None)

    def evict(self, node: str) -> list[str]:
        return self._answer(self._handle.evict.remote(node), None)

    def terminate_node(self, node: str) -> NodeTermination:
        return self._answer(self._handle.terminate_node.remote(node), TERMINATE_WAIT_S)

    def handle_node_interruption(self, node: str, kind: str = "spot-interruption",
                                 deadline: float | None = None) -> NodeInterruptionState:
        least = None if deadline is None else self._within(deadline - self._clock())
        return self._answer(self._handle.handle_node_interruption.remote(node, kind, deadline), least)

    def close_migrations(self, grace_s: float = 5.0) -> int:
        return self._answer(self._handle.close_migrations.remote(grace_s), self._within(grace_s))


class AsyncSchedulerClient:
    """``AsyncSchedulerApi`` over the actor handle ``handle()`` gives (untyped, as above)."""

    def __init__(self, handle: Callable[[], Any]) -> None:
        self._handle = handle

    # -- placement ----------------------------------------------------------------------------------
    async def place_task(self, req: Requirement, release: Sequence[str] = ()) -> NodeAssignment:
        return await self._handle().place_task.remote(req, release)

    async def wait_for_placement(self, request_id: str, req: Requirement, priority: int = 0,
                                 timeout_s: float | None = None) -> NodeAssignment:
        return await self._handle().wait_for_placement.remote(request_id, req, priority, timeout_s)

    async def lease(self, lease_id: str, req: Requirement, holding: Mapping[str, int] | None = None, want: int = 64,
                    release: Sequence[str] = ()) -> LeaseGrant:
        return await self._handle().lease.remote(lease_id, req, holding, want, release)

    async def end_lease(self, lease_id: str) -> None:
        await self._handle().end_lease.remote(lease_id)

    async def report_calls(self, placed: int = 0, fallbacks: int = 0, job_id: str | None = None,
                           refused: int = 0) -> None:
        await self._handle().report_calls.remote(placed, fallbacks, job_id, refused)

    async def spilled_seen(self, job_id: str) -> int:
        return await self._handle().spilled_seen.remote(job_id)

    async def queue_timeout_s(self) -> float:
        return await self._handle().queue_timeout_s.remote()

    async def release(self, allocation_ids: Sequence[int]) -> None:
        await self._handle().release.remote(allocation_ids)

    async def select_worker(self, req: Requirement) -> NodeAssignment:
        return await self._handle().select_worker.remote(req)

    async def explain(self, req: Requirement, ctx: PlacementContext | None = None,
                      verbose: bool = False) -> ExplainAnswer:
        return await self._handle().explain.remote(req, ctx, verbose)

    async def explain_event(self, seq: int, replay: bool = False, settings_now: bool = False,
                            verbose: bool = False) -> dict[str, object]:
        return await self._handle().explain_event.remote(seq, replay, settings_now, verbose)

    async def decision_recording(self, enabled: bool | None = None) -> bool:
        return await self._handle().decision_recording.remote(enabled)

    # -- the operator's view ------------------------------------------------------------------------
    async def fallback_count(self) -> int:
        return await self._handle().fallback_count.remote()

    async def metrics(self) -> dict[str, object]:
        return await self._handle().metrics.remote()

    async def nodes(self) -> list[NodeRecord]:
        return await self._handle().nodes.remote()

    async def provisions(self) -> dict[str, object]:
        return await self._handle().provisions.remote()

    async def reservations(self) -> dict[str, dict[str, int]]:
        return await self._handle().reservations.remote()

    async def stimulus_log(self) -> list[dict[str, object]]:
        return await self._handle().stimulus_log.remote()

    async def loop_stats(self, reset: bool = False) -> LoopStats:
        return await self._handle().loop_stats.remote(reset)

    async def fleet_node(self, node: str) -> NodeRecord | None:
        return await self._handle().fleet_node.remote(node)

    async def sync_now(self) -> int:
        return await self._handle().sync_now.remote()

    async def ping(self) -> str:
        return await self._handle().ping.remote()

    async def pid(self) -> int:
        return await self._handle().pid.remote()

    # -- nodes --------------------------------------------------------------------------------------
    async def cordon(self, node: str) -> str:
        return await self._handle().cordon.remote(node)

    async def uncordon(self, node: str) -> str:
        return await self._handle().uncordon.remote(node)

    async def drain(self, node: str, grace_s: float | None = None) -> str:
        return await self._handle().drain.remote(node, grace_s)

    # -- long-running jobs --------------------------------------------------------------------------
    async def submit_job(self, spec: JobSpec, cls_blob: bytes, args_blob: bytes, job_id: str | None = None) -> str:
        return await self._handle().submit_job.remote(spec, cls_blob, args_blob, job_id)

    async def stop_job(self, job_id: str) -> str:
        return await self._handle().stop_job.remote(job_id)

    async def renew_lease(self, job_id: str, instance_key: str) -> str:
        return await self._handle().renew_lease.remote(job_id, instance_key)

    async def job_status(self, job_id: str) -> JobStatus:
        return await self._handle().job_status.remote(job_id)

    async def job_statuses(self) -> list[JobStatus]:
        return await self._handle().job_statuses.remote()

    async def job_instance(self, job_id: str) -> JobInstance:
        return await self._handle().job_instance.remote(job_id)

    async def inherited_store(self, resume: bool = False) -> dict[str, object] | None:
        return await self._handle().inherited_store.remote(resume)

    async def events(self, since: int = 0, kinds: list[str] | None = None, limit: int = 1000) -> list[FabricEvent]:
        return await self._handle().events.remote(since, kinds, limit)

    async def job_events(self, since: int = 0, kinds: list[str] | None = None) -> list[FabricEvent]:
        return await self._handle().job_events.remote(since, kinds)

    async def record_event(self, kind: str, data: Mapping[str, object]) -> None:
        await self._handle().record_event.remote(kind, data)

    # -- bundles ------------------------------------------------------------------------------------
    async def create_bundle(self, blob: bytes) -> BundleStatus:
        return await self._handle().create_bundle.remote(blob)

    async def update_bundle(self, blob: bytes) -> BundleStatus:
        return await self._handle().update_bundle.remote(blob)

    async def delete_bundle(self, bundle_id: str) -> BundleStatus:
        return await self._handle().delete_bundle.remote(bundle_id)

    async def bundle_status(self, bundle_id: str) -> BundleStatus:
        return await self._handle().bundle_status.remote(bundle_id)

    async def bundle_statuses(self) -> list[BundleStatus]:
        return await self._handle().bundle_statuses.remote()

    async def validate_bundle(self, blob: bytes) -> ValidationReport:
        return await self._handle().validate_bundle.remote(blob)

    async def validate_bundle_admission(self, blob: bytes) -> Admission:
        return await self._handle().validate_bundle_admission.remote(blob)

    async def place_dry_run(self, blob: bytes, replica: int, job: str) -> Decision:
        return await self._handle().place_dry_run.remote(blob, replica, job)

    async def start_bundle_job(self, bundle_id: str, replica: int, job: str) -> str:
        return await self._handle().start_bundle_job.remote(bundle_id, replica, job)

    async def stop_bundle_job(self, bundle_id: str, replica: int, job: str) -> str:
        return await self._handle().stop_bundle_job.remote(bundle_id, replica, job)

    # -- providers and spares -----------------------------------------------------------------------
    async def provision_node(self, provider: str, shape: NodeShape | Mapping[str, object], pool: str, pool_tier: str,
                             spare: bool = False, provision_id: str | None = None) -> ProvisionedInfo:
        return await self._handle().provision_node.remote(provider, shape, pool, pool_tier, spare, provision_id)

    async def terminate_instance(self, provider: str, instance_id: str, reason: str = "",
                             node_id: str | None = None) -> None:
        await self._handle().terminate_instance.remote(provider, instance_id, reason, node_id)

    async def set_spare_tags(self, node_id: str, spare: bool, reserved_for: Sequence[str] = (), exclusive: bool = False,
                             reason: str = "") -> bool:
        return await self._handle().set_spare_tags.remote(node_id, spare, reserved_for, exclusive, reason)

    async def close_providers(self) -> int:
        return await self._handle().close_providers.remote()

    # -- moving work on purpose ---------------------------------------------------------------------
    async def migrate_job(self, job_id: str, strategy: str | None = None, target_node: str | None = None,
                          override_reservation: bool = False) -> str:
        handle = self._handle()
        if strategy is None:  # left out, as SchedulerClient does: the actor's own default applies
            return await handle.migrate_job.remote(job_id, target_node=target_node,
                                                   override_reservation=override_reservation)
        return await handle.migrate_job.remote(job_id, strategy=strategy, target_node=target_node,
                                               override_reservation=override_reservation)

    async def migration(self, migration_id: str) -> MigrationState:
        return await self._handle().migration.remote(migration_id)

    async def migrations(self) -> list[MigrationState]:
        return await self._handle().migrations.remote()

    async def abort_migration(self, migration_id: str, reason: str = "") -> MigrationState:
        return await self._handle().abort_migration.remote(migration_id, reason)

    async def drain_jobs(self, node: str, timeout_s: float | None = None, force: bool = False,
                         strategy: str | None = None) -> DrainState:
        return await self._handle().drain_jobs.remote(node, timeout_s, force, strategy)

    async def drain_status(self, node: str) -> DrainState | None:
        return await self._handle().drain_status.remote(node)

    async def evict(self, node: str) -> list[str]:
        return await self._handle().evict.remote(node)

    async def terminate_node(self, node: str) -> NodeTermination:
        return await self._handle().terminate_node.remote(node)

    async def handle_node_interruption(self, node: str, kind: str = "spot-interruption",
                                       deadline: float | None = None) -> NodeInterruptionState:
        return await self._handle().handle_node_interruption.remote(node, kind, deadline)

    async def close_migrations(self, grace_s: float = 5.0) -> int:
        return await self._handle().close_migrations.remote(grace_s)


if TYPE_CHECKING:  # mypy holds each client to its protocol (pyproject's [tool.mypy] files cover this module)
    from fabric.core.scheduler_api import AsyncSchedulerApi, SchedulerApi

    def _conforms(blocking: SchedulerClient, awaited: AsyncSchedulerClient) -> tuple[SchedulerApi, AsyncSchedulerApi]:
        return blocking, awaited

"""Bringing the fabric up on a Ray cluster, and the handle drivers hold.

``up(settings)`` (``fabric.runtime.lifecycle.bring_up``, then a ``FabricHandle``) gets or creates the fabric's detached, named actors in namespace ``fabric``
(registry, health monitor, and the scheduler and dispatcher when installed), so it is idempotent
across drivers: a second driver or a ``ray job submit`` script calling ``up()`` finds the same
fabric. The settings of the first ``up`` stay in force (kept in the registry's state under
``fabric.core.settings``); a later ``up`` with other explicit settings raises ``SettingsConflictError``
rather than silently keeping the old ones, and ``up()`` without settings attaches to what runs.
The actors restart on failure (``max_restarts=-1``) and sit on the head node through a sliver of
Ray's head-node marker resource, never pinned to a node id. ``down()`` stops every job that has
not ended (``down(keep_jobs=True)`` leaves their instances running for the next ``up``), terminates
the nodes its providers started (``down(keep_nodes=True)`` leaves those running) and stops the actors;
Ray and the nodes that joined it stay; the registry's file stays, so a later ``up()`` on the same cluster picks up where it was
(its first ``up`` sets the settings in force anew).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Iterable

from fabric.core.errors import FabricError, NodeNotFoundError, SettingsConflictError
from fabric.core.events import FleetEvent
from fabric.core.jobs.book import JobStatus
from fabric.core.jobs.bundles import BundleStatus
from fabric.core.jobs.validation import Admission, ValidationReport
from fabric.core.names import HEALTH, NAMESPACE, REGISTRY, SCHEDULER
from fabric.core.node_view import with_scheduler_view
from fabric.core.placement import Decision, NodeRecord, Requirement
from fabric.core.records import RegistryRecord
from fabric.core.scheduler_api import FabricEvent, SchedulerApi
from fabric.core.scheduling import NodeAssignment
from fabric.core.settings import FabricSettings
from fabric.rayio.scheduler_client import SchedulerClient
from fabric.runtime import session as sessions
from fabric.runtime.event_log import EventsSurface, read_kinds
from fabric.runtime.lifecycle import bring_up, down, inherited_store, running_calls
from fabric.runtime.moves import MovesSurface
from fabric.runtime.spares import SparesSurface

if TYPE_CHECKING:
    from fabric.core.jobs.bundles import Bundle
    from fabric.runtime.jobs import JobHandle


def _get_actor(name: str) -> Any | None:
    return sessions.driver().get_actor(name)


def up(settings: FabricSettings | dict[str, Any] | None = None, *, scheduler: bool = True, timeout_s: float = 60.0,
       resume: bool = False, announce: bool = True) -> "FabricHandle":
    """Get or create the fabric's actors on the connected Ray cluster (``ray.init()`` first, or this
    connects the way ``ray.init()`` does) and return a handle once the health monitor has ticked.
    ``scheduler=False`` brings up only the fleet (registry, health monitor, probes).

    ``settings=None`` brings the fabric up with defaults, or attaches to the running fabric with the
    settings in force. Explicit settings on a fabric already up must equal the ones in force (then
    this is idempotent), else ``SettingsConflictError`` names the differing fields.

    A store another Ray cluster wrote (a head cold-started where a cluster that is gone kept its
    store): its jobs are held, not resumed; the handle's ``inherited`` says which cluster, how long
    ago it was last seen and which jobs (None: nothing of another cluster), and ``announce`` prints
    its one line. ``resume=True`` resumes them (as ``store.resume_inherited`` does at the start)."""
    bring_up(settings, scheduler=scheduler, timeout_s=timeout_s)
    handle = FabricHandle()
    handle.inherited = inherited_store(resume, timeout_s) if scheduler else None
    if announce and handle.inherited is not None:
        print(f"[fabric.up] {handle.inherited['line']}")
    return handle


class FabricHandle(EventsSurface, SparesSurface, MovesSurface):
    """A driver's view of the running fabric. Cheap to create; every call asks the actors. Its calls
    of the scheduler go through ``_scheduler_api()``: a ``SchedulerApi`` (mypy holds each call to it)."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self.inherited: dict[str, Any] | None = None
        """What ``up`` found of another Ray cluster's jobs in the store (``fabric.runtime.lifecycle.inherited_store``)."""

    def _actor(self, name: str) -> Any:
        handle = _get_actor(name)
        if handle is None:
            raise RuntimeError(f"the fabric is not up on this Ray cluster (no actor {name!r} in namespace {NAMESPACE!r}): call fabric.up()")
        return handle

    def _get(self, ref: Any) -> Any:
        return sessions.driver().get(ref, self.timeout_s)

    def _wait(self, ref: Any, timeout_s: float) -> Any:
        """``ref``'s result, waited on for ``timeout_s`` (a drain may answer when it is done)."""
        return sessions.driver().get(ref, timeout_s)

    # -- the scheduler ------------------------------------------------------------------------------
    def _scheduler(self) -> Any | None:
        """The scheduler's Ray actor handle, None when it is not up."""
        return _get_actor(SCHEDULER)

    def _scheduler_api(self) -> SchedulerApi:
        """The scheduler's methods, each answer waited for by ``_answer``; ``RuntimeError`` when it is not up."""
        api = self._scheduler_api_if_up()
        if api is None:
            raise RuntimeError(f"the fabric's scheduler is not up on this Ray cluster (no actor {SCHEDULER!r} in "
                               f"namespace {NAMESPACE!r}): call fabric.up() (with the scheduler)")
        return api

    def _scheduler_api_if_up(self) -> SchedulerApi | None:
        handle = self._scheduler()
        return None if handle is None else SchedulerClient(handle, self._answer)

    def _answer(self, ref: Any, least_wait_s: float | None) -> Any:
        """A scheduler call's answer, waited on for ``least_wait_s`` when that is longer than the
        handle's timeout; the scheduler's fabric error raised as itself, not Ray's wrapper."""
        try:
            if least_wait_s is not None and least_wait_s > self.timeout_s:
                return self._wait(ref, least_wait_s)
            return self._get(ref)
        except FabricError:
            raise
        except Exception as exc:  # Ray's RayTaskError around the scheduler's own error
            cause = getattr(exc, "cause", None)
            if isinstance(cause, FabricError):
                raise cause from None
            raise

    # -- the fleet ----------------------------------------------------------------------------------
    def records(self, statuses: Iterable[str] | None = None) -> list[RegistryRecord]:
        """The registry's records (``fabric.store.RegistryRecord``), collected ones excluded."""
        return self._get(self._actor(REGISTRY).records.remote(None if statuses is None else list(statuses)))

    def nodes(self, statuses: Iterable[str] | None = None) -> list[NodeRecord]:
        """Every node the registry holds, as ``fabric.core.placement.NodeRecord``, with ``running``: the
        fabric calls running there now; ``jobs``: the jobs bound there; and ``spare`` (with its
        reservation) as the spare reconciler tagged it: a spare that took a job is no spare from
        then on. Without a scheduler (or one that does not answer) ``jobs`` is empty and ``spare``
        is the node's launch label."""
        running = self._running()
        now = time.time()
        records = [r.to_node_record(now, running=running.get(r.node_id, 0)) for r in self.records(statuses)]
        api = self._scheduler_api_if_up()
        if api is None:
            return records
        try:
            fleet, jobs = api.nodes(), api.job_statuses()
        except Exception:  # a scheduler restarting or hung: the registry's view alone
            return records
        return with_scheduler_view(records, fleet, jobs)

    def node(self, node: str) -> NodeRecord:
        """One node by id, id prefix or name (the newest record of that name)."""
        rec: RegistryRecord = self._get(self._actor(REGISTRY).record.remote(node))
        return rec.to_node_record(time.time(), running=self._running().get(rec.node_id, 0))

    def collected(self) -> list[RegistryRecord]:
        """Records garbage-collected after their drain grace (status ``dead``)."""
        return self._get(self._actor(REGISTRY).collected.remote())

    def fleet_events(self, since: int = 0) -> tuple[int, list[FleetEvent]]:
        """The health monitor's fleet events after number ``since`` and the newest number
        (``fabric.core.events``); the fabric's one log is ``events`` (``EventsSurface``)."""
        return self._get(self._actor(HEALTH).events.remote(since))

    def subscribe(self, actor_name: str, method: str = "on_fleet_event") -> None:
        """Push every future fleet event to the named actor's ``method`` (namespace ``fabric``)."""
        self._get(self._actor(HEALTH).subscribe.remote(actor_name, method))

    def health(self) -> dict[str, Any]:
        """The health monitor's view: per node status, last beat, flap histories."""
        return self._get(self._actor(HEALTH).status.remote())

    # -- the scheduler's surface (present when the scheduler is installed) -------------------------
    def _running(self) -> dict[str, int]:
        """Fabric calls running now per node, as Ray counts them: every call (leased, spilled, or
        placed by the scheduler) holds one ``fabric.slots`` while it runs, so a node's slots in use
        are exactly its running calls. Not the scheduler's reservations: a lease reserves slots
        whether or not a call uses them."""
        return running_calls()

    def select_worker(self, req: Requirement) -> NodeAssignment:
        return self._scheduler_api().select_worker(req)

    def scheduler_nodes(self) -> list[NodeRecord]:
        """The scheduler's fleet view: a ``NodeRecord`` per node it places on, prospective ones
        (provisions still launching) included, each with its pool, spare mark and claimed ports.
        ``nodes()`` is the registry's view instead; ``RuntimeError`` when the scheduler is not up."""
        return self._scheduler_api().nodes()

    @property
    def fallback_count(self) -> int:
        """Calls that ran below their ``min_tier``; this process's own calls on leased slots are
        counted before it is read (``sessions.flush_calls``)."""
        sessions.flush_calls()
        return int(self._scheduler_api().fallback_count())

    def metrics(self) -> dict[str, object]:
        """The scheduler's counters (this process's own calls on leased slots counted first)."""
        sessions.flush_calls()
        return self._scheduler_api().metrics()

    # -- long-running jobs -------------------------------------------------------------------------------
    def jobs(self) -> list[JobStatus]:
        """Every job the scheduler keeps (``JobStatus``), oldest first."""
        return self._scheduler_api().job_statuses()

    def job(self, job_id: str) -> JobStatus:
        """One job's ``JobStatus`` (``JobNotFoundError`` for an unknown id)."""
        return self._scheduler_api().job_status(job_id)

    def job_handle(self, job_id: str) -> JobHandle[Any]:
        """A ``JobHandle`` to call a job by id (from another process, say)."""
        from fabric.runtime.jobs import JobHandle

        st = self.job(job_id)
        return JobHandle(st.job_id, st.name)

    def job_events(self, since: int = 0, kinds: Iterable[str] | None = None) -> list[FabricEvent]:
        """Job and bundle events after number ``since`` (each: seq, kind, at, data)."""
        return self._scheduler_api().job_events(since, read_kinds(kinds))

    # -- bundles (docs/jobs.md) -----------------------------------------------------------------------------
    def _bundle_blob(self, bundle: Bundle) -> bytes:
        from fabric.core.jobs.bundles import Bundle
        from fabric.core.errors import InvalidSpecError
        from fabric.rayio.instances import pickle_by_value

        if not isinstance(bundle, Bundle):
            raise InvalidSpecError(f"expected a fabric.Bundle, got {type(bundle).__name__}", field="bundle")
        classes = [getattr(j.cls, "cls", j.cls) for j in bundle.jobs if j.cls is not None]
        return pickle_by_value(bundle, classes)

    def validate_bundle(self, bundle: Bundle) -> ValidationReport:
        """Every error and warning at once (``ValidationReport``): shape, names, rules, satisfiability."""
        return self._scheduler_api().validate_bundle(self._bundle_blob(bundle))

    def validate_bundle_admission(self, bundle: Bundle) -> Admission:
        """Would each replica place right now? (``Admission``: ok | validation_errors | no_capacity)."""
        return self._scheduler_api().validate_bundle_admission(self._bundle_blob(bundle))

    def place_dry_run(self, bundle: Bundle, replica: int = 0, job: str | None = None) -> Decision:
        """One replica's job through the engine with its trace (``Decision``); nothing acts."""
        name = job if job is not None else bundle.jobs[0].name
        return self._scheduler_api().place_dry_run(self._bundle_blob(bundle), replica, name)

    def create_bundle(self, bundle: Bundle) -> BundleStatus:
        """Validate, store and place a bundle (``InvalidSpecError`` naming every error; nothing stored then)."""
        return self._scheduler_api().create_bundle(self._bundle_blob(bundle))

    def update_bundle(self, bundle: Bundle) -> BundleStatus:
        """Revive a bundle with a new spec: restart histories and the broken mark cleared."""
        return self._scheduler_api().update_bundle(self._bundle_blob(bundle))

    def delete_bundle(self, bundle_id: str) -> BundleStatus:
        return self._scheduler_api().delete_bundle(bundle_id)

    def bundle(self, bundle_id: str) -> BundleStatus:
        """A bundle's ``BundleStatus`` (state live|broken|deleting, replicas, jobs, reasons)."""
        return self._scheduler_api().bundle_status(bundle_id)

    def bundles(self) -> list[BundleStatus]:
        return self._scheduler_api().bundle_statuses()

    def start_bundle_job(self, bundle_id: str, replica: int, job: str) -> str:
        """Activate a ``start_mode="manual"`` job (placed now)."""
        return self._scheduler_api().start_bundle_job(bundle_id, replica, job)

    def stop_bundle_job(self, bundle_id: str, replica: int, job: str) -> str:
        """Make a job dormant for future placements (a running instance keeps running)."""
        return self._scheduler_api().stop_bundle_job(bundle_id, replica, job)

    def cordon(self, node: str) -> str:
        api = self._scheduler_api_if_up()
        if api is not None:
            return api.cordon(node)
        rec: RegistryRecord = self._get(self._actor(REGISTRY).set_cordoned.remote(node, True))
        return rec.node_id

    def uncordon(self, node: str) -> str:
        api = self._scheduler_api_if_up()
        if api is not None:
            return api.uncordon(node)
        rec: RegistryRecord = self._get(self._actor(REGISTRY).set_cordoned.remote(node, False))
        return rec.node_id


__all__ = ["FabricHandle", "NodeNotFoundError", "SettingsConflictError", "down", "running_calls", "up"]

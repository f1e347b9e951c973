"""Bringing the fabric up on a Ray cluster, and the handle drivers hold (API.md § Running the fabric).

``up(settings)`` gets or creates the fabric's detached, named actors in namespace ``fabric``
(registry, health monitor, and the scheduler and dispatcher when installed), so it is idempotent
across drivers: a second driver or a ``ray job submit`` script calling ``up()`` finds the same
fabric. The settings of the first ``up`` stay in force (kept in the registry's state under
``fabric.core.settings``); a later ``up`` with other explicit settings raises ``SettingsConflictError``
rather than silently keeping the old ones, and ``up()`` without settings attaches to what runs.
The actors restart on failure (``max_restarts=-1``) and sit on the head node through a sliver of
Ray's head-node marker resource, never pinned to a node id. ``down()`` stops the fabric's actors,
not Ray; the registry's file stays, so a later ``up()`` on the same cluster picks up where it was
(its first ``up`` sets the settings in force anew).
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from fabric.core.errors import NodeNotFoundError, SettingsConflictError, SettingsError
from fabric.core.names import (
    DISPATCHER, HEAD_RESOURCE, HEALTH, NAMESPACE, OPERATOR, PROBE_PREFIX, REGISTRY, SCHEDULER, SETTINGS_KEY, SPARES_PREFIX,
)
from fabric.core.settings import FabricSettings
from fabric.runtime import session as sessions
from fabric.runtime.events import EventsSurface
from fabric.runtime.moves import MovesSurface
from fabric.runtime.spares import SparesSurface

_HEAD = {HEAD_RESOURCE: 0.001}


def _get_actor(name: str) -> Any | None:
    return sessions.driver().get_actor(name)


def _start(driver: Any, actor_class: Any, name: str, *args: Any) -> Any:
    """Get or create one of the fabric's actors: detached, restarted on failure, on the head."""
    return driver.start_actor(actor_class, name, *args, lifetime="detached", num_cpus=0, resources=dict(_HEAD),
                              max_restarts=-1, max_task_retries=-1)


def up(settings: FabricSettings | dict | None = None, *, scheduler: bool = True, timeout_s: float = 60.0) -> "FabricHandle":
    """Get or create the fabric's actors on the connected Ray cluster (``ray.init()`` first, or this
    connects the way ``ray.init()`` does) and return a handle once the health monitor has ticked.
    ``scheduler=False`` brings up only the fleet (registry, health monitor, probes).

    ``settings=None`` brings the fabric up with defaults, or attaches to the running fabric with the
    settings in force. Explicit settings on a fabric already up must equal the ones in force (then
    this is idempotent), else ``SettingsConflictError`` names the differing fields."""
    driver = sessions.driver()
    driver.init()
    explicit = settings is not None
    settings = FabricSettings.load(settings)
    from fabric.providers.local import profile_problems

    problems = profile_problems(settings)
    if problems:  # a shape the local provider could not start: refused before anything runs
        raise SettingsError(problems)
    from actors.health import HealthMonitorActor
    from actors.registry import RegistryActor

    already_up = driver.get_actor(REGISTRY) is not None
    from fabric.store.paths import configured_store_paths

    configured = configured_store_paths(settings)
    registry = _start(driver, RegistryActor, REGISTRY, None if configured is None else str(configured.nodes))
    settings = _settings_in_force(driver, registry, settings, explicit=explicit, already_up=already_up, timeout_s=timeout_s)
    as_dict = settings.model_dump(mode="json")
    health = _start(driver, HealthMonitorActor, HEALTH, as_dict)
    waits = [registry.ping.remote(), health.ready.remote()]
    if scheduler:
        from actors.dispatcher import DispatcherActor
        from actors.scheduler import SchedulerActor

        _start(driver, SchedulerActor, SCHEDULER, as_dict)
        _start(driver, DispatcherActor, DISPATCHER)
        from fabric.runtime.spares import live_list, start_reconcilers

        reconcilers = start_reconcilers(driver, settings, [e.pool for e in live_list(driver, registry, settings, timeout_s)])
        waits += [r.ping.remote() for r in reconcilers]
        if settings.api.enabled:  # the operator API (gRPC + JSON view); a failed bind is raised here
            from actors.operator import OperatorActor

            waits.append(_start(driver, OperatorActor, OPERATOR, as_dict).address.remote())
    driver.get(waits, timeout_s)
    sessions.use_settings(settings, driver)
    return FabricHandle()


def _settings_in_force(driver: Any, registry: Any, requested: FabricSettings, *, explicit: bool, already_up: bool,
                       timeout_s: float) -> FabricSettings:
    """The settings the fabric runs with. On the first ``up`` (no registry before this call) the
    requested ones, stored in the registry's state; on a later one the stored ones, which explicit
    settings must match. A stored value that no longer loads (an older schema) counts as none."""
    in_force = None
    if already_up:
        stored = driver.get(registry.get_state.remote(SETTINGS_KEY), timeout_s)
        if stored is not None:
            try:
                in_force = FabricSettings.load(stored)
            except SettingsError:
                in_force = None
    if in_force is None:
        driver.get(registry.put_state.remote(SETTINGS_KEY, requested.model_dump(mode="json")), timeout_s)
        return requested
    if explicit:
        differing = in_force.differing_fields(requested)
        if differing:
            raise SettingsConflictError(differing)
    return in_force


def down(timeout_s: float = 30.0) -> list[str]:
    """Stop the fabric's actors (probes included), not Ray. Returns the names stopped. This
    process's session forgets their handles and its leases: a later call finds the fabric anew."""
    driver = sessions.driver()
    if not driver.is_initialized():
        return []
    names = driver.named_actors()
    if SCHEDULER in names:  # migrations in flight are rolled back (or marked lost) within their 5 s grace
        try:
            driver.get(driver.get_actor(SCHEDULER).close_migrations.remote(5.0), min(timeout_s, 10.0))
        except Exception as exc:
            print(f"[fabric.down] closing migrations failed: {type(exc).__name__}: {exc}")
    if SCHEDULER in names:  # the nodes providers made go first, while the scheduler that made them is up
        try:
            driver.get(driver.get_actor(SCHEDULER).close_providers.remote(), timeout_s)
        except Exception as exc:
            print(f"[fabric.down] terminating provisioned nodes failed: {type(exc).__name__}: {exc}")
    order = sorted(n for n in names if n.startswith(SPARES_PREFIX))
    order += [n for n in (OPERATOR, HEALTH, SCHEDULER, DISPATCHER) if n in names]
    order += sorted(n for n in names if n.startswith(PROBE_PREFIX))
    order += [n for n in (REGISTRY,) if n in names]
    stopped = []
    for name in order:
        handle = driver.get_actor(name)
        if handle is not None:
            driver.kill(handle)
            stopped.append(name)
    sessions.session(driver).disconnect()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(driver.get_actor(n) is not None for n in stopped):
        time.sleep(0.1)
    return stopped


def running_calls() -> dict[str, int]:
    """Per alive node id: ``fabric.slots`` in use (total minus available, from Ray's GCS)."""
    return sessions.driver().slots_in_use()


class FabricHandle(EventsSurface, SparesSurface, MovesSurface):
    """A driver's view of the running fabric. Cheap to create; every call asks the actors."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s

    def _actor(self, name: str) -> Any:
        handle = _get_actor(name)
        if handle is None:
            raise RuntimeError(f"the fabric is not up on this Ray cluster (no actor {name!r} in namespace {NAMESPACE!r}): call fabric.up()")
        return handle

    def _get(self, ref: Any) -> Any:
        return sessions.driver().get(ref, self.timeout_s)

    # -- the fleet ----------------------------------------------------------------------------------
    def records(self, statuses: Iterable[str] | None = None) -> list[Any]:
        """The registry's records (``fabric.store.RegistryRecord``), collected ones excluded."""
        return self._get(self._actor(REGISTRY).records.remote(None if statuses is None else list(statuses)))

    def nodes(self, statuses: Iterable[str] | None = None) -> list[Any]:
        """Every node the registry holds, as ``fabric.core.placement.NodeRecord``, with ``running``: the
        fabric calls running there now."""
        running = self._running()
        now = time.time()
        return [r.to_node_record(now, running=running.get(r.node_id, 0)) for r in self.records(statuses)]

    def node(self, node: str) -> Any:
        """One node by id, id prefix or name (the newest record of that name)."""
        rec = self._get(self._actor(REGISTRY).record.remote(node))
        return rec.to_node_record(time.time(), running=self._running().get(rec.node_id, 0))

    def collected(self) -> list[Any]:
        """Records garbage-collected after their drain grace (status ``dead``)."""
        return self._get(self._actor(REGISTRY).collected.remote())

    def fleet_events(self, since: int = 0) -> tuple[int, list[Any]]:
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
    def _scheduler(self) -> Any | None:
        return _get_actor(SCHEDULER)

    def _running(self) -> dict[str, int]:
        """Fabric calls running now per node, as Ray counts them: every call (leased, spilled, or
        placed by the scheduler) holds one ``fabric.slots`` while it runs, so a node's slots in use
        are exactly its running calls. Not the scheduler's reservations: a lease reserves slots
        whether or not a call uses them."""
        return running_calls()

    def select_worker(self, req: Any) -> Any:
        return self._get(self._actor(SCHEDULER).select_worker.remote(req))

    @property
    def fallback_count(self) -> int:
        """Calls that ran below their ``min_tier``; this process's own calls on leased slots are
        counted before it is read (``sessions.flush_calls``)."""
        sessions.flush_calls()
        return int(self._get(self._actor(SCHEDULER).fallback_count.remote()))

    def metrics(self) -> dict[str, Any]:
        """The scheduler's counters (this process's own calls on leased slots counted first)."""
        sessions.flush_calls()
        return self._get(self._actor(SCHEDULER).metrics.remote())

    # -- long-running jobs -------------------------------------------------------------------------------
    def jobs(self) -> list[Any]:
        """Every job the scheduler keeps (``JobStatus``), oldest first."""
        return self._get(self._actor(SCHEDULER).job_statuses.remote())

    def job(self, job_id: str) -> Any:
        """One job's ``JobStatus`` (``JobNotFoundError`` for an unknown id)."""
        return self._get(self._actor(SCHEDULER).job_status.remote(job_id))

    def job_handle(self, job_id: str) -> Any:
        """A ``JobHandle`` to call a job by id (from another process, say)."""
        from fabric.runtime.jobs import JobHandle

        st = self.job(job_id)
        return JobHandle(st.job_id, st.name)

    def job_events(self, since: int = 0, kinds: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Job and bundle events after number ``since`` (each: seq, kind, at, data)."""
        return self._get(self._actor(SCHEDULER).job_events.remote(since, list(kinds) if kinds else None))

    # -- bundles (API.md § Bundles) ------------------------------------------------------------------------
    def _bundle_blob(self, bundle: Any) -> bytes:
        from fabric.core.jobs.bundles import Bundle
        from fabric.core.errors import InvalidSpecError
        from fabric.rayio.instances import pickle_by_value

        if not isinstance(bundle, Bundle):
            raise InvalidSpecError(f"expected a fabric.Bundle, got {type(bundle).__name__}", field="bundle")
        classes = [getattr(j.cls, "cls", j.cls) for j in bundle.jobs if j.cls is not None]
        return pickle_by_value(bundle, classes)

    def validate_bundle(self, bundle: Any) -> Any:
        """Every error and warning at once (``ValidationReport``): shape, names, rules, satisfiability."""
        return self._get(self._actor(SCHEDULER).validate_bundle.remote(self._bundle_blob(bundle)))

    def validate_bundle_admission(self, bundle: Any) -> Any:
        """Would each replica place right now? (``Admission``: ok | validation_errors | no_capacity)."""
        return self._get(self._actor(SCHEDULER).validate_bundle_admission.remote(self._bundle_blob(bundle)))

    def place_dry_run(self, bundle: Any, replica: int = 0, job: str | None = None) -> Any:
        """One replica's job through the engine with its trace (``Decision``); nothing acts."""
        name = job if job is not None else bundle.jobs[0].name
        return self._get(self._actor(SCHEDULER).place_dry_run.remote(self._bundle_blob(bundle), replica, name))

    def create_bundle(self, bundle: Any) -> Any:
        """Validate, store and place a bundle (``InvalidSpecError`` naming every error; nothing stored then)."""
        return self._get(self._actor(SCHEDULER).create_bundle.remote(self._bundle_blob(bundle)))

    def update_bundle(self, bundle: Any) -> Any:
        """Revive a bundle with a new spec: restart histories and the broken mark cleared."""
        return self._get(self._actor(SCHEDULER).update_bundle.remote(self._bundle_blob(bundle)))

    def delete_bundle(self, bundle_id: str) -> Any:
        return self._get(self._actor(SCHEDULER).delete_bundle.remote(bundle_id))

    def bundle(self, bundle_id: str) -> Any:
        """A bundle's ``BundleStatus`` (state live|broken|deleting, replicas, jobs, reasons)."""
        return self._get(self._actor(SCHEDULER).bundle_status.remote(bundle_id))

    def bundles(self) -> list[Any]:
        return self._get(self._actor(SCHEDULER).bundle_statuses.remote())

    def start_bundle_job(self, bundle_id: str, replica: int, job: str) -> str:
        """Activate a ``start_mode="manual"`` job (placed now)."""
        return self._get(self._actor(SCHEDULER).start_bundle_job.remote(bundle_id, replica, job))

    def stop_bundle_job(self, bundle_id: str, replica: int, job: str) -> str:
        """Make a job dormant for future placements (a running instance keeps running)."""
        return self._get(self._actor(SCHEDULER).stop_bundle_job.remote(bundle_id, replica, job))

    def cordon(self, node: str) -> str:
        sched = self._scheduler()
        if sched is not None:
            return self._get(sched.cordon.remote(node))
        return self._get(self._actor(REGISTRY).set_cordoned.remote(node, True)).node_id

    def uncordon(self, node: str) -> str:
        sched = self._scheduler()
        if sched is not None and hasattr(sched, "uncordon"):
            return self._get(sched.uncordon.remote(node))
        return self._get(self._actor(REGISTRY).set_cordoned.remote(node, False)).node_id


__all__ = ["FabricHandle", "NodeNotFoundError", "SettingsConflictError", "down", "up"]

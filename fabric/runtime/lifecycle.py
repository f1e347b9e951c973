"""Bringing the fabric's actors up on a Ray cluster and stopping them.

``bring_up(settings)`` gets or creates the fabric's detached, named actors in namespace ``fabric``
(registry, health monitor, and the scheduler and dispatcher when installed), so it is idempotent
across drivers: a second driver or a ``ray job submit`` script bringing it up finds the same
fabric. The settings of the first bring-up stay in force (kept in the registry's state under
``fabric.core.settings``); a later one with other explicit settings raises ``SettingsConflictError``
rather than silently keeping the old ones, and one without settings attaches to what runs. The
actors restart on failure (``max_restarts=-1``) and sit on the head node through a sliver of Ray's
head-node marker resource, never pinned to a node id. ``down()`` stops every job that has not
ended (through the scheduler, as a job's own ``stop()`` does, and waits until each is ``stopped``:
the job store records them so, and a later bring-up starts none of them), then terminates the nodes
its providers started and stops the fabric's actors. ``keep_jobs=True`` leaves the job instances
running for a later bring-up to re-adopt: each serves on only while its lease lasts
(``fence.lease_ttl_s`` without a renewal from the scheduler), then ends its own process, and that
later bring-up recovers those by their policy. ``keep_nodes=True`` leaves the provider-started nodes
running, for a later bring-up to adopt. Ray itself and the nodes that joined it stay. The registry's
file stays, so a later bring-up on the same cluster picks up where it was.

``fabric.up`` is ``bring_up`` and a ``FabricHandle`` (``fabric.runtime.control``). This module sits
below the handle and the call paths (``dispatch``, ``jobs``), so that a ``.remote()`` can bring the
fabric up with defaults (``connected``) without the session importing the handle.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from fabric.core.errors import JobNotFoundError, SettingsConflictError, SettingsError
from fabric.core.names import (
    DISPATCHER, HEAD_RESOURCE, HEALTH, HOT_SPARES_KEY, OPERATOR, PROBE_PREFIX, REGISTRY, SCHEDULER, SETTINGS_KEY,
    SPARES_PREFIX, spares_actor_name,
)
from fabric.core.settings import FabricSettings
from fabric.rayio.scheduler_client import SchedulerClient
from fabric.runtime import session as sessions

__all__ = ["DownResult", "JobsDown", "bring_up", "connected", "down", "inherited_store", "live_list", "running_calls",
           "start_actor", "start_reconcilers"]

_HEAD = {HEAD_RESOURCE: 0.001}
SCHEDULER_ENV = {"RAY_kill_child_processes_on_worker_exit": "0"}
"""The scheduler's process is the parent of the nodes the ``local`` provider starts, and Ray kills a
worker's child processes when the worker exits (``ray.kill`` included). Without that, those nodes
end only when a provider terminates them (``down()``, scaling): they outlive a scheduler that is
stopped by ``down(keep_nodes=True)`` or that crashed, and the next scheduler adopts them."""


def start_actor(driver: Any, actor_class: Any, name: str, *args: Any, env: dict[str, str] | None = None) -> Any:
    """Get or create one of the fabric's actors: detached, restarted on failure, on the head
    (``env``: environment variables of its process)."""
    extra: dict[str, Any] = {"runtime_env": {"env_vars": dict(env)}} if env else {}
    return driver.start_actor(actor_class, name, *args, lifetime="detached", num_cpus=0, resources=dict(_HEAD),
                              max_restarts=-1, max_task_retries=-1, **extra)


def start_reconcilers(driver: Any, settings: FabricSettings, pools: Iterable[str]) -> list[Any]:
    """Get or create each pool's hot-spare reconciler (``fabric.spares.<pool>``); their handles."""
    from actors.spares import SpareReconcilerActor

    as_dict = settings.model_dump(mode="json")
    return [start_actor(driver, SpareReconcilerActor, spares_actor_name(pool), pool, as_dict) for pool in pools]


def live_list(driver: Any, registry: Any, settings: FabricSettings, timeout_s: float) -> tuple[Any, ...]:
    """The live hot-spare list (the registry's, else the settings')."""
    from actors.spares import live_entries

    return live_entries(settings, driver.get(registry.get_state.remote(HOT_SPARES_KEY), timeout_s))


def bring_up(settings: FabricSettings | dict | None = None, *, scheduler: bool = True,
             timeout_s: float = 60.0) -> FabricSettings:
    """Get or create the fabric's actors on the connected Ray cluster (``ray.init()`` first, or this
    connects the way ``ray.init()`` does), wait until the health monitor has ticked, and hand the
    settings in force to this process's session; those settings. ``scheduler=False`` brings up only
    the fleet (registry, health monitor, probes). See the module docstring for ``settings``."""
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
    registry = start_actor(driver, RegistryActor, REGISTRY, None if configured is None else str(configured.nodes))
    settings = _settings_in_force(driver, registry, settings, explicit=explicit, already_up=already_up, timeout_s=timeout_s)
    as_dict = settings.model_dump(mode="json")
    health = start_actor(driver, HealthMonitorActor, HEALTH, as_dict)
    waits = [registry.ping.remote(), health.ready.remote()]
    if scheduler:
        from actors.dispatcher import DispatcherActor
        from actors.scheduler import SchedulerActor

        start_actor(driver, SchedulerActor, SCHEDULER, as_dict, env=SCHEDULER_ENV)
        start_actor(driver, DispatcherActor, DISPATCHER)
        reconcilers = start_reconcilers(driver, settings, [e.pool for e in live_list(driver, registry, settings, timeout_s)])
        waits += [r.ping.remote() for r in reconcilers]
        if settings.api.enabled:  # the operator API (gRPC + JSON view); a failed bind is raised here
            from actors.operator import OperatorActor

            waits.append(start_actor(driver, OperatorActor, OPERATOR, as_dict).address.remote())
    driver.get(waits, timeout_s)
    sessions.use_settings(settings, driver)
    return settings


def inherited_store(resume: bool = False, timeout_s: float = 60.0) -> dict[str, Any] | None:
    """What the scheduler found of another Ray cluster's jobs in its store (a cold start on the
    store of a cluster that is gone: ``actors.inherited``), those jobs resumed first when
    ``resume``; None when nothing (or no scheduler runs). Its ``line`` is what ``fabric up`` prints."""
    driver = sessions.driver()
    handle = driver.get_actor(SCHEDULER)
    if handle is None:
        return None
    found = SchedulerClient(handle, lambda ref, _: driver.get(ref, timeout_s)).inherited_store(bool(resume))
    return None if found is None else dict(found)


def connected() -> sessions.Session:
    """This process's connected session, the fabric brought up with defaults when it is not up."""
    return sessions.current(bring_up=bring_up)


def _settings_in_force(driver: Any, registry: Any, requested: FabricSettings, *, explicit: bool, already_up: bool,
                       timeout_s: float) -> FabricSettings:
    """The settings the fabric runs with. On the first bring-up (no registry before this call) the
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


JOB_POLL_S = 0.2
"""How often ``down`` reads the jobs' states while it waits for their stops."""


@dataclass(frozen=True)
class JobsDown:
    """What ``down`` did to the jobs. ``kept``: left running (``keep_jobs``), their leases lasting
    ``lease_ttl_s`` (None: not known) without the scheduler. Otherwise ``stopped``: the jobs that
    ended (``name (job_id)``), ``not_stopped``: those still not ended at the timeout, with their state;
    ``error``: why the jobs could not be listed or stopped (empty when they could). ``scheduler``:
    whether a scheduler ran at all (a fleet-only fabric runs no jobs)."""

    kept: bool = False
    scheduler: bool = True
    stopped: tuple[str, ...] = ()
    not_stopped: tuple[str, ...] = ()
    error: str = ""
    lease_ttl_s: float | None = None

    @property
    def ok(self) -> bool:
        """Every job the fabric ran has ended, or was kept on purpose."""
        return self.kept or (not self.not_stopped and not self.error)


class DownResult(list[str]):
    """The actor names ``down`` stopped (a list, as before), with what it did to the jobs (``jobs``)."""

    def __init__(self, names: Iterable[str] = (), jobs: JobsDown | None = None) -> None:
        super().__init__(names)
        self.jobs = jobs if jobs is not None else JobsDown(scheduler=False)


def _label(status: Any) -> str:
    return f"{status.name} ({status.job_id})"


def _ended(status: Any) -> bool:
    from fabric.core.jobs.states import JOB_LIFECYCLE

    return JOB_LIFECYCLE.is_terminal(status.state)


def stop_jobs(client: SchedulerClient, timeout_s: float, progress: Callable[[str], None] | None = None) -> JobsDown:
    """Ask the scheduler to stop every job that has not ended (bundles' jobs too: each is a job of
    the book), then wait, ``timeout_s`` at most, until each has ended; which did and which did not.
    ``progress`` hears ``stopping N jobs...`` before the wait and ``stopped N jobs`` (or which did
    not stop in time) after it."""
    deadline = time.monotonic() + timeout_s
    live = {s.job_id: s for s in client.job_statuses() if not _ended(s)}
    if not live:
        return JobsDown()
    if progress is not None:
        progress(f"stopping {len(live)} job{'s' if len(live) != 1 else ''}...")
    for job_id in live:
        try:
            client.stop_job(job_id)
        except JobNotFoundError:  # forgotten meanwhile (its bundle deleted): nothing left of it
            pass
    pending = set(live)
    latest = dict(live)
    while True:
        seen = {s.job_id: s for s in client.job_statuses()}
        latest.update({j: seen[j] for j in pending if j in seen})
        pending = {j for j in pending if j in seen and not _ended(seen[j])}
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(JOB_POLL_S)
    done = JobsDown(stopped=tuple(_label(live[j]) for j in live if j not in pending),
                    not_stopped=tuple(f"{_label(latest[j])}: {latest[j].state}" for j in live if j in pending))
    if progress is not None:
        count = f"{len(done.stopped)} job{'s' if len(done.stopped) != 1 else ''}"
        progress(f"stopped {count}" if not pending else
                 f"stopped {count} of {len(live)}; not stopped in time: {', '.join(done.not_stopped)}")
    return done


def _lease_ttl_s(driver: Any, timeout_s: float) -> float | None:
    """The job instances' lease in the settings in force (the registry's), None when not readable."""
    try:
        stored = driver.get(driver.get_actor(REGISTRY).get_state.remote(SETTINGS_KEY), min(timeout_s, 10.0))
        return FabricSettings.load(stored).fence.lease_ttl_s if stored is not None else FabricSettings().fence.lease_ttl_s
    except Exception:
        return None


def _jobs_down(driver: Any, names: Iterable[str], timeout_s: float, keep_jobs: bool,
               progress: Callable[[str], None] | None) -> JobsDown:
    """The jobs' part of ``down``: stopped and waited for, or kept (their lease read)."""
    present = set(names)
    if SCHEDULER not in present:
        return JobsDown(kept=keep_jobs, scheduler=False)
    if keep_jobs:
        return JobsDown(kept=True, lease_ttl_s=_lease_ttl_s(driver, timeout_s) if REGISTRY in present else None)
    try:
        client = SchedulerClient(driver.get_actor(SCHEDULER), lambda ref, _: driver.get(ref, min(timeout_s, 10.0)))
        return stop_jobs(client, timeout_s, progress)
    except Exception as exc:
        print(f"[fabric.down] stopping the jobs failed: {type(exc).__name__}: {exc}")
        return JobsDown(error=f"{type(exc).__name__}: {exc}")


def down(timeout_s: float = 30.0, *, keep_nodes: bool = False, keep_jobs: bool = False,
         progress: Callable[[str], None] | None = None) -> DownResult:
    """Stop the fabric: migrations in flight are closed, then every job that has not ended is
    stopped (waited for, ``timeout_s`` at most, until each is ``stopped``), then the nodes the
    fabric's providers started are terminated, then the fabric's actors (probes included) stop.

    ``keep_jobs``: the job instances keep running for a later bring-up to re-adopt, each only while
    its lease lasts (``fence.lease_ttl_s`` without the scheduler; then it ends its own process and
    that bring-up recovers the job by its policy). ``keep_nodes``: the provider-started nodes keep
    running (a later bring-up's providers adopt them). Ray itself, and the nodes that joined it
    (``fabric join``, ``ray start``), stay. ``progress`` hears the steps that take a while (the jobs'
    stops: how many, then how many stopped or which did not in time).

    Returns the actor names stopped (a ``DownResult``, whose ``jobs`` says what happened to the
    jobs; a job that did not stop in time is printed too, when no ``progress`` hears it). This process's session forgets the
    actors' handles and its leases: a later call finds the fabric anew."""
    driver = sessions.driver()
    if not driver.is_initialized():
        return DownResult()
    names = driver.named_actors()
    if SCHEDULER in names:  # migrations in flight are rolled back (or marked lost) within their 5 s grace
        try:
            SchedulerClient(driver.get_actor(SCHEDULER), lambda ref, _: driver.get(ref, min(timeout_s, 10.0))).close_migrations(5.0)
        except Exception as exc:
            print(f"[fabric.down] closing migrations failed: {type(exc).__name__}: {exc}")
    jobs = _jobs_down(driver, names, timeout_s, keep_jobs, progress)  # while the scheduler that runs them is up
    if jobs.not_stopped and progress is None:  # progress heard it already
        print(f"[fabric.down] not stopped within {timeout_s:g} s: {', '.join(jobs.not_stopped)}")
    if SCHEDULER in names and not keep_nodes:  # the nodes providers made go next, while the scheduler that made them is up
        try:
            SchedulerClient(driver.get_actor(SCHEDULER), lambda ref, _: driver.get(ref, timeout_s)).close_providers()
        except Exception as exc:
            print(f"[fabric.down] terminating provisioned nodes failed: {type(exc).__name__}: {exc}")
    order = sorted(n for n in names if n.startswith(SPARES_PREFIX))
    order += [n for n in (OPERATOR, HEALTH, SCHEDULER, DISPATCHER) if n in names]
    order += sorted(n for n in names if n.startswith(PROBE_PREFIX))
    order += [n for n in (REGISTRY,) if n in names]
    stopped = DownResult(jobs=jobs)
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

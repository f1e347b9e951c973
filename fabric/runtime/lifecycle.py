"""Bringing the fabric's actors up on a Ray cluster and stopping them.

``bring_up(settings)`` gets or creates the fabric's detached, named actors in namespace ``fabric``
(registry, health monitor, and the scheduler and dispatcher when installed), so it is idempotent
across drivers: a second driver or a ``ray job submit`` script bringing it up finds the same
fabric. The settings of the first bring-up stay in force (kept in the registry's state under
``fabric.core.settings``); a later one with other explicit settings raises ``SettingsConflictError``
rather than silently keeping the old ones, and one without settings attaches to what runs. The
actors restart on failure (``max_restarts=-1``) and sit on the head node through a sliver of Ray's
head-node marker resource, never pinned to a node id. ``down()`` stops the fabric's actors and
terminates the nodes its providers started (``keep_nodes=True`` leaves those running, for a later
bring-up to adopt); Ray itself and the nodes that joined it stay. The registry's file stays, so a
later bring-up on the same cluster picks up where it was.

``fabric.up`` is ``bring_up`` and a ``FabricHandle`` (``fabric.runtime.control``). This module sits
below the handle and the call paths (``dispatch``, ``jobs``), so that a ``.remote()`` can bring the
fabric up with defaults (``connected``) without the session importing the handle.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from fabric.core.errors import SettingsConflictError, SettingsError
from fabric.core.names import (
    DISPATCHER, HEAD_RESOURCE, HEALTH, HOT_SPARES_KEY, OPERATOR, PROBE_PREFIX, REGISTRY, SCHEDULER, SETTINGS_KEY,
    SPARES_PREFIX, spares_actor_name,
)
from fabric.core.settings import FabricSettings
from fabric.rayio.scheduler_client import SchedulerClient
from fabric.runtime import session as sessions

__all__ = ["bring_up", "connected", "down", "live_list", "running_calls", "start_actor", "start_reconcilers"]

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


def down(timeout_s: float = 30.0, *, keep_nodes: bool = False) -> list[str]:
    """Stop the fabric's actors (probes included) and terminate every node the fabric's providers
    started; with ``keep_nodes`` those nodes keep running (a later bring-up's providers adopt them).
    Ray itself, and the nodes that joined it (``fabric join``, ``ray start``), stay. Returns the
    actor names stopped. This process's session forgets their handles and its leases: a later call
    finds the fabric anew."""
    driver = sessions.driver()
    if not driver.is_initialized():
        return []
    names = driver.named_actors()
    if SCHEDULER in names:  # migrations in flight are rolled back (or marked lost) within their 5 s grace
        try:
            SchedulerClient(driver.get_actor(SCHEDULER), lambda ref, _: driver.get(ref, min(timeout_s, 10.0))).close_migrations(5.0)
        except Exception as exc:
            print(f"[fabric.down] closing migrations failed: {type(exc).__name__}: {exc}")
    if SCHEDULER in names and not keep_nodes:  # the nodes providers made go first, while the scheduler that made them is up
        try:
            SchedulerClient(driver.get_actor(SCHEDULER), lambda ref, _: driver.get(ref, timeout_s)).close_providers()
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

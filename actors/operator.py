"""OperatorActor: the operator API's server on the head (issue 17; docs/operator-api.md).

The detached, named actor ``fabric.operator`` (namespace ``fabric``), started by ``fabric.up()`` on
the head like the scheduler. It runs its own asyncio event loop in a thread and serves there:

- gRPC ``fabric.operator.v1.Operator`` and ``fabric.operator.v1.Inspect`` (``fabric.api.server``,
  with the standard health service and server reflection) on ``api.host:api.port``, each RPC a
  call of the scheduler actor's methods through its ``AsyncSchedulerClient`` (``GetSettings``
  answers the settings the actor was started with; ``ListPools`` adds each pool's hot spares, asked of
  the spare reconcilers ``fabric.spares.<pool>``);
- the read-only JSON view ``GET /api/capabilities/nodes`` (``fabric.api.http_view.make_app``) on
  ``api.host:api.http_port``.

``ListNodes`` and the view list every node the registry holds, offline and dead ones too
(``every_node``), each with the scheduler's view of it where it has one.

Both take the bearer token in ``api_token`` (0600) in the store's folder (``store.path``'s, else
the registry's default store path's), made at the first start and kept across restarts. A
non-loopback ``api.host`` without ``api.allow_remote`` is refused here too (``SettingsError``
naming ``api.host``), not only by the settings. A start that failed (that refusal, a port in use)
leaves the actor up with the error: ``address()`` raises it, so ``fabric.up()`` reports it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import ray

from fabric.api.token import ensure_token, read_token, token_path
from fabric.core.errors import SettingsError, SettingsProblem
from fabric.core.names import NAMESPACE, SCHEDULER, SPARES_PREFIX
from fabric.core.scheduler_api import AsyncSchedulerApi
from fabric.core.settings import FabricSettings
from fabric.core.settings_api import ApiSettings, is_loopback, remote_refusal
from fabric.rayio.scheduler_client import AsyncSchedulerClient

if TYPE_CHECKING:  # pragma: no cover
    from fabric.api.inspect import SparesReader
    from fabric.api.server import EventsReader

START_TIMEOUT_S = 30.0


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def refuse_remote(api: ApiSettings) -> None:
    """``SettingsError`` naming ``api.host`` for a non-loopback host without ``api.allow_remote``."""
    host = api.host if isinstance(api.host, str) else ""
    if not host.strip() or (not api.allow_remote and not is_loopback(host)):
        raise SettingsError([SettingsProblem("remote_bind", "api.host", remote_refusal(host))])


def events_method() -> EventsReader:
    """The scheduler's event-log reader: ``events(since, kinds, limit)`` when it has one, else ``job_events``."""
    from actors.scheduler import Scheduler

    return "events" if callable(getattr(Scheduler, "events", None)) else "job_events"


async def spares_status() -> list[dict[str, Any]]:
    """Each running spare reconciler's ``status()`` (``fabric.spares.<pool>``), by name: what
    ``FabricHandle.spares`` answers a driver, for the API's ``ListPools``."""
    from ray.util import list_named_actors

    found = await asyncio.to_thread(list_named_actors, all_namespaces=True)
    names = sorted(a["name"] for a in found if a.get("namespace") == NAMESPACE and a["name"].startswith(SPARES_PREFIX))
    return [await ray.get_actor(n, namespace=NAMESPACE).status.remote() for n in names]


def every_node(scheduler: AsyncSchedulerApi) -> Callable[[], Any]:
    """The node list of ``ListNodes`` and the JSON view: every record of the registry actor, whatever
    its status, with the scheduler's live view and the jobs bound there (``fabric.core.node_view.every_node``)."""
    async def nodes() -> list[Any]:
        import time

        from fabric.core.names import REGISTRY
        from fabric.core.node_view import every_node as merge

        registry = ray.get_actor(REGISTRY, namespace=NAMESPACE)
        records: list[Any]
        records, fleet, jobs = await asyncio.gather(registry.records.remote(None), scheduler.nodes(), scheduler.job_statuses())
        now = time.time()
        return merge([r.to_node_record(now) for r in records], fleet, jobs)

    return nodes


async def start_servers(scheduler: AsyncSchedulerApi, api: ApiSettings, token: str, *, events: EventsReader = "job_events",
                        poll_s: float = 0.2, settings: Callable[[], FabricSettings] | None = None,
                        spares: SparesReader | None = None,
                        nodes: Callable[[], Any] | None = None) -> tuple[dict[str, str | None], list[Callable]]:
    """Start the gRPC server (and the JSON view when ``fabric.api.http_view`` is there) on the running
    loop: their addresses ``{"grpc": "host:port", "http": "host:port" | None}`` and their stoppers.
    ``settings``: the settings in force, for the API's ``GetSettings`` and ``ListPools``; ``spares``:
    the hot spares' status, for ``ListPools``; ``nodes``: what ``ListNodes`` and the view list (None:
    the scheduler's fleet)."""
    refuse_remote(api)
    from fabric.api.server import serve

    nodes = nodes or scheduler.nodes
    server, port = await serve(scheduler, token, api.host, api.port, events_method=events, poll_s=poll_s, settings=settings,
                               spares=spares, nodes=nodes)
    stoppers: list[Callable] = [lambda: server.stop(1.0)]
    addresses: dict[str, str | None] = {"grpc": _hostport(api.host, port), "http": None}
    try:
        from fabric.api.http_view import make_app
    except ImportError:
        return addresses, stoppers
    from aiohttp import web

    runner = web.AppRunner(make_app(nodes, token), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, api.host, api.http_port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        await server.stop(None)
        raise
    stoppers.append(runner.cleanup)
    sockets = getattr(getattr(site, "_server", None), "sockets", None) or ()
    http_port = sockets[0].getsockname()[1] if sockets else api.http_port
    addresses["http"] = _hostport(api.host, http_port)
    return addresses, stoppers


class Operator:
    """The actor's logic. ``scheduler`` (default: the scheduler actor's ``AsyncSchedulerClient``,
    its handle looked up on the first call) and ``store_path`` (default: the store's) are seams for tests."""

    def __init__(self, settings: dict | None = None, *, scheduler: AsyncSchedulerApi | None = None,
                 store_path: str | None = None, poll_s: float = 0.2) -> None:
        self.settings = FabricSettings.load(settings)
        self._scheduler_handle: Any = None
        self._scheduler: AsyncSchedulerApi = scheduler or AsyncSchedulerClient(self._scheduler_actor)
        self._token_file = token_path(store_path or self._store_path())
        self._token = ensure_token(self._token_file)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fabric-operator-api", daemon=True)
        self._thread.start()
        self._stoppers: list[Callable] = []
        self._error: BaseException | None = None
        self._addresses: dict[str, str | None] = {"grpc": None, "http": None}
        try:
            events = events_method() if scheduler is None else "job_events"
            self._addresses, self._stoppers = self._run(
                start_servers(self._scheduler, self.settings.api, self._token, events=events, poll_s=poll_s,
                              settings=self._settings, spares=spares_status if scheduler is None else None,
                              nodes=every_node(self._scheduler) if scheduler is None else None))
        except Exception as exc:  # kept: address() raises it (up() reports it); the actor stays up
            self._error = exc
            print(f"[fabric.operator] the operator API did not start: {type(exc).__name__}: {exc}")

    def _settings(self) -> FabricSettings:
        """The settings this fabric runs with (those ``fabric.up`` started the actor with)."""
        return self.settings

    def _store_path(self) -> Path:
        from fabric.rayio.adapter import RayAdapter
        from fabric.store.paths import configured_store_paths, store_paths

        configured = configured_store_paths(self.settings)
        return (configured or store_paths(self.settings, RayAdapter().gcs_address())).nodes

    def _run(self, coro: Any, timeout_s: float = START_TIMEOUT_S) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def _scheduler_actor(self) -> Any:
        """The scheduler's actor handle, looked up the first time a call needs it."""
        if self._scheduler_handle is None:
            self._scheduler_handle = ray.get_actor(SCHEDULER, namespace=NAMESPACE)
        return self._scheduler_handle

    # -- the actor's methods ------------------------------------------------------------------------------
    def address(self) -> dict[str, str | None]:
        """``{"grpc": "host:port", "http": "host:port" | None}``; the start's error when it failed."""
        if self._error is not None:
            raise self._error
        return dict(self._addresses)

    def token(self) -> str:
        """The bearer token (``fabric api-token``): whoever reaches this actor controls the cluster anyway."""
        return read_token(self._token_file)

    def token_path(self) -> str:
        return str(self._token_file)

    def ping(self) -> str:
        return "ok"

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        """Stop serving (tests; ``fabric.down`` kills the actor)."""
        async def stop() -> None:
            for stopper in reversed(self._stoppers):
                await stopper()

        if self._stoppers:
            self._run(stop())
            self._stoppers = []
        self._loop.call_soon_threadsafe(self._loop.stop)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=16)  # type: ignore[call-overload]  # Ray's stubs lack max_concurrency
class OperatorActor(Operator):
    """``Operator`` as the detached, named Ray actor (``fabric.operator``)."""


__all__ = ["Operator", "OperatorActor", "events_method", "refuse_remote", "spares_status", "start_servers"]

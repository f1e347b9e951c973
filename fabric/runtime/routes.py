"""Edge routes through Caddy (a port registry that writes the proxy config).

``FabricSettings.routes`` maps a host name to a job and the TCP host port it declares
(``fabric.core.settings_routes``). This module turns the routes and the live bindings (which node
runs each job now, at which address, with which ports claimed there) into a Caddy JSON config:

- ``route_plan(routes, jobs, nodes) -> RoutePlan`` (pure): per host, the upstream (``dial``
  ``ADDRESS:PORT`` of the job's node) or why it is unroutable (no such job, not running, a name
  several jobs share, a node with no known address, a port the fabric does not hold for it there).
- ``caddy_config(routes, jobs, nodes, admin=..., listen=...) -> dict`` (pure): that plan as Caddy's
  config: one HTTP server on ``listen``, one route per routable host (a ``host`` matcher and a
  ``reverse_proxy`` to its upstream), a last route answering 404 for every other host. Unroutable
  hosts are left out (``RoutePlan.unroutable`` says why). Automatic HTTPS is off (plain HTTP on
  the port given) and Caddy's admin API stays on ``admin`` with nothing persisted.
- ``RouteWatcher(handle, path, admin)``: ``refresh()`` reads the bindings once and, when the
  config differs from the one written last, rewrites ``path`` (atomically) and, with ``reload``,
  POSTs it to Caddy's admin API ``/load``; ``start()`` / ``run()`` poll every ``interval_s``
  (0.5 s), so a job that recovers on another node is routed there within a poll or two of the
  scheduler binding it. A failed read or load is reported and retried on the next poll.

``live_bindings(handle)`` is where Ray is read: the scheduler's jobs (``handle.jobs()``), its fleet
view (each node's claimed ports) and Ray's node table (each alive node's address).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "DEFAULT_ADMIN", "DEFAULT_LISTEN", "CaddyLoadError", "RouteNode", "RoutePlan", "RouteWatcher", "Upstream",
    "caddy_config", "describe", "live_bindings", "post_load", "route_plan", "write_config",
]

DEFAULT_ADMIN = "127.0.0.1:2019"
"""Caddy's own default admin address."""
DEFAULT_LISTEN = ":8080"
"""Where the generated server listens when nothing else is given."""
SERVER_NAME = "fabric_routes"
"""The HTTP server's name in the generated config."""
SERVING_STATES = ("running", "migrating")
"""Job states whose bound instance serves (a migrating job's source serves until the move is done)."""


class CaddyLoadError(RuntimeError):
    """Caddy's admin API did not take a config (unreachable, or it answered with an error)."""

    def __init__(self, admin: str, message: str, status: int | None = None) -> None:
        super().__init__(f"Caddy admin {admin}: {message}")
        self.admin = admin
        self.status = status


@dataclass(frozen=True)
class RouteNode:
    """What routing needs of one node: where it is reached and which host ports the fabric holds there."""

    node_id: str
    address: str | None
    """The node's address (Ray's ``NodeManagerAddress``); None: not alive in Ray's node table."""
    ports: frozenset[str] | None = None
    """Host ports the scheduler holds claimed on the node (``"18080/tcp"``); None: not known (no check)."""


@dataclass(frozen=True)
class Upstream:
    """A routable host: the job serving it and the address Caddy dials."""

    host: str
    job_id: str
    node_id: str
    dial: str


@dataclass(frozen=True)
class RoutePlan:
    """Per host (sorted): its upstream, or why it is unroutable."""

    routed: tuple[Upstream, ...] = ()
    unroutable: Mapping[str, str] = field(default_factory=dict)

    def config(self, admin: str = DEFAULT_ADMIN, listen: str = DEFAULT_LISTEN) -> dict[str, Any]:
        """This plan as a Caddy JSON config (see the module docstring)."""
        routes: list[dict[str, Any]] = [
            {"match": [{"host": [u.host]}],
             "handle": [{"handler": "reverse_proxy", "upstreams": [{"dial": u.dial}]}],
             "terminal": True}
            for u in self.routed
        ]
        routes.append({"handle": [{"handler": "static_response", "status_code": 404,
                                   "body": "no fabric route for this host\n"}]})
        return {
            "admin": {"listen": admin, "config": {"persist": False}},
            "apps": {"http": {"servers": {SERVER_NAME: {
                "listen": [listen],
                "automatic_https": {"disable": True},
                "routes": routes,
            }}}},
        }


def _value(state: Any) -> str:
    return str(getattr(state, "value", state))


def _dial(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _pick(route_job: str, jobs: Sequence[Any]) -> tuple[Any | None, str | None]:
    """The job a route names (by id first, else by name) that serves now, or None and why not."""
    matches = [j for j in jobs if j.job_id == route_job] or [j for j in jobs if j.name == route_job]
    if not matches:
        return None, f"no job named {route_job!r} or with that id"
    live = [j for j in matches if _value(j.state) in SERVING_STATES and j.binding is not None]
    if not live:
        states = sorted({_value(j.state) for j in matches})
        return None, f"job {route_job!r} has no running instance (state {', '.join(states)})"
    if len(live) == 1:
        return live[0], None
    bundles = {j.bundle_id for j in live}
    if len(bundles) == 1 and None not in bundles:  # one bundle's replicas: the primary, else its backup
        return min(live, key=lambda j: (j.replica, j.job_id)), None
    shown = ", ".join(sorted(j.job_id for j in live)[:5])
    return None, f"{len(live)} running jobs are named {route_job!r} ({shown}): name one by its job id"


def route_plan(routes: Mapping[str, Any], jobs: Iterable[Any], nodes: Iterable[RouteNode]) -> RoutePlan:
    """Where each route goes now. ``routes``: host -> ``RouteSettings`` (``job``, ``port``);
    ``jobs``: ``JobStatus`` objects (``job_id``, ``name``, ``state``, ``binding``, ``bundle_id``,
    ``replica``); ``nodes``: ``RouteNode`` per node (others' nodes count as having no address)."""
    job_list = list(jobs)
    by_id = {n.node_id: n for n in nodes}
    routed: list[Upstream] = []
    unroutable: dict[str, str] = {}
    for host in sorted(routes):
        r = routes[host]
        job, why = _pick(r.job, job_list)
        if job is None:
            unroutable[host] = why or "no job"
            continue
        node_id = job.binding.node_id
        node = by_id.get(node_id)
        token = f"{int(r.port)}/tcp"
        if node is None or not node.address:
            unroutable[host] = f"job {job.job_id} is bound to node {node_id[:12]}, which has no known address (not alive in Ray)"
        elif node.ports is not None and token not in node.ports:
            unroutable[host] = (f"port {token} is not held for job {job.job_id} on node {node_id[:12]}: "
                                f"the job does not declare it (ports=[{token!r}])")
        else:
            routed.append(Upstream(host=host, job_id=job.job_id, node_id=node_id, dial=_dial(node.address, int(r.port))))
    return RoutePlan(routed=tuple(routed), unroutable=unroutable)


def caddy_config(routes: Mapping[str, Any], jobs: Iterable[Any], nodes: Iterable[RouteNode],
                 admin: str = DEFAULT_ADMIN, listen: str = DEFAULT_LISTEN) -> dict[str, Any]:
    """The Caddy JSON config for ``route_plan(routes, jobs, nodes)`` (unroutable hosts left out:
    ``route_plan(...).unroutable`` says why)."""
    return route_plan(routes, jobs, nodes).config(admin=admin, listen=listen)


def describe(plan: RoutePlan | None) -> list[str]:
    """One line per host: ``HOST -> DIAL (job ID)`` or ``HOST unroutable: WHY``."""
    if plan is None:
        return []
    lines = [f"{u.host} -> {u.dial} (job {u.job_id})" for u in plan.routed]
    lines += [f"{host} unroutable: {why}" for host, why in sorted(plan.unroutable.items())]
    return sorted(lines)


# -- I/O ---------------------------------------------------------------------------------------------
def write_config(path: str | os.PathLike, config: Mapping[str, Any]) -> None:
    """Write ``config`` as JSON to ``path`` atomically (a reader never sees half a file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def post_load(admin: str, config: Mapping[str, Any], timeout_s: float = 5.0) -> None:
    """POST ``config`` to Caddy's admin API ``/load`` at ``admin`` (HOST:PORT); ``CaddyLoadError``
    when Caddy is unreachable or refuses it (with what Caddy said)."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"http://{admin}/load", data=json.dumps(config).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", "replace").strip()
        raise CaddyLoadError(admin, f"/load answered {exc.code}: {body[:500]}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        raise CaddyLoadError(admin, f"unreachable ({getattr(exc, 'reason', exc)})") from None


def live_bindings(handle: Any) -> tuple[list[Any], list[RouteNode]]:
    """The jobs (``handle.jobs()``) and a ``RouteNode`` per node of the scheduler's fleet view (its
    claimed ports) with its address from Ray's node table (alive nodes only)."""
    from fabric.rayio.adapter import RayAdapter

    jobs = handle.jobs()
    fleet = handle.scheduler_nodes()
    addresses = {v.node_id: v.address for v in RayAdapter().list_nodes() if v.alive and v.address}
    return jobs, [RouteNode(r.node_id, addresses.get(r.node_id), frozenset(r.ports)) for r in fleet]


class RouteWatcher:
    """Writes the Caddy config of the live bindings to ``path`` and keeps it current.

    ``routes``: host -> ``RouteSettings`` (default: the settings in force, ``handle.settings_in_force()``).
    ``bindings(handle) -> (jobs, nodes)``: default ``live_bindings``; ``post(admin, config)``:
    default ``post_load``; ``report(line)``: where a failed read or load is told (default: nowhere).
    Counters ``writes`` and ``loads`` say how often the file was rewritten and Caddy reloaded."""

    def __init__(self, handle: Any, path: str | os.PathLike, admin: str = DEFAULT_ADMIN, *,
                 routes: Mapping[str, Any] | None = None, listen: str = DEFAULT_LISTEN, interval_s: float = 0.5,
                 bindings: Callable[[Any], tuple[Sequence[Any], Sequence[RouteNode]]] | None = None,
                 post: Callable[[str, Mapping[str, Any]], None] | None = None,
                 report: Callable[[str], None] | None = None) -> None:
        if not isinstance(interval_s, (int, float)) or isinstance(interval_s, bool) or not interval_s > 0:
            raise ValueError(f"interval_s must be a positive number of seconds, got {interval_s!r}")
        self.handle = handle
        self.path = Path(path)
        self.admin = admin
        self.listen = listen
        self.interval_s = float(interval_s)
        self._routes = routes
        self._bindings = bindings or live_bindings
        self._post = post or post_load
        self._report = report or (lambda line: None)
        self.plan: RoutePlan | None = None
        self.config: dict[str, Any] | None = None
        self._written: dict[str, Any] | None = None
        self._loaded: dict[str, Any] | None = None
        self.writes = 0
        self.loads = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def routes(self) -> Mapping[str, Any]:
        if self._routes is None:
            self._routes = dict(self.handle.settings_in_force().routes)
        return self._routes

    def refresh(self, reload: bool = True) -> bool:
        """Read the bindings once; rewrite the file when the config changed and, with ``reload``,
        load it into Caddy when Caddy has not taken it yet. True when the file was rewritten.
        A read or load that fails raises (``run`` reports it and tries again next poll)."""
        jobs, nodes = self._bindings(self.handle)
        self.plan = route_plan(self.routes, jobs, nodes)
        self.config = self.plan.config(admin=self.admin, listen=self.listen)
        changed = self.config != self._written
        if changed:
            write_config(self.path, self.config)
            self._written = self.config
            self.writes += 1
        if reload and self.config != self._loaded:
            self._post(self.admin, self.config)
            self._loaded = self.config
            self.loads += 1
        return changed

    def run(self, stop: threading.Event | None = None, max_polls: int | None = None) -> None:
        """Poll until ``stop`` (or ``self.stop()``) is set, or ``max_polls`` polls ran."""
        stop = stop or self._stop
        polls = 0
        while not stop.is_set() and (max_polls is None or polls < max_polls):
            polls += 1
            writes = self.writes
            try:
                self.refresh(reload=True)
                self.last_error = None
            except Exception as exc:  # an actor restarting, Caddy not up yet: told, retried next poll
                why = f"{type(exc).__name__}: {exc}"
                if why != self.last_error:
                    self._report(f"fabric routes: {why}")
                self.last_error = why
            if self.writes != writes:  # the file changed (whether or not Caddy took it yet): where each host goes now
                for line in describe(self.plan):
                    self._report(line)
            stop.wait(self.interval_s)

    def start(self) -> "RouteWatcher":
        """Poll in a daemon thread until ``stop()``."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="fabric-route-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

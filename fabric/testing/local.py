"""``LocalFabric``: a real multi-node Ray cluster on this machine, one node per probe profile.

Each node is a real raylet (``ray.cluster_utils.Cluster``) started with its profile's Ray
resources and labels (exactly what ``fabric join --profile`` would give it) plus a
``fabric.io/profile`` label, so the node's ProbeActor reads the profile's recording: the whole
stack (probe -> labels/resources -> registry -> health -> scheduler -> dispatch) runs for real.
Ray's health checks are fast (500 ms x 3: a SIGKILLed raylet is declared dead in ~1.5 s).

It stops exactly what it started: its own cluster's processes (through the ``Cluster`` object,
which knows their pids) and its driver connection. Never ``ray stop``, never kill by name: other
clusters on the machine are left alone.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from fabric.core.settings import FabricSettings

FAST_HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}
FAST_FENCE = {"lease_ttl_s": 4.0, "renew_every_s": 1.0, "margin_s": 0.5}
"""The fence a LocalFabric runs with unless its settings name one: every process of a local fleet
shares one clock and one machine, so a short lease is safe, and a job whose node is killed waits
4.5 s for its replacement instead of the default 22 s."""


def with_fast_fence(settings: FabricSettings | dict | None) -> FabricSettings | dict:
    """``settings`` with ``FAST_FENCE`` where it names no ``fence`` (a dict, or none at all); a
    ``FabricSettings`` object is taken as it is."""
    if settings is None or isinstance(settings, dict):
        return {"fence": FAST_FENCE, **(settings or {})}
    return settings


@dataclass
class LocalNode:
    """One node of a LocalFabric: its name, profile, Ray node id and whether it is running."""

    name: str
    profile: str
    node_id: str
    ray_node: Any = field(repr=False, default=None)
    alive: bool = True
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


def node_spec(profile: str, name: str | None = None, *, max_slots: int | None = None, pool: str | None = None,
              pool_tier: str | None = None, zone: str | None = None, cloud: str | None = None) -> dict[str, Any]:
    """``Cluster.add_node`` arguments for a node of ``profile``: CPUs = its fabric slots, its
    capability resources and labels, and the profile label the probe actor reads. Built by the
    ``local`` provider's ``node_args``, so a LocalFabric node joins Ray as a provisioned one does."""
    from fabric.providers.local import node_args

    return node_args(profile, name=name, max_slots=max_slots, pool=pool, pool_tier=pool_tier, zone=zone,
                     cloud=cloud).cluster_kwargs()


def recording_node_spec(recording: str, name: str, *, max_slots: int | None = None, pool: str | None = None,
                        pool_tier: str | None = None, zone: str | None = None, cloud: str | None = None) -> dict[str, Any]:
    """Like ``node_spec`` for an arbitrary recording folder: no profile label (a label cannot hold a
    path); the raylet's environment carries ``FABRIC_RECORDING`` and its workers inherit it."""
    from fabric.providers.local import node_args

    return node_args(Path(recording), name=name, max_slots=max_slots, pool=pool, pool_tier=pool_tier,
                     zone=zone, cloud=cloud).cluster_kwargs()


def free_port() -> int:
    """A TCP port free on loopback now (the OS picks it)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scratch_home_env(folder: str) -> dict[str, str]:
    """The environment that keeps a head's default stores (``$XDG_DATA_HOME/adaptive-fabric``) and
    the artifact caches of its actors and of the nodes its providers start
    (``$XDG_CACHE_HOME/adaptive-fabric``) under ``folder`` instead of the user's home. Ray actors
    and workers inherit their raylet's environment, so the head's ``env_vars`` reach them."""
    return {"XDG_DATA_HOME": folder, "XDG_CACHE_HOME": os.path.join(folder, "cache")}


def ensure_auth_token() -> None:
    """Token auth as ``ray.init()`` has it for a new local cluster: on unless ``RAY_AUTH_MODE`` says
    otherwise (tests may set ``disabled`` explicitly), with ``~/.ray/auth_token`` generated when
    missing. ``Cluster`` alone would start with auth off when the variable is unset, and a
    cluster started without ``ray.init()`` must make the token itself or its GCS has none."""
    from ray._private.authentication.authentication_token_setup import (
        enable_token_auth_by_default,
        ensure_token_if_auth_enabled,
    )

    enable_token_auth_by_default()  # sets RAY_AUTH_MODE=token for this process and its children when unset
    ensure_token_if_auth_enabled(None, create_token_if_missing=True)


class LocalFabric:
    """A local multi-node fabric. Use as a context manager, or call ``close()``.

    ``nodes``: profile names, one node each (a repeated profile gets ``-2``, ``-3`` names).
    ``settings``: fabric settings for ``fabric.up`` (tests pass small health timings); a dict or
    none runs with ``FAST_FENCE`` unless it names a ``fence``.
    ``max_slots``: cap every node's slots (and CPUs): this machine is small.
    ``fabric``: bring the fabric's actors up (``fabric.up``) and wait until every node registered.
    ``scheduler``: include the scheduler/dispatcher actors when ``fabric`` is on.
    ``node_ip_address``: the address every process of this cluster uses (default: Ray's choice;
    127.0.0.1 when ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``). Give another loopback address
    (``127.0.0.2``) to let a real ``ray start --address`` / ``fabric join`` reach it: Ray 2.60
    rewrites ``127.0.0.1``/``localhost`` in a join address to the machine's routable address, and
    refuses ``ray start --address`` outright with the loopback switch on.
    """

    def __init__(self, nodes: Sequence[str] = (), *, settings: FabricSettings | dict | None = None, max_slots: int | None = None,
                 head_cpus: float = 1, fabric: bool = True, scheduler: bool = True, dashboard: bool = False,
                 system_config: dict | None = None, timeout_s: float = 60.0, node_ip_address: str | None = None,
                 head_env: dict[str, str] | None = None) -> None:
        import ray
        from ray.cluster_utils import Cluster

        self.settings = FabricSettings.load(with_fast_fence(settings))
        # The registry's default store is a per-cluster path under $XDG_DATA_HOME (~/.local/share):
        # each LocalFabric points its head's XDG_DATA_HOME at a folder of its own, removed at
        # close, so tests and demos neither share nor leave behind a store while the default path
        # logic still runs. store.url / store.path keep one across clusters (a head restart test).
        self._store_dir: tempfile.TemporaryDirectory | None = None
        env: dict[str, str] = {}
        from fabric.store.paths import configured_store_paths

        if configured_store_paths(self.settings) is None:
            self._store_dir = tempfile.TemporaryDirectory(prefix="fabric-store-")
            env.update(scratch_home_env(self._store_dir.name))
        env.update(head_env or {})
        self.max_slots = max_slots
        self.timeout_s = timeout_s
        self.handle: Any = None
        self._nodes: dict[str, LocalNode] = {}
        self._reserved: set[str] = set()
        self._lock = threading.Lock()
        atexit.register(self.close)
        self.history: list[LocalNode] = []
        self.cluster: Any = None
        self._connected = False
        self.timings: dict[str, float] = {}
        self.node_ip_address = node_ip_address
        t0 = time.monotonic()
        ensure_auth_token()
        try:
            self.dashboard = dashboard
            dash = {"dashboard_host": "127.0.0.1", "dashboard_port": free_port(),
                    "dashboard_agent_listen_port": free_port()} if dashboard else {}
            self.cluster = Cluster(initialize_head=True, head_node_args=dict(
                num_cpus=head_cpus, include_dashboard=dashboard, **dash, **({"env_vars": env} if env else {}),
                **({"node_ip_address": node_ip_address} if node_ip_address else {}),
                _system_config={**FAST_HEALTH_CHECKS, **(system_config or {})},
            ))
            self.timings["head_s"] = time.monotonic() - t0
            if ray.is_initialized():
                ray.shutdown()
            ray.init(address=self.cluster.address, log_to_driver=False,
                     **({"_node_ip_address": node_ip_address} if node_ip_address else {}))
            self._connected = True
            # The fabric's actors come up first, so each node registers while the next one starts.
            # (Raylets start one at a time: started in parallel on a small machine they miss their
            # start deadline.)
            if fabric:
                import fabric as fabric_pkg

                self.handle = fabric_pkg.up(self.settings, scheduler=scheduler, timeout_s=timeout_s)
                self.timings["up_s"] = time.monotonic() - t0
            for profile in nodes:
                self.add_node(self._reserve_name(profile), profile=profile, wait=False)
            self.timings["nodes_s"] = time.monotonic() - t0
            if fabric:
                self.wait_registered()
            self.timings["ready_s"] = time.monotonic() - t0
        except BaseException:
            self.close()
            raise

    # -- nodes ----------------------------------------------------------------------------------
    def _reserve_name(self, profile: str) -> str:
        name, i = profile, 2
        while name in self._reserved:
            name, i = f"{profile}-{i}", i + 1
        self._reserved.add(name)
        return name

    def add_node(self, name: str, *, profile: str | None = None, recording: str | None = None, wait: bool = True,
                 pool: str | None = None, pool_tier: str | None = None, zone: str | None = None,
                 cloud: str | None = None) -> LocalNode:
        """Start (or restart, after ``kill_node``) the node ``name`` from ``profile`` (default: the
        profile it had, else ``name``), or from an arbitrary ``recording`` folder (the path reaches
        the node's probe actor through the raylet's environment, as with ``fabric join --recording``).
        A rejoin is a new Ray node id, hence a new registry record. ``wait``: block until the
        fabric registered it. ``cloud`` labels it as ``fabric join --cloud`` does (its probe actor
        then reads that cloud's reclaim notices, at ``spot_notices.metadata_url`` in a test)."""
        old = self._nodes.get(name)
        if old is not None and old.alive:
            raise ValueError(f"node {name!r} is already running ({old.node_id[:12]})")
        if recording is not None:
            spec = recording_node_spec(recording, name, max_slots=self.max_slots, pool=pool, pool_tier=pool_tier, zone=zone,
                                       cloud=cloud)
            profile = str(Path(recording).resolve())
        else:
            profile = profile or (old.profile if old is not None else name)
            spec = node_spec(profile, name, max_slots=self.max_slots, pool=pool, pool_tier=pool_tier, zone=zone, cloud=cloud)
        if self.node_ip_address:
            spec["node_ip_address"] = self.node_ip_address
        if getattr(self, "dashboard", False):
            # Every raylet starts a dashboard agent; on one machine they need distinct ports, or
            # the head's agent loses its port and Ray's job API has no agent to submit through.
            spec["dashboard_agent_listen_port"] = free_port()
        try:
            ray_node = self.cluster.add_node(**spec)
        except Exception as exc:
            # Ray picks a raylet's ports before it binds them: on a busy machine another process can
            # take one first, the raylet aborts ("bind: Address already in use") and Ray reports a
            # startup timeout. A second start picks new ports.
            if "timed out during startup" not in str(exc):
                raise
            print(f"[LocalFabric] node {name!r} did not start ({exc}); starting it again")
            ray_node = self.cluster.add_node(**spec)
        node = LocalNode(name=name, profile=profile, node_id=ray_node.node_id, ray_node=ray_node,
                         resources=spec["resources"], labels=spec["labels"])
        with self._lock:
            self._reserved.add(name)
            self._nodes[name] = node
            self.history.append(node)
        if wait and self.handle is not None:
            self.wait_registered([node.node_id])
        return node

    def kill_node(self, name: str) -> LocalNode:
        """Abrupt loss: the node's raylet and workers are SIGKILLed (no graceful shutdown)."""
        node = self.node(name)
        if not node.alive:
            raise ValueError(f"node {name!r} is not running")
        self.cluster.remove_node(node.ray_node, allow_graceful=False)
        node.alive = False
        return node

    def reclaim(self, name: str, deadline_s: float, kind: str = "spot-interruption") -> Any:
        """Take the node ``name`` back as a cloud reclaims a spot node: the fabric's scheduler gets
        the notice (``handle_node_interruption(node_id, kind, now + deadline_s)``), then the node's
        raylet is SIGKILLed at the deadline (``kill_node``, from a timer thread; skipped when the
        node was killed or replaced meanwhile). Returns the scheduler's ``NodeInterruptionState``."""
        if self.handle is None:
            raise RuntimeError("reclaim needs the fabric up (LocalFabric(fabric=True))")
        if isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float)) or not deadline_s >= 0:
            raise ValueError(f"deadline_s must be 0 or more seconds, got {deadline_s!r}")
        node = self.node(name)
        if not node.alive:
            raise ValueError(f"node {name!r} is not running")
        at = time.time() + deadline_s
        state = self.handle.handle_node_interruption(node.node_id, kind=kind, deadline=at)

        def kill() -> None:
            current = self._nodes.get(name)
            if self.cluster is not None and current is node and node.alive:
                try:
                    self.kill_node(name)
                except Exception:  # closed or killed meanwhile: nothing left to reclaim
                    pass

        timer = threading.Timer(max(0.0, at - time.time()), kill)
        timer.daemon = True
        timer.start()
        return state

    def node(self, name: str) -> LocalNode:
        """The current node called ``name`` (after a rejoin: the new one)."""
        try:
            return self._nodes[name]
        except KeyError:
            raise KeyError(f"no node {name!r} in this LocalFabric; nodes: {sorted(self._nodes)}") from None

    @property
    def nodes(self) -> list[LocalNode]:
        return list(self._nodes.values())

    @property
    def address(self) -> str:
        return self.cluster.address

    @property
    def dashboard_url(self) -> str:
        """``http://HOST:PORT`` of the head's dashboard (``dashboard=True``): the address for
        ``ray job submit --address``."""
        if not getattr(self, "dashboard", False):
            raise RuntimeError("this LocalFabric was started without dashboard=True")
        return f"http://{self.cluster.webui_url}"

    # -- waiting ----------------------------------------------------------------------------------
    def kill_scheduler(self, timeout_s: float = 90.0) -> float:
        """SIGKILL the scheduler actor's process (by its pid) and wait until Ray restarted it
        (``max_restarts=-1``) and it answers again; when it was killed (wall clock seconds)."""
        import signal

        import ray

        from fabric.core.names import NAMESPACE, SCHEDULER

        sched = ray.get_actor(SCHEDULER, namespace=NAMESPACE)
        pid = ray.get(sched.pid.remote(), timeout=30)
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)

        def back() -> bool:
            try:
                return ray.get(sched.pid.remote(), timeout=5) != pid
            except Exception:
                return False

        self.wait_until(back, "the scheduler to come back", timeout_s=timeout_s)
        return killed_at

    def wait_until(self, predicate: Callable[[], Any], what: str, timeout_s: float | None = None, interval_s: float = 0.1) -> Any:
        """Poll ``predicate`` until it returns something truthy; ``TimeoutError`` saying ``what``
        (and the last value or error) otherwise."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.timeout_s)
        last: Any = None
        while True:
            try:
                value = predicate()
                if value:
                    return value
                last = value
            except Exception as exc:  # an actor restarting mid-poll: keep polling
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out waiting for {what}; last seen: {last!r}")
            time.sleep(interval_s)

    def wait_registered(self, node_ids: Sequence[str] | None = None, timeout_s: float | None = None) -> None:
        """Wait until the registry holds an ``active`` record for each node (default: every running one)."""
        wanted = set(node_ids) if node_ids is not None else {n.node_id for n in self._nodes.values() if n.alive}

        def done():
            have = {r.node_id for r in self.handle.records(["active"])}
            missing = wanted - have
            return not missing or False

        self.wait_until(done, f"registration of nodes {sorted(i[:12] for i in wanted)}", timeout_s)
        sched = self._scheduler()
        if sched is not None:  # and the scheduler places on them: its fleet follows the registry by a tick
            import ray

            def placed_on():
                ray.get(sched.sync_now.remote(), timeout=30)
                return wanted <= {r.node_id for r in ray.get(sched.nodes.remote(), timeout=30)}

            self.wait_until(placed_on, f"the scheduler's view of nodes {sorted(i[:12] for i in wanted)}", timeout_s)

    def _scheduler(self) -> Any:
        import ray

        from fabric.core.names import NAMESPACE, SCHEDULER

        try:
            return ray.get_actor(SCHEDULER, namespace=NAMESPACE) if self.handle is not None else None
        except ValueError:
            return None

    # -- teardown -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Disconnect the driver and stop this cluster's processes (and nothing else)."""
        import ray

        if self._connected:
            try:
                self._close_providers()
                ray.shutdown()
            finally:
                self._connected = False
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.shutdown()
        self._sweep_providers()
        if self._store_dir is not None:
            store, self._store_dir = self._store_dir, None
            store.cleanup()
        atexit.unregister(self.close)
        for node in self._nodes.values():
            node.alive = False

    def _close_providers(self) -> None:
        """Terminate the nodes the fabric's providers made while the scheduler that made them is up."""
        import ray

        from fabric.core.names import NAMESPACE, SCHEDULER

        if self.handle is None:
            return
        try:
            ray.get(ray.get_actor(SCHEDULER, namespace=NAMESPACE).close_providers.remote(), timeout=60)
        except Exception:  # no scheduler (fleet-only fabric), or it is gone: the sweep below
            pass

    def store_root(self) -> Path:
        """The folder under which this fabric's stores (and its providers' pid files) live: the
        temporary data folder, or the one the settings name."""
        from fabric.store.paths import configured_store_paths

        if self._store_dir is not None:
            return Path(self._store_dir.name)
        configured = configured_store_paths(self.settings)
        assert configured is not None  # without a configured store, a temporary folder is made
        return configured.folder

    def _sweep_providers(self) -> None:
        """Kill what a killed scheduler's local provider left running (its pid files, nothing else)."""
        from fabric.providers.local import sweep

        try:
            root = self.store_root()
        except AssertionError:
            return
        for folder in root.glob("**/providers/local"):
            sweep(folder)

    def __enter__(self) -> "LocalFabric":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

_free_port = free_port  # the name it had (kept for callers that still use it)

_ensure_auth_token = ensure_auth_token  # the name it had (kept for callers that still use it)

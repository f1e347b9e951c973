"""Ray's autoscaler on one machine: the fake multi-node provider as an ``external`` provider module.

``FakeAutoscalingCluster`` starts a real head (``ray.cluster_utils.Cluster``, in this process's
session, so it stops exactly what it started) whose monitor runs Ray's autoscaler v2 over
``FakeProvider``: a ``ray.autoscaler._private.fake_multi_node`` ``FakeMultiNodeProvider``
loaded through ``provider: {type: external, module: fabric.testing.fake_autoscaler.FakeProvider}``.
Each node the autoscaler launches is a real raylet (``ray._private.node.Node``) with its node
type's resources and labels, started inside the monitor process; the autoscaler terminates it
when idle past ``idle_timeout_minutes``.

Why this shape (Ray 2.60):
- The built-in ``type: fake_multinode`` is broken in the wheel: its defaults file
  (``fake_multi_node/example.yaml``) is not shipped, so ``AutoscalingCluster`` and the built-in
  type's default config both fail. An ``external`` provider gets ``MINIMAL_EXTERNAL_CONFIG``
  as its defaults instead; ``autoscaling_config`` writes a complete config.
- Autoscaler v1 drops ``request_resources``'s label selectors (it stores only the resource
  shapes), so a pool tier's node type could not be chosen by label: the head runs v2
  (``enable_autoscaler_v2`` in its system config), whose scheduler honours them. v2 needs the
  head to be the fake provider's head instance (``RAY_OVERRIDE_NODE_ID_FOR_TESTING`` and
  ``RAY_CLOUD_INSTANCE_ID`` = ``FAKE_HEAD_NODE_ID`` in the head's environment) and
  ``launch_multiple``.
- The monitor is a child of the head's starter with this process's environment, not the head's
  ``env_vars``: ``AUTOSCALER_UPDATE_INTERVAL_S`` (read when Ray is imported) is set in
  ``os.environ`` while the head starts, then restored. ``FakeMultiNodeProvider`` insists on
  ``RAY_FAKE_CLUSTER`` in the monitor's environment; ``FakeProvider`` sets it itself.
- Token auth (``RAY_AUTH_MODE=token``) needs nothing special: the monitor and the raylets it
  starts inherit ``RAY_AUTH_MODE`` and read the same token file (``~/.ray/auth_token``, made by
  ``LocalFabric``'s ``ensure_auth_token`` when missing) as the head.
- The raylets the fake provider starts are not the head's children: one the autoscaler has not
  terminated when the head stops would outlive it (and a node appears in ``ray.nodes()`` before
  the provider's ``Node`` constructor returns). So ``FakeProvider`` logs every process the monitor
  starts (``ray._private.services.start_ray_process``, wrapped in the monitor process only) to
  ``<state_dir>/pids.log`` as it starts, with its start time; ``close`` stops the head (the
  monitor with it), then SIGKILLs each logged pid still running with that same start time (ours
  alone, by pid). ``<state_dir>/<node id>.json`` lists the nodes launched and not yet terminated.
- The head's actors keep their default stores and caches in the same temporary folder
  (``scratch_home_env``), not under the user's home: ``close`` removes them with it.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from ray.autoscaler._private.fake_multi_node.node_provider import FAKE_HEAD_NODE_ID, FakeMultiNodeProvider

from fabric.testing.local import FAST_HEALTH_CHECKS, ensure_auth_token, free_port, scratch_home_env

__all__ = ["FakeProvider", "FakeAutoscalingCluster", "autoscaling_config", "FAKE_HEAD_NODE_ID", "MODULE"]

MODULE = "fabric.testing.fake_autoscaler.FakeProvider"
"""The ``provider.module`` an ``external`` provider config names."""
HEAD_TYPE = "ray.head.default"
PID_LOG = "pids.log"
OBJECT_STORE_BYTES = 100 * 1024 * 1024
"""Each launched node's object store (unless its node type's resources give one)."""


class FakeProvider(FakeMultiNodeProvider):
    """``FakeMultiNodeProvider`` that needs no ``RAY_FAKE_CLUSTER`` from its caller and records
    each node's pids under ``provider_config["state_dir"]`` (when given) until it terminates it."""

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        os.environ.setdefault("RAY_FAKE_CLUSTER", "1")
        super().__init__(provider_config, cluster_name)
        self._state_dir = Path(provider_config["state_dir"]) if provider_config.get("state_dir") else None
        if self._state_dir is not None:
            _log_started_processes(self._state_dir / PID_LOG)

    def _create_node_with_resources_and_labels(self, node_config, tags, count, resources, labels):  # noqa: ANN001
        # A small object store (Ray's default is 30% of this machine's memory, per node).
        resources = {"object_store_memory": OBJECT_STORE_BYTES, **resources}
        with self.lock:
            before = set(self._nodes)
            super()._create_node_with_resources_and_labels(node_config, tags, count, resources, labels)
            for node_id in set(self._nodes) - before:
                self._record(node_id)

    def terminate_node(self, node_id: str) -> None:
        super().terminate_node(node_id)
        if self._state_dir is not None:
            (self._state_dir / f"{node_id}.json").unlink(missing_ok=True)

    def _record(self, node_id: str) -> None:
        if self._state_dir is None:
            return
        node = self._nodes[node_id]["node"]
        pids = [info.process.pid for infos in node.all_processes.values() for info in infos if info.process is not None]
        tmp = self._state_dir / f".{node_id}.tmp"
        tmp.write_text(json.dumps({"node_id": node_id, "pids": pids}))
        tmp.replace(self._state_dir / f"{node_id}.json")


def _start_time(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _log_started_processes(path: Path) -> None:
    """Wrap ``start_ray_process`` in this (the monitor's) process: log each started pid at once."""
    import ray._private.services as services

    original = services.start_ray_process
    if getattr(original, "_fabric_pid_log", None) is not None:
        return

    def start_ray_process(*args: Any, **kwargs: Any) -> Any:
        info = original(*args, **kwargs)
        pid = info.process.pid
        with open(path, "a") as log:
            log.write(json.dumps({"pid": pid, "start_time": _start_time(pid)}) + "\n")
        return info

    start_ray_process._fabric_pid_log = str(path)  # type: ignore[attr-defined]
    services.start_ray_process = start_ray_process


def autoscaling_config(node_types: Mapping[str, Mapping[str, Any]], *, gcs_address: str, head_resources: Mapping[str, float],
                       state_dir: str | None = None, idle_timeout_minutes: float = 0.1, max_workers: int = 8,
                       cluster_name: str = "fabric-fake") -> dict[str, Any]:
    """A complete autoscaler config over ``FakeProvider``: ``node_types`` (``available_node_types``
    worker entries, e.g. ``RayAutoscalerProvider``'s ``node_types_for(settings)``) plus the head's
    type, nodes joining ``gcs_address``, idle nodes given back after ``idle_timeout_minutes``."""
    types = {name: dict(spec) for name, spec in node_types.items()}
    types[HEAD_TYPE] = {"resources": dict(head_resources), "node_config": {}, "min_workers": 0, "max_workers": 0}
    provider: dict[str, Any] = {"type": "external", "module": MODULE, "gcs_address": gcs_address, "use_node_id_as_ip": True,
                                "disable_node_updaters": True, "disable_launch_config_check": True, "launch_multiple": True,
                                "head_node_id": FAKE_HEAD_NODE_ID}
    if state_dir:
        provider["state_dir"] = state_dir
    return {
        "cluster_name": cluster_name, "max_workers": max_workers, "upscaling_speed": 1.0,
        "idle_timeout_minutes": idle_timeout_minutes, "provider": provider, "available_node_types": types,
        "head_node_type": HEAD_TYPE, "auth": {}, "docker": {}, "initialization_commands": [], "setup_commands": [],
        "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
        "worker_start_ray_commands": [], "file_mounts": {}, "cluster_synced_files": [],
        "file_mounts_sync_continuously": False, "rsync_exclude": [], "rsync_filter": [],
    }


class FakeAutoscalingCluster:
    """A head whose autoscaler (v2) launches ``node_types`` through ``FakeProvider``, with the
    driver connected. ``head_cpus``: the head's CPUs; ``update_interval_s``: the autoscaler's
    loop period; ``idle_timeout_minutes``: how long a node idles before it is given back;
    ``system_config``: over ``FAST_HEALTH_CHECKS``. Use as a context manager, or call ``close()``."""

    def __init__(self, node_types: Mapping[str, Mapping[str, Any]], *, head_cpus: int = 1, update_interval_s: int = 1,
                 idle_timeout_minutes: float = 0.1, system_config: Mapping[str, Any] | None = None,
                 connect: bool = True) -> None:
        import ray
        from ray.cluster_utils import Cluster

        self._tmp = tempfile.TemporaryDirectory(prefix="fabric-fake-autoscaler-")
        self.state_dir = Path(self._tmp.name) / "nodes"
        self.state_dir.mkdir()
        self.home = str(Path(self._tmp.name) / "home")
        """The head's ``XDG_DATA_HOME``: the fabric's default stores (no ``store.url``) live under it
        and go with the folder at close."""
        self.cluster: Any = None
        self._connected = False
        atexit.register(self.close)
        ensure_auth_token()
        port = free_port()
        self.config = autoscaling_config(node_types, gcs_address=f"127.0.0.1:{port}", head_resources={"CPU": head_cpus},
                                         state_dir=str(self.state_dir), idle_timeout_minutes=idle_timeout_minutes)
        self.config_path = Path(self._tmp.name) / "autoscaler.json"
        self.config_path.write_text(json.dumps(self.config))
        saved = {k: os.environ.get(k) for k in ("AUTOSCALER_UPDATE_INTERVAL_S", "RAY_enable_autoscaler_v2")}
        os.environ.update({"AUTOSCALER_UPDATE_INTERVAL_S": str(update_interval_s), "RAY_enable_autoscaler_v2": "1"})
        try:
            self.cluster = Cluster(initialize_head=True, head_node_args=dict(
                num_cpus=head_cpus, gcs_server_port=port, node_ip_address="127.0.0.1", include_dashboard=False,
                autoscaling_config=str(self.config_path),
                env_vars={"RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_NODE_ID, "RAY_CLOUD_INSTANCE_ID": FAKE_HEAD_NODE_ID,
                          "RAY_NODE_TYPE_NAME": HEAD_TYPE, **scratch_home_env(self.home)},
                _system_config={**FAST_HEALTH_CHECKS, "enable_autoscaler_v2": True, **(system_config or {})},
            ))
            if connect:
                if ray.is_initialized():
                    ray.shutdown()
                ray.init(address=self.cluster.address, log_to_driver=False)
                self._connected = True
        except BaseException:
            self.close()
            raise
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    @property
    def address(self) -> str:
        return self.cluster.address

    def launched(self) -> dict[str, list[int]]:
        """The nodes ``FakeProvider`` started and has not terminated: node id -> their pids."""
        out = {}
        for path in self.state_dir.glob("*.json"):  # not the pid log, not a .tmp being written
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            out[data["node_id"]] = list(data["pids"])
        return out

    def wait_until(self, predicate: Callable[[], Any], what: str, timeout_s: float = 60.0, interval_s: float = 0.2) -> Any:
        """Poll ``predicate`` until truthy; ``TimeoutError`` naming ``what`` and the last value."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while True:
            try:
                last = predicate()
                if last:
                    return last
            except Exception as exc:  # noqa: BLE001 - a GCS call mid-restart: keep polling
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out waiting for {what}; last seen: {last!r}")
            time.sleep(interval_s)

    def close(self) -> None:
        """Disconnect, stop the head (its monitor with it), SIGKILL the processes of launched nodes
        still listed (by the pids ``FakeProvider`` recorded), remove the folder. Idempotent."""
        import ray

        if self._connected:
            self._connected = False
            ray.shutdown()
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.shutdown()
        if self._tmp is not None:
            self._kill_launched()
            tmp, self._tmp = self._tmp, None
            tmp.cleanup()
        atexit.unregister(self.close)

    def _kill_launched(self) -> None:
        """SIGKILL every process the monitor started that still runs (same pid, same start time)."""
        try:
            lines = (self.state_dir / PID_LOG).read_text().splitlines()
        except OSError:
            return
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            pid, started = entry.get("pid"), entry.get("start_time")
            if isinstance(pid, int) and started is not None and _start_time(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def __enter__(self) -> "FakeAutoscalingCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

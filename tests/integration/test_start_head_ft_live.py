"""``fabric start-head`` with GCS fault tolerance, for real: a SIGKILLed head started again with the
same command brings its cluster back, on the embedded store and on an external Redis.

Per backend: ``fabric start-head`` on 127.0.0.6 and a free port (its own temp dir, its own
``XDG_DATA_HOME`` so the embedded store lands in the test's folder), ``fabric join`` of one node
(its own temp dir), a detached actor pinned to that node; then every process of the head is
SIGKILLed (found by its temp dir, ``fabric.testing.head_kill``), and the same ``start-head`` runs
again: it says it recovered the cluster with 1 of 1 worker nodes, the actor answers from the same
pid and a new task runs on the worker. Everything is stopped by pid and the temp dirs removed.
The join runs without the loopback switch ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` (see
``test_node_cli``) and with ``--node-ip-address``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("ray")

from fabric.testing.head_kill import kill_node  # noqa: E402
from fabric.testing.redis import RedisServer, redis_problem, require  # noqa: E402

pytestmark = pytest.mark.integration

IP = "127.0.0.6"
PASSWORD = "hft-redis-pw-8c1e"
NAMESPACE = "hft"
DRIVER_TIMEOUT_S = 120

CREATE = textwrap.dedent("""
    import json, os, sys, ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    ray.init(address=sys.argv[1], namespace="hft", log_to_driver=False)
    worker = [n["NodeID"] for n in ray.nodes() if n["Alive"] and not n.get("IsHeadNode", False)
              and n["NodeManagerAddress"] and n["NodeID"] != ray.get_runtime_context().get_node_id()]
    @ray.remote
    class Probe:
        def pid(self):
            return os.getpid()
    a = Probe.options(name="probe", lifetime="detached", num_cpus=0, max_restarts=0,
                      scheduling_strategy=NodeAffinitySchedulingStrategy(worker[0], soft=False)).remote()
    print("RESULT " + json.dumps({"pid": ray.get(a.pid.remote(), timeout=60), "worker": worker[0]}))
""")

CHECK = textwrap.dedent("""
    import json, os, sys, time, ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    ray.init(address=sys.argv[1], namespace="hft", log_to_driver=False)
    deadline = time.time() + 90
    while True:
        try:
            pid = ray.get(ray.get_actor("probe").pid.remote(), timeout=10)
            break
        except Exception:
            if time.time() > deadline:
                raise
            time.sleep(0.5)
    @ray.remote(num_cpus=0)
    def where():
        return ray.get_runtime_context().get_node_id()
    node = ray.get(where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(sys.argv[2], soft=False)).remote(), timeout=60)
    print("RESULT " + json.dumps({"pid": pid, "task_node": node}))
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((IP, 0))
        return int(s.getsockname()[1])


def _env(xdg: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_gcs", "RAY_REDIS", "RAY_ADDRESS"))}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", XDG_DATA_HOME=str(xdg))
    return env


def _fabric(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fabric", *args], env=env, capture_output=True, text=True, timeout=180)


def _driver(env: dict[str, str], code: str, *args: str) -> dict[str, Any]:
    p = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT "):]))
    raise AssertionError(f"driver exited {p.returncode}: {(p.stdout + p.stderr)[-2000:]}")


class Cluster:
    """One head + one joined node, their dirs and commands."""

    def __init__(self, root: Path, backend: str, redis: RedisServer | None) -> None:
        self.root, self.backend, self.port = root, backend, _free_port()
        self.head_tmp, self.worker_tmp = root / "h", root / "w"
        self.env = _env(root / "xdg")
        self.address = f"{IP}:{self.port}"
        root.mkdir()
        flags = ["--profile", "edge-relay", "--node-ip-address", IP, "--port", str(self.port)]
        if redis is not None:
            pw = root / "redis.pw"
            pw.write_text(redis.password + "\n")
            flags += ["--redis-address", redis.address, "--redis-password-file", str(pw)]
        self.head_args = ["start-head", *flags, "--", f"--temp-dir={self.head_tmp}", "--num-cpus=1",
                          "--include-dashboard=false", "--object-store-memory=80000000"]

    def start_head(self) -> str:
        p = _fabric(self.env, *self.head_args)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout + p.stderr

    def join(self) -> str:
        p = _fabric(self.env, "join", "--address", self.address, "--profile", "cpu-only-box", "--name", "w1",
                    "--node-ip-address", IP, "--head-outage-tolerance", "120", "--", f"--temp-dir={self.worker_tmp}",
                    "--num-cpus=1", "--object-store-memory=80000000")
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout + p.stderr

    def stop(self) -> None:
        kill_node(str(self.worker_tmp))
        kill_node(str(self.head_tmp))


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hft-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=["embedded", "redis"])
def cluster(request: pytest.FixtureRequest, root: Path) -> Iterator[Cluster]:
    redis = None
    if request.param == "redis":
        require(redis_problem())
        redis = RedisServer.start(PASSWORD, host="127.0.0.1")
    c: Cluster | None = None
    try:
        c = Cluster(root / request.param, request.param, redis)
        yield c
    finally:
        if c is not None:
            c.stop()
            shutil.rmtree(c.root, ignore_errors=True)
        if redis is not None:
            redis.stop()


def test_a_killed_head_started_again_brings_the_cluster_back(cluster: Cluster) -> None:
    first = cluster.start_head()
    expected = "GCS fault tolerance: embedded store" if cluster.backend == "embedded" else "GCS fault tolerance: redis 127.0.0.1:"
    assert expected in first, first
    assert PASSWORD not in first
    cluster.join()
    before = _driver(cluster.env, CREATE, cluster.address)
    assert kill_node(str(cluster.head_tmp)), "no head process found by its temp dir"
    again = cluster.start_head()
    assert f"removed a stale {cluster.head_tmp / 'ray_current_cluster'} naming {cluster.address}" in again, again
    assert "recovered the cluster" in again and "1 of 1 worker nodes came back" in again, again
    assert PASSWORD not in again
    after = _driver(cluster.env, CHECK, cluster.address, before["worker"])
    assert after["pid"] == before["pid"]
    assert after["task_node"] == before["worker"]


def test_no_fault_tolerance_says_off(root: Path) -> None:
    c = Cluster(root / "off", "off", None)
    c.head_args.insert(1, "--no-fault-tolerance")
    try:
        out = c.start_head()
        assert "GCS fault tolerance: off" in out, out
        assert not (c.root / "xdg" / "adaptive-fabric" / "clusters" / f"{IP}-{c.port}" / "gcs").exists()
    finally:
        c.stop()

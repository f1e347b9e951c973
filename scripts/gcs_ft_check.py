#!/usr/bin/env python
"""Does Ray's GCS fault tolerance survive a SIGKILLed head on this machine? (Ray only, no fabric.)

    python scripts/gcs_ft_check.py --backend rocksdb|redis [--json] [--keep] [--reconnect-s N] [--outage-s S]

Starts a head (``ray start --head``, own ``--temp-dir``) on a GCS storage backend and a worker node
(``--resources '{"w":1}'``, own temp dir, ``RAY_gcs_rpc_server_reconnect_timeout_s=120``), puts a
detached named actor on the worker that appends ``<n> <time>`` to a file every 100 ms, SIGKILLs
every head process (those naming the head's temp dir in their command line, and their
descendants; never by name), waits 5 s, restarts the head (same port, temp dir, backend) and
checks: the worker node is ALIVE with the same id, the actor has the same id and pid, the counter
never stopped (longest gap), new work is placed. ``--json``: the last line is the result record.
Backends, set on the head only: rocksdb ``RAY_gcs_storage=rocksdb RAY_gcs_storage_path=<dir>``;
redis ``RAY_REDIS_ADDRESS=127.0.0.1:<port>`` + ``--redis-password`` (a private redis-server).
Everything started is killed by pid at the end and the temp dirs removed (``--keep`` keeps them).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

ACTOR_NAME = "gcs_ft_probe"
NAMESPACE = "gcs_ft_check"
RECONNECT_S = 120  # the worker's RAY_gcs_rpc_server_reconnect_timeout_s (--reconnect-s); Ray's default is 60
OUTAGE_S = 5.0  # seconds between the SIGKILL and the restart (--outage-s)
CHECK_TIMEOUT_S = 90  # how long the driver after the restart waits for the node and the actor
RESULT_TAG = "GCSFT_RESULT "
PR_SET_CHILD_SUBREAPER = 36


class Probe:
    """The detached actor: a thread appends ``<n> <time>`` to a file every 100 ms, whatever the GCS does."""

    def __init__(self, path: str) -> None:
        self.path = path
        threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self) -> None:
        n = 0
        with open(self.path, "a", buffering=1) as f:
            while True:
                f.write(f"{n} {time.time():.4f}\n")
                n += 1
                time.sleep(0.1)

    @staticmethod
    def pid() -> int:
        """A task body (the check's new work): where it ran."""
        return os.getpid()

    def info(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {"pid": os.getpid(), "actor_id": ctx.get_actor_id(), "node_id": ctx.get_node_id()}


# ----------------------------------------------------------------------------------- driver phases
def _emit(payload: dict[str, Any]) -> None:
    print(RESULT_TAG + json.dumps(payload), flush=True)


def phase_create(address: str, counter_file: str) -> None:
    """Driver 1: place the detached actor on the worker node, report its pid/id and the node ids."""
    import ray

    ray.init(address=address, namespace=NAMESPACE, logging_level=logging.ERROR, log_to_driver=False)
    actor: Any = ray.remote(Probe).options(name=ACTOR_NAME, lifetime="detached", num_cpus=0,
                                      resources={"w": 1}, max_restarts=0).remote(counter_file)
    info: dict[str, Any] = ray.get(actor.info.remote(), timeout=120)
    workers = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("w")]
    _emit({**info, "worker_node_id": workers[0] if workers else None})


def phase_check(address: str, worker_node_id: str, counter_file: str, timeout_s: float) -> None:
    """Driver 2 (after the restart): ready = the worker node ALIVE, the actor answering, a task run on
    the worker node (ALIVE alone proves nothing: the GCS reloads nodes as they were). Reports how far it got."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    deadline = time.time() + timeout_s
    ray.init(address=address, namespace=NAMESPACE, logging_level=logging.ERROR, log_to_driver=False)
    out: dict[str, Any] = {}
    try:
        while not any(n["NodeID"] == worker_node_id and n["Alive"] for n in ray.nodes()):
            if time.time() > deadline:
                raise TimeoutError(f"worker node {worker_node_id[:8]} not ALIVE")
            time.sleep(0.2)
        out["node_alive_at"] = time.time()
        while True:
            try:
                out.update(ray.get(ray.get_actor(ACTOR_NAME).info.remote(), timeout=10))
                break
            except Exception as e:  # noqa: BLE001 -- retried until the deadline, the last one reported
                if time.time() > deadline:
                    raise TimeoutError(f"actor {ACTOR_NAME} not reachable: {e!r}") from e
                time.sleep(0.5)
        task = ray.remote(num_cpus=1)(Probe.pid).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(worker_node_id, soft=False))
        out["task_on_worker_pid"] = ray.get(task.remote(), timeout=60)
        out["ready_at"] = time.time()
        fresh: Any = ray.remote(Probe).options(num_cpus=0).remote(counter_file + ".fresh")
        ray.get(fresh.info.remote(), timeout=60)
        ray.kill(fresh)
        out["new_work_at"] = time.time()
    except Exception as e:  # noqa: BLE001 -- reported to the orchestrator
        out["error"] = f"{type(e).__name__}: {e}"[:600]
    out["nodes"] = {n["NodeID"][:12]: n["Alive"] for n in ray.nodes()}
    _emit(out)


# ----------------------------------------------------------------------------------- orchestration
@dataclass
class Run:
    """One check's dirs, ports, env and child processes."""

    backend: str
    root: Path
    port: int
    redis_port: int = 0
    redis_password: str = "gcsft-pw"
    redis: subprocess.Popen[bytes] | None = None
    reconnect_s: int = RECONNECT_S
    outage_s: float = OUTAGE_S
    head_dir: Path = field(init=False)  # the head's --temp-dir; a worker's dir never contains it
    worker_dir: Path = field(init=False)
    store_dir: Path = field(init=False)  # RAY_gcs_storage_path
    counter_file: Path = field(init=False)

    def __post_init__(self) -> None:
        self.head_dir, self.worker_dir = self.root / "head", self.root / "wrk"
        self.store_dir, self.counter_file = self.root / "gcs_store", self.root / "counter.txt"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def free_port() -> int:
    """A loopback port nobody listens on now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_env() -> dict[str, str]:
    """This process's env without anything that would point Ray at another cluster or backend."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_gcs_storage", "RAY_REDIS", "RAY_ADDRESS", "RAY_gcs_rpc_server"))}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    return env


def head_env(run: Run) -> dict[str, str]:
    """The head's env: the storage backend (the only place it is needed)."""
    backend = ({"RAY_gcs_storage": "rocksdb", "RAY_gcs_storage_path": str(run.store_dir)} if run.backend == "rocksdb"
               else {"RAY_REDIS_ADDRESS": f"127.0.0.1:{run.redis_port}"})
    return {**base_env(), **backend}


def worker_env(run: Run) -> dict[str, str]:
    """The worker node's env: a reconnect window longer than the outage (Ray's default is 60 s)."""
    env = base_env()
    if run.reconnect_s >= 0:  # --reconnect-s -1: leave it unset, Ray's default applies
        env["RAY_gcs_rpc_server_reconnect_timeout_s"] = str(run.reconnect_s)
    return env


def ray_start(argv: list[str], env: dict[str, str], log: Path) -> None:
    """Run ``ray start ...`` to completion (it daemonizes the node); raise with its log on failure."""
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", *argv]
    with open(log, "ab") as f:
        rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=180).returncode
    if rc != 0:
        raise RuntimeError(f"ray start {argv[0]} exited {rc}: {' | '.join(log.read_text().splitlines()[-15:])}")


def start_head(run: Run) -> None:
    """``ray start --head`` on the run's port and temp dir with the backend's env (also the restart)."""
    argv = ["--head", f"--port={run.port}", "--num-cpus=1", f"--temp-dir={run.head_dir}",
            "--node-ip-address=127.0.0.1", "--include-dashboard=false", "--object-store-memory=100000000",
            "--disable-usage-stats"]
    if run.backend == "redis":
        argv.append(f"--redis-password={run.redis_password}")
    ray_start(argv, head_env(run), run.root / "head-start.log")


def start_worker(run: Run) -> None:
    """``ray start --address`` for the worker node: 2 CPUs, resource ``w``, its own temp dir."""
    argv = [f"--address={run.address}", "--num-cpus=2", '--resources={"w": 1}', f"--temp-dir={run.worker_dir}",
            "--node-ip-address=127.0.0.1", "--object-store-memory=100000000"]
    ray_start(argv, worker_env(run), run.root / "worker-start.log")


def start_redis(run: Run) -> None:
    """A private, password-protected, non-persisting redis-server on a free loopback port (our child)."""
    if (exe := shutil.which("redis-server")) is None:
        raise RuntimeError("redis-server not found (apt-get install -y redis-server)")
    run.redis_port = free_port()
    run.redis = subprocess.Popen([exe, "--port", str(run.redis_port), "--bind", "127.0.0.1", "--requirepass",
                                  run.redis_password, "--save", "", "--appendonly", "no", "--daemonize", "no"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", run.redis_port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError("redis-server did not listen within 10 s")


def driver(args: list[str], timeout_s: float) -> dict[str, Any]:
    """Run this script as a driver subprocess and return the JSON it tagged."""
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    p = subprocess.run(cmd, env=base_env(), capture_output=True, text=True, timeout=timeout_s)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return dict(json.loads(line[len(RESULT_TAG):]))
    raise RuntimeError(f"driver {args[1]} exited {p.returncode}: {(p.stdout + p.stderr)[-1500:]}")


def processes_under(marker: str) -> list[psutil.Process]:
    """Every process whose command line names ``marker`` (a node's temp dir), and their descendants."""
    found: dict[int, psutil.Process] = {}
    me = os.getpid()
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.pid != me and marker in " ".join(p.info["cmdline"] or []):
            found[p.pid] = p
    for p in list(found.values()):
        with contextlib.suppress(psutil.NoSuchProcess):
            found.update({c.pid: c for c in p.children(recursive=True)})
    return list(found.values())


def sigkill(procs: list[psutil.Process]) -> list[str]:
    """SIGKILL these processes and reap them; return ``name(pid)`` of those killed."""
    killed = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            name = label(p)
            p.send_signal(signal.SIGKILL)
            killed.append(f"{name}({p.pid})")
    psutil.wait_procs(procs, timeout=10)
    return killed


def label(p: psutil.Process) -> str:
    """A process's short name: the script for a Python process (``monitor.py``), else its name."""
    scripts = [os.path.basename(c) for c in p.cmdline()[1:3] if c.endswith(".py")]
    return scripts[0] if p.name().startswith("python") and scripts else p.name()


def raylet_pid(node_dir: Path) -> int | None:
    """The pid of the raylet started with this temp dir, if one runs."""
    return next((p.pid for p in processes_under(str(node_dir)) if p.name() == "raylet"), None)


def counter_gap_ms(path: Path, since: float, until: float = float("inf")) -> tuple[float, int]:
    """The longest gap (ms) between consecutive ticks written in ``[since, until]``, and the tick count."""
    times = [t for t in (float(ln.split()[1]) for ln in path.read_text().splitlines() if len(ln.split()) == 2)
             if since <= t <= until]
    gaps = [b - a for a, b in zip(times, times[1:])]
    return (round(max(gaps) * 1000, 1) if gaps else float("nan")), len(times)


def log_errors(node_dir: Path) -> str:
    """The error lines of a node's GCS and raylet logs (its newest session), for the report."""
    logs = node_dir / "session_latest" / "logs"
    lines: list[str] = []
    for name in ("gcs_server.err", "gcs_server.out", "raylet.err", "raylet.out"):
        p = logs / name
        if p.exists():
            bad = [ln for ln in p.read_text(errors="replace").splitlines()
                   if any(w in ln for w in ("ERROR", "FATAL", "Check failed", " E ", "[E", "*** "))]
            lines += [f"{name}: {ln[:300]}" for ln in bad[-6:]]
    return "\n".join(lines)


def check(run: Run, res: dict[str, Any], say: Any) -> None:
    """The whole scenario, filling ``res`` as it goes (so a failure still reports how far it got)."""
    if run.backend == "redis":
        start_redis(run)
    t = time.time()
    start_head(run)
    res["head_start_s"] = round(time.time() - t, 2)
    start_worker(run)
    say(f"head on {run.address} ({run.backend}) and worker started in {time.time() - t:.1f}s")
    before = driver(["--phase", "create", "--address", run.address, "--counter-file", str(run.counter_file)], 180)
    say(f"actor {before['actor_id'][:12]} pid {before['pid']} on node {before['node_id'][:12]}")
    while counter_gap_ms(run.counter_file, 0)[1] < 30:  # 3 s of ticks: the gap baseline before the kill
        time.sleep(0.1)
    worker_raylet = raylet_pid(run.worker_dir)
    killed_at = time.time()
    res["head_killed"] = sigkill(processes_under(str(run.head_dir)))
    say(f"SIGKILLed {len(res['head_killed'])} head processes: {', '.join(res['head_killed'])}")
    time.sleep(run.outage_s)
    # On one machine `ray start --head` refuses to start if its temp dir's ray_current_cluster names
    # this address and a live raylet (here: the worker's) has it as --gcs-address; forget it first.
    (run.head_dir / "ray_current_cluster").unlink(missing_ok=True)
    restart_at = time.time()
    try:
        start_head(run)
    except RuntimeError as e:
        raise RuntimeError(f"{e}\n{log_errors(run.head_dir)}") from e
    res["head_restart_s"] = round(time.time() - restart_at, 2)
    say(f"head restarted in {res['head_restart_s']}s")
    try:
        after = driver(["--phase", "check", "--address", run.address, "--worker-node-id", before["worker_node_id"],
                        "--counter-file", str(run.counter_file)], CHECK_TIMEOUT_S + 60)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"{e}\n{log_errors(run.head_dir)}\n{log_errors(run.worker_dir)}") from e
    time.sleep(0.5)
    gap, ticks = counter_gap_ms(run.counter_file, killed_at)
    res["counter_gap_before_kill_ms"] = counter_gap_ms(run.counter_file, 0, killed_at)[0]
    res.update(worker_same_node_id="ready_at" in after and before["node_id"] == before["worker_node_id"],
               actor_same_pid=after.get("pid") == before["pid"], new_work_ok="new_work_at" in after,
               actor_same_id=after.get("actor_id") == before["actor_id"], counter_gap_ms=gap, ticks_since_kill=ticks,
               worker_raylet_same_pid=raylet_pid(run.worker_dir) == worker_raylet, nodes_after=after["nodes"])
    if "ready_at" in after:
        res.update(restart_to_ready_s=round(after["ready_at"] - restart_at, 2),
                   kill_to_ready_s=round(after["ready_at"] - killed_at, 2))
    if "error" in after:
        res["error"] = f"check driver: {after['error']}\n{log_errors(run.head_dir)}\n{log_errors(run.worker_dir)}"
    res["recovered"] = all(res[k] for k in ("worker_same_node_id", "actor_same_pid", "actor_same_id", "new_work_ok"))


def cleanup(run: Run, keep: bool) -> None:
    """Kill both nodes' processes and redis by pid, reap orphans we inherited, remove the temp dirs."""
    sigkill(processes_under(str(run.root)))
    if run.redis is not None:
        run.redis.kill()
        run.redis.wait(10)
    sigkill(psutil.Process().children(recursive=True))  # anything left that we became the parent of
    if not keep:
        shutil.rmtree(run.root, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("rocksdb", "redis"), default="rocksdb")
    ap.add_argument("--json", action="store_true", help="the last line is the result as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (logs) after the run")
    ap.add_argument("--reconnect-s", type=int, default=RECONNECT_S, help="worker's GCS reconnect s (-1: unset)")
    ap.add_argument("--outage-s", type=float, default=OUTAGE_S, help="seconds the head stays down")
    ap.add_argument("--phase", choices=("create", "check"), help=argparse.SUPPRESS)
    ap.add_argument("--address", help=argparse.SUPPRESS)
    ap.add_argument("--counter-file", help=argparse.SUPPRESS)
    ap.add_argument("--worker-node-id", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.phase == "create":
        phase_create(a.address, a.counter_file)
        return 0
    if a.phase == "check":
        phase_check(a.address, a.worker_node_id, a.counter_file, CHECK_TIMEOUT_S)
        return 0
    # Become the subreaper of the daemonized Ray processes, so nothing escapes the final cleanup.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    run = Run(backend=a.backend, root=Path(tempfile.mkdtemp(prefix="gcsft-", dir="/tmp")), port=free_port(),
              reconnect_s=a.reconnect_s, outage_s=a.outage_s)
    t0 = time.time()
    res: dict[str, Any] = {"backend": run.backend, "recovered": False, "worker_same_node_id": False,
                           "actor_same_pid": False, "actor_same_id": False, "new_work_ok": False,
                           "counter_gap_ms": None, "restart_to_ready_s": None, "error": None}
    try:
        check(run, res, lambda s: print(f"[{time.time() - t0:6.1f}s] {s}", flush=True))
    except Exception as e:  # noqa: BLE001 -- reported as the run's error, the cleanup still runs
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        cleanup(run, a.keep)
    keys = ("recovered", "worker_same_node_id", "actor_same_pid", "actor_same_id", "new_work_ok", "counter_gap_ms",
            "counter_gap_before_kill_ms", "head_restart_s", "restart_to_ready_s", "kill_to_ready_s")
    print(f"backend={res['backend']} " + " ".join(f"{k}={res.get(k)}" for k in keys))
    if res.get("error"):
        print(f"error: {res['error']}")
    if a.keep:
        print(f"kept {run.root}")
    if a.json:
        print(json.dumps(res))
    return 0 if res["recovered"] else 1


if __name__ == "__main__":
    sys.exit(main())

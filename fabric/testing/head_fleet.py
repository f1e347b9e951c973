"""A fleet on one machine's loopback whose head can be SIGKILLed and started again: ``HeadFleet``.

The head runs ``fabric start-head --profile edge-relay`` (so no job or call lands on it) on
127.0.0.6 and a free port, with Ray's GCS fault tolerance on the ``embedded`` store (RocksDB in
the cluster's state folder, under the fleet's own ``XDG_DATA_HOME``), on a private Redis
(``redis``, a ``fabric.testing.redis.RedisServer``), or ``off`` (``--no-fault-tolerance``). Each
worker runs ``fabric join --head-outage-tolerance`` on a loopback address of its own (127.0.0.7,
127.0.0.8, ...) with a temp dir of its own. ``kill_head()`` SIGKILLs every process of the head at
once (found by its temp dir: ``fabric.testing.head_kill``; the fabric's actors on it die too) and
``restart_head()`` runs the same command again.

Drivers (``driver``: ``python -m fabric.testing.chaos_driver``) attach to the first worker's raylet
(``--node-ip``): a driver attached to the head's raylet dies with it. They run without the loopback
switch ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` and with Ray's wait for its GCS made long, so they
outlive an outage. ``close()`` stops everything the fleet started, by pid and temp dir (never by
name: other clusters may run on the machine), stops the Redis and removes the fleet's folder.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Self

from fabric.testing.chaos_driver import result_of
from fabric.testing.head_kill import kill_node, kill_processes, processes_under
from fabric.testing.redis import RedisServer

__all__ = ["BACKENDS", "HEAD_IP", "HeadFleet", "StartClose", "fleet_env"]

HEAD_IP = "127.0.0.6"
BACKENDS = ("embedded", "redis", "off")
REDIS_PASSWORD = "head-fleet-redis-pw"
CLI_TIMEOUT_S = 180.0
DRIVER_RECONNECT_S = 300
"""How long a driver waits for a GCS that went away (Ray's default, 60 s, is too short for a test's outage)."""
HEAD_RAY_ARGS = ("--num-cpus=1", "--include-dashboard=false", "--object-store-memory=80000000")


def free_port(host: str = HEAD_IP) -> int:
    """A TCP port nobody listens on at ``host`` now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def fleet_env(xdg: Path, address: str | None = None) -> dict[str, str]:
    """The environment of the fleet's commands: this one without Ray's GCS, Redis and address
    settings or the loopback switch, auth off, usage stats off, ``XDG_DATA_HOME`` = ``xdg`` (the
    fabric's state folder, and so the embedded store, lands there), and ``RAY_ADDRESS`` when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_gcs", "RAY_REDIS", "RAY_ADDRESS"))}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", XDG_DATA_HOME=str(xdg))
    if address is not None:
        env["RAY_ADDRESS"] = address
    return env


class StartClose:
    """A context manager over ``start()`` and ``close()``: ``close`` runs also when ``start`` fails."""

    def start(self) -> object:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: Self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HeadFleet(StartClose):
    """A head and ``workers`` joined nodes on loopback; see the module docstring.

    Use it as a context manager (``close()`` runs also when the start fails)::

        with HeadFleet("embedded", workers=2) as fleet:
            fleet.up({"fence": {...}})
            jobs = fleet.driver("jobs", out_dir, "4", "50")["jobs"]
            fleet.kill_head()
            out = fleet.restart_head()
    """

    def __init__(self, backend: str = "embedded", *, workers: int = 2, worker_cpus: int = 2,
                 outage_tolerance_s: float = 300.0, root: Path | None = None,
                 say: Callable[[str], None] = lambda line: None) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.backend, self.n_workers, self.worker_cpus = backend, workers, worker_cpus
        self.outage_tolerance_s, self.say = outage_tolerance_s, say
        self._given_root = root
        self.root = Path()
        self.port = 0
        self.redis: RedisServer | None = None
        self.head_args: list[str] = []
        self.workers: list[str] = []
        """The joined nodes' names, in join order (``w1``, ``w2``, ...)."""
        self.drivers: list[subprocess.Popen[str]] = []
        self.supervisors: list[subprocess.Popen[str]] = []
        """``fabric join --supervise`` processes (``join(supervise=True)``)."""
        self.outputs: list[str] = []
        """What each ``start-head`` printed, in order (the first start, then each restart)."""
        self.started = False

    # -- where things are --------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return f"{HEAD_IP}:{self.port}"

    @property
    def head_tmp(self) -> Path:
        return self.root / "head"

    @property
    def env(self) -> dict[str, str]:
        """The environment of the fleet's ``fabric`` commands."""
        return fleet_env(self.root / "xdg")

    @property
    def driver_env(self) -> dict[str, str]:
        """A driver's environment: the fleet's, ``RAY_ADDRESS`` and a long wait for the GCS."""
        return {**fleet_env(self.root / "xdg", self.address),
                "RAY_gcs_rpc_server_reconnect_timeout_s": str(DRIVER_RECONNECT_S)}

    @staticmethod
    def worker_ip(i: int) -> str:
        """The loopback address of the ``i``-th worker (1-based): 127.0.0.7, 127.0.0.8, ..."""
        return f"127.0.0.{6 + i}"

    def worker_tmp(self, name: str) -> Path:
        return self.root / name

    @property
    def driver_ip(self) -> str:
        """The raylet drivers attach to: the first worker's."""
        return self.worker_ip(1)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> HeadFleet:
        """Make the fleet's folder, start the Redis (backend ``redis``), the head and the workers."""
        # short: Ray's unix sockets live under each temp dir (a socket path is at most 107 bytes)
        self.root = self._given_root or Path(tempfile.mkdtemp(prefix="hf-", dir="/tmp"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.started = True
        self.port = free_port()
        flags = ["--profile", "edge-relay", "--name", "head", "--node-ip-address", HEAD_IP, "--port", str(self.port)]
        if self.backend == "redis":
            self.redis = RedisServer.start(REDIS_PASSWORD, host="127.0.0.1")
            pw = self.root / "redis.pw"
            pw.write_text(self.redis.password + "\n")
            pw.chmod(0o600)
            flags += ["--redis-address", self.redis.address, "--redis-password-file", str(pw)]
        elif self.backend == "off":
            flags.insert(0, "--no-fault-tolerance")
        self.head_args = ["start-head", *flags, "--", f"--temp-dir={self.head_tmp}", *HEAD_RAY_ARGS]
        self.say(f"head on {self.address} ({self.backend})")
        self.start_head()
        self.join_many(self.n_workers)
        return self

    def join_many(self, n: int) -> list[str]:
        """Join ``n`` workers at once (``join``'s defaults, each ``fabric join`` in a thread of its
        own: a join mostly waits on its probe and Ray); their names, in order."""
        from concurrent.futures import ThreadPoolExecutor

        first = len(self.workers) + 1
        with ThreadPoolExecutor(max_workers=max(1, n)) as pool:
            names = list(pool.map(lambda i: self._join(i), range(first, first + n)))
        self.workers.extend(names)
        return names

    def fabric(self, *args: str, timeout_s: float = CLI_TIMEOUT_S, check: bool = True) -> str:
        """Run ``python -m fabric ARGS`` in the fleet's environment; its output (stdout + stderr).
        ``check``: a non-zero exit raises, with the output."""
        p = subprocess.run([sys.executable, "-m", "fabric", *args], env=self.env, capture_output=True, text=True,
                           timeout=timeout_s, cwd=str(self.root))
        out = p.stdout + p.stderr
        if check and p.returncode != 0:
            raise RuntimeError(f"fabric {' '.join(args[:1])} exited {p.returncode}:\n{out[-3000:]}")
        return out

    def start_head(self) -> str:
        """Run the head's ``fabric start-head``; its output (kept in ``outputs``)."""
        out = self.fabric(*self.head_args)
        self.outputs.append(out)
        return out

    def join(self, profile: str = "cpu-only-box", cpus: int | None = None, slots: int = 4, *,
             supervise: bool = False, outage_tolerance_s: float | None = None) -> str:
        """Join one more worker (``w<n>`` on the next loopback address) with ``slots`` concurrent
        tasks (a job takes one: with the profile's one, the calls would find no room); its name.
        ``supervise``: ``fabric join --supervise`` runs in the background (``close()`` ends it) and
        keeps the node in the fleet; ``outage_tolerance_s``: this node's ``--head-outage-tolerance``."""
        name = self._join(len(self.workers) + 1, profile, cpus, slots, supervise=supervise,
                          outage_tolerance_s=outage_tolerance_s)
        self.workers.append(name)
        return name

    def _join(self, i: int, profile: str = "cpu-only-box", cpus: int | None = None, slots: int = 4, *,
              supervise: bool = False, outage_tolerance_s: float | None = None) -> str:
        """Join worker ``w<i>`` at ``worker_ip(i)`` (see ``join``); its name."""
        name = f"w{i}"
        tolerance = self.outage_tolerance_s if outage_tolerance_s is None else outage_tolerance_s
        # --no-wait: the workers join before `fabric up`, so no registry could list them yet
        args = ["join", "--address", self.address, "--profile", profile, "--name", name,
                "--node-ip-address", self.worker_ip(i), "--max-concurrent-tasks", str(slots),
                "--head-outage-tolerance", str(int(tolerance)), *(["--supervise"] if supervise else ["--no-wait"]),
                "--", f"--temp-dir={self.worker_tmp(name)}", f"--num-cpus={cpus or self.worker_cpus}",
                "--object-store-memory=80000000"]
        if supervise:
            log = open(self.root / f"{name}.supervise.log", "w")
            self.supervisors.append(subprocess.Popen([sys.executable, "-m", "fabric", *args], env=self.env, stdout=log,
                                                     stderr=subprocess.STDOUT, text=True, cwd=str(self.root),
                                                     start_new_session=True))
            log.close()
        else:
            self.fabric(*args)
        self.say(f"joined {name} at {self.worker_ip(i)}" + (" (supervised)" if supervise else ""))
        return name

    def up(self, settings: dict[str, Any] | None = None, timeout_s: float = 120.0) -> str:
        """``fabric up --address --config FILE`` with ``settings`` (JSON is YAML); its output."""
        args = ["up", "--address", self.address, "--timeout", str(int(timeout_s))]
        if settings:
            config = self.root / "fabric-settings.yaml"
            config.write_text(json.dumps(settings, indent=1))
            args += ["--config", str(config)]
        return self.fabric(*args, timeout_s=timeout_s + 60)

    # -- drivers -----------------------------------------------------------------------------------------
    def driver_argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "fabric.testing.chaos_driver", "--node-ip", self.driver_ip, *args]

    def driver(self, *args: str, timeout_s: float = 300.0) -> Any:
        """Run one chaos driver command to its end (attached to the first worker); its answer."""
        p = subprocess.run(self.driver_argv(*args), env=self.driver_env, capture_output=True, text=True,
                           timeout=timeout_s, cwd=str(self.root))
        answer = result_of(p.stdout)
        if p.returncode != 0 or answer is None:
            raise RuntimeError(f"chaos driver {args[0]} failed ({p.returncode}): {p.stdout[-800:]}{p.stderr[-2500:]}")
        return answer

    def spawn_driver(self, *args: str) -> subprocess.Popen[str]:
        """Start a chaos driver command in the background (``close()`` ends it if still running)."""
        proc = subprocess.Popen(self.driver_argv(*args), env=self.driver_env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=str(self.root), start_new_session=True)
        self.drivers.append(proc)
        return proc

    def python(self, code: str, *args: str, timeout_s: float = 300.0) -> Any:
        """Run ``code`` as a driver script attached to the first worker (``ray.init`` is the
        script's: ``NODE_IP`` and ``RAY_ADDRESS`` are in its environment); the JSON it prints
        after ``chaos-result: ``."""
        env = {**self.driver_env, "NODE_IP": self.driver_ip}
        p = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                           timeout=timeout_s, cwd=str(self.root))
        answer = result_of(p.stdout)
        if p.returncode != 0 or answer is None:
            raise RuntimeError(f"driver script failed ({p.returncode}): {p.stdout[-800:]}{p.stderr[-2500:]}")
        return answer

    # -- the fault ---------------------------------------------------------------------------------------
    def kill_head(self) -> list[int]:
        """SIGKILL every process of the head at once (its GCS, raylet, agents, the fabric's actors);
        the pids. Raises when none was found."""
        pids = kill_node(str(self.head_tmp))
        if not pids:
            raise RuntimeError(f"no process of the head found by its temp dir {self.head_tmp}")
        self.say(f"SIGKILLed {len(pids)} head processes")
        return pids

    def restart_head(self) -> str:
        """Run the head's ``fabric start-head`` again, as it was first run; its output (with the
        fault tolerance on it says ``recovered the cluster ... N of N worker nodes came back``)."""
        out = self.start_head()
        self.say("head started again: " + " ".join(line.strip() for line in out.splitlines() if "recovered" in line))
        return out

    # -- the end -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every driver, worker and head process this fleet started (by pid and temp dir), the
        Redis, and remove the fleet's folder. Safe to call twice and after a failed start."""
        for proc in self.drivers:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 9)
                except OSError:
                    pass
                try:
                    proc.communicate(timeout=10)
                except (subprocess.TimeoutExpired, ValueError):
                    pass
        self.drivers.clear()
        for proc in self.supervisors:  # SIGTERM: a supervisor stops its node and exits
            if proc.poll() is None:
                proc.terminate()
        for proc in self.supervisors:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
        self.supervisors.clear()
        if self.started:
            # drivers' Ray workers, the workers, then the head: every process naming the fleet's folder
            for name in self.workers:
                kill_node(str(self.worker_tmp(name)))
            kill_node(str(self.head_tmp))
            leftovers = processes_under(str(self.root))
            if leftovers:
                kill_processes(leftovers)
        if self.redis is not None:
            self.redis.stop()
            self.redis = None
        if self.started and self._given_root is None:
            shutil.rmtree(self.root, ignore_errors=True)
        self.started = False


def wait_until(check: Callable[[], Any], what: str, timeout_s: float = 120.0, every_s: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy (returned); a ``TimeoutError`` naming ``what``."""
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # e.g. the fabric not answering yet
            last = exc
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s" + (f" (last error: {last})" if last else ""))

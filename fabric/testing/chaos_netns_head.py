"""The head restart on hosts in network namespaces: ``NetnsHeadFleet`` and ``head_restart_netns``.

A fleet of a head and two nodes, each host in a namespace of its own on a bridge
(``fabric.testing.netns.NetnsFleet``, token auth on): the head runs ``fabric start-head --profile
edge-relay`` with Ray's GCS fault tolerance on the embedded store, or on a private Redis listening on
the bridge's root address (``fabric.testing.redis.RedisServer``); the nodes join with ``fabric join
--supervise``. ``NetnsHeadFleet`` gives ``fabric.testing.chaos_head.head_restart`` what it drives
(``driver``, ``spawn_driver``, ``kill_head``, ``restart_head``, ``backend``): the drivers run inside
``n1``'s namespace (a driver on the head would die with it) with Ray's wait for its GCS made long;
``kill_head`` SIGKILLs every process of the head's namespace at once (a machine that lost its
power); ``restart_head`` runs the same ``start-head`` again and returns what it printed up to
``recovered the cluster ...``. The scenario and its keys are ``chaos_head``'s.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from fabric.testing.chaos_driver import result_of
from fabric.testing.chaos_head import HeadRestart, head_restart
from fabric.testing.head_fleet import StartClose
from fabric.testing.netns import NetnsFleet

__all__ = ["HEAD_SETTINGS", "NetnsHeadFleet", "head_restart_netns"]

DRIVER_ENV = {"RAY_gcs_rpc_server_reconnect_timeout_s": "600"}
"""A driver outlives the head's outage (Ray's own wait for its GCS is 60 s)."""
HEAD_SETTINGS = {"health": {"heartbeat_interval_s": 1.0, "offline_after_s": 6.0, "monitor_interval_s": 0.25,
                            "join_timeout_s": 120.0},
                 "fence": {"lease_ttl_s": 60.0, "renew_every_s": 2.0, "margin_s": 2.0}}
"""The jobs' leases outlast the outage: the head down, its GCS back, the fabric's actors restarted on it."""


class NetnsHeadFleet(StartClose):
    """See the module docstring; a context manager (``close`` runs also after a failed start)."""

    def __init__(self, backend: str, *, say: Callable[[str], None] = print) -> None:
        if backend not in ("embedded", "redis"):
            raise ValueError(f"backend must be 'embedded' or 'redis', got {backend!r}")
        self.backend, self.say = backend, say
        self.fleet = NetnsFleet(auth=True)
        self.work = Path(tempfile.mkdtemp(prefix="fabric-head-netns-"))
        self.work.chmod(0o777)
        self.redis: Any = None
        self.drivers: list[subprocess.Popen[str]] = []

    def start(self) -> None:
        f = self.fleet.open()
        flags: list[str] = []
        if self.backend == "redis":
            from fabric.testing.redis import RedisServer

            self.redis = RedisServer.start(secrets.token_hex(12), host=f.bridge_address)
            secret = self.work / "redis.pw"
            secret.write_text(self.redis.password + "\n")
            secret.chmod(0o600)
            flags = ["--redis-address", self.redis.address, "--redis-password-file", str(secret)]
        f.start_head("head", profile="edge-relay", head_flags=flags)
        f.join("n1", profile="cpu-only-box", slots=4, supervise=True)
        f.join("n2", profile="cpu-only-box", slots=4, supervise=True)
        f.wait_nodes(3, timeout_s=180)
        config = self.work / "fabric.json"
        config.write_text(json.dumps(HEAD_SETTINGS))
        up = f.run(None, ["fabric", "up", "--address", f.address, "--config", str(config), "--timeout", "180"], timeout_s=300)
        if up.returncode != 0:
            raise RuntimeError(f"fabric up failed: {up.stdout[-1500:]}{up.stderr[-1500:]}")
        self.say(f"fleet up ({self.backend}): head {f.address}, n1, n2")

    # -- what chaos_head drives ----------------------------------------------------------------------
    def _argv(self, *args: str) -> list[str]:
        # attached to n1's own raylet: left to itself, Ray finds the head's raylet (its session folder
        # is on the shared disk) and gives the driver the head's address, which nobody in n1 answers
        return [sys.executable, "-m", "fabric.testing.chaos_driver", "--node-ip", self.fleet.hosts["n1"].address, *args]

    def driver(self, *args: str, timeout_s: float = 300.0) -> Any:
        """One chaos driver command in ``n1``'s namespace, to its end; its answer."""
        proc = self.fleet.run("n1", self._argv(*args), env=DRIVER_ENV, timeout_s=timeout_s)
        answer = result_of(proc.stdout)
        if proc.returncode != 0 or answer is None:
            raise RuntimeError(f"chaos driver {args[0]} failed ({proc.returncode}): {proc.stdout[-800:]}{proc.stderr[-2000:]}")
        return answer

    def spawn_driver(self, *args: str) -> subprocess.Popen[str]:
        """A chaos driver command in ``n1``'s namespace, in the background (``close`` ends it)."""
        host = self.fleet.hosts["n1"]
        proc = subprocess.Popen(["ip", "netns", "exec", host.namespace, *self._argv(*args)],
                                env={**self.fleet.driver_env("n1"), **DRIVER_ENV}, cwd=str(self.work),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.drivers.append(proc)
        return proc

    def kill_head(self) -> list[int]:
        pids = self.fleet.crash("head")
        if not pids:
            raise RuntimeError("no process found in the head's namespace")
        self.say(f"SIGKILLed {len(pids)} head processes")
        return pids

    def restart_head(self, timeout_s: float = 120.0) -> str:
        """``start-head`` again; what it printed until it said it recovered the cluster (or
        ``timeout_s`` passed)."""
        host = self.fleet.hosts["head"]
        start = host.log.stat().st_size if host.log.exists() else 0
        self.fleet.restart_head(timeout_s=timeout_s)
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            with open(host.log, "rb") as fh:
                fh.seek(start)
                text = fh.read().decode(errors="replace")
            if "recovered the cluster" in text or "came back" in text:
                break
            time.sleep(0.5)
        self.say("head started again: " + " ".join(line.strip() for line in text.splitlines() if "recovered" in line))
        return text

    def close(self) -> None:
        for proc in self.drivers:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.communicate(timeout=10)
            except (subprocess.TimeoutExpired, ValueError):
                pass
        self.drivers.clear()
        try:
            self.fleet.close()
        finally:
            if self.redis is not None:
                self.redis.stop()
                self.redis = None
            shutil.rmtree(self.work, ignore_errors=True)


def head_restart_netns(name: str, backend: str, calls: int, load_s: float, say: Callable[[str], None] = print) -> dict[str, Any]:
    """``chaos_head.head_restart`` on a ``NetnsHeadFleet`` of ``backend``: four jobs, two on each
    node, ``calls`` calls over ``load_s`` seconds (at least 18); the chaos JSON."""
    with NetnsHeadFleet(backend, say=say) as fleet:
        ticks = fleet.work / "ticks"
        ticks.mkdir()
        ticks.chmod(0o777)
        jobs = fleet.driver("jobs", str(ticks), "4", "50", "--spread", "n1,n2")["jobs"]
        t = HeadRestart(calls=calls, load_s=max(load_s, 18.0))
        run = fleet.work / "run"
        run.mkdir()
        run.chmod(0o777)
        doc = head_restart(fleet, jobs, ticks, run, t, name=name)
        return {**doc, "hosts": "netns"}

"""A private ``redis-server`` for tests of the GCS's external store: a free loopback port, a
password, no persistence (a test's Redis outlives only the head it backs, not itself).

``RedisServer.start(password)`` runs Debian's ``redis-server`` as this process's child and waits
until it listens; ``stop()`` ends it by pid. ``redis_problem()`` says why none can run here and
``require(problem)`` turns that into a skip (a failure under ``CI=true``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field

LISTEN_TIMEOUT_S = 10.0


def redis_problem() -> str | None:
    """Why no ``redis-server`` can run here, or None."""
    return None if shutil.which("redis-server") else "redis-server is not installed (apt-get install redis-server)"


def require(problem: str | None) -> None:
    """In a test: skip naming ``problem``; under ``CI=true`` a missing tool is a failure instead."""
    if problem is None:
        return
    import pytest

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and no Redis can run: {problem}")
    pytest.skip(problem)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class RedisServer:
    """One ``redis-server`` child: ``address`` (``HOST:PORT``) and ``password``."""

    host: str
    port: int
    password: str = field(repr=False)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def start(cls, password: str, host: str = "127.0.0.1") -> RedisServer:
        """Start one on a free port of ``host`` and wait until it accepts connections."""
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError(redis_problem())
        server = cls(host, _free_port(host), password)
        # The password goes in through stdin (a config read from "-"), not this child's argv.
        server.proc = subprocess.Popen([exe, "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        config = (f"port {server.port}\nbind {host}\nrequirepass {password}\nsave \"\"\nappendonly no\n"
                  "daemonize no\nprotected-mode no\n")
        assert server.proc.stdin is not None
        server.proc.stdin.write(config.encode())
        server.proc.stdin.close()
        server.wait_listening()
        return server

    def wait_listening(self) -> None:
        """Return once the server accepts connections; raise (and stop it) if it exits or takes too long."""
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited {self.proc.returncode} before it listened on {self.address}")
            with socket.socket() as s:
                if s.connect_ex((self.host, self.port)) == 0:
                    return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not listen on {self.address} within {LISTEN_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        """End it by pid (SIGTERM, then SIGKILL) and reap it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


__all__ = ["RedisServer", "redis_problem", "require"]

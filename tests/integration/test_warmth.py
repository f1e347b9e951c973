"""Warmth is real (issue 15) on a real local fleet: a node's ProbeActor prefetches a template's
artifacts (a file:// one and an http:// one served on loopback by this test) into the node's own
artifact cache and reports them; ``h.nodes()`` shows them in that node's ``warm``; a bad URI comes
back ``ok: False`` and stays cold; a job whose template lists the artifacts lands on the warm node,
and the scheduler's dry run shows the warmth component in each node's key.

One module-scoped LocalFabric: two identical worker raylets (two slots each). Each node's cache is
``$XDG_CACHE_HOME/adaptive-fabric/artifacts/<node name>``: the raylets inherit ``XDG_CACHE_HOME``
(a temporary folder) from this process. No wall-clock assertions: waits are bounded polls.
"""

from __future__ import annotations

import http.server
import os
import sys
import threading
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fabric import adaptive  # noqa: E402
from fabric.core.names import NAMESPACE, SCHEDULER, probe_actor_name  # noqa: E402
from fabric.core.placement import PlacementContext, Requirement  # noqa: E402
from fabric.core.settings import template_artifacts  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0, "reprobe_interval_s": 600.0}}


@adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1, template="encoder", call_timeout_s=60)
class Encoder:
    def where(self) -> str:
        return ray.get_runtime_context().get_node_id()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("warmth")
    served = root / "served" / "enc"
    served.mkdir(parents=True)
    (served / "table.bin").write_bytes(b"lookup table " * 500)
    local = root / "local" / "model.bin"
    local.parent.mkdir()
    local.write_bytes(b"model weights " * 800)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a, **k: _Quiet(*a, directory=str(root / "served"), **k))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    artifacts = [local.as_uri(), f"{base}/enc/table.bin"]
    settings = {**SETTINGS, "templates": {"encoder": {"artifacts": artifacts}}}
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(root / "cache")  # the raylets started below inherit it
    try:
        with LocalFabric(["cpu-only-box", "cpu-only-box"], settings=settings, max_slots=2, timeout_s=120) as lf:
            yield {"lf": lf, "artifacts": artifacts, "base": base, "root": root}
    finally:
        srv.shutdown()
        srv.server_close()
        if old is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = old


def probe_of(node_id: str):
    return ray.get_actor(probe_actor_name(node_id), namespace=NAMESPACE)


def warm_of(lf) -> dict[str, frozenset]:
    return {r.node_id: frozenset(r.warm) for r in lf.handle.nodes()}


def test_prefetch_makes_one_node_warm_and_a_bad_uri_stays_cold(env):
    lf, artifacts = env["lf"], env["artifacts"]
    cold, warm = sorted(n.node_id for n in lf.nodes)  # warm the node the id tie-break would not pick
    env["warm"], env["cold"] = warm, cold
    lf.wait_until(lambda: all(probe_of(n) for n in (cold, warm)), "both probe actors")
    missing = (env["root"] / "local" / "absent.bin").as_uri()
    results = ray.get(probe_of(warm).prefetch.remote([*artifacts, f"{env['base']}/enc/nope.bin", missing]), timeout=60)
    assert [(r["uri"], r["ok"]) for r in results] == [(artifacts[0], True), (artifacts[1], True),
                                                       (f"{env['base']}/enc/nope.bin", False), (missing, False)]
    assert "404" in results[2]["error"] and "no such file" in results[3]["error"] and results[0]["bytes"] == 14 * 800
    lf.wait_until(lambda: warm_of(lf).get(warm) == frozenset(artifacts), "the warm node's warmth in h.nodes()")
    assert warm_of(lf)[cold] == frozenset()
    infos = {n: ray.get(probe_of(n).info.remote(), timeout=30) for n in (cold, warm)}
    assert infos[warm]["warm"] == sorted(artifacts)
    names = {n.node_id: n.name for n in lf.nodes}
    cache = {n: Path(i["artifact_cache"]) for n, i in infos.items()}
    assert cache[warm] == env["root"] / "cache" / "adaptive-fabric" / "artifacts" / names[warm]
    assert cache[cold] != cache[warm] and not (cache[cold] / "index.json").exists()  # each node its own folder
    assert len([p for p in cache[warm].iterdir() if not p.name.startswith(".")]) == 3  # two artifacts + index


def test_the_dry_run_shows_warmth_and_a_template_job_lands_on_the_warm_node(env):
    lf, warm, cold = env["lf"], env["warm"], env["cold"]
    sched = ray.get_actor(SCHEDULER, namespace=NAMESPACE)
    images = template_artifacts(lf.settings, "encoder")
    ctx = PlacementContext(template="encoder", template_images=images)
    req = Requirement(min_tier="cpu_ffmpeg", num_cpus=0.1)

    def warmth_keys():
        out = ray.get(sched.explain.remote(req, ctx, True), timeout=30)
        keys = {s["node_id"]: s["key"] for s in out["survivors"]}
        return out if keys.get(warm, [None] * 5)[4] == "-2" else None

    out = lf.wait_until(warmth_keys, "the scheduler's fleet to see the warm node")
    keys = {s["node_id"]: s["key"] for s in out["survivors"]}
    assert keys[cold][4] == "0" and out["decision"]["node_id"] == warm and "warmth=-2" in out["text"]
    assert keys[cold][:4] == keys[warm][:4]  # everything above warmth tied: warmth decided
    job = Encoder.remote()
    try:
        assert ray.get(job.wait_running(90).where.remote(), timeout=90) == warm
        assert lf.handle.job(job.job_id).binding.node_id == warm
    finally:
        job.stop()

"""The fabric's metrics on Ray's Prometheus endpoint (issue 17), against a real local fabric.

The scheduler exports ``h.metrics()`` through ``ray.util.metrics`` on every tick; Ray's metrics
agent on the head serves them on the node's ``MetricsExportPort`` (from ``ray.nodes()``) with a
``ray_`` prefix (and ``_total`` on counters). The test scrapes ``/metrics`` there (the cluster
reports every 500 ms), checks the fabric's series exist, runs real work (adaptive tasks and a
job) and checks the placement counters and the pool gauges move with it, to what ``h.metrics()``
says. No wall-clock assertions: every wait is a bounded poll.
"""

from __future__ import annotations

import re
import sys
import time
import urllib.request

import pytest

ray = pytest.importorskip("ray")

from fabric import JobState, adaptive  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0, "reprobe_interval_s": 600.0}}
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1)
def square(x: int) -> int:
    return x * x


@adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60)
class Holder:
    def __init__(self) -> None:
        self.n = 0

    def ping(self) -> int:
        self.n += 1
        return self.n


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(["cpu-only-box"], settings=SETTINGS, max_slots=2, timeout_s=120,
                     system_config={"metrics_report_interval_ms": 500}) as fabric_:
        yield fabric_


@pytest.fixture(scope="module")
def url(lf):
    head = [n for n in ray.nodes() if n.get("Alive") and "node:__internal_head__" in n.get("Resources", {})]
    assert len(head) == 1, ray.nodes()
    port = head[0].get("MetricsExportPort")
    assert port, head[0]
    return f"http://{head[0]['NodeManagerAddress']}:{port}/metrics"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every fabric sample on the endpoint: ``(name, fabric tags) -> value`` (Ray's own labels,
    such as the session and the reporting component, left out)."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m or not m.group(1).startswith("ray_fabric_"):
            continue
        tags = tuple(sorted((k, v) for k, v in LABEL.findall(m.group(2) or "")
                            if k in ("outcome", "pool", "tier", "kind", "bundle_id")))
        key = (m.group(1), tags)
        out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def placements(samples: dict, outcome: str) -> float:
    return samples.get(("ray_fabric_placements_total", (("outcome", outcome),)), 0.0)


def pool_gauge(samples: dict, name: str, pool: str = "default") -> float | None:
    return samples.get((f"ray_fabric_pool_{name}", (("pool", pool),)))


def test_the_fabrics_series_are_on_the_heads_metrics_export_port(lf, url):
    assert lf.handle.metrics()["pools"]["default"]["nodes"] == 1  # LocalFabric waited for the node to register
    samples = lf.wait_until(lambda: (s := scrape(url)) and pool_gauge(s, "nodes") == 1 and s,
                            "the registered node in the pool's gauge on /metrics", timeout_s=90, interval_s=0.5)
    assert pool_gauge(samples, "spare_target") == 0
    assert ("ray_fabric_nodes", (("tier", "cpu_ffmpeg"),)) in samples
    assert ("ray_fabric_queue_depth", ()) in samples


def test_placement_counters_and_gauges_move_with_real_work_to_what_h_metrics_says(lf, url):
    h = lf.handle
    before = scrape(url)
    n = 5
    assert ray.get([square.remote(i) for i in range(n)], timeout=120) == [i * i for i in range(n)]
    # the tasks' workers report their calls when quiet; the figure reaches the endpoint within a report interval
    lf.wait_until(lambda: placements(scrape(url), "succeeded") >= placements(before, "succeeded") + n,
                  "the tasks counted as placed on /metrics", timeout_s=90, interval_s=0.5)

    job = Holder.remote()
    assert ray.get(job.ping.remote(), timeout=120) == 1
    # a job holds one slot of the pool's two for its life: the used fraction moves with no fleet change
    lf.wait_until(lambda: (pool_gauge(scrape(url), "used_capacity_fraction") or 0) >= 0.5,
                  "the running job in the pool's used capacity", timeout_s=90, interval_s=0.5)
    assert h.metrics()["pools"]["default"]["used_capacity_fraction"] >= 0.5
    assert job.stop() == JobState.STOPPED
    lf.wait_until(lambda: pool_gauge(scrape(url), "used_capacity_fraction") == 0.0,
                  "the stopped job's slot back in the gauge", timeout_s=90, interval_s=0.5)

    def agree() -> bool:  # quiet now: the endpoint converges on the scheduler's figures
        m, s = h.metrics(), scrape(url)
        return all(placements(s, o) == m[f"placements_{o}"] for o in ("attempted", "succeeded", "failed")) \
            and pool_gauge(s, "nodes") == m["pools"]["default"]["nodes"]

    lf.wait_until(agree, "/metrics to equal h.metrics()", timeout_s=90, interval_s=0.5)
    m = h.metrics()
    assert m["placements_succeeded"] >= placements(before, "succeeded") + n + 1  # the tasks and the job
    assert m["placements_attempted"] >= m["placements_succeeded"]
    for name in ("placements_dispatch_failed", "jobs_rejected", "bundles_broken", "jobs_dropped"):
        assert m[name] == 0, name
    assert m["broken_bundle_ids"] == [] and m["pools"]["default"]["broken_bundle_ids"] == []

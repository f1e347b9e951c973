"""``scripts/bench_control_plane.py`` runs and keeps its JSON contract on a small profile (150 then
300 simulated nodes, 2-second heartbeats, 2 seconds to settle and a 4-second window each, a
6-second soak): the real registry, health monitor and scheduler take the simulated fleet, every
node reaches the scheduler's view, load steps reach it, placements are answered. It checks that the
benchmark works and that its figures hang together, not how fast anything is; the figures come
from full runs (``docs/benchmarks.md``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {"nodes", "heartbeats_per_s", "lag_p50_s", "lag_p99_s", "tick_p50_ms", "tick_p99_ms", "placement_p50_ms",
          "placement_p99_ms", "rss_mib", "cpu_s_per_node_hour"}


def test_bench_control_plane_measures_each_size_and_prints_one_json_line():
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    out = subprocess.run([sys.executable, "scripts/bench_control_plane.py", "--sizes", "150,300", "--window", "4",
                          "--heartbeat", "2", "--settle", "2", "--rate", "50", "--floor-s", "2", "--soak", "6", "--past-wall", "--json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result["sizes"]) == {"150", "300"}
    for size, row in result["sizes"].items():
        assert FIELDS <= set(row), FIELDS - set(row)
        assert row["nodes"] == row["fleet_in_scheduler"] >= int(size)  # every node reached the scheduler's view
        assert row["heartbeats_per_s"] > 0 and row["calls_failed"] == 0 and row["sim_errors"] == []
        assert row["lag_samples"] > 0 and 0 < row["lag_p50_s"] <= row["lag_p99_s"]
        assert row["placements"] > 0 and row["placement_errors"] == []
        assert 0 < row["placement_p50_ms"] <= row["placement_p99_ms"]
        assert row["ticks"] > 0 and row["tick_p50_ms"] <= row["tick_p99_ms"]
        assert set(row["rss_mib"]) == {"registry", "health", "scheduler", "total"}
        assert row["rss_mib"]["total"] == pytest.approx(sum(v for k, v in row["rss_mib"].items() if k != "total"), abs=0.5)
        assert row["cpu_s"]["simulator"] > 0 and row["cpu_s_per_node_hour"] > 0
        assert row["registry_cpu_us_per_heartbeat"] > 0
    assert result["largest_sustained"] in (0, 150, 300)
    floor = result["ray_floor"]
    assert floor["calls"] > 0 and floor["actor_cpu_us_per_call"] > 0 and floor["max_calls_per_s_per_core"] > 0
    assert all(row["datagrams_shed"] >= 0 for row in result["sizes"].values())  # the kernel's count is read
    soak = result["soak"]
    assert soak["seconds"] >= 6 and soak["nodes"] >= 300 and soak["windows"]
    assert soak["store_bytes_start"] > 0 and set(soak["rss_mib_end"]) == {"registry", "health", "scheduler"}
    assert isinstance(soak["flat"], bool)
    if result["largest_sustained"]:
        wall = result["past_wall"]
        assert wall["size"] == 2 * result["largest_sustained"] and wall["nodes"] >= wall["size"]
        assert wall["datagrams_shed"] >= 0 and isinstance(wall["graceful"], bool)
    assert "largest fleet sustained" in out.stdout
    assert "actors up:" in out.stderr  # progress on stderr

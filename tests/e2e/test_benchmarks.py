"""The benchmark scripts run and print what their issues promise (tiny sizes: this checks that they
work and keep their JSON contract, not how fast anything is; the figures come from full runs)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def run_script(*args: str, timeout: float = 600) -> str:
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    out = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def test_bench_dispatch_prints_its_table_and_json_object():
    text = run_script("scripts/bench_dispatch.py", "--sizes", "20,60", "--rounds", "2", "--latency-calls", "8",
                      "--quiet-pct", "100", "--by-process", "--json")
    result = json.loads(text.strip().splitlines()[-1])
    for key in ("plain_tasks_per_s", "adaptive_tasks_per_s", "throughput_ratio", "plain_p50_ms", "adaptive_p50_ms",
                "added_p50_ms"):
        assert key in result, key
    assert result["plain_tasks_per_s"] > 0 and result["adaptive_tasks_per_s"] > 0
    assert result["throughput_ratio"] == pytest.approx(result["adaptive_tasks_per_s"] / result["plain_tasks_per_s"], rel=0.02)
    assert result["added_p50_ms"] == pytest.approx(result["adaptive_p50_ms"] - result["plain_p50_ms"], abs=0.002)
    assert set(result["sizes"]) == {"20", "60"} and len(result["sizes"]["60"]["paired_ratios"]) == 2
    assert result["leases_granted"] >= 1  # the adaptive calls took the lease path
    assert "paired ratios" in text and "single call" in text
    # decision recording on (the default) against off, paired bursts of the biggest size
    assert len(result["recording_paired_ratios"]) == result["recording_rounds"] == 5
    assert result["recording_ratio_median"] == pytest.approx(statistics.median(result["recording_paired_ratios"]), abs=1e-3)
    assert result["recording_on_tasks_per_s"] > 0 and result["recording_off_tasks_per_s"] > 0
    sized = result["sizes"]["60"]  # read from the driver's Ray log: every kind sent some
    assert min(sized[f"{kind}_lease_requests_per_task"] for kind in ("plain", "adaptive", "shaped")) > 0
    # plain Ray given the fabric's options for spilled calls: the third kind, in the same rounds
    assert result["ratio_to_shaped"] == pytest.approx(result["adaptive_tasks_per_s"] / result["shaped_tasks_per_s"], rel=0.02)
    # Ray's own fallback_strategy, the peer a Ray user would pick: the fourth kind, in the same rounds
    kinds = {"plain", "adaptive", "shaped", "fallback_strategy", "waiting"}
    for size, row in result["sizes"].items():
        assert row["fallback_strategy_tasks_per_s"] > 0, size
        assert row["ratio_to_fallback_strategy"] == pytest.approx(
            row["adaptive_tasks_per_s"] / row["fallback_strategy_tasks_per_s"], rel=0.02)
        # where the work ran, per kind: the share at min_tier or above, and nothing of the fabric's below its floor
        assert set(row["at_min_tier_share"]) == kinds and all(0 <= v <= 1 for v in row["at_min_tier_share"].values())
        assert set(row["below_floor"]) == kinds and row["below_floor"]["adaptive"] == 0
    assert result["ratio_to_fallback_strategy"] == result["sizes"]["60"]["ratio_to_fallback_strategy"]
    # the fabric with when_full="wait": the fifth kind, in the same rounds, against fallback_strategy
    for size, row in result["sizes"].items():
        for key in ("waiting_tasks_per_s", "ratio_waiting_to_fallback_strategy",
                    "paired_ratio_waiting_to_fallback_strategy_median"):
            assert isinstance(row[key], (int, float)) and row[key] > 0, (size, key, row.get(key))
        assert row["ratio_waiting_to_fallback_strategy"] == pytest.approx(
            row["waiting_tasks_per_s"] / row["fallback_strategy_tasks_per_s"], rel=0.02)
        assert 0 < row["at_min_tier_share"]["waiting"] <= 1, size
        assert row["below_floor"]["waiting"] == 0, size
    assert result["waiting_tasks_per_s"] == result["sizes"]["60"]["waiting_tasks_per_s"]
    assert result["ratio_waiting_to_fallback_strategy"] == result["sizes"]["60"]["ratio_waiting_to_fallback_strategy"]
    roles = result["by_process"]  # --by-process: CPU per task of each part of the cluster, both kinds
    assert {"driver", "raylet", "gcs_server", "task workers", "SchedulerActor"} <= set(roles), roles
    assert roles["driver"]["plain_cpu_ms_per_task"] > 0 and roles["driver"]["adaptive_cpu_ms_per_task"] > 0


def test_bench_placement_prints_one_json_object_per_fleet_size():
    text = run_script("scripts/bench_placement.py", "--sizes", "50,200", "--decisions", "300", "--ref-decisions", "20",
                      "--repeat", "1", "--json", timeout=300)
    rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert [row["nodes"] for row in rows] == [50, 200]
    for row in rows:
        assert row["decisions_per_s"] > 0 and row["reference_decisions_per_s"] > 0 and row["speedup_vs_reference"] > 0

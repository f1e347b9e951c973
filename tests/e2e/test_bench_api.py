"""``scripts/bench_api.py`` runs and keeps its JSON contract on a small profile: 50 calls of each
kind, then one 500-task burst without a watcher, one with a ``WatchEventBatches`` watcher and one
with a ``WatchEvents`` watcher (``--watcher-stream both``). One run serves both tests: the figures
are there and consistent, and each stream's watcher received every event logged, in order. This
checks the contract, not how fast anything is; the figures come from full runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RATES = ("status_per_s", "direct_per_s", "explain_per_s", "direct_explain_per_s", "events_per_s", "events_produced_per_s",
         "burst_tasks_per_s_with_watcher", "burst_tasks_per_s_without", "burst_ratio_with_watcher")
LATENCIES = ("status_p50_ms", "status_p99_ms", "direct_p99_ms", "explain_p99_ms", "direct_explain_p99_ms")


@pytest.fixture(scope="module")
def run() -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """One run of the small profile with both streams watched, shared by the module's tests."""
    out = subprocess.run([sys.executable, "scripts/bench_api.py", "--calls", "50", "--tasks", "500", "--rounds", "1",
                          "--watcher-stream", "both", "--json"],
                         cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out, json.loads(out.stdout.strip().splitlines()[-1])


def test_bench_api_prints_its_figures_and_one_json_line(run):
    out, result = run
    for key in RATES + LATENCIES:
        assert isinstance(result[key], float) and result[key] > 0, (key, result[key])
    assert result["status_p50_ms"] <= result["status_p99_ms"]
    assert result["burst_ratio_with_watcher"] == pytest.approx(
        result["burst_tasks_per_s_with_watcher"] / result["burst_tasks_per_s_without"])
    assert (result["tasks"], result["calls"], result["rounds"]) == (500, 50, 1)
    assert [r["watcher"] for r in result["per_round"]] == [False, True, True]
    # the watcher read the log in order, and every event logged during the burst reached it
    assert result["events_out_of_order"] == 0 and result["events_missed"] == 0
    assert "status over gRPC:" in out.stdout and "burst with watcher / without:" in out.stdout
    assert "status and explain: 50 calls each" in out.stderr  # progress on stderr


def test_bench_api_measures_both_streams_in_one_run(run):
    out, result = run
    rows = result["per_round"]
    assert [(r["watcher"], r.get("stream")) for r in rows] == [(False, None), (True, "batches"), (True, "events")]
    assert all(r["events_missed"] == 0 and r["events_out_of_order"] == 0 for r in rows if r["watcher"])
    assert result["watcher_stream"] == "batches" and set(result["burst_ratio_by_stream"]) == {"batches", "events"}
    assert result["burst_ratio_by_stream"]["batches"] == pytest.approx(result["burst_ratio_with_watcher"])
    assert set(result["cpu_us_per_event"]) == {"batches", "events"}
    # the operator actor's CPU is read from /proc on this machine: it is there for every burst
    assert all(isinstance(r["operator_cpu_s"], float) for r in rows)
    assert "CPU per event streamed (events):" in out.stdout

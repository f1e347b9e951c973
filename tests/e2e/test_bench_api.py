"""``scripts/bench_api.py`` runs and keeps its JSON contract on a small profile (50 calls of each
kind, one 500-task burst with and one without the watcher): this checks that it works and that its
figures are consistent, not how fast anything is; the figures come from full runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RATES = ("status_per_s", "direct_per_s", "explain_per_s", "direct_explain_per_s", "events_per_s", "events_produced_per_s",
         "burst_tasks_per_s_with_watcher", "burst_tasks_per_s_without", "burst_ratio_with_watcher")
LATENCIES = ("status_p50_ms", "status_p99_ms", "direct_p99_ms", "explain_p99_ms", "direct_explain_p99_ms")


def test_bench_api_prints_its_figures_and_one_json_line():
    out = subprocess.run([sys.executable, "scripts/bench_api.py", "--calls", "50", "--tasks", "500", "--rounds", "1", "--json"],
                         cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for key in RATES + LATENCIES:
        assert isinstance(result[key], float) and result[key] > 0, (key, result[key])
    assert result["status_p50_ms"] <= result["status_p99_ms"]
    assert result["burst_ratio_with_watcher"] == pytest.approx(
        result["burst_tasks_per_s_with_watcher"] / result["burst_tasks_per_s_without"])
    assert (result["tasks"], result["calls"], result["rounds"]) == (500, 50, 1)
    assert [r["watcher"] for r in result["per_round"]] == [False, True]
    # the watcher read the log in order, and every event logged during the burst reached it
    assert result["events_out_of_order"] == 0 and result["events_missed"] == 0
    assert "status over gRPC:" in out.stdout and "burst with watcher / without:" in out.stdout
    assert "status and explain: 50 calls each" in out.stderr  # progress on stderr

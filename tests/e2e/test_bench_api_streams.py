"""``scripts/bench_api.py --watcher-stream both`` on a small profile (20 calls of each kind, one
500-task burst without a watcher, one with a ``WatchEventBatches`` watcher, one with a
``WatchEvents`` watcher): each stream's watcher received every event logged, in order, and the
figures per stream are there. This checks the contract, not how fast anything is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def test_bench_api_measures_both_streams_in_one_run():
    out = subprocess.run([sys.executable, "scripts/bench_api.py", "--calls", "20", "--tasks", "500", "--rounds", "1",
                          "--watcher-stream", "both", "--json"],
                         cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    rows = result["per_round"]
    assert [(r["watcher"], r.get("stream")) for r in rows] == [(False, None), (True, "batches"), (True, "events")]
    assert all(r["events_missed"] == 0 and r["events_out_of_order"] == 0 for r in rows if r["watcher"])
    assert result["watcher_stream"] == "batches" and set(result["burst_ratio_by_stream"]) == {"batches", "events"}
    assert result["burst_ratio_by_stream"]["batches"] == pytest.approx(result["burst_ratio_with_watcher"])
    assert set(result["cpu_us_per_event"]) == {"batches", "events"}
    # the operator actor's CPU is read from /proc on this machine: it is there for every burst
    assert all(isinstance(r["operator_cpu_s"], float) for r in rows)
    assert "CPU per event streamed (events):" in out.stdout

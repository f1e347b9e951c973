"""``scripts/bench_migration.py`` runs and keeps its JSON contract (one migration per strategy: this
checks that it works and that each strategy leaves its kind of trace, not how fast anything is;
the figures come from full runs). A 1 ms tick: a stop-then-start gap or an overlap of a few ms
is visible at that resolution, not at the default 10 ms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
STRATEGIES = ("stop_then_start", "overlap", "handover")


def test_bench_migration_prints_its_figures_and_one_json_line():
    out = subprocess.run([sys.executable, "scripts/bench_migration.py", "--migrations", "1", "--actor-trials", "2",
                          "--period-ms", "1", "--settle-ticks", "100", "--json"],
                         cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(STRATEGIES) | {"actor_start_ms"} <= set(result) and result["period_ms"] == 1.0
    assert isinstance(result["actor_start_ms"], float) and result["actor_start_ms"] > 0
    for strategy in STRATEGIES:
        r = result[strategy]
        assert r["migrations"] == 1, (strategy, r)
        assert isinstance(r["gap_ms"], float) and r["gap_ms"] >= 0, (strategy, r)
        assert isinstance(r["duplicates"], float) and r["duplicates"] >= 0, (strategy, r)
    # each strategy's nature, as the job counted it
    assert result["stop_then_start"]["gap_ms"] > 0 and result["stop_then_start"]["duplicates"] == 0
    assert result["overlap"]["gap_ms"] == 0 and result["overlap"]["duplicates"] > 0
    assert result["handover"]["gap_ms"] == 0 and result["handover"]["duplicates"] == 0
    assert "stop_then_start migration 1:" in out.stderr and "plain Ray actor start" in out.stdout

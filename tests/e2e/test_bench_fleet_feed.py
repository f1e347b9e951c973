"""``scripts/bench_fleet_feed.py`` runs and keeps its JSON contract (a tiny fleet: this checks that
it works and that the feed's result equals the full poll's, not how fast anything is; the figures
come from full runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def test_bench_fleet_feed_prints_its_table_and_one_json_line():
    out = subprocess.run([sys.executable, "scripts/bench_fleet_feed.py", "--sizes", "200,300", "--ticks", "3", "--json"],
                         cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert set(result) == {"sizes"} and set(result["sizes"]) == {"200", "300"}
    for size, row in result["sizes"].items():
        assert row["tick_ms"] > 0 and row["full_poll_ms"] > 0, row
        assert row["same_result"] is True and row["ticks"] == 3
        assert row["nodes_changed_per_tick"] == max(1, round(int(size) / 100))
        assert 0 < row["tick_bytes"] < row["full_poll_bytes"]  # a page carries the changes, a poll the fleet
    assert "every tick: the feed's fleet changes and fleet equal the full poll's" in out.stdout
    assert "tick ms" in lines[0] and "full poll ms" in lines[0]

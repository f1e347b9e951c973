"""``scripts/bench_spares.py`` runs and keeps its JSON contract (one trial of each failover, one
provision through ray-autoscaler: this checks that it works, not how fast anything is; the
figures come from full runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("spare_failover_s", "provisioned_failover_s", "busy_node_failover_s", "death_detection_s")


def test_bench_spares_prints_its_figures_and_one_json_line():
    out = subprocess.run([sys.executable, "scripts/bench_spares.py", "--trials", "1", "--autoscaler-trials", "1", "--json"],
                         cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for key in KEYS:
        assert isinstance(result[key], float) and result[key] > 0, (key, result[key])
    assert set(result["provision_to_serving_s"]) == {"local", "ray-autoscaler"}
    assert all(v > 0 for v in result["provision_to_serving_s"].values())
    assert result["spare_margin_s"] == pytest.approx(result["spare_failover_s"] - result["death_detection_s"])
    tiers = {k: [t["landed_pool_tier"] for t in v] for k, v in result["per_trial"].items()}
    assert tiers == {"spare": ["spares"], "busy": ["onprem"], "provisioned": ["spares"]}
    assert "trial 1 spare:" in out.stdout and "provision to serving (ray-autoscaler)" in out.stdout


def test_bench_spares_keeps_to_its_budget_and_names_what_it_did_not_measure():
    out = subprocess.run([sys.executable, "scripts/bench_spares.py", "--trials", "1", "--budget", "1", "--json"],
                         cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["budget_s"] == 1 and all(result[key] is None for key in KEYS)
    assert result["provision_to_serving_s"]["ray-autoscaler"] is None
    assert sorted(u.split(":")[0] for u in result["unmeasured"]) == [
        "busy failover", "provisioned failover", "ray-autoscaler", "spare failover"]
    assert "not measured within the 1 s budget: ray-autoscaler" in out.stdout

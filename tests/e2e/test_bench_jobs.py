"""``scripts/bench_jobs.py`` runs and keeps its JSON contract (one trial, ten jobs: this checks that
it works, not how fast anything is; the figures come from full runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("recovery_ratio_to_ray", "fabric_recovery_s", "ray_recovery_s", "ray_death_detection_s", "jobs_placed_per_s",
        "jobs_running_per_s", "jobs", "ray_actors_running_per_s")


def test_bench_jobs_prints_its_figures_and_one_json_line():
    out = subprocess.run([sys.executable, "scripts/bench_jobs.py", "--trials", "1", "--jobs", "10", "--lease-ttl", "4", "--json"],
                         cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    for key in KEYS:
        value = result[key]
        assert isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0, (key, value)
    assert result["jobs"] == 10 and result["jobs_asked"] == 10  # ten jobs fit any machine this runs on
    assert result["recovery_ratio_to_ray"] == pytest.approx(result["fabric_recovery_s"] / result["ray_recovery_s"], rel=0.01)
    for key in ("shaped_actors_running_per_s", "running_ratio_to_shaped", "submit_p99_s"):
        assert isinstance(result[key], float) and result[key] > 0, (key, result[key])
    assert result["running_ratio_to_shaped"] == pytest.approx(
        result["jobs_running_per_s"] / result["shaped_actors_running_per_s"], rel=0.02)
    assert result["submit_p50_s"] <= result["submit_p99_s"] <= result["submit_max_s"]
    assert result["scheduler_tick_p99_ms"] <= result["scheduler_tick_max_ms"]
    text = out.stdout
    assert "shaped Ray, 10 detached named actors" in text
    assert "trial 1 fabric:" in text and "trial 1 ray:" in text and "placement of 10 jobs" in text

"""The README's demo, end to end: a live local fabric, a GPU node killed mid-burst and rejoined,
and nothing lost (``./scripts/demo`` runs the same module after setting up)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_three_phases_and_loses_nothing():
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    out = subprocess.run([sys.executable, "-m", "fabric.demo", "--tasks", "12"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    text = out.stdout
    assert out.returncode == 0, text[-3000:] + out.stderr[-3000:]
    for phase in ("1. whole fleet up", "2. GPU workstation killed mid-burst", "3. workstation rejoined"):
        assert phase in text
    assert "killing gpu-cuda-workstation" in text
    assert text.count("lost: 0") == 3 and "36 calls, 0 lost" in text
    assert "gpu_cuda    gpu-cuda-workstation" in text  # the best tier did work
    assert "edge-relay" not in text.split("phase 1")[1]  # below the floor: never used
    rejoined = text.split("phase 3")[1]  # absorbed at once: not held by flap damping, best tier first
    assert "rejoined and absorbed" in rejoined and "the next call went to gpu-cuda-workstation" in rejoined
    assert "gpu_cuda    gpu-cuda-workstation" in rejoined

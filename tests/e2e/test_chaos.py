"""scripts/chaos.py's small profile (issue 12): a scheduler SIGKILL, a node kill and a partition on a
real local fleet, each under a burst, lose nothing, run nothing below its floor or on an excluded
node, and lose no registry record. The full run (every scenario, 20,000-call burst) is
``./scripts/chaos.py``; its figures are in the issue's note."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SMALL = ("scheduler_sigkill", "node_kill_one", "partition")


def test_chaos_small_profile_loses_nothing():
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    out = subprocess.run([sys.executable, "scripts/chaos.py", "--scenarios", ",".join(SMALL), "--calls", "120",
                          "--duration", "6", "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])["scenarios"]
    assert set(result) == set(SMALL)
    for name, figures in result.items():
        assert figures["calls"] == 120, (name, figures)
        assert figures["lost"] == 0 and figures["completed"] + figures["refused"] == 120, (name, figures)
        assert figures["below_floor"] == 0 and figures["on_excluded"] == 0, (name, figures)
        assert figures["records_lost"] == 0, (name, figures)
        assert figures["recovery_s"] is not None and figures["recovery_s"] >= 0, (name, figures)
    assert "chaos scenarios" in out.stderr  # the table, for people (stderr under --json)

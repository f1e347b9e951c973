"""``scripts/fuzz.py`` runs and keeps its JSON contract (a tiny run of one surface: this checks the
script, not the surfaces; ``test_fuzz.py`` checks those)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fuzz_script_prints_its_table_and_a_json_last_line():
    out = subprocess.run(
        [sys.executable, "scripts/fuzz.py", "--examples", "20", "--json", "--surface", "requirement", "--seed", "1"],
        cwd=ROOT, env={**os.environ}, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert list(result["surfaces"]) == ["requirement"]
    row = result["surfaces"]["requirement"]
    assert set(row) == {"tried", "typed", "crashes", "stored_on_refusal"}
    assert 0 < row["tried"] <= 20 and row["crashes"] == 0 and row["stored_on_refusal"] == 0
    assert "stored on refusal" in out.stderr and "requirement" in out.stderr  # the table, on stderr under --json


def test_fuzz_script_refuses_an_unknown_surface():
    out = subprocess.run([sys.executable, "scripts/fuzz.py", "--surface", "nope"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 2 and "unknown surface" in out.stderr

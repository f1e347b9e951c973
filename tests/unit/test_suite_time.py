"""``scripts/suite_time.py``: seconds per test and module from pytest's ``--durations=0`` lines, and a
group of tests' total by ``--match``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "suite_time.py"
LOG = """\
============================== slowest durations ===============================
12.50s call     tests/integration/test_a.py::test_one
2.00s setup    tests/integration/test_a.py::test_one
0.50s teardown tests/integration/test_a.py::test_one
3.00s call     tests/integration/test_a.py::test_two[x]
7.20s call     tests/e2e/test_b.py::test_three
(10 durations < 0.005s hidden.  Use -vv to show these durations.)
"""


def run(*args: str, stdin: str = LOG) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_a_test_is_its_three_phases_and_a_module_the_sum_of_its_tests():
    out = run("--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["total_s"] == 25.2 and doc["tests"] == 3
    assert doc["modules"] == {"tests/integration/test_a.py": 18.0, "tests/e2e/test_b.py": 7.2}
    assert list(doc["modules"]) == ["tests/integration/test_a.py", "tests/e2e/test_b.py"]  # slowest first


def test_match_totals_a_group_of_tests(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(LOG)
    out = run(str(log), "--match", r"test_one$", "--match", "three")
    assert out.returncode == 0, out.stderr
    assert "    15.0 s  tests/integration/test_a.py::test_one" in out.stdout
    assert out.stdout.rstrip().endswith("22.2 s  in 2 test(s)")
    assert json.loads(run("--json", "--match", "two").stdout)["matched"] == {"tests/integration/test_a.py::test_two[x]": 3.0}


def test_a_log_without_durations_and_a_bad_pattern_are_refused_by_name():
    out = run(stdin="3 passed in 1.00s\n")
    assert out.returncode == 1 and "--durations=0" in out.stderr
    bad = run("--match", "(")
    assert bad.returncode == 2 and "--match: not a regular expression" in bad.stderr

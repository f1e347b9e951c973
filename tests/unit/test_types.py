"""The pure core type-checks: ``mypy`` over ``fabric/core`` (pyproject's ``[tool.mypy]``) is clean,
and the jobs side (``fabric/core/jobs``) is clean under ``mypy --strict``.

mypy keeps an incremental cache in ``.mypy_cache`` (a cold run takes a few seconds, a warm one
under one), so this runs with the rest of the unit suite.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_over_the_pure_core_is_clean():
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "No module named mypy" not in proc.stderr, "mypy is not installed (it is in the test extra)"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("Success: no issues found"), proc.stdout


def test_mypy_strict_over_the_jobs_side_is_clean():
    """``fabric/core/jobs`` holds to ``mypy --strict`` itself (every flag it has, not only those
    pyproject's override for the package names). The modules it imports are followed silently: they
    hold to the project's flags (the test above). Its own cache folder keeps both runs warm."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--strict",
                           "--follow-imports=silent", "--cache-dir", str(ROOT / ".mypy_cache" / "strict-jobs"),
                           "fabric/core/jobs"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "No module named mypy" not in proc.stderr, "mypy is not installed (it is in the test extra)"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("Success: no issues found"), proc.stdout

"""The layer contract (pyproject's [tool.importlinter]) is enforced by the test run itself, and
it bites: a copy of the tree with one deliberate wrong import fails the contract it breaks."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fabric", "actors", "probes")

LAYERS = "Folders are layers"
PURE = "The pure core imports no Ray"
ACYCLIC = "No import cycles inside the placement engine"


def _lint_imports() -> str:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "import-linter is not installed (it is in the test extra)"
    return exe


def _copy_tree(dest: Path) -> Path:
    """The packages' Python modules (grimp reads nothing else: recordings and data stay behind)
    and pyproject.toml, under ``dest``."""

    def only_python(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n == "__pycache__" or (not n.endswith(".py") and not os.path.isdir(os.path.join(folder, n)))]

    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=only_python)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _verdicts(out: str) -> dict[str, str]:
    """Contract name prefix -> KEPT/BROKEN, read from lint-imports' summary (rich wraps long lines)."""
    flat = " ".join(out.split())
    return {name: m.group(1) for name in (LAYERS, PURE, ACYCLIC)
            if (m := re.search(re.escape(name) + r".*? (KEPT|BROKEN)", flat))}


# (what is added, to which module of the copy, the contract it breaks, what the report must say)
WRONG_IMPORTS = {
    "core imports the runtime": ("import fabric.runtime.client", "fabric/core/tiers.py", LAYERS,
                                 ("fabric.core is not allowed to import fabric.runtime",
                                  "fabric.core.tiers -> fabric.runtime.client")),
    "rayio imports an actor": ("import actors.scheduler", "fabric/rayio/_upward.py", LAYERS,
                               ("fabric.rayio is not allowed to import actors", "fabric.rayio._upward -> actors.scheduler")),
    "core imports ray": ("import ray", "fabric/core/_ray.py", PURE,
                         ("fabric.core is not allowed to import ray", "fabric.core._ray -> ray")),
    "placement cycle": ("import fabric.core.placement.fast", "fabric/core/placement/reference.py", ACYCLIC,
                        ("No cycles are allowed in fabric.core.placement", ".reference -> .fast")),
}


@pytest.fixture(scope="module")
def wrong_import_reports(tmp_path_factory) -> dict[str, tuple[int, str]]:
    """Each wrong import in its own copy of the tree, linted in parallel: case -> (exit code, report)."""
    exe = _lint_imports()
    procs = {}
    for case, (line, module, _, _) in WRONG_IMPORTS.items():
        tree = _copy_tree(tmp_path_factory.mktemp("tree"))
        target = tree / module
        before = target.read_text() if target.exists() else ""
        target.write_text(before + f"\n{line}  # a deliberate wrong import (tests/unit/test_layers.py)\n")
        env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "200"}
        procs[case] = subprocess.Popen([exe, "--no-cache"], cwd=tree, env=env, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reports = {}
    for case, p in procs.items():
        out, _ = p.communicate(timeout=120)  # read while it runs: a long report fills the pipe
        reports[case] = (p.returncode, out)
    return reports


@pytest.mark.parametrize("case", sorted(WRONG_IMPORTS))
def test_a_wrong_import_breaks_its_contract(case, wrong_import_reports):
    _, _, contract, said = WRONG_IMPORTS[case]
    code, out = wrong_import_reports[case]
    assert code != 0, out
    assert _verdicts(out).get(contract) == "BROKEN", out
    for words in said:
        assert words in out, out


def test_import_linter_contracts_hold():
    exe = _lint_imports()
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "broken" not in proc.stdout.lower() or " 0 broken" in proc.stdout.lower(), proc.stdout
    assert _verdicts(proc.stdout) == {LAYERS: "KEPT", PURE: "KEPT", ACYCLIC: "KEPT"}, proc.stdout


def test_an_untouched_copy_of_the_tree_passes(tmp_path):
    """The control for the wrong-import cases: the copy itself is linted (not the installed
    tree) and passes as it is."""
    tree = _copy_tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "200"}
    proc = subprocess.run([_lint_imports(), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_importing_fabric_does_not_import_ray():
    code = "import sys, fabric, fabric.core.settings, fabric.core.capabilities; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)

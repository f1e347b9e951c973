"""Users' type checkers see fabric's public API typed, not ``Any``: a small user program
(``tests/fixtures/typing/user_program.py``: ``fabric.up()``, ``@adaptive.remote`` on a function and a
class, handle calls, each value's type asserted with ``assert_type``) passes ``mypy --strict``, and
one with deliberate mistakes (``wrong_program.py``) fails it on exactly the lines whose comment says ``error``.

fabric's modules are followed silently (``--follow-imports=silent``), as mypy treats an installed
package: their own flags are held by ``test_types.py``. The program imports Ray's hints too, so a
cold run takes a few seconds more; its own cache folder keeps later runs warm.
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

import fabric

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "fixtures" / "typing"


def _mypy_strict(program: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--strict",
                           "--follow-imports=silent", "--cache-dir", str(ROOT / ".mypy_cache" / "public-typing"),
                           str(program.relative_to(ROOT))],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "No module named mypy" not in proc.stderr, "mypy is not installed (it is in the test extra)"
    return proc


def test_a_user_program_on_the_public_api_passes_mypy_strict():
    proc = _mypy_strict(PROGRAMS / "user_program.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("Success: no issues found"), proc.stdout


def test_mypy_strict_reports_each_mistake_of_a_user_program():
    program = PROGRAMS / "wrong_program.py"
    marked = {n for n, line in enumerate(program.read_text().splitlines(), 1) if "  # error:" in line}
    proc = _mypy_strict(program)
    reported = {int(m) for m in re.findall(rf"{re.escape(program.name)}:(\d+): error:", proc.stdout)}
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert reported == marked, proc.stdout


def _type_checking_imports() -> dict[str, str]:
    """Name -> module of each import under ``if TYPE_CHECKING:`` in ``fabric/__init__.py``."""
    tree = ast.parse((ROOT / "fabric" / "__init__.py").read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module is not None, ast.dump(imp)
                for alias in imp.names:
                    assert alias.asname == alias.name, f"{alias.name}: import it as itself, so mypy re-exports it"
                    found[alias.name] = imp.module
    return found


def test_every_lazy_name_is_imported_for_type_checkers():
    """Each name ``fabric.__getattr__`` loads on first use is also imported under ``TYPE_CHECKING``,
    as the very object the lazy path gives (else a checker sees ``Any`` or another object)."""
    seen = _type_checking_imports()
    assert set(seen) == set(fabric._LAZY)
    for name, module in seen.items():
        assert getattr(sys.modules.get(module) or __import__(module, fromlist=[name]), name) is getattr(fabric, name), name

"""No module calls into another's ``_private`` names (issue 21, the house; STYLE habit 11).

An AST scan of ``fabric``, ``actors`` and ``probes`` (generated gRPC stubs aside) finds every call
``x._name(...)`` on anything but ``self``/``cls``/``super()``, and every ``from <our module> import
_name``. What one object uses of another is public and named for it; a private name stays inside
its module and its class. None is left: ``LEFT`` is empty, and it must match exactly, so a reach
that had to stay would be listed there with why (a new reach fails the test, and so does a fixed one
left listed).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = ("fabric", "actors", "probes")

# None left: the CLI and the routes watcher use FabricHandle's public methods (settings_in_force,
# scheduler_nodes), and RayDriver.when_done uses Ray's public ObjectRef.future(). A reach that has to
# stay would be listed here with why; the set must match the scan exactly.
LEFT: set[tuple[str, str]] = set()


def private_reaches(root: Path = ROOT) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for top in OURS:
        for path in sorted((root / top).rglob("*.py")):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            rel = path.relative_to(root).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    name, owner = node.func.attr, node.func.value
                    if not name.startswith("_") or name.startswith("__"):
                        continue
                    if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                        continue
                    if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                        continue
                    found.add((rel, ast.unparse(node.func)))
                elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
                    for alias in node.names:
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            found.add((rel, f"from {node.module} import {alias.name}"))
    return found


def test_no_call_into_another_modules_private_names_beyond_the_listed_ones():
    found = private_reaches()
    assert found - LEFT == set(), "new calls into another object's or module's private names"
    assert LEFT - found == set(), "fixed: take these off the list"


def test_the_scan_bites(tmp_path):
    pkg = tmp_path / "actors"
    pkg.mkdir()
    (pkg / "a.py").write_text("from fabric.core.x import _hidden\n\ndef f(r):\n    r._soon()\n    self_like = r\n")
    (pkg / "b.py").write_text("class C:\n    def g(self):\n        self._mine()\n        super()._theirs()\n")
    for top in ("fabric", "probes"):
        (tmp_path / top).mkdir()
    assert private_reaches(tmp_path) == {("actors/a.py", "from fabric.core.x import _hidden"), ("actors/a.py", "r._soon")}

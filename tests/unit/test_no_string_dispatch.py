"""No Ray actor method is called by a name held in a string (issue 21, item 3).

The driver side (``fabric/runtime``), the operator API (``fabric/api``), the CLI (``fabric/cli``), the
operator actor and the scheduler's typed client are read as syntax trees, and none of them may

- call ``getattr(handle, <a string or a variable>).remote(...)`` (or ``.options(...)``): the method a
  Ray handle is asked for must be named in code, where a rename is a type error;
- dispatch through a helper by the scheduler method's name in a string, ``self._call("drain_jobs",
  ...)`` / ``await call("metrics")``: a callable whose name says "call", given a ``SchedulerApi``
  method's name as its first argument.

The one exception is named with its reason. The detector is shown to bite on the forms it replaced.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from fabric.core.scheduler_api import SchedulerApi

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("fabric/runtime", "fabric/api", "fabric/cli", "actors/operator.py", "fabric/rayio/scheduler_client.py")
SCHEDULER_METHODS = frozenset(n for n, _ in inspect.getmembers(SchedulerApi, inspect.isfunction) if not n.startswith("_"))
ALLOWED = {
    # A JobHandle forwards ``job.encode.remote(...)`` to the job's running instance: the method is the
    # user's class's, which only the user's code names; this is the proxy, not a call of the fabric's actors.
    ("fabric/runtime/jobs.py", "JobMethod.remote"),
    ("fabric/runtime/jobs.py", "JobMethod.options"),
}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


class _Finder(ast.NodeVisitor):
    """Each string dispatch in one module: (line, where, what)."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.found: list[tuple[int, str, str]] = []

    def _scoped(self, node: ast.AST) -> None:
        self.scope.append(node.name)  # type: ignore[attr-defined]
        self.generic_visit(node)
        self.scope.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _scoped

    def visit_Call(self, node: ast.Call) -> None:
        where = ".".join(self.scope) or "<module>"
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr in ("remote", "options") and isinstance(f.value, ast.Call)
                and _name(f.value.func) == "getattr"):
            self.found.append((node.lineno, where, f"getattr(...).{f.attr}(...): a Ray method named by a value"))
        first = node.args[0] if node.args else None
        if (isinstance(first, ast.Constant) and first.value in SCHEDULER_METHODS
                and "call" in _name(f).lower()):
            self.found.append((node.lineno, where, f"{_name(f)}({first.value!r}, ...): a scheduler method named by a string"))
        self.generic_visit(node)


def string_dispatches(source: str) -> list[tuple[int, str, str]]:
    finder = _Finder()
    finder.visit(ast.parse(source))
    return finder.found


def _files() -> list[Path]:
    out: list[Path] = []
    for entry in SCANNED:
        path = ROOT / entry
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def test_the_scanned_code_names_every_ray_method_it_calls():
    found = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        for line, where, what in string_dispatches(path.read_text()):
            if (rel, where) not in ALLOWED:
                found.append(f"{rel}:{line} in {where}: {what}")
    assert found == []


def test_every_allowed_exception_is_still_there():
    """An exception the code no longer needs is taken off the list, not left to excuse a new one."""
    seen = set()
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        seen |= {(rel, where) for _, where, _ in string_dispatches(path.read_text())}
    assert ALLOWED <= seen


# The forms this replaced (issue 21), each as it was written: the detector finds every one.
BEFORE = {
    "FabricHandle's moves": "def _call(self, method, *args):\n    ref = getattr(sched, method).remote(*args)\n",
    "a move by name": "def drain(self, node):\n    return self._call('drain_jobs', node, None, False, None)\n",
    "the gRPC servicer": "async def Status(self):\n    return await self.call('metrics')\n",
    "the operator actor": "async def _scheduler_call(self, method, *args):\n"
                          "    return await getattr(self._scheduler, method).remote(*args)\n",
    "the JSON view's source": "make_app(lambda: call('nodes'), token)\n",
    "the CLI's node commands": "node_id = ray.get(getattr(sched, args.op).remote(args.node), timeout=60)\n",
    "the CLI's API commands": "def get(method):\n    return ray.get(getattr(actor, method).remote(), timeout=30)\n",
    "a literal name": "getattr(sched, 'uncordon').remote(node)\n",
}


@pytest.mark.parametrize("case", sorted(BEFORE))
def test_the_detector_finds_each_form_it_replaced(case):
    assert len(string_dispatches(BEFORE[case])) == 1, BEFORE[case]


def test_the_detector_leaves_named_calls_and_other_strings_alone():
    source = ("sched.drain_jobs.remote(node, None, False, None)\n"
              "await scheduler.metrics()\n"
              "parser.add_parser('drain', help='...')\n"
              "value = getattr(state, 'value', state)\n"
              "print('metrics')\n")
    assert string_dispatches(source) == []

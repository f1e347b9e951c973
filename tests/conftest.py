"""Shared test setup, applied before any test module imports Ray.

- Ray 2.60 turns token auth on for new local clusters: choose explicitly (the fabric must work with it on).
- Keep every Ray process on loopback: with this switch off, Ray resolves the node IP to 127.0.0.1
  instead of the machine's routable address (read by ``ray._private.services.get_node_ip_address``),
  and spawned raylets/workers inherit it.
- Nothing in the user's home: ``XDG_DATA_HOME`` (the fabric's default stores) and ``XDG_CACHE_HOME``
  (the nodes' artifact caches) name a temporary folder for the whole run, removed at its end. Ray
  copies this process's environment into every raylet it starts and a raylet's workers and actors
  inherit it, so even a test that runs ``fabric.up()`` on a cluster of its own writes there. A run
  that leaves anything under ``$XDG_DATA_HOME/adaptive-fabric`` fails, naming what it left: without
  this folder it would have landed in ``~/.local/share``.
- The end of a run lists the slowest modules with their time (their tests' setup, call and teardown).
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

SCRATCH_HOME = Path(tempfile.mkdtemp(prefix="fabric-tests-home-"))
"""The run's ``XDG_DATA_HOME``; ``XDG_CACHE_HOME`` is its ``cache`` folder."""
os.environ["XDG_DATA_HOME"] = str(SCRATCH_HOME)
os.environ["XDG_CACHE_HOME"] = str(SCRATCH_HOME / "cache")
LEFT = pytest.StashKey[list]()
"""What ``pytest_sessionfinish`` found left, for the terminal summary."""


def left_in_data_home() -> list[Path]:
    """What the run left under ``$XDG_DATA_HOME/adaptive-fabric``: files, and folders with nothing in them."""
    root = SCRATCH_HOME / "adaptive-fabric"
    if not root.exists():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() or not any(p.iterdir())) or [root]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    left = left_in_data_home()
    if left:
        session.config.stash[LEFT] = left
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


MODULES_SHOWN = 25
"""Modules the time-by-module summary lists, slowest first."""
MODULE_SECONDS: dict[str, float] = {}
"""Seconds per test module (setup, call and teardown of its tests): what a slow run spends its time on."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    MODULE_SECONDS[module] = MODULE_SECONDS.get(module, 0.0) + report.duration


@pytest.hookimpl(trylast=True)  # after pytest's own --durations list, so that a run's output ends with it
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if len(MODULE_SECONDS) > 1:
        total = sum(MODULE_SECONDS.values())
        terminalreporter.section(f"time by module ({total / 60:.1f} min in tests; the slowest {MODULES_SHOWN})", sep="=")
        for module, secs in sorted(MODULE_SECONDS.items(), key=lambda kv: -kv[1])[:MODULES_SHOWN]:
            terminalreporter.write_line(f"{secs:8.1f}s  {module}")
    left = config.stash.get(LEFT, [])
    if left:
        terminalreporter.section("left in the data home", sep="=", red=True, bold=True)
        terminalreporter.write_line(f"the run left {len(left)} path(s) under {SCRATCH_HOME / 'adaptive-fabric'} "
                                    "(~/.local/share/adaptive-fabric outside the test run): a fabric started "
                                    "without LocalFabric or store.url kept its default stores there", red=True)
        for path in left[:20]:
            terminalreporter.write_line(f"  {path}")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(SCRATCH_HOME, ignore_errors=True)


"""Every registered fuzz surface, with a small profile: no crash, no refused input stored.

The surfaces come from ``surfaces_pure.py`` (settings, requirements, decorator, probe parsers,
recordings) and, where present, ``surfaces_registry.py`` (the registry's calls) and
``surfaces_scheduler.py`` (the scheduler's). Each surface is
its own test, so a failure names the surface and shows the inputs that crashed it. The number of
examples per surface is ``FABRIC_FUZZ_EXAMPLES`` (default 100); ``scripts/fuzz.py`` runs the
large profile.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from fabric.testing.fuzz import SURFACES, run_surface

HERE = Path(__file__).resolve().parent
EXAMPLES = int(os.environ.get("FABRIC_FUZZ_EXAMPLES", "100"))

for module in ("surfaces_pure", "surfaces_registry", "surfaces_scheduler"):
    if (HERE / f"{module}.py").exists():
        importlib.import_module(module)


@pytest.mark.parametrize("name", list(SURFACES))
def test_surface_refuses_cleanly(name):
    report = run_surface(SURFACES[name], EXAMPLES, seed=0)
    assert report["tried"] > 0
    assert report["crashes"] == 0, f"{name}: {report['crashes']} crash(es), first: {report['examples_of_crashes']}"
    assert report["stored_on_refusal"] == 0, f"{name}: refused inputs stored: {report['examples_of_stored']}"

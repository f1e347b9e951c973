"""A test run leaves nothing in the user's home. A ``LocalFabric`` without ``store.url`` points its
head's ``XDG_DATA_HOME`` at a temporary folder of its own: the registry's node store, the
scheduler's jobs store and the operator's token file (the head's actors work the default path out
in their own processes) land there, and ``close`` removes it. Nothing appears under the run's
``$XDG_DATA_HOME/adaptive-fabric`` either (``tests/conftest.py`` points that at another temporary
folder; without it the stores would sit in ``~/.local/share/adaptive-fabric``).

One LocalFabric, the head alone (one CPU), started and closed inside the test.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fabric.core.names import NAMESPACE, REGISTRY  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration

SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "monitor_interval_s": 0.25}}


def tree(folder: Path) -> list[Path]:
    return sorted(p.relative_to(folder) for p in folder.rglob("*")) if folder.exists() else []


def test_a_local_fabric_keeps_its_stores_in_a_folder_it_removes_at_close():
    run_home = Path(os.environ["XDG_DATA_HOME"]) / "adaptive-fabric"
    before = tree(run_home)
    with LocalFabric(settings=SETTINGS, head_cpus=1, timeout_s=90) as lf:
        root = lf.store_root()
        assert root.is_relative_to(tempfile.gettempdir()) and not root.is_relative_to(run_home.parent)
        registry = ray.get_actor(REGISTRY, namespace=NAMESPACE)
        store = Path(ray.get(registry.ping.remote(), timeout=30)["store"])
        (folder,) = (root / "adaptive-fabric" / "clusters").iterdir()  # keyed by this head's address
        assert store == folder / "fabric.db" and store.is_file()
        lf.wait_until(lambda: (folder / "fabric.jobs.db").is_file(), "the scheduler's jobs store beside it")
    assert not root.exists()
    assert tree(run_home) == before

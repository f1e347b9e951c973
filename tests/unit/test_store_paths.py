"""Where the stores live: ``store.url`` (``sqlite:///DIR``), ``store.path`` as before, the per-cluster
default; one function (``fabric.store.paths.store_paths``) answers for every actor."""

from pathlib import Path

import pytest

from fabric.core.errors import SettingsError
from fabric.core.settings import FabricSettings
from fabric.store.paths import configured_store_paths, default_store_path, store_paths

ENV = {"HOME": "/home/op"}


def test_zero_configuration_keeps_both_files_in_the_per_cluster_folder():
    p = store_paths(FabricSettings(), "127.0.0.1:6379", ENV)
    folder = Path("/home/op/.local/share/adaptive-fabric/clusters/127.0.0.1-6379")
    assert (p.nodes, p.jobs, p.folder) == (folder / "fabric.db", folder / "fabric.jobs.db", folder)
    assert p.nodes == default_store_path("127.0.0.1:6379", ENV)
    assert configured_store_paths(FabricSettings()) is None


def test_a_url_names_the_folder_of_both_files(tmp_path):
    s = FabricSettings.load({"store": {"url": f"sqlite:///{tmp_path}/state"}})
    p = store_paths(s, "ignored:1", ENV)
    assert (p.nodes, p.jobs) == (tmp_path / "state/fabric.db", tmp_path / "state/fabric.jobs.db")
    both = FabricSettings.load({"store": {"url": f"sqlite:///{tmp_path}/a", "path": str(tmp_path / "b/x.db")}})
    assert store_paths(both, "h:1").folder == tmp_path / "a"  # the url wins over the path


def test_a_path_keeps_its_old_meaning(tmp_path):
    s = FabricSettings.load({"store": {"kind": "sqlite", "path": str(tmp_path / "ops/fleet.db")}})
    p = store_paths(s, "h:1", ENV)
    assert (p.nodes, p.jobs) == (tmp_path / "ops/fleet.db", tmp_path / "ops/fleet.jobs.db")


@pytest.mark.parametrize("url", ["postgres://db/fabric", "sqlite:///", "sqlite://relative", "sqlite:///x?mode=ro", 3])
def test_a_bad_url_is_refused_naming_the_field(url):
    with pytest.raises(SettingsError) as err:
        FabricSettings.load({"store": {"url": url}})
    assert "store.url" in str(err.value)

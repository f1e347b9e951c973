"""Where the stores live: ``store.url`` (``sqlite:///DIR``), ``store.path`` as before, the per-cluster
default; one function (``fabric.store.paths.store_paths``) answers for every actor."""

import tempfile
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


def test_the_default_folder_honours_an_absolute_xdg_data_home_read_at_call_time(monkeypatch):
    env = {"HOME": "/home/op", "XDG_DATA_HOME": "/srv/data"}
    assert default_store_path("h:1", env) == Path("/srv/data/adaptive-fabric/clusters/h-1/fabric.db")
    # empty or relative: ignored, as the XDG base directory rules say
    for xdg in ("", "data"):
        assert default_store_path("h:1", {**env, "XDG_DATA_HOME": xdg}).parents[3] == Path("/home/op/.local/share")
    monkeypatch.setenv("XDG_DATA_HOME", "/elsewhere")
    assert default_store_path("h:1") == Path("/elsewhere/adaptive-fabric/clusters/h-1/fabric.db")


def test_the_test_run_keeps_default_stores_out_of_the_home():
    # tests/conftest.py points XDG_DATA_HOME at a temporary folder for the whole run; every Ray
    # process a test starts inherits it, so a fabric without store.url writes nothing to ~/.local/share
    path = default_store_path("127.0.0.1:6379")
    assert path.is_relative_to(tempfile.gettempdir())
    assert not path.is_relative_to(Path.home() / ".local")

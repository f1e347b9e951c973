"""The package as a user gets it: the wheel built from the repository's tracked files, installed in a
fresh virtual environment, used from a folder outside the repository.

The fresh environment has no copy of the repository on ``sys.path`` and no editable install of the
project: ``fabric``, ``actors`` and ``probes`` come from the wheel alone. Its third-party
dependencies (Ray, pydantic, grpcio...) are read from the test environment's site-packages through
a ``.pth`` line, so the test needs no network; a ``.pth`` line only adds a folder to ``sys.path``,
so the editable install's own hook in that folder stays inactive (checked below).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]

USER_PROGRAM = """
import sys
from pathlib import Path

import fabric, actors, probes
from fabric import adaptive, up, down, FabricHandle, CapacityError
from fabric.core.settings import FabricSettings

repo = Path(sys.argv[1]).resolve()
for module in (fabric, actors, probes):
    where = Path(module.__file__).resolve()
    assert repo not in where.parents, f"{module.__name__} imported from the repository: {where}"
    assert "site-packages" in where.parts, where
assert not any(Path(p or ".").resolve() == repo for p in sys.path), sys.path

@adaptive.remote(min_tier="batch", num_cpus=1)
def double(x: int) -> int:
    return 2 * x

FabricSettings.load({})
shipped = Path(fabric.__file__).parent
assert (shipped / "py.typed").is_file() and (shipped / "api" / "operator.proto").is_file()
assert (shipped / "data" / "fabric.yaml").is_file()
print("imported", fabric.__version__)
"""


def _tracked_files(dest: Path) -> None:
    """Copy what git tracks (what a release is built from), not the working folder's leftovers."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        for name in filter(None, listed.decode().split("\0")):
            src = ROOT / name
            if src.is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)
    else:  # an exported tree without git: everything but the build and environment folders
        shutil.copytree(ROOT, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"))


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{argv}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def test_the_wheel_installs_alone_and_its_cli_and_api_work(tmp_path):
    src, dist, venv, elsewhere = (tmp_path / n for n in ("src", "dist", "venv", "elsewhere"))
    for folder in (src, dist, elsewhere):
        folder.mkdir()
    _tracked_files(src)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)], tmp_path)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    wheels = list(dist.glob("adaptive_fabric-*.whl"))
    assert [w.name for w in wheels] == [f"adaptive_fabric-{version}-py3-none-any.whl"]

    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheels[0])], tmp_path)
    fresh_site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).stdout.strip())
    (fresh_site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    fabric_cmd = str(venv / "bin" / "fabric")
    assert _run([fabric_cmd, "--version"], elsewhere).stdout.strip() == f"fabric {version}"
    checked = _run([fabric_cmd, "settings", "validate", str(ROOT / "examples" / "fabric.yaml")], elsewhere)
    assert "fabric.yaml" in checked.stdout + checked.stderr
    shipped = _run([fabric_cmd, "settings", "example"], elsewhere).stdout
    assert shipped == (ROOT / "examples" / "fabric.yaml").read_text()
    imported = _run([str(python), "-c", USER_PROGRAM, str(ROOT)], elsewhere)
    assert imported.stdout.strip() == f"imported {version}"

"""``fabric up --config`` / ``fabric down`` for real, and what a command says when token auth refuses it.

One local head (a LocalFabric with no nodes and no fabric: the CLI brings the fabric up) on
127.0.0.2, as in test_node_cli.py: the CLI runs in a subprocess with ``--address`` and, seeing a
loopback address other than 127.0.0.1, uses it as its own node address. The head has token auth on
(tests/conftest.py sets ``RAY_AUTH_MODE=token``); a wrong or missing token is simulated only in a
subprocess's environment (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, ``HOME``): the machine's
``~/.ray/auth_token`` is never touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray")

from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration

IP = "127.0.0.2"
GOOD = ("health:\n  heartbeat_interval_s: 0.5\n  offline_after_s: 3.0\n  monitor_interval_s: 0.25\n"
        "queue_timeout_s: 30\n")
OTHER = ("health:\n  heartbeat_interval_s: 1.0\n  offline_after_s: 5.0\n  monitor_interval_s: 0.25\n"
         "queue_timeout_s: 30\n")
BAD = ("pools:\n  - name: a\n    tiers: [{name: x, packing: sideways}]\n  - name: a\n"
       "operations:\n  enc: {min_tier: cpu_ffmpeg, pool: ghost}\n")


@pytest.fixture(scope="module")
def lf():
    with LocalFabric([], fabric=False, head_cpus=1, timeout_s=90, node_ip_address=IP) as fabric_:
        yield fabric_


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    d = tmp_path_factory.mktemp("configs")
    for name, text in (("good", GOOD), ("other", OTHER), ("bad", BAD)):
        (d / f"{name}.yaml").write_text(text)
    return d


def fabric_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabric", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def fabric_actors() -> set[str]:
    from ray.util import list_named_actors

    return {a["name"] for a in list_named_actors(all_namespaces=True) if a.get("namespace") == "fabric"}


# -- up / down -----------------------------------------------------------------------------------------
def test_up_with_a_bad_config_prints_every_problem_and_starts_nothing(lf, configs):
    out = fabric_cli("up", "--config", str(configs / "bad.yaml"), "--address", lf.address)
    assert out.returncode == 2, out.stderr
    bad = configs / "bad.yaml"  # each problem with its file and line, as fabric settings validate prints it
    for path, what in (("pools[0].tiers[0].packing", "sideways"), ("pools[1].name", "defined twice"),
                       ("operations.enc.pool", "ghost")):
        assert any(line.startswith(f"{bad}:") and f": {path}: " in line and what in line for line in out.stderr.splitlines()), out.stderr
    assert "nothing started" in out.stderr
    assert fabric_actors() == set()


def test_up_brings_the_fabric_up_with_the_file_s_settings(lf, configs):
    from fabric.core.settings import FabricSettings

    out = fabric_cli("up", "--config", str(configs / "good.yaml"), "--address", lf.address)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "started " in out.stdout and "fabric.registry" in out.stdout and "fabric.health" in out.stdout
    assert {"fabric.registry", "fabric.health", "fabric.scheduler"} <= fabric_actors()
    registry = ray.get_actor("fabric.registry", namespace="fabric")
    in_force = ray.get(registry.get_state.remote("fabric.settings"), timeout=30)
    assert in_force == FabricSettings.from_yaml(configs / "good.yaml").model_dump(mode="json")
    status = fabric_cli("status", "--address", lf.address, "--json")  # the shared connect helper, when all is well
    assert status.returncode == 0 and status.stdout.strip().startswith("["), status.stderr[-2000:]


def test_a_second_up_with_other_settings_is_refused_and_names_the_field(lf, configs):
    out = fabric_cli("up", "--config", str(configs / "other.yaml"), "--address", lf.address)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "already up with other settings" in out.stderr and "health" in out.stderr and "fabric down" in out.stderr
    assert "queue_timeout_s" not in out.stderr  # only the field that differs
    again = fabric_cli("up", "--config", str(configs / "good.yaml"), "--address", lf.address)  # the same settings: idempotent
    assert again.returncode == 0 and "already running" in again.stdout and "started" not in again.stdout, again.stderr[-2000:]
    attach = fabric_cli("up", "--address", lf.address)  # no settings: attach to what runs
    assert attach.returncode == 0, attach.stderr[-2000:]


def test_up_in_a_driver_raises_a_typed_conflict_and_up_without_settings_attaches(lf, configs):
    import fabric
    from fabric.core.errors import SettingsConflictError
    from fabric.core.settings import FabricSettings

    with pytest.raises(SettingsConflictError) as exc:
        fabric.up(FabricSettings.from_yaml(configs / "other.yaml"))
    assert exc.value.fields == ("health",)
    fabric.up()  # attaches, whatever runs
    fabric.up(FabricSettings.from_yaml(configs / "good.yaml"))  # the settings in force: fine


def test_down_stops_the_actors_and_a_new_up_may_bring_other_settings(lf, configs):
    out = fabric_cli("down", "--address", lf.address)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "stopped" in out.stdout and "fabric.registry" in out.stdout
    assert fabric_actors() == set()
    again = fabric_cli("down", "--address", lf.address)
    assert again.returncode == 0 and "nothing to stop" in again.stdout
    # down, then up with other settings: they are the settings in force now (the stored ones do not outlive down)
    up = fabric_cli("up", "--config", str(configs / "other.yaml"), "--address", lf.address, "--no-scheduler")
    assert up.returncode == 0, up.stderr[-2000:]
    assert "fabric.scheduler" not in fabric_actors()
    assert fabric_cli("down", "--address", lf.address).returncode == 0


# -- token auth: what a refused client is told ----------------------------------------------------------
@pytest.fixture
def token_auth_on():
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        pytest.skip("the head runs with token auth only when RAY_AUTH_MODE=token (tests/conftest.py sets it)")


def refused(lf, *args: str, env: dict[str, str]) -> str:
    t0 = time.monotonic()
    out = fabric_cli(*args, "--address", lf.address, env=env, timeout=120)
    took = time.monotonic() - t0
    assert out.returncode == 1, out.stdout + out.stderr  # the cluster cannot be reached: 1, as every command
    # Ray alone would say only "Failed to connect to Ray cluster" after ~20 s
    assert took < 15, f"took {took:.1f}s"
    assert f"cannot connect to Ray at {lf.address}" in out.stderr, out.stderr
    return out.stderr


@pytest.mark.parametrize("command", [("status",), ("cordon", "some-node"), ("up",), ("down",)])
def test_a_wrong_token_is_named_with_its_fix(lf, token_auth_on, command):
    err = refused(lf, *command, env={"RAY_AUTH_TOKEN": "0" * 32})
    assert "the cluster refused this client's token (from RAY_AUTH_TOKEN)" in err
    assert "set RAY_AUTH_TOKEN to the head's token" in err


def test_a_wrong_token_file_is_named_with_its_fix(lf, token_auth_on, tmp_path):
    wrong = tmp_path / "token"
    wrong.write_text("f" * 32)
    err = refused(lf, "status", env={"RAY_AUTH_TOKEN_PATH": str(wrong)})
    assert f"refused this client's token (from {wrong}, named by RAY_AUTH_TOKEN_PATH)" in err
    assert "point RAY_AUTH_TOKEN_PATH at a copy of the head's ~/.ray/auth_token" in err


def test_no_token_at_all_is_named_with_its_fix(lf, token_auth_on, tmp_path):
    err = refused(lf, "status", env={"HOME": str(tmp_path)})  # a home without ~/.ray/auth_token
    assert "the cluster requires a token and this client has none (RAY_AUTH_MODE=token" in err
    assert f"copy the head's ~/.ray/auth_token to {tmp_path}/.ray/auth_token" in err
    missing = refused(lf, "status", env={"RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")})
    assert f"RAY_AUTH_TOKEN_PATH names {tmp_path / 'missing'}, which is missing or empty" in missing


def test_token_auth_off_here_is_named_with_its_fix(lf, token_auth_on):
    err = refused(lf, "status", env={"RAY_AUTH_MODE": "disabled"})
    assert "the cluster requires a token and this client sends none (token auth is off here: RAY_AUTH_MODE=disabled)" in err
    assert "set RAY_AUTH_MODE=token" in err
    assert "is the head's" in err  # this machine's ~/.ray/auth_token is the head's: only the mode is wrong

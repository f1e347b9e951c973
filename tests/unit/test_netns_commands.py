"""The commands and environments the namespace fleet runs its hosts with (no root needed)."""

from __future__ import annotations

import json
from pathlib import Path

from fabric.testing.netns import FAST_HEALTH, head_argv, host_env, join_argv, netns_problem, one_way_problem

FABRIC = ["/venv/bin/fabric"]


def test_the_head_starts_blocking_on_its_address_with_its_own_temp_dir_and_health_checks():
    argv = head_argv(FABRIC, name="head", address="198.51.100.2", port=6379, profile="edge-relay",
                     temp_dir="/tmp/afn-abcdef/head/r", slots=1, system_config=FAST_HEALTH, ray_args=["--foo=1"])
    assert argv[:2] == ["/venv/bin/fabric", "start-head"]
    assert argv[argv.index("--node-ip-address") + 1] == "198.51.100.2" and argv[argv.index("--port") + 1] == "6379"
    assert argv[argv.index("--profile") + 1] == "edge-relay" and argv[argv.index("--name") + 1] == "head"
    assert argv[argv.index("--max-concurrent-tasks") + 1] == "1"
    ray = argv[argv.index("--") + 1:]
    assert ray[0] == "--block" and "--temp-dir=/tmp/afn-abcdef/head/r" in ray and ray[-1] == "--foo=1"
    config = next(a for a in ray if a.startswith("--system-config="))
    assert json.loads(config.split("=", 1)[1]) == {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                                                   "health_check_timeout_ms": 1000}


def test_ray_defaults_pass_no_system_config():
    argv = head_argv(FABRIC, name="h", address="198.51.100.2", port=6379, profile="p", temp_dir="/t", system_config={})
    assert not any(a.startswith("--system-config") for a in argv) and "--max-concurrent-tasks" not in argv


def test_a_node_joins_the_head_blocking_or_supervised():
    argv = join_argv(FABRIC, name="n1", address="198.51.100.3", head="198.51.100.2:6379", profile="cpu-only-box",
                     temp_dir="/tmp/afn-abcdef/n1/r", slots=2)
    assert argv[:2] == ["/venv/bin/fabric", "join"]
    assert argv[argv.index("--address") + 1] == "198.51.100.2:6379"
    assert argv[argv.index("--node-ip-address") + 1] == "198.51.100.3"
    assert argv[argv.index("--") + 1:] == ["--block", "--temp-dir=/tmp/afn-abcdef/n1/r"]
    assert "--supervise" not in argv
    sup = join_argv(FABRIC, name="n1", address="198.51.100.3", head="198.51.100.2:6379", profile="cpu-only-box",
                    temp_dir="/t", supervise=True, ray_args=["--x"])
    assert sup.index("--supervise") < sup.index("--") and "--block" not in sup
    assert sup[sup.index("--") + 1:] == ["--temp-dir=/t", "--x"]


def test_a_host_env_has_its_own_home_and_caches_and_none_of_the_callers_ray_settings():
    base = {"PATH": "/usr/bin", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_ADDRESS": "127.0.0.1:1",
            "RAY_AUTH_TOKEN": "callers", "RAY_TMPDIR": "/x", "HOME": "/root", "KEEP": "me"}
    env = host_env(base, Path("/tmp/afn-abcdef/n1"), token_file=Path("/tmp/afn-abcdef/auth_token"))
    assert env["HOME"] == "/tmp/afn-abcdef/n1/home" and env["XDG_CACHE_HOME"] == "/tmp/afn-abcdef/n1/cache"
    assert env["XDG_DATA_HOME"] == "/tmp/afn-abcdef/n1/data" and env["KEEP"] == "me"
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == "/tmp/afn-abcdef/auth_token"
    for gone in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_TMPDIR"):
        assert gone not in env
    assert env["PATH"].endswith("/usr/bin") and env["PATH"] != "/usr/bin"
    off = host_env(base, Path("/f"), token_file=None)
    assert off["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN_PATH" not in off


def test_the_problem_helpers_name_what_is_missing(monkeypatch):
    import fabric.testing.netns as netns

    monkeypatch.setattr(netns.sys, "platform", "linux")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert "needs root" in (netns_problem() or "")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)
    assert "`ip` command" in (netns_problem() or "")
    assert "neither nft nor iptables" in (one_way_problem() or "")
    monkeypatch.setattr(netns.shutil, "which", lambda name: "/usr/sbin/iptables" if name == "iptables" else None)
    assert one_way_problem() is None
    monkeypatch.setattr(netns.shutil, "which", lambda name: "/usr/sbin/nft" if name == "nft" else None)
    assert one_way_problem() is None
    monkeypatch.setattr(netns.sys, "platform", "darwin")
    assert "Linux only" in (netns_problem() or "")


def test_a_fleet_takes_its_health_checks_as_parameters_before_it_touches_the_machine():
    from fabric.testing.netns import NetnsFleet

    assert NetnsFleet().system_config == FAST_HEALTH
    assert NetnsFleet(ray_defaults=True).system_config == {}
    custom = NetnsFleet(health_check_period_ms=200, health_check_failure_threshold=5, health_check_timeout_ms=300)
    assert custom.system_config == {"health_check_period_ms": 200, "health_check_failure_threshold": 5,
                                    "health_check_timeout_ms": 300}
    a, b = NetnsFleet(), NetnsFleet()
    assert a.names.run_id != b.names.run_id and str(a.folder) == f"/tmp/afn-{a.names.run_id}"
    assert not a.folder.exists() and a.record is None
    a.close()  # nothing was made: closing is a no-op


def test_a_teardown_problem_does_not_hide_the_bodys_exception():
    import pytest

    from fabric.testing.netns import NetnsError, NetnsFleet

    fleet = NetnsFleet()

    def failing_close() -> None:
        raise NetnsError("teardown left: namespace af-abcdef-x: busy")

    fleet.close = failing_close  # type: ignore[method-assign]
    body = RuntimeError("the body failed")
    fleet.__exit__(RuntimeError, body, None)
    assert body.__notes__ == ["and the fleet's teardown failed: teardown left: namespace af-abcdef-x: busy"]
    with pytest.raises(NetnsError, match="busy"):
        fleet.__exit__(None, None, None)

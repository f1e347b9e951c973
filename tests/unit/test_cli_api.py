"""``fabric --api HOST:PORT ...`` against a real operator API server over a fake scheduler (the
server of ``test_api_client``): the commands print what they print through Ray, never import Ray,
and exit 0 done, 1 failed / not reachable / token missing or refused, 2 bad input. The shared
parent parsers give every command one spelling of ``--address``, ``--api``, ``--token-file``."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from fabric.cli import build_parser, main
from fabric.cli.common import ADDRESS_HELP, API_HELP, EXIT_FAILED, EXIT_OK, EXIT_USAGE
from test_api_client import TOKEN, Served

ROOT = Path(__file__).resolve().parents[2]
API_COMMANDS = ("status", "nodes", "jobs", "events", "cordon", "uncordon", "drain", "evict", "terminate", "migrate", "migrations",
                "interrupt", "explain", "settings show")


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.close()


@pytest.fixture
def api(served: Served, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FABRIC_API_TOKEN", TOKEN)
    monkeypatch.delenv("FABRIC_API", raising=False)
    return f"127.0.0.1:{served.port}"


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None:
        return
    for name, p in sub.choices.items():
        full = f"{prefix}{name}"
        if any(isinstance(a, argparse._SubParsersAction) for a in p._actions):
            yield from _commands(p, f"{full} ")
        else:
            yield full, p


def _option(p: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in p._actions if flag in a.option_strings), None)


# -- the parser -------------------------------------------------------------------------------------------
def test_every_api_command_takes_api_and_token_file_spelt_one_way() -> None:
    commands = dict(_commands(build_parser()))
    for name in API_COMMANDS:
        api, token = _option(commands[name], "--api"), _option(commands[name], "--token-file")
        assert api is not None and token is not None, name
        assert (api.metavar, api.help, token.metavar) == ("HOST:PORT", API_HELP, "FILE"), name


def test_every_address_is_host_port_with_one_help() -> None:
    mine = [(n, p) for n, p in _commands(build_parser()) if n not in ("up", "down", "join", "start-head")]
    seen = [(n, _option(p, "--address")) for n, p in mine]
    with_address = [(n, a) for n, a in seen if a is not None]
    assert len(with_address) >= len(API_COMMANDS) + 4
    for name, action in with_address:
        assert (action.metavar, action.help, action.default) == ("HOST:PORT", ADDRESS_HELP, "auto"), name


def test_routes_takes_config_and_keeps_settings() -> None:
    p = build_parser()
    assert p.parse_args(["routes", "--caddy", "c.json", "--config", "a.yaml"]).settings == "a.yaml"
    assert p.parse_args(["routes", "--caddy", "c.json", "--settings", "b.yaml"]).settings == "b.yaml"


def test_fabric_api_names_the_api_when_api_is_not_given(served: Served, monkeypatch: pytest.MonkeyPatch,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FABRIC_API", f"127.0.0.1:{served.port}")
    monkeypatch.setenv("FABRIC_API_TOKEN", TOKEN)
    assert main(["nodes", "--json"]) == EXIT_OK
    assert [r["name"] for r in json.loads(capfd.readouterr().out)] == ["alpha", "beta"]


def test_api_wins_and_fabric_api_yields_to_an_explicit_address() -> None:
    from fabric.cli.common import api_address

    p = build_parser()
    env = {"FABRIC_API": "10.0.0.9:7000"}
    assert api_address(p.parse_args(["jobs"]), env) == "10.0.0.9:7000"
    assert api_address(p.parse_args(["jobs", "--address", "10.0.0.5:6379"]), env) is None
    assert api_address(p.parse_args(["jobs", "--api", "h:1", "--address", "10.0.0.5:6379"]), env) == "h:1"
    assert api_address(p.parse_args(["jobs"]), {}) is None


# -- the commands over the API ---------------------------------------------------------------------------
def test_the_commands_print_what_the_scheduler_answers(api: str, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["nodes", "--api", api, "--json"]) == EXIT_OK
    rows = json.loads(capfd.readouterr().out)
    assert [(r["name"], r["flags"], r["pool"], r["running"]) for r in rows] == [("alpha", ["cordoned"], "edge", 2),
                                                                                ("beta", ["spare"], "default", 0)]
    assert main(["status", "--api", api]) == EXIT_OK
    out = capfd.readouterr().out
    assert out.startswith("NAME") and "alpha" in out and "beta" in out
    assert main(["jobs", "--api", api]) == EXIT_OK
    out = capfd.readouterr().out
    assert out.splitlines()[0].startswith("JOB") and "enc" in out and "alpha" in out  # the node's name, from the nodes
    assert main(["jobs", "j1", "--api", api, "--json"]) == EXIT_OK
    assert [h["state"] for h in json.loads(capfd.readouterr().out)["history"]] == ["pending", "running"]
    assert main(["settings", "show", "--api", api, "--json"]) == EXIT_OK
    assert json.loads(capfd.readouterr().out)["drain"]["timeout_s"] == 45
    assert main(["events", "--api", api, "--limit", "2"]) == EXIT_OK
    assert [int(line.split()[0]) for line in capfd.readouterr().out.splitlines()] == [6, 7]
    assert main(["cordon", "alpha", "--api", api]) == EXIT_OK
    assert capfd.readouterr().out.strip() == f"cordon alpha ({('n1' * 8)[:12]})"
    assert main(["drain", "alpha", "--api", api, "--status", "--json"]) == EXIT_OK
    assert json.loads(capfd.readouterr().out)["phase"] == "waiting"
    assert main(["migrations", "--api", api]) == EXIT_OK
    assert "m-1" in capfd.readouterr().out
    assert main(["explain", "--api", api, "--min-tier", "cpu_ffmpeg"]) == EXIT_OK
    assert "alpha wins" in capfd.readouterr().out
    assert main(["explain", "--api", api, "--event", "7", "--replay"]) == EXIT_OK
    assert "event 7: alpha then" in capfd.readouterr().out
    assert main(["explain", "--api", api, "--replay"]) == 2  # a replay of what? --event SEQ is missing


def test_events_follow_stops_after_for_seconds(api: str, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "--api", api, "--follow", "--for", "0.3", "--interval", "0.05", "--kind", "job_state"]) == EXIT_OK
    assert [int(line.split()[0]) for line in capfd.readouterr().out.splitlines()] == [1, 3, 5, 7]


@pytest.mark.parametrize("argv, code, words", [
    (["cordon", "ghost"], EXIT_USAGE, "no node known as 'ghost'"),
    (["jobs", "nope"], EXIT_USAGE, "no job 'nope'"),
    (["drain", "beta", "--status"], EXIT_FAILED, "beta has no drain"),
])
def test_refusals_and_failures_exit_by_outcome(api: str, argv: list[str], code: int, words: str,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--api", api]) == code
    assert words in capfd.readouterr().err


def test_token_and_address_problems_are_one_line(served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("FABRIC_API_TOKEN", raising=False)
    api = f"127.0.0.1:{served.port}"
    assert main(["nodes", "--api", api]) == EXIT_FAILED
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "no API token" in err and "FABRIC_API_TOKEN" in err
    wrong = tmp_path / "wrong"
    wrong.write_text("x" * 43)
    assert main(["status", "--api", api, "--token-file", str(wrong)]) == EXIT_FAILED
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and f"refused the token from the token file {wrong}" in err
    assert main(["jobs", "--api", "no-port", "--token-file", str(wrong)]) == EXIT_USAGE
    assert "--api: address 'no-port' is not HOST:PORT" in capfd.readouterr().err
    monkeypatch.setenv("FABRIC_API_TOKEN", TOKEN)
    assert main(["settings", "show", "--api", "127.0.0.1:1"]) == EXIT_FAILED
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the operator API at 127.0.0.1:1" in err


def test_a_bad_address_is_bad_usage_before_anything_connects(capfd: pytest.CaptureFixture[str]) -> None:
    for argv in (["status"], ["jobs"], ["events"], ["cordon", "n"], ["drain", "n"], ["settings", "show"], ["pools"],
                 ["bundles"], ["api-token"]):
        assert main([*argv, "--address", "nohost"]) == EXIT_USAGE, argv
        assert "is not HOST:PORT" in capfd.readouterr().err


# -- without Ray -----------------------------------------------------------------------------------------
CLIENT = textwrap.dedent('''
    import json, sys
    from fabric.cli import main
    api = sys.argv[1]
    codes = {}
    for argv in (["status"], ["nodes", "--json"], ["jobs"], ["events", "--follow", "--for", "0.2"], ["cordon", "alpha"],
                 ["uncordon", "alpha"], ["drain", "alpha", "--wait", "--wait-timeout", "0.3"], ["migrate", "j1"],
                 ["explain", "--min-tier", "relay"], ["settings", "show"], ["migrations"]):
        codes[" ".join(argv)] = main([*argv, "--api", api])
    print(json.dumps({"codes": codes, "ray": "ray" in sys.modules}), file=sys.stderr)
''')


def test_the_api_path_never_imports_ray(served: Served) -> None:
    env = {"FABRIC_API_TOKEN": TOKEN, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CLIENT, f"127.0.0.1:{served.port}"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["ray"] is False
    # the drain is still waiting when --wait-timeout passes: 1; every other command 0
    assert report["codes"] == {**{k: 0 for k in report["codes"]}, "drain alpha --wait --wait-timeout 0.3": 1}
    assert len(report["codes"]) == 11


def test_an_answer_that_does_not_read_is_one_line_and_exit_1(api: str, monkeypatch: pytest.MonkeyPatch,
                                                            capfd: pytest.CaptureFixture[str]) -> None:
    from fabric.api import readers

    def unreadable(message: object) -> object:
        raise ValueError("Node.record_json: not a JSON object")

    monkeypatch.setattr(readers, "node_record", unreadable)
    assert main(["nodes", "--api", api]) == EXIT_FAILED
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "answered what this client cannot read" in err and "not a JSON object" in err

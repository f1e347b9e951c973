"""``fabric join``'s checks without a cluster: version compare and its lines, the token a node sends
and how ``ray start`` gets it, what the head's answers mean, and the whole ``fabric join`` against a
fake head (``HeadSeam``) and a fake ``ray`` that records how it was run."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from fabric.cli import main
from fabric.cli import node as node_cli
from fabric.cli.join_checks import (
    PRETEND_ENV, JoinToken, Versions, check_join, head_token_lines, join_token, local_versions, record_head_versions,
    token_problem, version_mismatches,
)

HEAD = Versions(python="3.11.7", ray="2.60.0", fabric="0.1.0")
ADDR = "10.0.0.5:6379"


# -- versions ---------------------------------------------------------------------------------------------
def test_the_same_versions_and_another_python_patch_pass():
    assert version_mismatches(HEAD, HEAD, ADDR) == []
    assert version_mismatches(Versions("3.11.2", "2.60.0", "0.1.0"), HEAD, ADDR) == []


def test_each_differing_version_is_one_line_naming_both():
    here = Versions(python="3.12.1", ray="2.59.0", fabric="0.2.0")
    lines = version_mismatches(here, HEAD, ADDR)
    assert lines == [
        f"Python differs: this node has 3.12.1, the head at {ADDR} has 3.11.7 (major.minor must match)",
        f"Ray differs: this node has 2.59.0, the head at {ADDR} has 2.60.0",
        f"fabric differs: this node has 0.2.0, the head at {ADDR} has 0.1.0",
    ]
    assert version_mismatches(Versions("3.11.7", "2.60.1", "0.1.0"), HEAD, ADDR) == [
        f"Ray differs: this node has 2.60.1, the head at {ADDR} has 2.60.0"]  # Ray: exact, patch included


def test_local_versions_are_this_python_s_and_a_test_may_pretend_others():
    import platform

    import fabric

    real = local_versions({})
    assert real.python == platform.python_version() and real.fabric == fabric.__version__ and real.ray[0].isdigit()
    faked = local_versions({PRETEND_ENV: "ray=9.9.9, fabric=0.0.0-x,unknown=1,python="})
    assert faked == Versions(python=real.python, ray="9.9.9", fabric="0.0.0-x")


def test_versions_round_trip_and_a_bad_record_is_refused():
    assert Versions.from_json(HEAD.to_json()) == HEAD
    for bad in ('["x"]', '{"python": "3.11"}', "{"):
        with pytest.raises(ValueError):
            Versions.from_json(bad)


# -- tokens -----------------------------------------------------------------------------------------------
def reader(files: dict[str, str]):
    return lambda path: files.get(str(path))


def test_token_file_wins_and_reaches_ray_start_as_a_path(tmp_path):
    home = tmp_path / "home"
    f = tmp_path / "tok"
    tok = join_token({"RAY_AUTH_TOKEN": "from-env"}, home, str(f), reader({str(f): "abc\n"}))
    assert tok.token == "abc" and tok.problem is None and str(f) in tok.where
    assert tok.env == {"RAY_AUTH_TOKEN_PATH": str(f)} and tok.unset == ("RAY_AUTH_TOKEN",)  # the file, not the env, wins
    assert "abc" not in json.dumps(tok.env)  # the token itself never travels


def test_a_missing_or_empty_token_file_is_a_problem(tmp_path):
    f = tmp_path / "tok"
    assert "missing" in join_token({}, tmp_path, str(f), reader({})).problem
    empty = join_token({}, tmp_path, str(f), reader({str(f): " \n"}))
    assert empty.token is None and "empty" in empty.problem
    assert token_problem(ADDR, empty, "ok", None).startswith(f"the token file {f} (--token-file) is empty")


def test_without_token_file_ray_s_own_order_is_kept(tmp_path):
    home = tmp_path
    default = str(home / ".ray" / "auth_token")
    env_tok = join_token({"RAY_AUTH_TOKEN": " t1 "}, home, None, reader({default: "t3"}))
    assert (env_tok.token, env_tok.where, env_tok.env, env_tok.unset) == ("t1", "RAY_AUTH_TOKEN", {}, ())
    path_tok = join_token({"RAY_AUTH_TOKEN_PATH": "/x/t"}, home, None, reader({"/x/t": "t2", default: "t3"}))
    assert path_tok.token == "t2" and "/x/t" in path_tok.where
    file_tok = join_token({}, home, None, reader({default: "t3"}))
    assert file_tok.token == "t3" and file_tok.where == default
    assert join_token({}, home, None, reader({})).token is None


def test_what_the_head_s_answers_mean():
    none = JoinToken(token=None, where="/h/.ray/auth_token")
    some = JoinToken(token="t", where="RAY_AUTH_TOKEN")
    assert token_problem(ADDR, none, "ok", None) is None  # the head needs no token
    assert token_problem(ADDR, none, None, None) is None  # not askable (TLS): ray start will say
    missing = token_problem(ADDR, none, "unauthenticated", None)
    assert missing.startswith(f"the head at {ADDR} requires a token and this node has none") and "--token-file" in missing
    wrong = token_problem(ADDR, some, "unauthenticated", "unauthenticated")
    assert wrong.startswith(f"the head at {ADDR} refused this node's token (from RAY_AUTH_TOKEN)")
    assert token_problem(ADDR, some, "unauthenticated", "ok") is None


def test_start_head_says_where_the_token_is(tmp_path):
    default = str(tmp_path / ".ray" / "auth_token")
    on_file = head_token_lines({"RAY_AUTH_MODE": "token"}, tmp_path, reader({default: "t"}))
    assert on_file == [f"token auth is on: the cluster token is in {default}: copy that file to each other machine and join "
                       "with --token-file FILE (or put it at ~/.ray/auth_token there, or its contents in RAY_AUTH_TOKEN)"]
    named = head_token_lines({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": "/srv/tok"}, tmp_path, reader({"/srv/tok": "t"}))
    assert "the cluster token is in /srv/tok" in named[0]
    assert "this shell's RAY_AUTH_TOKEN" in head_token_lines({"RAY_AUTH_TOKEN": "t"}, tmp_path, reader({}))[0]  # mode unset + token: on
    assert "no token in" in head_token_lines({"RAY_AUTH_MODE": "token"}, tmp_path, reader({}))[0]
    assert head_token_lines({"RAY_AUTH_MODE": "disabled"}, tmp_path, reader({default: "t"}))[0].startswith("token auth is off")


# -- against a fake head ----------------------------------------------------------------------------------
class FakeHead:
    """The head's GCS: the token it requires (None: none) and what it recorded."""

    def __init__(self, token: str | None = "good", recorded: bytes | None = HEAD.to_json().encode()) -> None:
        self.token, self.recorded, self.asked = token, recorded, []

    def ask(self, gcs: str, token: str | None) -> str | None:
        self.asked.append(token)
        return "ok" if self.token is None or token == self.token else "unauthenticated"

    def kv_get(self, gcs: str, token: str | None) -> tuple[str, bytes | None]:
        return ("ok", self.recorded) if self.ask(gcs, token) == "ok" else ("unauthenticated", None)

    def kv_put(self, gcs: str, token: str | None, value: bytes) -> str:
        if self.ask(gcs, token) != "ok":
            return "unauthenticated"
        self.recorded = value
        return "ok"


def test_check_join_passes_a_good_token_on_with_token_auth_on():
    v = check_join(ADDR, JoinToken("good", "f", {"RAY_AUTH_TOKEN_PATH": "/f"}, ("RAY_AUTH_TOKEN",)), FakeHead(), HEAD)
    assert v.problems == [] and v.warnings == []
    assert v.env == {"RAY_AUTH_TOKEN_PATH": "/f", "RAY_AUTH_MODE": "token"} and v.unset == ("RAY_AUTH_TOKEN",)


def test_check_join_refuses_a_wrong_token_before_reading_versions():
    head = FakeHead(recorded=None)
    v = check_join(ADDR, JoinToken("bad", "RAY_AUTH_TOKEN"), head, HEAD)
    assert len(v.problems) == 1 and "refused this node's token" in v.problems[0] and v.warnings == []


def test_check_join_refuses_other_versions_and_warns_when_none_were_recorded():
    here = Versions("3.11.7", "2.60.0", "0.0.9")
    v = check_join(ADDR, JoinToken(None, "x"), FakeHead(token=None), here)
    assert v.problems == [f"fabric differs: this node has 0.0.9, the head at {ADDR} has 0.1.0"] and "RAY_AUTH_MODE" not in v.env
    v = check_join(ADDR, JoinToken(None, "x"), FakeHead(token=None, recorded=None), here)
    assert v.problems == [] and "recorded no versions" in v.warnings[0]


def test_record_head_versions_uses_the_head_s_token(tmp_path):
    head = FakeHead(recorded=None)
    assert record_head_versions(ADDR, HEAD, {"RAY_AUTH_TOKEN": "good"}, tmp_path, head, wait_s=0) is None
    assert Versions.from_json(head.recorded) == HEAD
    assert record_head_versions(ADDR, HEAD, {"RAY_AUTH_TOKEN": "bad"}, tmp_path, FakeHead(), wait_s=0) == "unauthenticated"


# -- the whole fabric join, against a fake head and a fake ray ---------------------------------------------
@pytest.fixture
def fake_ray(tmp_path):
    """A ``ray`` that writes its argv and environment to ``ray.json`` and exits 0."""
    script = tmp_path / "ray"
    out = tmp_path / "ray.json"
    script.write_text(f"#!/usr/bin/env python3\nimport json, os, sys\njson.dump({{'argv': sys.argv, 'env': dict(os.environ)}}, "
                      f"open({str(out)!r}, 'w'))\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, out


def join(monkeypatch, capsys, head: FakeHead, ray: Path, *argv: str, env: dict[str, str] | None = None):
    monkeypatch.setattr(node_cli, "_reachable", lambda host, port, timeout_s=3.0: None)
    monkeypatch.setattr(node_cli, "HeadSeam", lambda: head)
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", PRETEND_ENV):
        monkeypatch.delenv(name, raising=False)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    code = main(["join", "--address", ADDR, "--profile", "edge-relay", "--ray", str(ray), "--no-wait", *argv])  # no registry here
    out = capsys.readouterr()
    return code, out.out, out.err


def test_join_with_a_token_file_runs_ray_start_with_it_in_the_environment_only(monkeypatch, capsys, tmp_path, fake_ray):
    ray, record = fake_ray
    f = tmp_path / "tok"
    f.write_text("good\n")
    code, out, err = join(monkeypatch, capsys, FakeHead(), ray, "--token-file", str(f), env={"RAY_AUTH_MODE": "disabled"})
    assert code == 0, err
    ran = json.loads(record.read_text())
    assert ran["env"]["RAY_AUTH_TOKEN_PATH"] == str(f.resolve()) and ran["env"]["RAY_AUTH_MODE"] == "token"
    assert not any("good" in a for a in ran["argv"]) and "good" not in out


@pytest.mark.parametrize("case", ["missing", "wrong", "versions"])
def test_join_refuses_with_exit_1_and_starts_nothing(monkeypatch, capsys, tmp_path, fake_ray, case):
    ray, record = fake_ray
    env = {"HOME": str(tmp_path / "home")}
    if case == "wrong":
        env["RAY_AUTH_TOKEN"] = "bad"
    if case == "versions":
        env.update(RAY_AUTH_TOKEN="good", **{PRETEND_ENV: "ray=2.59.0"})
    code, _, err = join(monkeypatch, capsys, FakeHead(), ray, env=env)
    assert code == 1 and not record.exists()
    assert err.splitlines()[-1] == "fabric join: nothing started"
    expected = {"missing": f"the head at {ADDR} requires a token and this node has none",
                "wrong": f"the head at {ADDR} refused this node's token (from RAY_AUTH_TOKEN)",
                "versions": f"Ray differs: this node has 2.59.0, the head at {ADDR} has 2.60.0"}[case]
    assert f"fabric join: error: {expected}" in err


def test_join_to_a_head_that_recorded_nothing_warns_and_goes_on(monkeypatch, capsys, tmp_path, fake_ray):
    ray, record = fake_ray
    code, _, err = join(monkeypatch, capsys, FakeHead(token=None, recorded=None), ray, env={"HOME": str(tmp_path)})
    assert code == 0 and record.exists()
    assert "fabric join: warning: the head at 10.0.0.5:6379 recorded no versions" in err


def test_start_head_records_its_versions_after_ray_start(monkeypatch, capsys, tmp_path, fake_ray):
    ray, record = fake_ray
    head = FakeHead(token="good", recorded=None)
    monkeypatch.setattr(node_cli, "HeadSeam", lambda: head)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "good")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # whatever the shell running the tests says
    code = main(["start-head", "--profile", "edge-relay", "--port", "6391", "--ray", str(ray)])
    out = capsys.readouterr().out
    assert code == 0 and record.exists()
    assert Versions.from_json(head.recorded) == local_versions(os.environ)
    assert "recorded the head's versions for joining nodes: Python " in out
    assert "the cluster token is this shell's RAY_AUTH_TOKEN" in out


class BrokenHead(FakeHead):
    def ask(self, gcs: str, token: str | None) -> str | None:
        raise RuntimeError("no answer this way")


def test_a_head_that_cannot_be_asked_is_a_warning_and_ray_start_runs(monkeypatch, capsys, tmp_path, fake_ray):
    ray, record = fake_ray
    code, _, err = join(monkeypatch, capsys, BrokenHead(), ray, env={"HOME": str(tmp_path)})
    assert code == 0 and record.exists()
    assert "fabric join: warning: could not ask the head at 10.0.0.5:6379 (RuntimeError: no answer this way)" in err

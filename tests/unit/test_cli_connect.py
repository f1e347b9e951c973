"""``fabric.cli.connect`` without a cluster: which token a client sends, and what each failure says.

The facts in these tests are the ones measured against a real token-auth head (see
tests/integration/test_cli_lifecycle.py): a wrong token or no token sent gets ``UNAUTHENTICATED``
from the GCS; token auth on with no token makes ``ray.init`` raise ``AuthenticationError`` at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fabric.cli.connect import ClientToken, ConnectFacts, RaySeam, client_token_from, connect, explain_failure


def files(contents: dict[str, str]):
    def read(path: Path) -> str | None:
        return contents.get(str(path))

    return read


HOME = Path("/home/op")
DEFAULT = "/home/op/.ray/auth_token"


# -- which token, from where ------------------------------------------------------------------------
def test_token_precedence_is_env_then_path_then_default_file():
    read = files({DEFAULT: "from-file\n", "/etc/tok": " from-path "})
    assert client_token_from({"RAY_AUTH_TOKEN": "from-env", "RAY_AUTH_TOKEN_PATH": "/etc/tok"}, HOME, auto=False, read=read).token == "from-env"
    via_path = client_token_from({"RAY_AUTH_TOKEN_PATH": "/etc/tok"}, HOME, auto=False, read=read)
    assert (via_path.source, via_path.path, via_path.token) == ("RAY_AUTH_TOKEN_PATH", "/etc/tok", "from-path")
    default = client_token_from({}, HOME, auto=False, read=read)
    assert (default.source, default.path, default.token) == ("file", DEFAULT, "from-file")


def test_a_path_to_a_missing_or_empty_file_is_no_token_without_falling_back():
    read = files({DEFAULT: "from-file", "/empty": "  \n"})
    assert client_token_from({"RAY_AUTH_TOKEN_PATH": "/missing"}, HOME, auto=False, read=read).token is None
    assert client_token_from({"RAY_AUTH_TOKEN_PATH": "/empty"}, HOME, auto=False, read=read).token is None


def test_mode_unset_turns_token_auth_on_only_for_auto_with_a_token():
    read = files({DEFAULT: "t"})
    assert client_token_from({}, HOME, auto=True, read=read).mode == "token"
    assert client_token_from({}, HOME, auto=False, read=read).mode == "disabled"
    assert client_token_from({}, HOME, auto=True, read=files({})).mode == "disabled"
    explicit = client_token_from({"RAY_AUTH_MODE": "Token"}, HOME, auto=False, read=files({}))
    assert (explicit.mode, explicit.mode_set) == ("token", True)


# -- what each failure says ------------------------------------------------------------------------
def token(mode="token", source="file", path=DEFAULT, value="t", mode_set=True) -> ClientToken:
    return ClientToken(mode=mode, mode_set=mode_set, source=source, path=path, token=value)


def facts(client: ClientToken, **kw) -> ConnectFacts:
    return ConnectFacts(address="10.0.0.5:6379", gcs="10.0.0.5:6379", client=client, **kw)


def test_a_wrong_token_says_so_and_how_to_fix_it_for_its_source():
    msg = explain_failure(facts(token(), without_token="unauthenticated", with_token="unauthenticated"))
    assert "refused this client's token" in msg and DEFAULT in msg and "copy the head's ~/.ray/auth_token" in msg
    env = explain_failure(facts(token(source="RAY_AUTH_TOKEN", path=None), without_token="unauthenticated", with_token="unauthenticated"))
    assert "from RAY_AUTH_TOKEN" in env and "set RAY_AUTH_TOKEN to the head's token" in env


def test_no_token_with_token_auth_on():
    msg = explain_failure(facts(token(value=None), without_token="unauthenticated"))
    assert msg.startswith("the cluster requires a token and this client has none (RAY_AUTH_MODE=token")
    assert "copy the head's ~/.ray/auth_token" in msg and "RAY_AUTH_TOKEN" in msg
    via_path = explain_failure(facts(token(source="RAY_AUTH_TOKEN_PATH", path="/missing", value=None), without_token="unauthenticated"))
    assert "RAY_AUTH_TOKEN_PATH names /missing, which is missing or empty" in via_path
    not_needed = explain_failure(facts(token(value=None), without_token="ok"))
    assert "does not require one" in not_needed and "RAY_AUTH_MODE=disabled" in not_needed


def test_token_auth_off_here_against_a_token_cluster():
    off = token(mode="disabled")
    right = explain_failure(facts(off, without_token="unauthenticated", with_token="ok"))
    assert "sends none" in right and "RAY_AUTH_MODE=disabled" in right and "set RAY_AUTH_MODE=token" in right and "is the head's" in right
    wrong = explain_failure(facts(off, without_token="unauthenticated", with_token="unauthenticated"))
    assert "holds another" in wrong and "copy the head's ~/.ray/auth_token" in wrong
    unset = explain_failure(facts(token(mode="disabled", mode_set=False, value=None), without_token="unauthenticated"))
    assert "RAY_AUTH_MODE unset" in unset and "set RAY_AUTH_MODE=token" in unset


def test_nothing_there_and_nothing_wrong():
    assert "nothing answers there (Connection refused)" in explain_failure(facts(token(), reachable="Connection refused"))
    assert explain_failure(facts(token(), without_token="ok")) is None
    assert explain_failure(facts(token(), without_token="unauthenticated", with_token="ok")) is None
    assert explain_failure(facts(token(), without_token="ok", ray_error="RuntimeError: boom")) == "RuntimeError: boom"


# -- connect over a fake seam ----------------------------------------------------------------------
class FakeSeam(RaySeam):
    def __init__(self, *, answers=("ok", "ok"), reachable=None, client=None, init_error=None):
        super().__init__(env={}, home=HOME)
        self.answers, self.why, self.client, self.init_error = list(answers), reachable, client or token(), init_error
        self.inits: list[tuple[str, str | None]] = []
        self.asked: list[str | None] = []

    @property
    def ray(self):
        return "ray-module"

    def is_initialized(self):
        return False

    def client_token(self, address):
        return self.client

    def resolve(self, address):
        return "127.0.0.2:6379" if address == "auto" else address

    def reachable(self, host, port):
        return self.why

    def ask_gcs(self, gcs, token):
        self.asked.append(token)
        return self.answers[len(self.asked) - 1]

    def init(self, address, node_ip_address):
        self.inits.append((address, node_ip_address))
        if self.init_error:
            raise self.init_error


def test_connect_refuses_a_wrong_token_before_ray_init(capsys):
    seam = FakeSeam(answers=("unauthenticated", "unauthenticated"))
    assert connect("10.0.0.5:6379", "status", seam=seam) is None
    assert seam.inits == [] and seam.asked == [None, "t"]
    err = capsys.readouterr().err
    assert err.startswith("fabric status: cannot connect to Ray at 10.0.0.5:6379: the cluster refused this client's token")


def test_connect_goes_ahead_when_the_token_is_accepted_and_uses_a_loopback_node_ip():
    seam = FakeSeam(answers=("unauthenticated", "ok"))
    assert connect("auto", "up", seam=seam) == "ray-module"
    assert seam.inits == [("auto", "127.0.0.2")]


def test_connect_reports_ray_words_when_nothing_explains_the_failure(capsys):
    seam = FakeSeam(init_error=ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379"))
    assert connect("10.0.0.5:6379", "down", seam=seam) is None
    assert "ConnectionError: Failed to connect to Ray cluster" in capsys.readouterr().err


@pytest.mark.parametrize("address", ["nonsense", "host:", "host:99999"])
def test_connect_refuses_a_malformed_address(capsys, address):
    assert connect(address, "status", seam=FakeSeam()) is None
    assert "is not HOST:PORT" in capsys.readouterr().err

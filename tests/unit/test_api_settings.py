"""The operator API's settings, token file and the actor's own bind refusal (issue 17)."""

from __future__ import annotations

import asyncio
import os
import stat

import pytest

from fabric.api.token import ensure_token, read_token, token_path
from fabric.core.errors import SettingsError
from fabric.core.settings import FabricSettings
from fabric.core.settings_api import ApiSettings, is_loopback


def test_defaults_bind_loopback_on_free_ports() -> None:
    api = FabricSettings.load().api
    assert (api.host, api.port, api.http_port, api.allow_remote, api.enabled) == ("127.0.0.1", 0, 0, False, True)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.com", "::", ""])
def test_a_non_loopback_host_without_allow_remote_is_a_settings_error_naming_api_host(host: str) -> None:
    with pytest.raises(SettingsError) as caught:
        FabricSettings.load({"api": {"host": host}})
    assert [p.path for p in caught.value.problems] == ["api.host"]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.5", "::1", "localhost"])
def test_loopback_hosts_need_nothing_else(host: str) -> None:
    assert FabricSettings.load({"api": {"host": host}}).api.host == host and is_loopback(host)


def test_allow_remote_lets_any_host_bind_and_ports_are_checked() -> None:
    assert FabricSettings.load({"api": {"host": "0.0.0.0", "allow_remote": True}}).api.host == "0.0.0.0"
    with pytest.raises(SettingsError) as caught:
        FabricSettings.load({"api": {"port": 70000, "http_port": -1}})
    assert sorted(p.path for p in caught.value.problems) == ["api.http_port", "api.port"]


def test_the_token_file_is_made_once_0600_and_kept(tmp_path) -> None:
    path = token_path(tmp_path / "store" / "fabric.db")
    assert path == tmp_path / "store" / "api_token"
    first = ensure_token(path)
    assert len(first) >= 40 and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ensure_token(path) == first == read_token(path)
    os.chmod(path, 0o644)
    assert ensure_token(path) == first and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    path.write_text("")
    again = ensure_token(path)
    assert again != first and read_token(path) == again


def test_the_actor_refuses_a_remote_bind_even_past_the_settings(tmp_path) -> None:
    from actors.operator import Operator, start_servers
    from test_api_server import ByName

    sneaky = ApiSettings.model_construct(host="0.0.0.0", allow_remote=False, port=0, http_port=0, enabled=True)

    async def call(method: str, *args):  # never reached
        raise AssertionError(method)

    with pytest.raises(SettingsError) as caught:
        asyncio.run(start_servers(ByName(call), sneaky, "t" * 43))
    assert [p.path for p in caught.value.problems] == ["api.host"]
    op = Operator(None, scheduler=ByName(call), store_path=str(tmp_path / "fabric.db"))
    try:
        addr = op.address()
        assert addr["grpc"].startswith("127.0.0.1:") and not addr["grpc"].endswith(":0")
        assert op.token() == read_token(tmp_path / "api_token") and op.token_path() == str(tmp_path / "api_token")
    finally:
        op.close()

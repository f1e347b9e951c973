"""``Inspect.ListPools``: the pools view (``fabric.api.pools``) carried over gRPC unchanged, served
from the scheduler's fleet and provisions, the settings and the spare reconcilers' status, and
printed by ``fabric status --api`` and ``fabric pools --api`` as the Ray path prints it."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, Iterator

import pytest

from fabric.api import inspect_pb2
from fabric.api.pools import pools_message, pools_view, view_from_message
from fabric.api.server import serve
from fabric.cli import main
from fabric.cli.pools_cmd import format_pools
from fabric.core.placement import NodeRecord
from fabric.core.scheduling.provisions import PendingProvision, shape_record
from fabric.core.settings import FabricSettings, NodeShape
from fabric.core.spares.rows import KeptSpareProvision, spare_provision_row
from test_api_client import CAPS, TOKEN, Scheduler

SETTINGS = FabricSettings.load({"pools": [
    {"name": "default", "tiers": [
        {"name": "onprem"},
        {"name": "burst", "scale_out": "elastic", "provider": "local", "max_nodes": 2, "launch_mode": "spot",
         "candidate_shapes": [{"name": "cpu-box", "profile": "cpu-only-box"}]}]},
    {"name": "edge", "tiers": [{"name": "fixed"}]}]})
NOW = 1_000.0
NODES = [NodeRecord("a" * 16, "alpha", CAPS, pool="default", pool_tier="onprem"),
         NodeRecord("b" * 16, "beta", CAPS, pool="default", pool_tier="burst", spare=True),
         NodeRecord("c" * 16, "gamma", CAPS, pool="edge", pool_tier="fixed"),
         shape_record("prospective:p1", NodeShape(name="cpu-box"), "default", "burst")]
PROVISIONS: dict[str, Any] = {
    "pending": [PendingProvision("p1", "default", "burst", "local", NodeShape(name="cpu-box"), NOW - 3.25, NOW + 596.75,
                                 reason="no node for job j1").to_dict(NOW),
                PendingProvision("p2", "default", "burst", "local", NodeShape(name="cpu-box"), NOW - 9.0, NOW + 591.0,
                                 instance_id="local-3").to_dict(NOW)],
    "held": [{"pool": "default", "pool_tier": "burst", "until_s": 42.5}],
    "instances": [{"provider": "local", "instance_id": "local-3", "pool": "default", "pool_tier": "burst", "shape": "cpu-box",
                   "spare": False, "serving_s": None},
                  {"provider": "local", "instance_id": "local-1", "pool": "default", "pool_tier": "burst", "shape": "cpu-box",
                   "spare": True, "serving_s": 7.5}],
    "spare_provisions": [spare_provision_row(KeptSpareProvision("default", "spare-default-4", "local", "burst",
                                                                NodeShape(name="cpu-box"), 100.0, "local-5", 104.0))],
}
SPARES = [{"pool": "default", "target": 2, "live": ["b" * 16], "pending": ["x"], "consumed": [], "reaping": [],
           "warm_for": ["encoder", "relay"], "reserved_for": ["enc"], "exclusive": True, "backing_off": True, "rounds": 3,
           "errors": []}]


def view() -> dict[str, Any]:
    return pools_view(SETTINGS, NODES, PROVISIONS, SPARES)


def test_a_view_read_back_from_its_message_is_the_view_sent() -> None:
    sent = view()
    assert sent["prospective"][1]["instance_id"] == "local-3" and sent["pools"][1]["spares"] is None  # both kinds of each
    wire = inspect_pb2.PoolsReply.FromString(pools_message(sent).SerializeToString())
    back = view_from_message(wire)
    assert back == sent
    assert json.dumps(back, indent=2, default=str) == json.dumps(sent, indent=2, default=str)  # the same --json, key order too
    assert format_pools(back) == format_pools(sent) and format_pools(back, None) == format_pools(sent, None)


def test_unset_and_zero_stay_apart_on_the_wire() -> None:
    sent = view()
    onprem, burst = sent["pools"][0]["tiers"]
    assert (onprem["max_nodes"], onprem["held_s"], burst["max_nodes"], burst["held_s"]) == (None, None, 2, 42.5)
    zero = {**sent, "pools": [{**sent["pools"][0], "tiers": [{**burst, "max_nodes": 0, "held_s": None}]}]}
    back = view_from_message(pools_message(zero))
    assert back["pools"][0]["tiers"][0]["max_nodes"] == 0 and back["pools"][0]["tiers"][0]["held_s"] is None
    assert view_from_message(inspect_pb2.PoolsReply()) == {"pools": [], "prospective": [], "spare_provisions": [], "instances": []}


class PoolsScheduler(Scheduler):
    """The client tests' fake scheduler with the fleet and provisions the pools view reads."""

    async def nodes(self) -> list[NodeRecord]:
        return list(NODES)

    async def provisions(self) -> dict[str, object]:
        return dict(PROVISIONS)


class ServedPools:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def spares() -> list[dict[str, Any]]:
            return list(SPARES)

        self.server, self.port = asyncio.run_coroutine_threadsafe(
            serve(PoolsScheduler(), TOKEN, "127.0.0.1", 0, settings=lambda: SETTINGS, spares=spares),  # type: ignore[arg-type]
            self.loop).result(30)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def served() -> Iterator[ServedPools]:
    s = ServedPools()
    yield s
    s.close()


@pytest.fixture
def api(served: ServedPools, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FABRIC_API_TOKEN", TOKEN)
    monkeypatch.delenv("FABRIC_API", raising=False)
    return f"127.0.0.1:{served.port}"


def _stable(v: dict[str, Any]) -> dict[str, Any]:
    """The view without the spare provisions' ages (the server reads its own clock)."""
    return {**v, "spare_provisions": [{k: x for k, x in p.items() if k != "age_s"} for p in v["spare_provisions"]]}


def test_list_pools_answers_the_view_the_ray_path_builds(served: ServedPools) -> None:
    from fabric.api.client import ApiClient, ApiToken

    with ApiClient(f"127.0.0.1:{served.port}", ApiToken(TOKEN, "the token file /tmp/t"), timeout_s=10) as client:
        got = client.pools()
    assert _stable(got) == _stable(view())
    assert got["pools"][0]["spares"]["warm_for"] == ["encoder", "relay"] and got["spare_provisions"][0]["phase"] == "started"


def test_pools_and_status_over_the_api_print_the_pools_text(api: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pools", "--api", api]) == 0
    pools_out = capsys.readouterr().out
    expected = format_pools(view())
    lines = pools_out.rstrip("\n").splitlines()
    assert lines[:len(expected.splitlines()) - 3] == expected.splitlines()[:-3]  # all but the spare provisions' aging row
    assert "hot spares: 1/2 live, 1 pending, warm for encoder, relay (backing off)" in pools_out
    assert "held 42s (failed)" in pools_out and "spare provisions in flight" in pools_out
    assert any(line.split()[:2] == ["p2", "started"] for line in lines)
    assert main(["pools", "--api", api, "--json"]) == 0
    assert _stable(json.loads(capsys.readouterr().out)) == _stable(json.loads(json.dumps(view(), default=str)))
    assert main(["status", "--api", api]) == 0
    status_out = capsys.readouterr().out
    table, _, pools_part = status_out.partition("\n\npool default\n")
    assert table.splitlines()[0].split()[:2] == ["NAME", "TIER"] and "alpha" in table
    assert ("pool default\n" + pools_part).splitlines()[:len(expected.splitlines()) - 3] == expected.splitlines()[:-3]


def test_status_over_an_api_without_pools_prints_the_node_table_alone(monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from test_api_client import Served

    s = Served()  # its scheduler has no provisions(): ListPools fails, the table stays
    try:
        monkeypatch.setenv("FABRIC_API_TOKEN", TOKEN)
        monkeypatch.delenv("FABRIC_API", raising=False)
        assert main(["status", "--api", f"127.0.0.1:{s.port}"]) == 0
        out = capsys.readouterr().out
        assert "alpha" in out and "pool " not in out
        assert main(["pools", "--api", f"127.0.0.1:{s.port}"]) == 1  # asked for the pools alone: said, exit 1
        assert "fabric pools:" in capsys.readouterr().err
    finally:
        s.close()


def test_pools_takes_api_and_token_file_as_the_other_api_commands_do() -> None:
    from fabric.cli import build_parser
    from fabric.cli.common import API_HELP

    args = build_parser().parse_args(["pools", "--api", "127.0.0.1:1", "--token-file", "t", "--json"])
    assert (args.api, args.token_file, args.json) == ("127.0.0.1:1", "t", True)
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    api = next(a for a in sub.choices["pools"]._actions if "--api" in a.option_strings)
    assert (api.metavar, api.help) == ("HOST:PORT", API_HELP)

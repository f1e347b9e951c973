"""The read-only JSON view ``GET /api/capabilities/nodes`` (fabric/api/http_view.py): the
registry shape, the bearer token, nothing else served, a failing record source answered, not fatal."""

from __future__ import annotations

import asyncio
import math

import pytest
from aiohttp.test_utils import TestClient, TestServer

from fabric.api.http_view import NODES_PATH, bearer_ok, iso_utc, make_app, node_entry, nodes_document
from fabric.core.errors import MessageError
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import NodeRecord
from fabric.core.placement.synth import node_capabilities

TOKEN = "s3cret-token"
SEED_KEYS = {"node_id", "hardware", "tier", "limitations", "last_seen", "status"}


def record(node_id: str, kind: str = "cuda", **kw) -> NodeRecord:
    return NodeRecord(node_id=node_id, name=f"{node_id}.tail-abc123.ts.net", capabilities=node_capabilities(kind, 8, 16384), **kw)


class Source:
    """An async record source that counts its calls (a refused request must not read the fleet)."""

    def __init__(self, records=(), fail: Exception | None = None, delay_s: float = 0.0) -> None:
        self.records, self.fail, self.delay_s, self.calls = list(records), fail, delay_s, 0

    async def __call__(self):
        self.calls += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail is not None:
            raise self.fail
        return self.records


def serve(source, scenario, **kw):
    """Run ``scenario(client)`` against the app on a loopback test server."""
    async def main():
        async with TestClient(TestServer(make_app(source, TOKEN, **kw), host="127.0.0.1")) as client:
            return await scenario(client)
    return asyncio.run(main())


AUTH = {"Authorization": f"Bearer {TOKEN}"}


# -- the mapping -------------------------------------------------------------------------------------------
def test_entry_has_seed_002_shape():
    e = node_entry(record("n1", last_seen=1780286400.0, status=NodeStatus.DRAINING, cordoned=True))
    assert SEED_KEYS <= set(e)
    assert e["last_seen"] == "2026-06-01T04:00:00Z"
    assert e["status"] == "draining" and e["cordoned"] is True
    assert e["tier"] == "gpu_cuda"
    hw = e["hardware"]
    assert hw["memory_mib"] == 16384 and hw["cpu_logical"] == 8 and hw["arch"] == "x86_64"
    assert [g["tier"] for g in hw["gpus"]] == ["gpu_cuda"]
    assert "h264_nvenc" in hw["encoders"] and "h264_nvenc" in hw["ffmpeg"]
    assert e["limitations"]["max_concurrent_tasks"] == 8
    assert e["k3s_hostname"] == "n1"


def test_entry_reads_records_and_their_dict_form_alike():
    rec = record("n1", last_seen=1780286400.5, jobs=frozenset({"b", "a"}))
    assert node_entry(rec) == node_entry(rec.to_dict())
    assert node_entry(rec)["jobs"] == ["a", "b"]


def test_entry_per_gpu_tier_for_vaapi_and_cpu_nodes():
    assert [g["tier"] for g in node_entry(record("a", "apu"))["hardware"]["gpus"]] == ["gpu_apu"]
    assert node_entry(record("c", "cpu"))["tier"] == "cpu_ffmpeg"


def test_demoted_tier_is_the_records_not_the_hardwares():
    assert node_entry(record("n1", tier="cpu_ffmpeg"))["tier"] == "cpu_ffmpeg"


@pytest.mark.parametrize("bad", [None, math.nan, math.inf, True, "yesterday", 1e300])
def test_iso_utc_unreadable_is_none(bad):
    assert iso_utc(bad) is None


def test_not_a_record_is_a_typed_error():
    with pytest.raises(MessageError) as ei:
        node_entry(42)
    assert ei.value.field == "nodes"


def test_document_orders_by_node_id_and_counts():
    doc = nodes_document([record("b"), record("a")])
    assert [e["node_id"] for e in doc["nodes"]] == ["a", "b"] and doc["count"] == 2


@pytest.mark.parametrize("header,ok", [(f"Bearer {TOKEN}", True), (f"bearer {TOKEN}", True), (None, False), ("", False),
                                       (f"Basic {TOKEN}", False), ("Bearer ", False), (f"Bearer {TOKEN}x", False),
                                       (f"Bearer {TOKEN[:-1]}", False), (TOKEN, False), ("Bearer \udcff", False)])
def test_bearer_ok(header, ok):
    assert bearer_ok(header, TOKEN) is ok


@pytest.mark.parametrize("token", ["", "   ", None, 5])
def test_empty_token_refused(token):
    with pytest.raises(MessageError) as ei:
        make_app(Source(), token)
    assert ei.value.field == "token"


def test_bad_source_and_timeout_refused():
    with pytest.raises(MessageError) as ei:
        make_app([], TOKEN)
    assert ei.value.field == "nodes"
    with pytest.raises(MessageError) as ei:
        make_app(Source(), TOKEN, timeout_s=0)
    assert ei.value.field == "timeout_s"


# -- the server --------------------------------------------------------------------------------------------
def test_get_serves_the_nodes():
    src = Source([record("n2"), record("n1", last_seen=1780286400.0)])

    async def scenario(c):
        r = await c.get(NODES_PATH, headers=AUTH)
        return r.status, r.content_type, await r.json()

    status, ctype, body = serve(src, scenario)
    assert status == 200 and ctype == "application/json"
    assert body["count"] == 2 and len(body["nodes"]) == 2  # as jq '.nodes | length' counts them
    assert [n["node_id"] for n in body["nodes"]] == ["n1", "n2"]
    assert SEED_KEYS <= set(body["nodes"][0]) and body["nodes"][0]["last_seen"] == "2026-06-01T04:00:00Z"
    assert src.calls == 1


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                                     {"Authorization": TOKEN}, {"X-Token": TOKEN}])
def test_missing_or_wrong_token_is_401_and_reads_nothing(headers):
    src = Source([record("n1")])

    async def scenario(c):
        out = []
        for path in (NODES_PATH, "/", "/api/capabilities/nodes/n1", "/metrics"):
            r = await c.get(path, headers=headers)
            out.append((r.status, r.headers.get("WWW-Authenticate"), (await r.json())["error"]))
        return out

    for status, challenge, error in serve(src, scenario):
        assert status == 401 and challenge and challenge.startswith("Bearer") and "unauthenticated" in error
    assert src.calls == 0


def test_nothing_else_is_served():
    src = Source([record("n1")])

    async def scenario(c):
        out = {}
        for path in ("/", "/api", "/api/capabilities", NODES_PATH + "/n1", "/api/capabilities/nodes.json", "/../etc/passwd"):
            out[path] = (await c.get(path, headers=AUTH)).status
        return out

    assert set(serve(src, scenario).values()) == {404}
    assert src.calls == 0


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
def test_read_only_other_methods_405(method):
    src = Source([record("n1")])

    async def scenario(c):
        r = await c.request(method, NODES_PATH, headers=AUTH, data=b'{"node_id": "x"}')
        return r.status, r.headers.get("Allow")

    status, allow = serve(src, scenario)
    assert status == 405 and allow == "GET"
    assert src.calls == 0


def test_failing_source_is_503_and_the_view_stays_up():
    src = Source([record("n1")], fail=RuntimeError("scheduler gone"))

    async def scenario(c):
        first = await c.get(NODES_PATH, headers=AUTH)
        body = await first.json()
        src.fail = None
        second = await c.get(NODES_PATH, headers=AUTH)
        return first.status, body, second.status, (await second.json())["count"]

    s1, body, s2, count = serve(src, scenario)
    assert s1 == 503 and "RuntimeError" in body["error"] and "scheduler gone" not in body["error"]
    assert (s2, count) == (200, 1)


def test_slow_source_is_504():
    src = Source([record("n1")], delay_s=5.0)

    async def scenario(c):
        r = await c.get(NODES_PATH, headers=AUTH)
        return r.status

    assert serve(src, scenario, timeout_s=0.05) == 504


def test_garbage_records_are_503_not_a_crash():
    src = Source([record("n1"), object()])

    async def scenario(c):
        return (await c.get(NODES_PATH, headers=AUTH)).status

    assert serve(src, scenario) == 503


def test_serve_view_binds_and_stops():
    import aiohttp

    from fabric.api.http_view import serve_view

    async def main():
        runner, port = await serve_view(Source([record("n1")]), TOKEN, "127.0.0.1", 0)
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(f"http://127.0.0.1:{port}{NODES_PATH}", headers=AUTH) as r:
                    ok = (r.status, (await r.json())["count"])
                async with s.get(f"http://127.0.0.1:{port}{NODES_PATH}") as r:
                    refused = r.status
        finally:
            await runner.cleanup()
        return port, ok, refused

    port, ok, refused = asyncio.run(main())
    assert port > 0 and ok == (200, 1) and refused == 401


def test_status_filters_the_list_and_an_unknown_status_is_400_naming_it():
    source = Source([record("a", status=NodeStatus.ACTIVE), record("b", status=NodeStatus.OFFLINE),
                     record("c", status=NodeStatus.DEAD)])

    async def scenario(client):
        out = {}
        for query in ("", "?status=offline", "?status=offline,dead", "?status=dead&status=active", "?status=gone"):
            r = await client.get(NODES_PATH + query, headers=AUTH)
            out[query] = (r.status, await r.json())
        return out

    out = serve(source, scenario)
    ids = {q: [e["node_id"] for e in body["nodes"]] for q, (status, body) in out.items() if status == 200}
    assert ids == {"": ["a", "b", "c"], "?status=offline": ["b"], "?status=offline,dead": ["b", "c"],
                   "?status=dead&status=active": ["a", "c"]}
    status, body = out["?status=gone"]
    assert status == 400 and body["error"].startswith("status:") and "gone" in body["error"]

"""``Inspect.WatchEventBatches`` (the event log streamed in batches) over a real grpc.aio server with a
fake scheduler log, its blocking client ``ApiClient.watch_events`` and ``fabric events --follow``
over it: every event arrives once and in order across batches of up to 1,000 events, a stream
resumes after any number, kinds filter, a message is cut by size only, the token is still
required, a failed read ends the stream with its status, and a server without the stream is
polled instead."""

from __future__ import annotations

import asyncio
import io
import json
import math
import threading
from enum import Enum
from typing import Any, Iterator

import grpc
import pytest

from fabric.api import inspect_pb2 as pb
from fabric.api import inspect_pb2_grpc as pb_grpc
from fabric.api.client import ApiClient, ApiToken, ApiTokenError
from fabric.api.server import serve
from fabric.api.watch import EVENT_BATCH, batch_messages
from fabric.api.wire import event_json, event_message, jsonable
from fabric.cli import build_parser
from fabric.cli.events_cmd import events_with
from fabric.core.errors import NodeNotFoundError

TOKEN = "w" * 43
GOOD = (("authorization", f"Bearer {TOKEN}"),)


def ev(seq: int, kind: str = "bench_tick") -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "at": 1000.0 + seq, "stimulus_id": f"s{seq}", "data": {"i": seq, "job_id": f"j{seq}"}}


class Log:
    """The scheduler's log readers over a list that tests append to; each read recorded."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.log = events
        self.reads: list[tuple] = []
        self.fail: BaseException | None = None

    async def events(self, since: int, kinds: list[str] | None, limit: int) -> list[dict[str, Any]]:
        self.reads.append(("events", since, kinds, limit))
        if self.fail is not None:
            raise self.fail
        found = [e for e in self.log if e["seq"] > since and (not kinds or e["kind"] in kinds)]
        return found[limit:] if limit < 0 else found[:limit]

    async def job_events(self, since: int, kinds: list[str] | None) -> list[dict[str, Any]]:
        self.reads.append(("job_events", since, kinds))
        return [e for e in self.log if e["seq"] > since and (not kinds or e["kind"] in kinds)]


async def collect(stub: Any, request: pb.WatchEventsRequest, until: int, on_batch: Any = None) -> list[list[int]]:
    """The seqs of each batch until the one holding ``until``."""
    batches: list[list[int]] = []
    call = stub.WatchEventBatches(request, metadata=GOOD)
    async for batch in call:
        batches.append([e.seq for e in batch.events])
        if on_batch is not None:
            on_batch(batches)
        if until in batches[-1]:
            break
    call.cancel()
    return batches


def test_every_event_arrives_once_in_order_across_batches_and_new_ones_follow() -> None:
    async def go() -> None:
        log = Log([ev(i) for i in range(1, 2501)])
        server, port = await serve(log, TOKEN, "127.0.0.1", 0, events_method="events", poll_s=0.01)  # type: ignore[arg-type]

        def grow(batches: list[list[int]]) -> None:
            if len(batches) == 3:  # caught up with the first 2,500: more are logged
                log.log.extend(ev(i) for i in range(2501, 2611))

        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            batches = await collect(pb_grpc.InspectStub(ch), pb.WatchEventsRequest(since=0), 2610, grow)
        await server.stop(None)
        seqs = [s for b in batches for s in b]
        assert seqs == list(range(1, 2611))
        assert [len(b) for b in batches[:3]] == [EVENT_BATCH, EVENT_BATCH, 500]  # each read's events in one message
        assert len(batches) <= 5  # the 110 new ones came in one or two reads, not one message each
        assert log.reads[:3] == [("events", 0, None, 1000), ("events", 1000, None, 1000), ("events", 2000, None, 1000)]

    asyncio.run(go())


def test_a_stream_resumes_after_a_number_and_filters_kinds() -> None:
    async def go() -> None:
        log = Log([ev(i, "job_state" if i % 3 == 0 else "bench_tick") for i in range(1, 31)])
        server, port = await serve(log, TOKEN, "127.0.0.1", 0, events_method="events", poll_s=0.01)  # type: ignore[arg-type]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.InspectStub(ch)
            resumed = await collect(stub, pb.WatchEventsRequest(since=17), 30)
            only = await collect(stub, pb.WatchEventsRequest(since=4, kinds=["job_state"]), 30)
            call = stub.WatchEventBatches(pb.WatchEventsRequest(since=0), metadata=GOOD)
            first = await call.read()
            call.cancel()
        await server.stop(None)
        assert [s for b in resumed for s in b] == list(range(18, 31))
        assert [s for b in only for s in b] == [6, 9, 12, 15, 18, 21, 24, 27, 30]
        assert ("events", 4, ["job_state"], 1000) in log.reads
        # the fields are those WatchEvents sends for the same event
        assert first.events[0] == event_message(ev(1))
        assert json.loads(first.events[0].data_json) == {"i": 1, "job_id": "j1"}

    asyncio.run(go())


def test_a_job_log_only_scheduler_is_streamed_too() -> None:
    async def go() -> None:
        log = Log([ev(i) for i in range(1, 6)])
        server, port = await serve(log, TOKEN, "127.0.0.1", 0, poll_s=0.01)  # type: ignore[arg-type]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            batches = await collect(pb_grpc.InspectStub(ch), pb.WatchEventsRequest(since=2), 5)
        await server.stop(None)
        assert batches == [[3, 4, 5]] and log.reads[0] == ("job_events", 2, None)

    asyncio.run(go())


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer nope"),), (("authorization", TOKEN),)],
                         ids=["none", "wrong", "no-scheme"])
def test_without_the_token_the_stream_is_unauthenticated_and_reads_nothing(metadata: tuple) -> None:
    async def go() -> None:
        log = Log([ev(1)])
        server, port = await serve(log, TOKEN, "127.0.0.1", 0, events_method="events", poll_s=0.01)  # type: ignore[arg-type]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in pb_grpc.InspectStub(ch).WatchEventBatches(pb.WatchEventsRequest(), metadata=metadata):
                    pass
        await server.stop(None)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert log.reads == []

    asyncio.run(go())


def test_a_failed_read_ends_the_stream_with_its_status() -> None:
    async def go() -> None:
        log = Log([])
        log.fail = NodeNotFoundError("ghost")
        server, port = await serve(log, TOKEN, "127.0.0.1", 0, events_method="events", poll_s=0.01)  # type: ignore[arg-type]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in pb_grpc.InspectStub(ch).WatchEventBatches(pb.WatchEventsRequest(), metadata=GOOD):
                    pass
        await server.stop(None)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND and "ghost" in (caught.value.details() or "")

    asyncio.run(go())


def test_a_message_is_cut_by_size_only_in_order_and_never_empty() -> None:
    events = [ev(i) for i in range(1, 101)]
    events[10]["data"] = {"blob": "x" * 5000}
    whole = list(batch_messages(events))
    assert len(whole) == 1 and [e.seq for e in whole[0].events] == list(range(1, 101))
    cut = list(batch_messages(events, max_bytes=2000))
    assert len(cut) > 3 and all(b.events for b in cut)
    assert [e.seq for b in cut for e in b.events] == list(range(1, 101))
    assert any(len(b.events) == 1 and b.events[0].seq == 11 for b in cut) or cut[0].events[-1].seq == 11
    assert list(batch_messages([])) == []


class Color(Enum):
    RED = "red"


@pytest.mark.parametrize("data", [
    {"i": 5, "job_id": "j", "ok": True, "none": None, "x": 1.5}, {"b": 1, "a": 2}, {}, {"nested": {"b": 1, "a": [1, 2]}},
    {"inf": math.inf}, {"c": Color.RED}, {1: "int key"}, {"t": (1, 2)}, None, "text",
])
def test_event_json_is_the_text_jsonable_gives(data: Any) -> None:
    assert event_json(data) == jsonable(data)


# -- the blocking client and the CLI --------------------------------------------------------------------------
class Served:
    """``serve`` (or ``handlers``: a bare server of those only) on a loop in a thread of its own."""

    def __init__(self, log: Log, handlers: list | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server, self.port = asyncio.run_coroutine_threadsafe(self._start(log, handlers), self.loop).result(30)

    async def _start(self, log: Log, handlers: list | None) -> tuple[grpc.aio.Server, int]:
        if handlers is None:
            return await serve(log, TOKEN, "127.0.0.1", 0, events_method="events", poll_s=0.01)  # type: ignore[arg-type]
        server = grpc.aio.server(handlers=handlers)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    def client(self, token: str = TOKEN) -> ApiClient:
        return ApiClient(f"127.0.0.1:{self.port}", ApiToken(token, "the token file /tmp/t"), timeout_s=10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def served() -> Iterator[tuple[Served, Log]]:
    log = Log([ev(i, "job_state" if i % 2 else "node_joined") for i in range(1, 1201)])
    s = Served(log)
    yield s, log
    s.close()


def test_the_client_follows_the_log_in_lists_of_fabric_events_and_ends_at_its_timeout(served: tuple[Served, Log]) -> None:
    s, log = served
    with s.client() as client:
        got: list[list[dict[str, Any]]] = []
        for events in client.watch_events(100, None, timeout_s=5.0):
            got.append(events)
            if events[-1]["seq"] == 1200:
                log.log.append(ev(1201))
            if events[-1]["seq"] == 1201:
                break
        assert [e["seq"] for b in got for e in b] == list(range(101, 1202))
        assert len(got[0]) == EVENT_BATCH
        assert got[0][0] == {"seq": 101, "kind": "job_state", "at": 1101.0, "stimulus_id": "s101",
                             "data": {"i": 101, "job_id": "j101"}}
        short = list(client.watch_events(1201, ["job_state"], timeout_s=0.5))  # nothing new: the timeout ends it
        assert short == []
        with pytest.raises(ApiTokenError):
            next(iter(s.client("x" * 43).watch_events(0)))


def test_the_client_polls_a_server_without_the_stream() -> None:
    log = Log([ev(i) for i in range(1, 8)])

    async def list_events(request: pb.ListEventsRequest, context: Any) -> pb.ListEventsReply:
        found = await log.events(int(request.since), list(request.kinds) or None, int(request.limit))
        return pb.ListEventsReply(events=[event_message(e) for e in found])

    inspect_only = grpc.method_handlers_generic_handler("fabric.operator.v1.Inspect", {
        "ListEvents": grpc.unary_unary_rpc_method_handler(list_events, request_deserializer=pb.ListEventsRequest.FromString,
                                                          response_serializer=pb.ListEventsReply.SerializeToString)})
    s = Served(log, [inspect_only])
    try:
        with s.client() as client:
            got = []
            for events in client.watch_events(3, None, timeout_s=10.0):
                got.append([e["seq"] for e in events])
                if got[-1][-1] == 7:
                    log.log.append(ev(8))
                if got[-1][-1] == 8:
                    break
    finally:
        s.close()
    assert got == [[4, 5, 6, 7], [8]]
    assert log.reads[:2] == [("events", 3, None, 1000), ("events", 7, None, 1000)]


def test_fabric_events_follow_over_the_api_prints_the_stream_and_reopens_it_after_a_failure(
        served: tuple[Served, Log]) -> None:
    s, log = served
    clock = [0.0]
    with s.client() as client:
        real = client.watch_events
        opened: list[int] = []

        def watch(since: int, kinds: list[str] | None, timeout_s: float | None) -> Iterator[list[dict[str, Any]]]:
            opened.append(since)
            if len(opened) == 1:  # the first stream breaks after one batch
                for events in real(since, kinds, 5.0):
                    yield events
                    raise RuntimeError("stream reset")
            log.log.extend([ev(1201, "job_state"), ev(1202, "node_joined"), ev(1203, "job_state")])
            for events in real(since, kinds, 5.0):
                yield events
                if events[-1]["seq"] >= 1203:
                    clock[0] = 100.0  # --for has run out: the command ends
                    return

        client.watch_events = watch  # type: ignore[method-assign]
        args = build_parser().parse_args(["events", "--since", "1100", "--limit", "10", "--kind", "job_state", "--follow",
                                          "--for", "50", "--json"])
        out, err = io.StringIO(), io.StringIO()
        code = events_with(client, args, out=out, err=err, sleep=lambda _s: None, clock=lambda: clock[0])
    seqs = [json.loads(line)["seq"] for line in out.getvalue().splitlines()]
    assert code == 0
    assert seqs == list(range(1101, 1204, 2))  # the first page, then the stream: each once, in order
    assert opened == [1119, 1199]  # reopened after the last one printed
    assert err.getvalue().count("stream reset") == 1

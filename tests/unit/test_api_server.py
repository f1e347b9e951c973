"""The operator API's servicer over a real grpc.aio server with a fake scheduler (issue 17): every RPC
reaches the scheduler method it stands for with the arguments it should, every fabric error becomes
its status code, and a call without the right bearer token is refused before anything is called."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from fabric.api import operator_pb2 as pb
from fabric.api import operator_pb2_grpc as pb_grpc
from fabric.api.server import OperatorServicer, bearer_ok, serve, status_for
from fabric.core.errors import (
    CapacityError, InvalidSpecError, JobNotFoundError, MessageError, MigrationError, NodeNotFoundError,
    RequirementError, SettingsError, SettingsProblem, TransitionError,
)
from fabric.core.jobs.bundles import BundleStatus
from fabric.core.placement import Requirement

TOKEN = "t" * 43
GOOD = (("authorization", f"Bearer {TOKEN}"),)


@dataclass
class Rec:
    node_id: str
    name: str
    status: str = "active"
    tier: str = "edge"
    pool: str = "default"
    cordoned: bool = False
    running: int = 0
    last_seen: float | None = 12.5
    jobs: frozenset = frozenset()


@dataclass
class Drain:
    node_id: str
    phase: str = "draining"


@dataclass
class Adm:
    kind: str = "ok"
    errors: tuple = ()


@dataclass
class FakeScheduler:
    """Records each call; answers from ``answers`` (an exception is raised)."""

    answers: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)

    async def __call__(self, method: str, *args: Any) -> Any:
        self.calls.append((method, *args))
        if method == "job_events":
            since = args[0]
            kinds = args[1]
            return [e for e in self.events if e["seq"] > since and (not kinds or e["kind"] in kinds)]
        answer = self.answers.get(method)
        if isinstance(answer, BaseException):
            raise answer
        return answer() if callable(answer) else answer


class ByName:
    """The servicer's ``AsyncSchedulerApi`` over an async ``fake(method, *args)`` (a ``FakeScheduler``):
    each method it calls is recorded by its name."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake

    def __getattr__(self, name: str) -> Any:
        async def method(*args: Any) -> Any:
            return await self.fake(name, *args)

        return method


def status(bundle_id: str = "b1") -> BundleStatus:
    return BundleStatus(bundle_id=bundle_id, state="live", replicas=1, jobs={"0/c": "b1-0-c"})


ANSWERS = {
    "metrics": {"placements_attempted": 3}, "nodes": [Rec("n1", "alpha", jobs=frozenset({"j1"})), Rec("n2", "beta")],
    "job_statuses": ["j1", "j2", "j3"], "bundle_statuses": [status()], "cordon": "n1", "uncordon": "n1",
    "drain_jobs": Drain("n1"), "evict": ["j1"], "handle_node_interruption": Drain("n1", "forced"),
    "validate_bundle_admission": Adm(), "create_bundle": status(), "update_bundle": status(),
    "delete_bundle": status(), "bundle_status": status(), "explain": {"text": "n1 wins", "decision": "n1"},
    "explain_event": {"text": "event 9: n1 then", "replay": {"same": True}},
    "migrate_job": "m-1", "abort_migration": {"phase": "aborted"},
}


class Api:
    def __init__(self, fake: FakeScheduler, server: grpc.aio.Server, port: int) -> None:
        self.fake, self.server = fake, server
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.OperatorStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()
        await self.server.stop(None)


async def api(answers: dict | None = None) -> Api:
    fake = FakeScheduler(dict(ANSWERS if answers is None else answers))
    server, port = await serve(ByName(fake), TOKEN, "127.0.0.1", 0, poll_s=0.01)
    return Api(fake, server, port)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def bundle_request(validate_only: bool = False, cls: str = "fabric.testing.counter:CounterJob") -> pb.BundleWriteRequest:
    job = pb.BundleJobSpec(name="c", cls=cls, args_json='["/tmp/out"]', kwargs_json='{"period_ms": 5}',
                           requirement_json='{"num_cpus": 0.5}')
    return pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id="b1", jobs=[job]), validate_only=validate_only)


# -- every RPC ----------------------------------------------------------------------------------------------
def test_every_unary_rpc_calls_its_scheduler_method_with_its_arguments() -> None:
    async def go() -> None:
        a = await api()
        s = a.stub
        st = await s.Status(pb.StatusRequest(), metadata=GOOD)
        assert (st.node_count, st.job_count, st.bundle_count, st.api) == (2, 3, 1, "fabric.operator.v1")
        assert json.loads(st.metrics_json) == {"placements_attempted": 3}
        nodes = (await s.ListNodes(pb.ListNodesRequest(), metadata=GOOD)).nodes
        assert [(n.node_id, n.name, n.status, n.tier, n.jobs, n.last_seen) for n in nodes] == [
            ("n1", "alpha", "active", "edge", ["j1"], 12.5), ("n2", "beta", "active", "edge", [], 12.5)]
        assert json.loads(nodes[0].record_json)["name"] == "alpha"
        assert (await s.Cordon(pb.NodeRequest(node="alpha"), metadata=GOOD)).node_id == "n1"
        assert (await s.Uncordon(pb.NodeRequest(node="alpha"), metadata=GOOD)).node_id == "n1"
        d = await s.Drain(pb.DrainRequest(node="alpha", timeout_s=0.0, force=True, strategy="handover"), metadata=GOOD)
        assert d.node_id == "n1" and json.loads(d.state_json)["phase"] == "draining"
        await s.Drain(pb.DrainRequest(node="beta"), metadata=GOOD)
        assert list((await s.Evict(pb.NodeRequest(node="alpha"), metadata=GOOD)).job_ids) == ["j1"]
        await s.NotifyInterruption(pb.NotifyInterruptionRequest(node="alpha", deadline_epoch=99.0), metadata=GOOD)
        await s.NotifyInterruption(pb.NotifyInterruptionRequest(node="alpha", kind="rebalance-recommendation"),
                                   metadata=GOOD)
        created = await s.CreateBundle(bundle_request(), metadata=GOOD)
        assert created.status.bundle_id == "b1" and dict(created.status.jobs) == {"0/c": "b1-0-c"}
        await s.UpdateBundle(bundle_request(), metadata=GOOD)
        assert (await s.GetBundle(pb.BundleIdRequest(bundle_id="b1"), metadata=GOOD)).status.state == "live"
        await s.DeleteBundle(pb.BundleIdRequest(bundle_id="b1"), metadata=GOOD)
        assert len((await s.ListBundles(pb.ListBundlesRequest(), metadata=GOOD)).bundles) == 1
        ex = await s.Explain(pb.ExplainRequest(requirement_json='{"num_cpus": 2}', verbose=True), metadata=GOOD)
        assert ex.text == "n1 wins" and json.loads(ex.explain_json)["decision"] == "n1"
        rec = await s.Explain(pb.ExplainRequest(event_seq=9, replay=True, settings_now=True), metadata=GOOD)
        assert rec.text == "event 9: n1 then" and json.loads(rec.explain_json)["replay"] == {"same": True}
        m = await s.Migrate(pb.MigrateRequest(job_id="j1", strategy="overlap", target_node="n2"), metadata=GOOD)
        assert m.migration_id == "m-1"
        await s.Migrate(pb.MigrateRequest(job_id="j1", override_reservation=True), metadata=GOOD)
        ab = await s.AbortMigration(pb.AbortMigrationRequest(migration_id="m-1", reason="ops"), metadata=GOOD)
        assert ab.migration_id == "m-1" and json.loads(ab.state_json) == {"phase": "aborted"}
        calls = a.fake.calls
        await a.close()
        by = {}
        for c in calls:
            by.setdefault(c[0], []).append(c[1:])
        assert by["cordon"] == [("alpha",)] and by["uncordon"] == [("alpha",)]
        assert by["drain_jobs"] == [("alpha", 0.0, True, "handover"), ("beta", None, False, None)]
        assert by["evict"] == [("alpha",)]
        assert by["handle_node_interruption"] == [("alpha", "spot-interruption", 99.0),
                                                  ("alpha", "rebalance-recommendation", None)]
        assert by["delete_bundle"] == [("b1",)] and by["bundle_status"] == [("b1",)]
        (req, ctx, verbose), = by["explain"]
        assert req == Requirement(num_cpus=2) and ctx is None and verbose is True
        assert by["explain_event"] == [(9, True, True, False)]
        assert by["migrate_job"] == [("j1", "overlap", "n2", False), ("j1", None, None, True)]
        assert by["abort_migration"] == [("m-1", "ops")]
        assert "validate_bundle_admission" not in by
        import pickle

        (blob,), = by["create_bundle"]
        b = pickle.loads(blob)
        from fabric.testing.counter import CounterJob

        assert b.bundle_id == "b1" and b.jobs[0].cls is CounterJob and b.jobs[0].args == ("/tmp/out",)
        assert b.jobs[0].kwargs == {"period_ms": 5} and b.jobs[0].requirement == Requirement(num_cpus=0.5)

    run(go())


def test_validate_only_asks_for_admission_and_stores_nothing() -> None:
    async def go() -> None:
        a = await api({**ANSWERS, "validate_bundle_admission": Adm("no_capacity")})
        for rpc in (a.stub.CreateBundle, a.stub.UpdateBundle):
            reply = await rpc(bundle_request(validate_only=True), metadata=GOOD)
            assert reply.validated_only and reply.admission_kind == "no_capacity" and not reply.HasField("status")
            assert json.loads(reply.admission_json)["kind"] == "no_capacity"
        methods = [c[0] for c in a.fake.calls]
        await a.close()
        assert methods == ["validate_bundle_admission"] * 2

    run(go())


def test_watch_events_streams_the_log_from_since_in_order_and_filters_kinds() -> None:
    async def go() -> None:
        a = await api()
        a.fake.events = [{"seq": i, "kind": "job_state" if i % 2 else "bundle_updated", "at": float(i),
                          "data": {"job_id": f"j{i}"}, "stimulus_id": f"s{i}"} for i in range(1, 7)]
        got = []
        call = a.stub.WatchEvents(pb.WatchEventsRequest(since=2), metadata=GOOD)
        async for ev in call:
            got.append((ev.seq, ev.kind, json.loads(ev.data_json)["job_id"], ev.stimulus_id))
            if ev.seq == 6:
                a.fake.events.append({"seq": 7, "kind": "job_state", "at": 7.0, "data": {"job_id": "j7"}})
            if ev.seq == 7:
                break
        call.cancel()
        only = []
        call = a.stub.WatchEvents(pb.WatchEventsRequest(since=0, kinds=["job_state"]), metadata=GOOD)
        async for ev in call:
            only.append(ev.seq)
            if ev.seq == 7:
                break
        call.cancel()
        await a.close()
        assert got == [(3, "job_state", "j3", "s3"), (4, "bundle_updated", "j4", "s4"), (5, "job_state", "j5", "s5"),
                       (6, "bundle_updated", "j6", "s6"), (7, "job_state", "j7", "")]
        assert only == [1, 3, 5, 7]

    run(go())


def test_watch_events_uses_the_events_reader_with_a_limit_when_told() -> None:
    async def go() -> None:
        fake = FakeScheduler({"events": [{"seq": 1, "kind": "node_joined", "at": 1.0, "data": {}}]})
        server, port = await serve(ByName(fake), TOKEN, "127.0.0.1", 0, events_method="events", poll_s=0.01)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            call = pb_grpc.OperatorStub(ch).WatchEvents(pb.WatchEventsRequest(kinds=["node_joined"]), metadata=GOOD)
            async for ev in call:
                assert ev.kind == "node_joined"
                break
            call.cancel()
        await server.stop(None)
        assert fake.calls[0] == ("events", 0, ["node_joined"], 1000)

    run(go())


# -- errors -------------------------------------------------------------------------------------------------
ERRORS = [
    (RequirementError("num_cpus", "must be positive", -1), grpc.StatusCode.INVALID_ARGUMENT, "num_cpus"),
    (MessageError("node", "must be an id", 5), grpc.StatusCode.INVALID_ARGUMENT, "node"),
    (InvalidSpecError("refused", field="jobs.0.cls"), grpc.StatusCode.INVALID_ARGUMENT, "jobs.0.cls"),
    (SettingsError([SettingsProblem("bad", "api.port", "too big")]), grpc.StatusCode.INVALID_ARGUMENT, "api.port"),
    (NodeNotFoundError("ghost"), grpc.StatusCode.NOT_FOUND, "ghost"),
    (JobNotFoundError("no bundle 'x'", job_id="x"), grpc.StatusCode.NOT_FOUND, "no bundle"),
    (MigrationError("already moving", job_id="j1"), grpc.StatusCode.FAILED_PRECONDITION, "already moving"),
    (TransitionError("job", "running", "pending"), grpc.StatusCode.FAILED_PRECONDITION, "cannot go from"),
    (CapacityError("no node fits"), grpc.StatusCode.RESOURCE_EXHAUSTED, "no node fits"),
    (ZeroDivisionError("boom"), grpc.StatusCode.INTERNAL, "ZeroDivisionError: boom"),
]


@pytest.mark.parametrize("error,code,text", ERRORS, ids=[type(e[0]).__name__ for e in ERRORS])
def test_each_fabric_error_becomes_its_status_code_naming_the_field(error: Exception, code: Any, text: str) -> None:
    async def go() -> None:
        a = await api({m: error for m in ANSWERS})
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await a.stub.Cordon(pb.NodeRequest(node="n1"), metadata=GOOD)
        with pytest.raises(grpc.aio.AioRpcError) as streamed:
            a.fake.events = None  # the log reader fails too: the stream ends with the same mapping
            async for _ in a.stub.WatchEvents(pb.WatchEventsRequest(), metadata=GOOD):
                pass
        # the server survives: a call that succeeds still works after the error
        a.fake.answers["uncordon"] = "n1"
        ok = await a.stub.Uncordon(pb.NodeRequest(node="n1"), metadata=GOOD)
        await a.close()
        assert caught.value.code() == code and text in caught.value.details()
        assert streamed.value.code() == grpc.StatusCode.INTERNAL
        assert ok.node_id == "n1"

    run(go())


def test_a_ray_wrapped_error_maps_by_its_cause() -> None:
    class RayTaskError(Exception):
        def __init__(self, cause: Exception) -> None:
            super().__init__("Traceback ...")
            self.cause = cause

    code, text = status_for(RayTaskError(NodeNotFoundError("ghost")))
    assert code == grpc.StatusCode.NOT_FOUND and text == "no node known as 'ghost'"


BAD_REQUESTS = [
    ("Cordon", pb.NodeRequest(), "node"),
    ("Drain", pb.DrainRequest(), "node"),
    ("Explain", pb.ExplainRequest(requirement_json="{not json"), "requirement"),
    ("Explain", pb.ExplainRequest(requirement_json='{"num_gpus_x": 1}'), "requirement.num_gpus_x"),
    ("Explain", pb.ExplainRequest(requirement_json='{"num_cpus": -3}'), "requirement.num_cpus"),
    ("Explain", pb.ExplainRequest(requirement_json="[1]"), "requirement"),
    ("CreateBundle", pb.BundleWriteRequest(), "bundle"),
    ("CreateBundle", bundle_request(cls="os:system"), "bundle.jobs.0.cls"),
    ("CreateBundle", bundle_request(cls="no.such.module:Job"), "bundle.jobs.0.cls"),
    ("CreateBundle", bundle_request(cls="not a path"), "bundle.jobs.0.cls"),
    ("UpdateBundle", pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id="b1")), "bundle.jobs"),
    ("CreateBundle", pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id="b1", jobs=[
        pb.BundleJobSpec(name="c", cls="fabric.testing.counter:CounterJob", args_json='{"a": 1}')])),
     "bundle.jobs.0.args_json"),
    ("CreateBundle", pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id="b1", options_json='{"pool": 3}', jobs=[
        pb.BundleJobSpec(name="c", cls="fabric.testing.counter:CounterJob")])), "bundle.pool"),
]


@pytest.mark.parametrize("method,request_,field", BAD_REQUESTS, ids=[f"{m}-{f}" for m, _, f in BAD_REQUESTS])
def test_a_malformed_request_is_invalid_argument_naming_the_field_and_reaches_no_scheduler(
        method: str, request_: Any, field: str) -> None:
    async def go() -> None:
        a = await api()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await getattr(a.stub, method)(request_, metadata=GOOD)
        calls = a.fake.calls
        await a.close()
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith(field), caught.value.details()
        assert calls == []

    run(go())


# -- authentication -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("metadata", [
    (), (("authorization", "Bearer wrong"),), (("authorization", TOKEN),), (("authorization", f"Basic {TOKEN}"),),
    (("x-token", TOKEN),), (("authorization", f"Bearer {TOKEN}x"),),
], ids=["none", "wrong", "no-scheme", "basic", "other-header", "longer"])
def test_a_missing_or_wrong_token_is_unauthenticated_and_nothing_is_called(metadata: tuple) -> None:
    async def go() -> None:
        a = await api()
        codes = []
        for rpc, req in ((a.stub.Status, pb.StatusRequest()), (a.stub.Cordon, pb.NodeRequest(node="n1")),
                         (a.stub.Drain, pb.DrainRequest(node="n1")), (a.stub.Evict, pb.NodeRequest(node="n1")),
                         (a.stub.CreateBundle, bundle_request()),
                         (a.stub.DeleteBundle, pb.BundleIdRequest(bundle_id="b1"))):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await rpc(req, metadata=metadata)
            codes.append(caught.value.code())
        with pytest.raises(grpc.aio.AioRpcError) as streamed:
            async for _ in a.stub.WatchEvents(pb.WatchEventsRequest(), metadata=metadata):
                pass
        # a raw, unparseable body is refused the same way (it is never parsed)
        raw = a.channel.unary_unary("/fabric.operator.v1.Operator/Cordon")
        with pytest.raises(grpc.aio.AioRpcError) as junk:
            await raw(b"\xff\xff\xff", metadata=metadata)
        calls = a.fake.calls
        await a.close()
        assert codes == [grpc.StatusCode.UNAUTHENTICATED] * 6
        assert streamed.value.code() == junk.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert calls == []

    run(go())


def test_bearer_ok_compares_the_whole_token() -> None:
    assert bearer_ok((("authorization", f"Bearer {TOKEN}"),), TOKEN)
    assert bearer_ok((("Authorization", f"bearer  {TOKEN} "),), TOKEN)
    assert not bearer_ok((("authorization", f"Bearer {TOKEN[:-1]}"),), TOKEN)
    assert not bearer_ok((("authorization", "Bearer "),), TOKEN)
    assert not bearer_ok(None, TOKEN)


def test_a_servicer_without_the_interceptor_is_never_what_serve_builds() -> None:
    async def go() -> None:
        fake = FakeScheduler(dict(ANSWERS))
        server, port = await serve(ByName(fake), TOKEN, "127.0.0.1", 0)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await pb_grpc.OperatorStub(ch).ListNodes(pb.ListNodesRequest())
        await server.stop(None)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED and fake.calls == []
        with pytest.raises(ValueError):
            await serve(ByName(fake), "short", "127.0.0.1", 0)
        assert isinstance(OperatorServicer(ByName(fake)), pb_grpc.OperatorServicer)

    run(go())


def test_a_body_that_is_not_its_message_is_invalid_argument_and_reaches_no_scheduler() -> None:
    async def go() -> None:
        a = await api()
        codes = []
        for path in ("Cordon", "CreateBundle", "Explain"):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await a.channel.unary_unary(f"/fabric.operator.v1.Operator/{path}")(b"\xff\xff\xff", metadata=GOOD)
            codes.append(caught.value.code())
        with pytest.raises(grpc.aio.AioRpcError) as streamed:
            async for _ in a.channel.unary_stream("/fabric.operator.v1.Operator/WatchEvents")(b"\xff\xff", metadata=GOOD):
                pass
        ok = await a.stub.Cordon(pb.NodeRequest(node="n1"), metadata=GOOD)
        calls = a.fake.calls
        await a.close()
        assert codes == [grpc.StatusCode.INVALID_ARGUMENT] * 3
        assert streamed.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a valid message" in streamed.value.details()
        assert ok.node_id == "n1" and calls == [("cordon", "n1")]

    run(go())


def test_list_nodes_lists_the_given_source_filtered_by_status() -> None:
    from fabric.core.lifecycle import NodeStatus
    from fabric.core.placement import NodeRecord
    from fabric.core.placement.synth import node_capabilities

    records = [NodeRecord(node_id=i, name=i, capabilities=node_capabilities("cpu", 4, 4096), status=st)
               for i, st in (("a", NodeStatus.ACTIVE), ("b", NodeStatus.OFFLINE), ("c", NodeStatus.DEAD))]

    async def source() -> list:
        return records

    async def go() -> None:
        fake = FakeScheduler(dict(ANSWERS))
        server, port = await serve(ByName(fake), TOKEN, "127.0.0.1", 0, nodes=source)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.OperatorStub(ch)
            every = await stub.ListNodes(pb.ListNodesRequest(), metadata=GOOD)
            some = await stub.ListNodes(pb.ListNodesRequest(statuses=["offline", "dead"]), metadata=GOOD)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ListNodes(pb.ListNodesRequest(statuses=["gone"]), metadata=GOOD)
        await server.stop(None)
        assert [(n.node_id, n.status) for n in every.nodes] == [("a", "active"), ("b", "offline"), ("c", "dead")]
        assert [n.node_id for n in some.nodes] == ["b", "c"]
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "statuses" in (caught.value.details() or "")
        assert "nodes" not in [c[0] for c in fake.calls]  # the source, not the scheduler's fleet

    run(go())

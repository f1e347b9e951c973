"""The operator API's blocking client (``fabric.api.client``) against a real grpc.aio server (in a
thread of its own) over a fake scheduler: each call answers the type the scheduler answers through
Ray, with the same values; a refused request is a ``FabricError``; a wrong or missing token, or no
server, is one line that says so (naming where the token came from). The ``Inspect`` service's new
reads, health and reflection (both without a token) are checked on the same server."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Iterator

import grpc
import pytest

from fabric.api import inspect_pb2 as pb
from fabric.api import inspect_pb2_grpc as pb_grpc
from fabric.api.client import ApiClient, ApiRefused, ApiToken, ApiTokenError, ApiUnreachable, requirement_json, token_from
from fabric.api.server import serve
from fabric.core.errors import FabricError, JobNotFoundError, NodeNotFoundError, TransitionError
from fabric.core.jobs.book import Binding, JobStatus
from fabric.core.jobs.drains import DrainJob, DrainState, JobDrainStatus, NodeDrainPhase, NodeInterruptionState
from fabric.core.jobs.migration import MigrationPhase, MigrationState, MigrationStrategy
from fabric.core.jobs.states import JobState
from fabric.core.placement import NodeRecord, Requirement
from fabric.core.placement.synth import node_capabilities
from fabric.core.settings import FabricSettings
from fabric.core.tiers import ComputeTier

TOKEN = "k" * 43
CAPS = node_capabilities("cpu", 8, 16384, gpus=0)
NODES = [NodeRecord(node_id="n1" * 8, name="alpha", capabilities=CAPS, cordoned=True, running=2, last_seen=100.5,
                    jobs=frozenset({"j1"}), pool="edge", pool_tier="fixed", utilization=0.25, tier=ComputeTier.CPU_FFMPEG),
         NodeRecord(node_id="n2" * 8, name="beta", capabilities=CAPS, ports=frozenset({"1935/tcp"}), spare=True,
                    ray_labels={"fabric.io/zone": "z1"}, ray_resources={"CPU": 8.0, "fabric.slots": 4.0})]
JOBS = [JobStatus("j1", "enc", JobState.RUNNING, "b1", 1, Binding("n1" * 8, "enc-1", 7), 2, "",
                  ((10.0, "pending", ""), (11.0, "running", "placed"))),
        JobStatus("j2", "idle", JobState.PENDING)]
DRAIN = DrainState("n1" * 8, NodeDrainPhase.WAITING, 50.0, 30.0, False, "overlap",
                   {"j1": DrainJob("j1", JobDrainStatus.MIGRATING, "m-1")}, ray_drain=None)
MIGRATION = MigrationState("m-1", "j1", MigrationStrategy.OVERLAP, MigrationPhase.PREPARING, "n1" * 8, "enc-1", "n2" * 8,
                           None, "", 60.0, 90.0, False, (("placing", 60.0, ""), ("preparing", 61.0, "target placed")))
EVENTS = [{"seq": i, "kind": "job_state" if i % 2 else "node_added", "at": 1000.0 + i, "stimulus_id": f"s{i}",
           "data": {"job_id": "j1", "to": "running"}} for i in range(1, 8)]
SETTINGS = FabricSettings.load({"health": {"offline_after_s": 120}, "drain": {"timeout_s": 45}})


class Scheduler:
    """The scheduler's awaited methods the client's calls reach, with what they were called with."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def metrics(self) -> dict:
        return {"placements_attempted": 3}

    async def nodes(self) -> list[NodeRecord]:
        return list(NODES)

    async def job_statuses(self) -> list[JobStatus]:
        return list(JOBS)

    async def bundle_statuses(self) -> list:
        return []

    async def job_status(self, job_id: str) -> JobStatus:
        for j in JOBS:
            if j.job_id == job_id:
                return j
        raise JobNotFoundError(f"no job {job_id!r}", job_id=job_id)

    async def events(self, since: int, kinds: list[str] | None, limit: int) -> list:
        self.calls.append(("events", since, kinds, limit))
        chosen = [e for e in EVENTS if e["seq"] > since and (not kinds or e["kind"] in kinds)]
        return chosen[limit:] if limit < 0 else chosen[:limit]

    async def job_events(self, since: int, kinds: list[str] | None) -> list:
        return [e for e in EVENTS if e["seq"] > since and (not kinds or e["kind"] in kinds)]

    async def cordon(self, node: str) -> str:
        self.calls.append(("cordon", node))
        if node == "ghost":
            raise NodeNotFoundError(node)
        return "n1" * 8

    async def uncordon(self, node: str) -> str:
        return "n1" * 8

    async def drain_jobs(self, node: str, timeout_s: float | None, force: bool, strategy: str | None) -> DrainState:
        self.calls.append(("drain_jobs", node, timeout_s, force, strategy))
        return DRAIN

    async def drain_status(self, node: str) -> DrainState | None:
        return DRAIN if node == "alpha" else None

    async def evict(self, node: str) -> list[str]:
        return ["j1"]

    async def terminate_node(self, node: str) -> dict:
        self.calls.append(("terminate_node", node))
        if node == "by-hand":
            raise TransitionError("node by-hand", "joined by hand", "terminated", "no provider made it")
        return {"node_id": "n1" * 8, "provider": "local", "instance_id": "local-1", "jobs_stopped": ["j1", "j2"]}

    async def handle_node_interruption(self, node: str, kind: str, deadline: float | None) -> NodeInterruptionState:
        self.calls.append(("interrupt", node, kind, deadline))
        return NodeInterruptionState("n1" * 8, kind, deadline, 55.0, DRAIN)

    async def migrate_job(self, job_id: str, strategy: str | None, target: str | None, override: bool) -> str:
        self.calls.append(("migrate_job", job_id, strategy, target, override))
        return "m-1"

    async def migration(self, migration_id: str) -> MigrationState:
        return MIGRATION

    async def migrations(self) -> list[MigrationState]:
        return [MIGRATION]

    async def explain(self, req: Requirement, ctx: Any, verbose: bool) -> dict:
        self.calls.append(("explain", req, verbose))
        return {"text": "alpha wins", "decision": {"node": "alpha"}, "verdicts": {}, "survivors": []}

    async def explain_event(self, seq: int, replay: bool, settings_now: bool, verbose: bool) -> dict:
        self.calls.append(("explain_event", seq, replay, settings_now, verbose))
        return {"seq": seq, "text": f"event {seq}: alpha then", "replay": {"same": not settings_now}}


class Served:
    """``serve`` on an event loop in a thread; ``port`` it bound, ``sched`` its fake scheduler."""

    def __init__(self, events_method: str = "events") -> None:
        self.sched = Scheduler()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server, self.port = asyncio.run_coroutine_threadsafe(
            serve(self.sched, TOKEN, "127.0.0.1", 0, events_method=events_method,  # type: ignore[arg-type]
                  settings=lambda: SETTINGS), self.loop).result(30)

    def client(self, token: str = TOKEN) -> ApiClient:
        return ApiClient(f"127.0.0.1:{self.port}", ApiToken(token, "the token file /tmp/t"), timeout_s=10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(None), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.close()


def test_nodes_come_back_as_the_records_the_scheduler_holds(served: Served) -> None:
    with served.client() as c:
        got = c.nodes()
    assert [(r.node_id, r.name, r.cordoned, r.running, r.last_seen, r.jobs, r.pool, r.pool_tier, r.utilization, r.tier)
            for r in got] == [(r.node_id, r.name, r.cordoned, r.running, r.last_seen, r.jobs, r.pool, r.pool_tier,
                               r.utilization, r.tier) for r in NODES]
    assert got[1].ports == frozenset({"1935/tcp"}) and got[1].spare and got[0].capabilities == CAPS
    assert got[1].ray_labels == {"fabric.io/zone": "z1"} and got[1].ray_resources == {"CPU": 8.0, "fabric.slots": 4.0}
    assert all(isinstance(r, NodeRecord) for r in got)


def test_jobs_drains_migrations_and_settings_come_back_as_their_types(served: Served) -> None:
    with served.client() as c:
        assert c.jobs() == JOBS and c.job_status("j1") == JOBS[0]
        assert c.drain_status("alpha") == DRAIN and c.drain_status("beta") is None
        assert c.migration("m-1") == MIGRATION and c.migrations() == [MIGRATION]
        assert c.settings_in_force() == SETTINGS
        assert c.metrics() == {"placements_attempted": 3}
        assert c.evict("alpha") == ["j1"]
        notice = c.handle_node_interruption("alpha", "rebalance", 99.0)
    assert isinstance(notice, NodeInterruptionState) and notice.drain == DRAIN and notice.deadline == 99.0


def test_moves_and_explain_reach_the_scheduler_with_their_arguments(served: Served) -> None:
    with served.client() as c:
        assert c.drain("alpha", timeout_s=30.0, force=True, strategy="overlap") == DRAIN
        assert c.migrate_job("j1", strategy="handover", target_node="beta", override_reservation=True) == "m-1"
        assert c.cordon("alpha") == "n1" * 8 and c.uncordon("alpha") == "n1" * 8
        req = Requirement("cpu_ffmpeg", "relay", num_cpus=0.5, capabilities=("arch:x86_64",), pool="edge")
        out = c.explain(req, None, True)
        recorded = c.explain_event(12, True, True)
    assert recorded["text"] == "event 12: alpha then" and recorded["replay"] == {"same": False}
    assert ("explain_event", 12, True, True, False) in served.sched.calls
    assert ("drain_jobs", "alpha", 30.0, True, "overlap") in served.sched.calls
    assert ("migrate_job", "j1", "handover", "beta", True) in served.sched.calls
    sent = next(call for call in served.sched.calls if call[0] == "explain")
    assert sent[1].class_key == req.class_key and sent[2] is True
    assert out["text"] == "alpha wins" and out["decision"] == {"node": "alpha"}


def test_terminate_node_travels_whole_and_a_hand_joined_node_is_a_refusal(served: Served) -> None:
    with served.client() as c:
        ended = c.terminate_node("alpha")
        with pytest.raises(ApiRefused) as refused:
            c.terminate_node("by-hand")
    assert ended == {"node_id": "n1" * 8, "provider": "local", "instance_id": "local-1", "jobs_stopped": ["j1", "j2"]}
    assert ("terminate_node", "alpha") in served.sched.calls
    assert refused.value.code == "FAILED_PRECONDITION" and "joined by hand" in str(refused.value)


def test_events_pages_newest_and_after_a_number(served: Served) -> None:
    with served.client() as c:
        newest = c.events(0, None, -3)
        after = c.events(4, ["job_state"], 10)
    assert [e["seq"] for e in newest] == [5, 6, 7] and newest[0]["data"] == {"job_id": "j1", "to": "running"}
    assert newest[0]["stimulus_id"] == "s5" and newest[0]["at"] == 1005.0
    assert [e["seq"] for e in after] == [5, 7]


def test_a_refused_request_is_a_fabric_error_and_a_bad_token_names_its_source(served: Served) -> None:
    with served.client() as c:
        with pytest.raises(ApiRefused) as refused:
            c.cordon("ghost")
        with pytest.raises(ApiRefused):
            c.job_status("nope")
    assert isinstance(refused.value, FabricError) and refused.value.code == "NOT_FOUND" and "ghost" in str(refused.value)
    cordons = sum(1 for call in served.sched.calls if call[0] == "cordon")
    with served.client("w" * 43) as c, pytest.raises(ApiTokenError) as bad:
        c.cordon("alpha")
    assert "refused the token from the token file /tmp/t" in str(bad.value) and "w" * 43 not in str(bad.value)
    assert sum(1 for call in served.sched.calls if call[0] == "cordon") == cordons  # refused before anything ran


def test_nothing_there_is_unreachable(unused_port: int) -> None:
    with ApiClient(f"127.0.0.1:{unused_port}", ApiToken(TOKEN, "FABRIC_API_TOKEN"), timeout_s=5) as c:
        with pytest.raises(ApiUnreachable) as gone:
            c.nodes()
    assert f"cannot reach the operator API at 127.0.0.1:{unused_port}" in str(gone.value)


def test_health_and_reflection_answer_without_a_token(served: Served) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{served.port}") as ch:
        health = health_pb2_grpc.HealthStub(ch)
        for name in ("", "fabric.operator.v1.Operator", "fabric.operator.v1.Inspect"):
            assert health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status == \
                health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(ch)
        answer = next(iter(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                     timeout=10)))
        listed = {s.name for s in answer.list_services_response.service}
        assert {"fabric.operator.v1.Operator", "fabric.operator.v1.Inspect", "grpc.health.v1.Health"} <= listed
        with pytest.raises(grpc.RpcError) as no_token:
            pb_grpc.InspectStub(ch).ListJobs(pb.ListJobsRequest(), timeout=10)
    assert no_token.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_job_log_only_scheduler_pages_its_log_on_the_server() -> None:
    s = Served(events_method="job_events")
    try:
        with s.client() as c:
            assert [e["seq"] for e in c.events(0, None, -2)] == [6, 7]
            assert [e["seq"] for e in c.events(2, None, 2)] == [3, 4]
    finally:
        s.close()


def test_the_token_comes_from_the_file_then_the_environment(tmp_path: Any) -> None:
    f = tmp_path / "tok"
    f.write_text(f"  {TOKEN}\n")
    assert token_from(str(f), {"FABRIC_API_TOKEN": "other"}) == ApiToken(TOKEN, f"the token file {f}")
    assert token_from(None, {"FABRIC_API_TOKEN": " envtok "}) == ApiToken("envtok", "FABRIC_API_TOKEN")
    with pytest.raises(ApiTokenError, match="no API token: pass --token-file FILE or set FABRIC_API_TOKEN"):
        token_from(None, {})
    with pytest.raises(ApiTokenError, match="cannot read the token file"):
        token_from(str(tmp_path / "missing"), {})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ApiTokenError, match="is empty"):
        token_from(str(tmp_path / "empty"), {})


def test_a_requirement_travels_whole() -> None:
    import json

    from fabric.api.wire import requirement_from_json

    for req in (Requirement("gpu_cuda", fallback=False, num_gpus=0.5, gpu_model="L4", ports=("1935/tcp",)),
                Requirement("cpu_ffmpeg", "relay", num_cpus=2, memory_mib=512, prefer="lowest", exclusive=True)):
        back = requirement_from_json(requirement_json(req))
        assert back.class_key == req.class_key and json.loads(requirement_json(back)) == json.loads(requirement_json(req))


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    time.sleep(0)
    return int(port)

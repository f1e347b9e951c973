"""A blocking client of the operator API: what ``fabric --api HOST:PORT ...`` talks to. No Ray.

``ApiClient(address, token)`` implements the part of ``SchedulerApi`` (``fabric.core.scheduler_api``)
the commands call (``nodes``, ``job_statuses``, ``job_status``, ``events``, ``cordon``, ``uncordon``,
``drain_jobs``, ``drain_status``, ``evict``, ``terminate_node``, ``handle_node_interruption``, ``migrate_job``,
``migration``, ``migrations``, ``explain``, ``metrics``) over gRPC, and ``watch_events``, the
log as it grows (the ``WatchEventBatches`` stream; ``fabric events --follow`` reads it), answering the same types the scheduler answers through Ray (read back by
``fabric.api.readers``), plus the few ``FabricHandle`` names the commands use (``jobs``,
``records``, ``drain``, ``settings_in_force``) and ``pools`` (``fabric pools``' view), so a command renders either transport's answer
with the same code.

Errors: a refused request (bad input, an unknown node or job, a refused move) raises
``ApiRefused``, a ``FabricError`` (the CLI exits 2, as for the fabric's own errors through Ray);
no server there raises ``ApiUnreachable``, a missing or refused token ``ApiTokenError``, anything
else ``ApiError`` (each one line that says what and, for the token, which one; the CLI exits 1).
``token_from`` finds the token: ``--token-file FILE``, else ``FABRIC_API_TOKEN``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, TypeVar, cast

import grpc

from fabric.api import inspect_pb2 as pb  # the Inspect messages and, imported publicly, the Operator ones
from fabric.api import inspect_pb2_grpc, operator_pb2_grpc
from fabric.api import readers
from fabric.core.errors import FabricError
from fabric.core.jobs.book import JobStatus
from fabric.core.jobs.drains import DrainState, NodeInterruptionState
from fabric.core.jobs.migration import MigrationState
from fabric.core.placement import NodeRecord, PlacementContext, Requirement
from fabric.core.scheduler_api import TERMINATE_WAIT_S, ExplainAnswer, FabricEvent, NodeTermination
from fabric.core.settings import FabricSettings

__all__ = ["API_ENV", "ApiClient", "ApiError", "ApiRefused", "ApiToken", "ApiTokenError", "ApiUnreachable", "TOKEN_ENV",
           "requirement_json", "token_from"]

API_ENV = "FABRIC_API"
"""The operator API's ``HOST:PORT`` when ``--api`` is not given."""
TOKEN_ENV = "FABRIC_API_TOKEN"
"""The token itself, when ``--token-file`` is not given."""
CALL_TIMEOUT_S = 60.0
"""How long one call waits for its answer (a drain: its own timeout on top)."""
POLL_S = 0.2
"""How often ``watch_events`` reads the log of a server without ``WatchEventBatches``."""
REFUSED = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.OUT_OF_RANGE)
T = TypeVar("T")


class ApiError(Exception):
    """The API could not answer (its words, on one line)."""


class ApiUnreachable(ApiError):
    """Nothing answers at the address."""


class ApiTokenError(ApiError):
    """No token, or one the API refused: the message names where it came from."""


class ApiRefused(FabricError):
    """The fabric refused the request (bad input, unknown node or job, a refused move); ``code``: the status's name."""

    code: str


@dataclass(frozen=True)
class ApiToken:
    """The bearer token and where it came from (named in errors; the token itself never is)."""

    value: str
    source: str


def token_from(token_file: str | None, env: Mapping[str, str] | None = None) -> ApiToken:
    """The token in ``token_file`` (``--token-file``), else in ``FABRIC_API_TOKEN``; ``ApiTokenError``
    naming the file or the variable when there is none."""
    env = os.environ if env is None else env
    if token_file:
        try:
            text = Path(token_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ApiTokenError(f"cannot read the token file {token_file} ({exc.strerror or type(exc).__name__})") from None
        if not text:
            raise ApiTokenError(f"the token file {token_file} is empty (`fabric api-token` on the head prints the token)")
        return ApiToken(text, f"the token file {token_file}")
    text = (env.get(TOKEN_ENV) or "").strip()
    if not text:
        raise ApiTokenError(f"no API token: pass --token-file FILE or set {TOKEN_ENV} (`fabric api-token` on the head prints it)")
    return ApiToken(text, TOKEN_ENV)


def requirement_json(req: Requirement) -> str:
    """``req`` as the JSON object of ``Requirement``'s keyword arguments the API reads back."""
    return json.dumps({
        "min_tier": req.min_tier.value, "floor": req.floor.value, "fallback": req.fallback, "num_cpus": req.num_cpus,
        "memory_mib": req.memory_mib, "num_cores": req.num_cores, "num_gpus": req.num_gpus, "gpu_model": req.gpu_model,
        "capabilities": sorted(req.capabilities), "ports": list(req.ports), "pool": req.pool, "prefer": req.prefer,
        "exclusive": req.exclusive, "payload_size": req.payload_size, "when_full": req.when_full, "scale": req.scale,
    })


class ApiClient:
    """The operator API at ``address`` (``HOST:PORT``) with ``token``; ``channel`` is a seam for tests."""

    def __init__(self, address: str, token: ApiToken, *, timeout_s: float = CALL_TIMEOUT_S,
                 channel: grpc.Channel | None = None) -> None:
        self.address = address
        self.token = token
        self.timeout_s = timeout_s
        self._channel = channel or grpc.insecure_channel(address)
        self._ops = operator_pb2_grpc.OperatorStub(self._channel)
        self._inspect = inspect_pb2_grpc.InspectStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token.value}"),)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "ApiClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: Callable[..., T], request: object, timeout_s: float | None = None) -> T:
        try:
            return method(request, metadata=self._metadata, timeout=timeout_s or self.timeout_s)
        except grpc.RpcError as exc:
            raise self._error(exc) from None

    def _error(self, exc: grpc.RpcError) -> Exception:
        code = exc.code() if callable(getattr(exc, "code", None)) else grpc.StatusCode.UNKNOWN
        details = (exc.details() if callable(getattr(exc, "details", None)) else "") or code.name.lower()
        details = " ".join(str(details).split())
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return ApiTokenError(f"the operator API at {self.address} refused the token from {self.token.source}: it is "
                                 "not the fabric's (`fabric api-token` on the head prints it)")
        if code == grpc.StatusCode.UNAVAILABLE:
            return ApiUnreachable(f"cannot reach the operator API at {self.address} ({details}): is the fabric up with "
                                  "its API on, and is the address right (`fabric api-address` on the head)?")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return ApiUnreachable(f"the operator API at {self.address} did not answer in time ({details})")
        if code in REFUSED:
            return ApiRefused(details, code=code.name)
        if code == grpc.StatusCode.UNIMPLEMENTED:
            return ApiError(f"the operator API at {self.address} does not offer this call (an older fabric?): {details}")
        return ApiError(f"the operator API at {self.address} failed: {code.name}: {details}")

    # -- SchedulerApi's methods the commands call --------------------------------------------------------
    def nodes(self, statuses: Iterable[str] | None = None) -> list[NodeRecord]:
        """Every node the registry holds (``ListNodes``), offline and dead ones too, each with the
        scheduler's view of it; only those of ``statuses`` when given."""
        reply: pb.ListNodesReply = self._call(self._ops.ListNodes, pb.ListNodesRequest(statuses=list(statuses or ())))
        return [readers.node_record(n) for n in reply.nodes]

    def metrics(self) -> dict[str, object]:
        reply: pb.StatusReply = self._call(self._ops.Status, pb.StatusRequest())
        return readers.json_object(reply.metrics_json, "StatusReply.metrics_json")

    def job_statuses(self) -> list[JobStatus]:
        reply: pb.ListJobsReply = self._call(self._inspect.ListJobs, pb.ListJobsRequest())
        return [readers.job_status(j) for j in reply.jobs]

    def job_status(self, job_id: str) -> JobStatus:
        return readers.job_status(self._call(self._inspect.GetJob, pb.JobIdRequest(job_id=job_id)))

    def events(self, since: int = 0, kinds: list[str] | None = None, limit: int = 1000) -> list[FabricEvent]:
        """The log after number ``since``: the first ``limit`` (negative: the newest ``-limit``), of ``kinds`` only."""
        request = pb.ListEventsRequest(since=max(0, int(since)), kinds=list(kinds or ()), limit=int(limit))
        reply: pb.ListEventsReply = self._call(self._inspect.ListEvents, request)
        return [readers.event(e) for e in reply.events]

    def watch_events(self, since: int = 0, kinds: list[str] | None = None,
                     timeout_s: float | None = None) -> Iterator[list[FabricEvent]]:
        """The log after number ``since`` (of ``kinds`` only), then each new event as it is logged, in
        lists (one per ``EventBatch``), in order, each event once, from one ``WatchEventBatches``
        stream. It ends after ``timeout_s`` seconds (None: never); closing the iterator cancels the
        stream. A server without that stream (an older fabric) is polled with ``ListEvents`` instead.
        Errors raise as every call's do."""
        request = pb.WatchEventsRequest(since=max(0, int(since)), kinds=list(kinds or ()))
        call = self._inspect.WatchEventBatches(request, metadata=self._metadata, timeout=timeout_s)
        since = request.since
        try:
            for batch in call:
                events = [readers.event(e) for e in batch.events]
                if events:
                    since = events[-1]["seq"]
                    yield events
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED and timeout_s is not None:
                return
            if code != grpc.StatusCode.UNIMPLEMENTED:
                raise self._error(exc) from None
        finally:
            call.cancel()
        yield from self._poll_events(since, kinds, timeout_s)

    def _poll_events(self, since: int, kinds: list[str] | None, timeout_s: float | None) -> Iterator[list[FabricEvent]]:
        """``watch_events`` against a server without ``WatchEventBatches``: ``ListEvents`` every ``POLL_S``."""
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while end is None or time.monotonic() < end:
            new = self.events(since, kinds, 1000)
            if new:
                since = int(new[-1]["seq"])
                yield new
            if len(new) < 1000:
                time.sleep(POLL_S if end is None else max(0.0, min(POLL_S, end - time.monotonic())))

    def cordon(self, node: str) -> str:
        reply: pb.NodeReply = self._call(self._ops.Cordon, pb.NodeRequest(node=node))
        return reply.node_id

    def uncordon(self, node: str) -> str:
        reply: pb.NodeReply = self._call(self._ops.Uncordon, pb.NodeRequest(node=node))
        return reply.node_id

    def drain_jobs(self, node: str, timeout_s: float | None = None, force: bool = False,
                   strategy: str | None = None) -> DrainState:
        """Cordon, migrate, drain: answers when the drain ends (waited for its timeout and a minute more)."""
        request = pb.DrainRequest(node=node, force=force, strategy=strategy or "")
        if timeout_s is not None:
            request.timeout_s = float(timeout_s)
        wait = self.timeout_s + (float(timeout_s) if timeout_s is not None else 600.0)
        reply: pb.DrainReply = self._call(self._ops.Drain, request, wait)
        return readers.drain_state(reply.state_json)

    def drain_status(self, node: str) -> DrainState | None:
        reply: pb.DrainStatusReply = self._call(self._inspect.DrainStatus, pb.NodeRequest(node=node))
        return readers.drain_state(reply.state_json) if reply.found else None

    def evict(self, node: str) -> list[str]:
        reply: pb.EvictReply = self._call(self._ops.Evict, pb.NodeRequest(node=node))
        return list(reply.job_ids)

    def terminate_node(self, node: str) -> NodeTermination:
        reply: pb.TerminateNodeReply = self._call(self._ops.TerminateNode, pb.NodeRequest(node=node),
                                                  self.timeout_s + TERMINATE_WAIT_S)
        return {"node_id": reply.node_id, "provider": reply.provider, "instance_id": reply.instance_id,
                "jobs_stopped": list(reply.job_ids)}

    def handle_node_interruption(self, node: str, kind: str = "spot-interruption",
                                 deadline: float | None = None) -> NodeInterruptionState:
        request = pb.NotifyInterruptionRequest(node=node, kind=kind)
        if deadline is not None:
            request.deadline_epoch = float(deadline)
        reply: pb.DrainReply = self._call(self._ops.NotifyInterruption, request)
        return readers.interruption_state(reply.state_json)

    def migrate_job(self, job_id: str, strategy: str | None = None, target_node: str | None = None,
                    override_reservation: bool = False) -> str:
        request = pb.MigrateRequest(job_id=job_id, strategy=strategy or "", target_node=target_node or "",
                                    override_reservation=override_reservation)
        reply: pb.MigrateReply = self._call(self._ops.Migrate, request)
        return reply.migration_id

    def migration(self, migration_id: str) -> MigrationState:
        reply: pb.Migration = self._call(self._inspect.GetMigration, pb.MigrationIdRequest(migration_id=migration_id))
        return readers.migration_state(reply.state_json)

    def migrations(self) -> list[MigrationState]:
        reply: pb.ListMigrationsReply = self._call(self._inspect.ListMigrations, pb.ListMigrationsRequest())
        return [readers.migration_state(m.state_json) for m in reply.migrations]

    def explain(self, req: Requirement, ctx: PlacementContext | None = None, verbose: bool = False) -> ExplainAnswer:
        """A dry-run placement (``ctx`` cannot travel: the API places with none)."""
        reply: pb.ExplainReply = self._call(self._ops.Explain, pb.ExplainRequest(requirement_json=requirement_json(req),
                                                                                 verbose=verbose))
        answer = readers.json_object(reply.explain_json, "ExplainReply.explain_json")
        answer.setdefault("text", reply.text)
        return cast(ExplainAnswer, answer)  # the ExplainAnswer the scheduler made, as JSON

    def explain_event(self, seq: int, replay: bool = False, settings_now: bool = False,
                      verbose: bool = False) -> dict[str, object]:
        """A decision on the record, explained (and replayed) by the scheduler."""
        reply: pb.ExplainReply = self._call(self._ops.Explain, pb.ExplainRequest(
            event_seq=seq, replay=replay, settings_now=settings_now, verbose=verbose))
        answer = readers.json_object(reply.explain_json, "ExplainReply.explain_json")
        answer.setdefault("text", reply.text)
        return answer

    # -- the FabricHandle names the commands use ----------------------------------------------------------
    def jobs(self) -> list[JobStatus]:
        return self.job_statuses()

    def records(self) -> list[NodeRecord]:
        """Node records (the commands read their ids and names)."""
        return self.nodes()

    def drain(self, node: str, timeout_s: float | None = None, force: bool = False, strategy: str | None = None) -> DrainState:
        return self.drain_jobs(node, timeout_s, force, strategy)

    def settings_in_force(self) -> FabricSettings:
        return readers.settings(self._call(self._inspect.GetSettings, pb.GetSettingsRequest()))

    def pools(self) -> dict[str, object]:
        """The pools view ``fabric pools`` prints (``ListPools``): the same dict the Ray path builds
        (``fabric.api.pools.pools_view``): pools with their tiers and hot spares, prospective nodes,
        spare provisions in flight, provider instances."""
        from fabric.api.pools import view_from_message

        return view_from_message(self._call(self._inspect.ListPools, pb.ListPoolsRequest()))

    def check(self) -> None:
        """One cheap authenticated call (``Status``): raises what a command would, before it starts."""
        self._call(self._ops.Status, pb.StatusRequest())

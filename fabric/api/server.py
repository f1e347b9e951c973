"""The operator API's servicer (issue 17): ``fabric.operator.v1.Operator`` on grpc.aio.

``OperatorServicer(scheduler)`` turns each RPC into calls of the scheduler actor's methods on
``scheduler``, an ``AsyncSchedulerApi`` (``fabric.core.scheduler_api``: the operator actor passes
the ``AsyncSchedulerClient`` of ``fabric.scheduler``; unit tests pass a fake), each called by name
in code, so mypy holds every RPC's call to the scheduler's real signature. What only this edge can
do is done here before anything is called: JSON and bundle messages turned into the fabric's
objects (a malformed requirement or bundle refused), and a request's node read with the scheduler's
own reader. Every other field is passed on as it came and read by the scheduler on arrival
(``fabric.core.scheduler_args``), so a bad one gets the error any other caller gets. The fabric's
errors become status codes
(``status_for``): bad input INVALID_ARGUMENT naming the field, an unknown node/job/bundle NOT_FOUND,
a refused move FAILED_PRECONDITION, no capacity RESOURCE_EXHAUSTED, anything else INTERNAL; an RPC
never crashes the server. ``TokenInterceptor`` refuses every call without the right
``authorization: Bearer <token>`` metadata with UNAUTHENTICATED before any handler runs (nothing
acts, the request is not even parsed); only the standard health service and server reflection
answer without one (``OPEN_SERVICES``). ``serve`` starts a server with the servicer, the read-only
``Inspect`` service (``fabric.api.inspect``), health, reflection and the token check on ``host:port``.
"""

from __future__ import annotations

import asyncio
import hmac
import pickle
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterable

import grpc

from fabric.api import operator_pb2 as pb
from fabric.api import operator_pb2_grpc as pb_grpc
from fabric.api.watch import EVENT_BATCH, EventsReader, follow_log
from fabric.api.wire import build_bundle, bundle_status_message, event_message, import_class, jsonable, node_message
from fabric.api.wire import requirement_from_json
from fabric.core.errors import (
    CapacityError, InvalidSpecError, JobNotFoundError, MessageError, MigrationError, NodeNotFoundError,
    RequirementError, SettingsError, TransitionError,
)
from fabric.core.node_view import read_statuses
from fabric.core.scheduler_api import AsyncSchedulerApi
from fabric.core.scheduling.messages import read_id
from fabric.core.settings import FabricSettings

if TYPE_CHECKING:  # pragma: no cover - fabric.api.inspect imports this module
    from fabric.api.inspect import SparesReader

NodesReader = Callable[[], Awaitable[Iterable[Any]]]
"""An async callable answering node records (``NodeRecord``s)."""

API_VERSION = "fabric.operator.v1"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


# -- errors -------------------------------------------------------------------------------------------------
def _cause(exc: BaseException) -> BaseException:
    """The error an actor raised (Ray wraps it: ``RayTaskError.cause``)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and details an error travels back as."""
    err = _cause(exc)
    text = str(getattr(err, "message", None) or err) or type(err).__name__
    if isinstance(err, InvalidSpecError):
        field = getattr(err, "field", "") or ""
        if field and not text.startswith(field):
            text = f"{field}: {text}"
        return grpc.StatusCode.INVALID_ARGUMENT, text
    if isinstance(err, (RequirementError, MessageError, SettingsError)):
        return grpc.StatusCode.INVALID_ARGUMENT, text
    if isinstance(err, (NodeNotFoundError, JobNotFoundError)):
        return grpc.StatusCode.NOT_FOUND, text
    if isinstance(err, (MigrationError, TransitionError)):
        return grpc.StatusCode.FAILED_PRECONDITION, text
    if isinstance(err, CapacityError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, text
    return grpc.StatusCode.INTERNAL, f"{type(err).__name__}: {text}"[:2000]


def guarded(fn: Callable) -> Callable:
    """An RPC method whose every error ends the call with its status (``status_for``), never a crash."""

    async def rpc(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await fn(self, request, context)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every error becomes a status; none reaches grpc as a crash
            code, details = status_for(exc)
        await context.abort(code, details)

    rpc.__name__ = fn.__name__
    return rpc


def _node(request: Any) -> str:
    """The request's node, read with the scheduler's own reader before anything is called (the
    scheduler reads it again on arrival; this one keeps a request without a node off the actor)."""
    return read_id("node", request.node)


# -- the servicer -------------------------------------------------------------------------------------------
class OperatorServicer(pb_grpc.OperatorServicer):
    """Each RPC as scheduler actor calls on ``scheduler``. ``events_method`` is the scheduler's log
    reader (``EventsReader``); ``poll_s`` how often WatchEvents looks for new events; ``importer``
    imports a bundle job's class by path."""

    def __init__(self, scheduler: AsyncSchedulerApi, *, events_method: EventsReader = "job_events", poll_s: float = 0.2,
                 importer: Callable[[str, str], Any] = import_class, nodes: NodesReader | None = None) -> None:
        self.scheduler = scheduler
        self.nodes = nodes
        """What ``ListNodes`` lists: every node the registry holds (``actors.operator.every_node``); None:
        the scheduler's fleet (where no registry is at hand)."""
        self.events_method = events_method
        self.poll_s = poll_s
        self.importer = importer

    @guarded
    async def Status(self, request: pb.StatusRequest, context: Any) -> pb.StatusReply:
        s = self.scheduler
        metrics, nodes, jobs, bundles = await asyncio.gather(s.metrics(), s.nodes(), s.job_statuses(), s.bundle_statuses())
        return pb.StatusReply(node_count=len(nodes), job_count=len(jobs), bundle_count=len(bundles),
                              metrics_json=jsonable(metrics), api=API_VERSION)

    @guarded
    async def ListNodes(self, request: pb.ListNodesRequest, context: Any) -> pb.ListNodesReply:
        wanted = read_statuses(list(request.statuses), "statuses")
        records = await (self.nodes or self.scheduler.nodes)()
        return pb.ListNodesReply(nodes=[node_message(r) for r in records if wanted is None or str(getattr(r, "status", "")) in wanted])

    @guarded
    async def Cordon(self, request: pb.NodeRequest, context: Any) -> pb.NodeReply:
        return pb.NodeReply(node_id=str(await self.scheduler.cordon(_node(request))))

    @guarded
    async def Uncordon(self, request: pb.NodeRequest, context: Any) -> pb.NodeReply:
        return pb.NodeReply(node_id=str(await self.scheduler.uncordon(_node(request))))

    @guarded
    async def Drain(self, request: pb.DrainRequest, context: Any) -> pb.DrainReply:
        timeout_s = request.timeout_s if request.HasField("timeout_s") else None
        state = await self.scheduler.drain_jobs(_node(request), timeout_s, request.force, request.strategy or None)
        return pb.DrainReply(node_id=str(getattr(state, "node_id", "") or request.node), state_json=jsonable(state))

    @guarded
    async def Evict(self, request: pb.NodeRequest, context: Any) -> pb.EvictReply:
        stopped = await self.scheduler.evict(_node(request))
        return pb.EvictReply(node_id=request.node, job_ids=[str(j) for j in stopped])

    @guarded
    async def TerminateNode(self, request: pb.NodeRequest, context: Any) -> pb.TerminateNodeReply:
        ended = await self.scheduler.terminate_node(_node(request))
        return pb.TerminateNodeReply(node_id=str(ended["node_id"]), provider=str(ended["provider"]),
                                     instance_id=str(ended["instance_id"]), job_ids=[str(j) for j in ended["jobs_stopped"]])

    @guarded
    async def NotifyInterruption(self, request: pb.NotifyInterruptionRequest, context: Any) -> pb.DrainReply:
        deadline = request.deadline_epoch if request.HasField("deadline_epoch") else None
        state = await self.scheduler.handle_node_interruption(_node(request), request.kind or "spot-interruption", deadline)
        return pb.DrainReply(node_id=str(getattr(state, "node_id", "") or request.node), state_json=jsonable(state))

    async def _write_bundle(self, request: pb.BundleWriteRequest, *, update: bool) -> pb.BundleReply:
        if not request.HasField("bundle"):
            raise InvalidSpecError("bundle: required", field="bundle")
        blob = pickle.dumps(build_bundle(request.bundle, self.importer))
        if request.validate_only:
            admission = await self.scheduler.validate_bundle_admission(blob)
            return pb.BundleReply(validated_only=True, admission_kind=str(getattr(admission, "kind", "")),
                                  admission_json=jsonable(admission))
        written = await (self.scheduler.update_bundle(blob) if update else self.scheduler.create_bundle(blob))
        return pb.BundleReply(status=bundle_status_message(written))

    @guarded
    async def CreateBundle(self, request: pb.BundleWriteRequest, context: Any) -> pb.BundleReply:
        return await self._write_bundle(request, update=False)

    @guarded
    async def UpdateBundle(self, request: pb.BundleWriteRequest, context: Any) -> pb.BundleReply:
        return await self._write_bundle(request, update=True)

    @guarded
    async def DeleteBundle(self, request: pb.BundleIdRequest, context: Any) -> pb.BundleReply:
        return pb.BundleReply(status=bundle_status_message(await self.scheduler.delete_bundle(request.bundle_id)))

    @guarded
    async def GetBundle(self, request: pb.BundleIdRequest, context: Any) -> pb.BundleReply:
        return pb.BundleReply(status=bundle_status_message(await self.scheduler.bundle_status(request.bundle_id)))

    @guarded
    async def ListBundles(self, request: pb.ListBundlesRequest, context: Any) -> pb.ListBundlesReply:
        return pb.ListBundlesReply(bundles=[bundle_status_message(s) for s in await self.scheduler.bundle_statuses()])

    @guarded
    async def Explain(self, request: pb.ExplainRequest, context: Any) -> pb.ExplainReply:
        if request.event_seq:  # a decision on the record
            out: Any = await self.scheduler.explain_event(request.event_seq, request.replay, request.settings_now, request.verbose)
        else:
            out = await self.scheduler.explain(requirement_from_json(request.requirement_json), None, request.verbose)
        text = out.get("text", "") if isinstance(out, dict) else getattr(out, "text", "")
        return pb.ExplainReply(text=str(text or ""), explain_json=jsonable(out))

    @guarded
    async def Migrate(self, request: pb.MigrateRequest, context: Any) -> pb.MigrateReply:
        mid = await self.scheduler.migrate_job(request.job_id, request.strategy or None, request.target_node or None,
                                               request.override_reservation)
        return pb.MigrateReply(migration_id=str(mid))

    @guarded
    async def AbortMigration(self, request: pb.AbortMigrationRequest, context: Any) -> pb.AbortMigrationReply:
        state = await self.scheduler.abort_migration(request.migration_id, request.reason)
        return pb.AbortMigrationReply(migration_id=request.migration_id, state_json=jsonable(state))

    async def WatchEvents(self, request: pb.WatchEventsRequest, context: Any) -> AsyncIterator[pb.Event]:
        """The log after ``since``, one ``Event`` a message (``Inspect.WatchEventBatches`` streams the
        same events in far fewer messages)."""
        kinds = [str(k) for k in request.kinds] or None
        try:
            async for events in follow_log(self.scheduler, self.events_method, int(request.since), kinds, self.poll_s):
                for event in events:
                    yield event_message(event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            code, details = status_for(exc)
            await context.abort(code, details)


# -- authentication -----------------------------------------------------------------------------------------
def bearer_ok(metadata: Any, token: str) -> bool:
    """True when ``metadata`` carries ``authorization: Bearer <token>`` (compared in constant time)."""
    for key, value in metadata or ():
        if str(key).lower() != "authorization":
            continue
        given = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        scheme, _, presented = given.strip().partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode()):
            return True
    return False


async def _refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required (metadata authorization: Bearer <token>; `fabric api-token` prints it)")


async def _refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
    await _refuse(request, context)
    yield None  # never reached: abort raises


class _Malformed:
    """A request body that did not parse as its message (the handler answers INVALID_ARGUMENT)."""

    def __init__(self, error: BaseException) -> None:
        self.error = f"{type(error).__name__}: {error}"[:300]


def _safe_parse(deserializer: Callable | None) -> Callable:
    def parse(data: bytes) -> Any:
        try:
            return deserializer(data) if deserializer is not None else data
        except Exception as exc:
            return _Malformed(exc)

    return parse


async def _malformed(context: grpc.aio.ServicerContext, request: "_Malformed") -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request: not a valid message ({request.error})")


def checked_parse(handler: Any) -> Any:
    """``handler`` with a request parser that never raises: a body that is not its message is
    INVALID_ARGUMENT (grpc would answer UNKNOWN)."""
    if handler is None or handler.request_streaming:
        return handler
    if handler.response_streaming:
        inner_stream = handler.unary_stream

        async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            if isinstance(request, _Malformed):
                await _malformed(context, request)
                return
            async for item in inner_stream(request, context):
                yield item

        return grpc.unary_stream_rpc_method_handler(stream, request_deserializer=_safe_parse(handler.request_deserializer),
                                                    response_serializer=handler.response_serializer)
    inner = handler.unary_unary

    async def unary(request: Any, context: Any) -> Any:
        if isinstance(request, _Malformed):
            await _malformed(context, request)
        return await inner(request, context)

    return grpc.unary_unary_rpc_method_handler(unary, request_deserializer=_safe_parse(handler.request_deserializer),
                                               response_serializer=handler.response_serializer)


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Every call but those of ``OPEN_SERVICES`` needs ``authorization: Bearer <token>``; a missing or
    wrong one gets UNAUTHENTICATED before the method's handler is reached (its request is never parsed). ``refused`` counts them."""

    def __init__(self, token: str) -> None:
        if not isinstance(token, str) or len(token) < 16:
            raise ValueError("the API token must be text of at least 16 characters")
        self.token = token
        self.refused = 0

    async def intercept_service(self, continuation: Callable, handler_call_details: grpc.HandlerCallDetails) -> Any:
        if open_method(str(handler_call_details.method or "")):
            return await continuation(handler_call_details)
        if bearer_ok(handler_call_details.invocation_metadata, self.token):
            return checked_parse(await continuation(handler_call_details))
        self.refused += 1
        handler = await continuation(handler_call_details)
        if handler is not None and handler.response_streaming and not handler.request_streaming:
            return grpc.unary_stream_rpc_method_handler(_refuse_stream)
        return grpc.unary_unary_rpc_method_handler(_refuse)


# -- the server ---------------------------------------------------------------------------------------------
HEALTH_SERVICE = "grpc.health.v1.Health"
REFLECTION_SERVICES = ("grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection")
OPEN_SERVICES = (HEALTH_SERVICE, *REFLECTION_SERVICES)
"""Services answered without a token: the standard health check (for probes and load balancers) and
server reflection (the services' schema, as shipped in ``operator.proto`` and ``inspect.proto``). Neither reads nor
changes the fabric."""
SERVICE_NAMES = ("fabric.operator.v1.Operator", "fabric.operator.v1.Inspect")


def open_method(method: str) -> bool:
    """True for a method of ``OPEN_SERVICES`` (``/grpc.health.v1.Health/Check``...)."""
    return method.lstrip("/").split("/", 1)[0] in OPEN_SERVICES


async def serve(scheduler: AsyncSchedulerApi, token: str, host: str = "127.0.0.1", port: int = 0, *,
                events_method: EventsReader = "job_events", poll_s: float = 0.2,
                settings: Callable[[], FabricSettings] | None = None,
                spares: SparesReader | None = None, nodes: NodesReader | None = None) -> tuple[grpc.aio.Server, int]:
    """A started grpc.aio server on ``host:port`` (0: a free port) with the token check, the
    ``Operator`` and ``Inspect`` services (``settings``: the settings in force, for ``GetSettings``
    and ``ListPools``; None: the defaults; ``spares``: the hot spares' status, for ``ListPools``; None: none;
    ``nodes``: what ``ListNodes`` lists, None: the scheduler's fleet), the standard health service (each service SERVING) and server reflection;
    the server and the port it bound. ``OSError`` when it cannot bind."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
    from grpc_reflection.v1alpha import reflection  # type: ignore[import-untyped]

    from fabric.api import inspect_pb2_grpc
    from fabric.api.inspect import InspectServicer, no_spares

    server = grpc.aio.server(interceptors=[TokenInterceptor(token)], options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), ("grpc.so_reuseport", 0)])
    pb_grpc.add_OperatorServicer_to_server(OperatorServicer(scheduler, events_method=events_method, poll_s=poll_s, nodes=nodes),
                                           server)
    inspect_pb2_grpc.add_InspectServicer_to_server(
        InspectServicer(scheduler, settings, events_method=events_method, poll_s=poll_s, spares=spares or no_spares), server)
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    reflection.enable_server_reflection((*SERVICE_NAMES, HEALTH_SERVICE, reflection.SERVICE_NAME), server)
    address = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"the operator API cannot bind {address}: {exc}") from None
    if not bound:
        raise OSError(f"the operator API cannot bind {address}")
    await server.start()
    for name in ("", *SERVICE_NAMES):
        await checks.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, bound


__all__ = ["API_VERSION", "EVENT_BATCH", "EventsReader", "OPEN_SERVICES", "OperatorServicer", "SERVICE_NAMES", "open_method", "TokenInterceptor", "bearer_ok", "guarded", "serve", "status_for"]

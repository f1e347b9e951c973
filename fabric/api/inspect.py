"""The operator API's read-only views: ``fabric.operator.v1.Inspect`` on grpc.aio.

``InspectServicer(scheduler, settings)`` answers what a ``fabric --api HOST:PORT`` command reads
besides nodes: the jobs (``ListJobs``, ``GetJob``), a node's drain (``DrainStatus``), the
migrations (``GetMigration``, ``ListMigrations``), one page of the event log (``ListEvents``) and
the settings in force (``GetSettings``), and the pools view (``ListPools``: ``fabric.api.pools``,
from the scheduler's fleet and provisions, the settings and ``spares``, the spare reconcilers'
status). Each RPC is one call of the scheduler actor's methods on
``scheduler`` (an ``AsyncSchedulerApi``), by name in code; ``WatchEventBatches`` streams the log
after a number in batches (``fabric.api.watch``: one scheduler call reads up to 1,000 events, and
all a read found travel as one ``EventBatch``); the settings come from ``settings``
(the operator actor's: those ``fabric.up`` started it with). Errors become status codes as the
``Operator`` service's do (``fabric.api.server.status_for``), and the same ``TokenInterceptor``
guards every call.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, Sequence

from fabric.api import inspect_pb2 as pb  # the Inspect messages and, imported publicly, the Operator ones
from fabric.api import inspect_pb2_grpc as pb_grpc
from fabric.api.pools import pools_message, pools_view
from fabric.api.watch import EventsReader, batch_messages, follow_log
from fabric.api.server import guarded
from fabric.api.wire import event_message, jsonable, plain
from fabric.core.errors import InvalidSpecError
from fabric.core.scheduler_api import AsyncSchedulerApi, FabricEvent
from fabric.core.scheduling.messages import read_id
from fabric.core.settings import FabricSettings

__all__ = ["DEFAULT_PAGE", "InspectServicer", "SparesReader", "job_message", "no_spares"]

SparesReader = Callable[[], Awaitable[Sequence[Mapping[str, Any]]]]
"""Each pool's hot-spare status (its reconciler's ``status()``), awaited."""


async def no_spares() -> list[dict[str, Any]]:
    """No hot spares known (a server without reconcilers to ask)."""
    return []

DEFAULT_PAGE = 1000
"""``ListEvents``'s page when the request's ``limit`` is 0."""
MAX_PAGE = 10000
"""The most events one ``ListEvents`` answers."""


def job_message(status: Any) -> pb.Job:
    """One ``JobStatus`` as a ``Job``."""
    binding = getattr(status, "binding", None)
    allocation = getattr(binding, "allocation_id", None) if binding is not None else None
    message = pb.Job(
        job_id=str(status.job_id), name=str(status.name), state=str(getattr(status.state, "value", status.state)),
        node_id=str(binding.node_id) if binding is not None else "",
        instance_key=str(binding.instance_key) if binding is not None else "",
        restarts_last_hour=max(0, int(status.restarts_last_hour or 0)), bundle_id=str(status.bundle_id or ""),
        replica=max(0, int(status.replica or 0)), reason=str(status.reason or ""),
        history=[pb.JobHistoryEntry(at=float(at), state=str(getattr(state, "value", state)), reason=str(reason or ""))
                 for at, state, reason in (status.history or ())],
    )
    if allocation is not None:
        message.allocation_id = int(allocation)
    for name in ("started_at", "first_started_at", "start_at"):
        if getattr(status, name, None) is not None:
            setattr(message, name, float(getattr(status, name)))
    return message


class InspectServicer(pb_grpc.InspectServicer):
    """Each read as scheduler actor calls on ``scheduler``; ``settings()`` the settings in force;
    ``events_method`` which log reader the scheduler has (``fabric.api.watch.EventsReader``);
    ``poll_s`` how often ``WatchEventBatches`` reads the log once it has caught up; ``spares`` the
    hot spares' status, for ``ListPools``."""

    def __init__(self, scheduler: AsyncSchedulerApi, settings: Callable[[], FabricSettings] | None = None, *,
                 events_method: EventsReader = "job_events", poll_s: float = 0.2, spares: SparesReader = no_spares) -> None:
        self.scheduler = scheduler
        self.settings = settings or FabricSettings
        self.spares = spares
        self.events_method = events_method
        self.poll_s = poll_s

    @guarded
    async def ListJobs(self, request: pb.ListJobsRequest, context: Any) -> pb.ListJobsReply:
        return pb.ListJobsReply(jobs=[job_message(s) for s in await self.scheduler.job_statuses()])

    @guarded
    async def GetJob(self, request: pb.JobIdRequest, context: Any) -> pb.Job:
        return job_message(await self.scheduler.job_status(read_id("job_id", request.job_id)))

    @guarded
    async def DrainStatus(self, request: pb.NodeRequest, context: Any) -> pb.DrainStatusReply:
        state = await self.scheduler.drain_status(read_id("node", request.node))
        if state is None:
            return pb.DrainStatusReply(found=False, node_id=request.node)
        return pb.DrainStatusReply(found=True, node_id=str(state.node_id), state_json=jsonable(state))

    @guarded
    async def GetMigration(self, request: pb.MigrationIdRequest, context: Any) -> pb.Migration:
        state = await self.scheduler.migration(read_id("migration_id", request.migration_id))
        return pb.Migration(migration_id=str(state.migration_id), state_json=jsonable(state))

    @guarded
    async def ListMigrations(self, request: pb.ListMigrationsRequest, context: Any) -> pb.ListMigrationsReply:
        states = await self.scheduler.migrations()
        return pb.ListMigrationsReply(migrations=[pb.Migration(migration_id=str(s.migration_id), state_json=jsonable(s))
                                                  for s in states])

    @guarded
    async def ListEvents(self, request: pb.ListEventsRequest, context: Any) -> pb.ListEventsReply:
        limit = int(request.limit) or DEFAULT_PAGE
        if abs(limit) > MAX_PAGE:
            raise InvalidSpecError(f"limit: at most {MAX_PAGE} events a page (negative: the newest), got {limit}", field="limit")
        since = int(request.since)
        kinds = [str(k) for k in request.kinds] or None
        events: list[FabricEvent]
        if self.events_method == "events":
            events = list(await self.scheduler.events(since, kinds, limit))
        else:  # a scheduler without the whole log's reader: its job log, cut to the page here
            events = list(await self.scheduler.job_events(since, kinds))
            events = events[limit:] if limit < 0 else events[:limit]
        return pb.ListEventsReply(events=[event_message(e) for e in events])

    @guarded
    async def GetSettings(self, request: pb.GetSettingsRequest, context: Any) -> pb.SettingsReply:
        import json

        return pb.SettingsReply(settings_json=json.dumps(plain(self.settings().model_dump(mode="json"))))

    @guarded
    async def ListPools(self, request: pb.ListPoolsRequest, context: Any) -> pb.PoolsReply:
        nodes = await self.scheduler.nodes()
        provisions = await self.scheduler.provisions()
        return pools_message(pools_view(self.settings(), nodes, provisions, await self.spares()))

    async def WatchEventBatches(self, request: pb.WatchEventsRequest, context: Any) -> AsyncIterator[pb.EventBatch]:
        """The log after ``since`` (of ``kinds`` only when given), then new events as they come: every
        event once, in order, each read's events in one ``EventBatch`` (cut at ``MAX_BATCH_BYTES``)."""
        from fabric.api.server import status_for

        kinds = [str(k) for k in request.kinds] or None
        try:
            async for events in follow_log(self.scheduler, self.events_method, int(request.since), kinds, self.poll_s):
                for batch in batch_messages(events):
                    yield batch
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed read ends the stream with its status
            code, details = status_for(exc)
            await context.abort(code, details)

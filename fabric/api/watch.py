"""Following the event log for the operator API's two streams: ``WatchEvents`` (one ``Event`` a
message) and ``WatchEventBatches`` (one ``EventBatch`` a message).

``follow_log`` reads the scheduler's log in bulk (one scheduler call returns up to ``EVENT_BATCH``
events after the last one sent), yields what each read found as one list, in order, each event
once, and waits ``poll_s`` when it has caught up. ``batch_messages`` turns one such list into
``EventBatch`` messages: all of it in one, unless that would pass ``MAX_BATCH_BYTES``, then cut in
order into several. A stream's cost is paid per message far more than per event (each message is a
trip through grpc's Python layer in the server and in the reader), so a batch costs about what one
``Event`` message does.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Iterable, Iterator, Literal, Mapping

from fabric.api import inspect_pb2 as pb  # the Inspect messages and, imported publicly, the Operator ones
from fabric.api.wire import event_json
from fabric.core.scheduler_api import AsyncSchedulerApi, FabricEvent

__all__ = ["EVENT_BATCH", "EventsReader", "MAX_BATCH_BYTES", "add_event", "batch_messages", "follow_log",
           "read_log"]

EventsReader = Literal["events", "job_events"]
"""Which of the scheduler's log readers the streams poll: ``events(since, kinds, limit)`` or ``job_events(since, kinds)``."""
EVENT_BATCH = 1000
"""The most events one read of the log asks for."""
MAX_BATCH_BYTES = 1024 * 1024
"""About the most bytes of events one ``EventBatch`` carries (a client's default limit is 4 MiB a message)."""
_EVENT_OVERHEAD = 64
"""Bytes counted per event besides its data and kind (numbers, field tags, stimulus id)."""


def add_event(batch: pb.EventBatch, event: Mapping[str, Any]) -> int:
    """Append one event of the log (a ``FabricEvent``) to ``batch``, with the fields
    ``wire.event_message`` fills; about the bytes it added."""
    data = event.get("data") or {}
    sid = event.get("stimulus_id") or (data.get("stimulus_id") if isinstance(data, dict) else None) or ""
    kind, data_json = str(event.get("kind", "")), event_json(data)
    batch.events.add(seq=int(event.get("seq") or 0), kind=kind, at=float(event.get("at") or 0.0), data_json=data_json,
                     stimulus_id=str(sid))
    return len(data_json) + len(kind) + _EVENT_OVERHEAD


def batch_messages(events: Iterable[Mapping[str, Any]], max_bytes: int = MAX_BATCH_BYTES) -> Iterator[pb.EventBatch]:
    """``events`` as ``EventBatch`` messages in order: one, unless a message would pass about
    ``max_bytes`` (then the next events start the next one; an event is never split). None for no events."""
    batch, size = pb.EventBatch(), 0
    for event in events:
        if size and size >= max_bytes:
            yield batch
            batch, size = pb.EventBatch(), 0
        size += add_event(batch, event)
    if size:
        yield batch


async def read_log(scheduler: AsyncSchedulerApi, reader: EventsReader, since: int, kinds: list[str] | None) -> list[FabricEvent]:
    """One read of the scheduler's log after ``since``: ``events(since, kinds, EVENT_BATCH)``, or the
    whole tail from ``job_events`` for a scheduler without that reader."""
    if reader == "events":
        return list(await scheduler.events(since, kinds, EVENT_BATCH))
    return list(await scheduler.job_events(since, kinds))


async def follow_log(scheduler: AsyncSchedulerApi, reader: EventsReader, since: int, kinds: list[str] | None,
                     poll_s: float) -> AsyncIterator[list[FabricEvent]]:
    """The log after ``since`` as lists of events, oldest first, each event once (numbers only go up):
    one list per read that found new ones; after a read that found fewer than ``EVENT_BATCH``, it
    waits ``poll_s`` before the next. Runs until closed; a failed read raises."""
    while True:
        fresh: list[FabricEvent] = []
        for event in await read_log(scheduler, reader, since, kinds):
            seq = int(event.get("seq", 0) or 0)
            if seq > since:
                since = seq
                fresh.append(event)
        if fresh:
            yield fresh
        if len(fresh) < EVENT_BATCH:  # caught up (or only old events came back): wait for more
            await asyncio.sleep(poll_s)

"""SpotWatch: a cloud node's probe actor reads its cloud's reclaim notices and hands each to the scheduler.

Without this a reclaim notice comes only from an operator (``h.handle_node_interruption``, ``fabric
interrupt``, gRPC ``NotifyInterruption``). On a node that knows its cloud (the ``fabric.io/cloud``
label: aws, gcp or azure) the probe actor runs a ``SpotWatch``: every
``spot_notices.poll_interval_s`` it reads the cloud's notice documents (``probes.spot.SpotPoller``)
and delivers each notice it has not delivered yet to the scheduler, as an operator's would be
(``handle_node_interruption(node, kind, deadline)``: a forced drain sized to the deadline), then
records a ``spot_notice`` event and prints a line. A notice the scheduler could not take (it is
restarting) is delivered at the next poll; one it took is never sent again, so a document that
stays up for two minutes is one notice. A rebalance recommendation and a later spot notice are two
notices: the second tightens the drain the first started.

A node without the label, or with ``spot_notices.enabled`` false, has no watch: nothing is contacted.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping

from fabric.core.names import CLOUD_LABEL, SCHEDULER
from fabric.core.settings_spot import SpotNoticeSettings
from fabric.core.spot import SPOT_CLOUDS, SpotNotice
from fabric.rayio.scheduler_client import AsyncSchedulerClient

SPOT_NOTICE_EVENT = "spot_notice"
"""The event a delivered notice adds to the fabric's log: node, cloud, kind, deadline, the document's words."""


class SpotWatch:
    """Reads ``poller`` (a ``SpotPoller``: ``poll() -> SpotReading``) every ``poll_interval_s`` and
    delivers each new notice about ``node_id`` to the scheduler, found by name through ``adapter``
    (the Ray seam). ``log``: where the line for a delivered notice goes (default ``print``: the
    actor's log)."""

    def __init__(self, node_id: str, cloud: str, *, poll_interval_s: float, poller: Any, adapter: Any,
                 log: Callable[[str], None] = print) -> None:
        self.node_id = node_id
        self.cloud = cloud
        self.poll_interval_s = poll_interval_s
        self.poller = poller
        self.adapter = adapter
        self.log = log
        self.delivered: list[SpotNotice] = []
        """Every notice the scheduler took, oldest first (their keys are never sent again)."""
        self.polls = 0
        self.notes: list[str] = []
        """What the last poll could not read (a malformed document, no answer)."""
        self.last_error: str | None = None
        """Why the last delivery failed, until one succeeds."""

    async def run(self) -> None:
        """Poll for ever, ``poll_interval_s`` apart. Never raises: a poll that fails is noted."""
        while True:
            try:
                await self.check()
            except Exception as exc:  # a poller bug must not end the probe's loop
                self.last_error = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(self.poll_interval_s)

    async def check(self) -> list[SpotNotice]:
        """One poll: read the documents and deliver the notices not delivered yet, in the order the
        poller found them; answers those delivered now. A delivery that fails stops this round (a
        later notice must not overtake it): the next poll tries again."""
        reading = await asyncio.to_thread(self.poller.poll)
        self.polls += 1
        self.notes = list(reading.notes)
        sent = {n.key for n in self.delivered}
        now: list[SpotNotice] = []
        for notice in reading.notices:
            if notice.key in sent:
                continue
            try:
                await self._deliver(notice)
            except Exception as exc:  # the scheduler restarting or not up: next poll
                self.last_error = f"{notice.kind} notice not delivered: {type(exc).__name__}: {exc}"
                break
            self.last_error = None
            sent.add(notice.key)
            self.delivered.append(notice)
            now.append(notice)
        return now

    async def _deliver(self, notice: SpotNotice) -> None:
        handle = self.adapter.get_actor(SCHEDULER)
        if handle is None:
            raise LookupError(f"no scheduler actor {SCHEDULER!r}")
        scheduler = AsyncSchedulerClient(lambda: handle)
        await scheduler.handle_node_interruption(self.node_id, notice.kind, notice.deadline)
        self.log(f"[fabric.spot] {self.cloud} notice for node {self.node_id[:12]}: {notice.kind}, "
                 f"{'no deadline' if notice.deadline is None else f'deadline {notice.deadline:.0f}'} ({notice.detail})")
        try:
            await scheduler.record_event(SPOT_NOTICE_EVENT, {"node_id": self.node_id, **notice.as_dict()})
        except Exception as exc:  # the notice is with the scheduler; the event only tells of it
            self.log(f"[fabric.spot] spot_notice event not recorded: {type(exc).__name__}: {exc}")

    def info(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "polls": self.polls, "delivered": [n.as_dict() for n in self.delivered],
                "notes": list(self.notes), "last_error": self.last_error}


def spot_watch_for(node_id: str, labels: Mapping[str, str], settings: Mapping[str, Any] | SpotNoticeSettings | None,
                   adapter: Any, *, poller: Any = None) -> SpotWatch | None:
    """The watch of a node with these ``labels`` under ``spot_notices`` ``settings`` (a dict, as the
    health monitor passes it; None: the defaults), or None: no cloud label, a cloud whose notices
    are not read, or reading turned off. ``poller``: instead of HTTP to the cloud's service."""
    cloud = (labels.get(CLOUD_LABEL) or "").strip().lower()
    spot = settings if isinstance(settings, SpotNoticeSettings) else SpotNoticeSettings.model_validate(dict(settings or {}))
    if cloud not in SPOT_CLOUDS or not spot.enabled:
        return None
    if poller is None:
        from probes.spot import poller_for

        poller = poller_for(cloud, metadata_url=spot.metadata_url, timeout_s=spot.timeout_s)
    return SpotWatch(node_id, cloud, poll_interval_s=spot.poll_interval_s, poller=poller, adapter=adapter)


__all__ = ["SPOT_NOTICE_EVENT", "SpotWatch", "spot_watch_for"]

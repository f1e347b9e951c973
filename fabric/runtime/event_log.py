"""``FabricHandle.events``: reading the fabric's one event log (docs/operator-api.md).

The log is the scheduler's (``actors.jobs.JobRunner.emit``); each event is a ``FabricEvent``
(``seq``, ``kind``, ``at``, ``stimulus_id``, ``data``). ``EventsSurface`` is mixed into
``FabricHandle``; ``fabric.on`` and its poller (``fabric.runtime.events``) read the log through a
handle. Kept apart from the poller so that the handle imports this and the poller the handle.
"""

from __future__ import annotations

from typing import Any, Iterable

from fabric.core.scheduler_api import FabricEvent, SchedulerApi
from fabric.core.scheduling import messages as msg

__all__ = ["EventsSurface", "PAGE", "read_kinds"]

PAGE = 1000
"""Events asked for per call."""


def read_kinds(kinds: Any) -> list[str] | None:
    """``None`` (every kind), one kind, or several (any iterable), as a list the scheduler takes: one
    kind given alone is wrapped here (the scheduler takes lists only), then read with the scheduler's
    own reader (``fabric.core.scheduling.messages.read_kinds``; ``MessageError`` naming ``kinds``)."""
    if isinstance(kinds, str):
        kinds = [kinds]
    elif kinds is not None and not isinstance(kinds, (list, tuple)) and isinstance(kinds, Iterable):
        kinds = list(kinds)
    return msg.read_kinds(kinds)


class EventsSurface:
    """Mixed into ``FabricHandle``: the fabric's event log."""

    def _scheduler_api(self) -> SchedulerApi:  # pragma: no cover - FabricHandle's
        raise NotImplementedError

    def events(self, since: int = 0, kinds: Iterable[str] | str | None = None, limit: int = PAGE) -> list[FabricEvent]:
        """The log's events after number ``since``, oldest first (each: seq, kind, at, stimulus_id,
        data), of ``kinds`` only when given; at most ``limit`` (a negative ``limit``: the newest ``-limit``)."""
        return self._scheduler_api().events(since, read_kinds(kinds), limit)

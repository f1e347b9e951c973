"""The fabric's one event log in the driver (docs/operator-api.md): ``h.events`` and ``fabric.on``.

The log is the scheduler's (``actors.jobs.JobRunner.emit``: bounded, persisted in the job store):
every event is a dict ``{"seq", "kind", "at", "stimulus_id", "data"}``, numbered in order. Fleet
events (``node_joined``, ``node_lost``, ``node_changed``, ``node_unhealthy``, ``node_healthy``) sit
beside placement, bundle, job, spare, drain and migration events.

``FabricHandle.events(since, kinds)`` (``fabric.runtime.event_log.EventsSurface``, mixed into
``FabricHandle``) reads it.
``fabric.on(kind, fn)`` returns a ``Subscription``: a daemon thread polls ``events(since)`` every
``interval_s`` and calls ``fn(event)`` for each new event of ``kind`` (``"*"``: every kind), in
order. A callback that raises is reported on stderr (once per distinct error) and counted
(``Subscription.errors``); polling goes on. A scheduler that does not answer is reported once per
outage; a gap (events dropped from the bounded log before they were read) or a restarted log
(the event last read is no longer there: re-read, only events newer than it are delivered) is
reported once and polling goes on. ``Subscription.cancel()`` stops it.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, TextIO

from fabric.core.errors import MessageError
from fabric.core.scheduling import messages as msg
from fabric.runtime.event_log import PAGE, EventsSurface, read_kinds

__all__ = ["EventsSurface", "PAGE", "Subscription", "on", "read_kinds"]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a.get("seq"), a.get("kind"), a.get("at"), a.get("stimulus_id")) == (
        b.get("seq"), b.get("kind"), b.get("at"), b.get("stimulus_id"))


class Subscription:
    """``fn(event)`` for each new event of ``kind`` (``"*"``: all) read from ``handle.events``.

    ``since``: the number after which events are new (None: the newest event now, read here, so
    what happens after this returns is delivered). ``start=False`` starts no thread: call
    ``poll_once()`` (tests do). Counters: ``delivered``, ``errors`` (callbacks that raised),
    ``gaps``, ``restarts``, ``outages``; ``reports`` holds every line written to ``err``."""

    def __init__(self, handle: Any, kind: str, fn: Callable[[dict[str, Any]], Any], *, since: int | None = None,
                 interval_s: float = 0.2, limit: int = PAGE, err: TextIO | None = None, start: bool = True) -> None:
        if not isinstance(kind, str) or not kind:
            raise MessageError("kind", "expected an event kind or '*'", kind)
        if not callable(fn):
            raise MessageError("fn", "expected a callable taking one event", fn)
        if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or not interval_s > 0:
            raise MessageError("interval_s", "expected a positive number of seconds", interval_s)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise MessageError("limit", "expected a positive whole number", limit)
        if since is not None:  # passed on to handle.events: read as the scheduler reads it
            since = msg.read_since(since)
        self.handle, self.kind, self.fn = handle, kind, fn
        self.kinds = None if kind == "*" else [kind]
        self.interval_s, self.limit = float(interval_s), limit
        self.err = err
        self.delivered = self.errors = self.gaps = self.restarts = self.outages = 0
        self.reports: list[str] = []
        self._seen_errors: set[tuple[str, str]] = set()
        self._anchor: dict[str, Any] | None = None
        """The last event read (checked to still be in the log on the next poll)."""
        self._after_at: float | None = None
        """After a restarted log: deliver only events newer than this (the last one read)."""
        self._down = False
        self._stop = threading.Event()
        if since is None:
            newest = handle.events(0, self.kinds, -1)
            self.since = int(newest[-1]["seq"]) if newest else 0
            self._anchor = dict(newest[-1]) if newest else None
        else:
            self.since = since
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name=f"fabric.on({kind})", daemon=True)
            self._thread.start()

    # -- control --------------------------------------------------------------------------------------
    def cancel(self) -> None:
        """Stop polling (the callback is not called again once this returns, bar one in progress)."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=max(5.0, 2 * self.interval_s))

    @property
    def cancelled(self) -> bool:
        return self._stop.is_set()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *_: Any) -> None:
        self.cancel()

    def __repr__(self) -> str:
        return (f"Subscription(kind={self.kind!r}, since={self.since}, delivered={self.delivered}, errors={self.errors}, "
                f"{'cancelled' if self.cancelled else 'polling'})")

    # -- polling --------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
                if self._down:
                    self._down = False
                    self._report(f"the fabric's event log answers again (reading after #{self.since})")
            except Exception as exc:  # the scheduler restarting, the cluster gone: say so once, go on
                if not self._down:
                    self._down = True
                    self.outages += 1
                    self._report(f"reading the event log failed ({type(exc).__name__}: {exc}); retrying every {self.interval_s:g} s")
            self._stop.wait(self.interval_s)

    def poll_once(self) -> int:
        """Read what is new (page by page) and deliver it; the number delivered. Errors reading the log propagate."""
        n = 0
        while not self._stop.is_set():
            batch = self._read()
            if batch is None:  # the log restarted: read again from its start
                continue
            n += self._deliver(batch)
            if len(batch) < self.limit:
                self._after_at = None  # caught up with a restarted log
                break
        return n

    def _read(self) -> list[dict[str, Any]] | None:
        a = self._anchor
        if a is None:
            batch = list(self.handle.events(self.since, self.kinds, self.limit))
            if batch and self.kinds is None and self.since and int(batch[0]["seq"]) > self.since + 1:
                self._gap(self.since, int(batch[0]["seq"]))
            return batch
        aseq = int(a["seq"])
        batch = list(self.handle.events(aseq - 1, self.kinds, self.limit + 1))
        if batch and _same(batch[0], a):
            return batch[1:]
        if batch and int(batch[0]["seq"]) > aseq:  # the last one read was dropped, and maybe more after it
            self._gap(aseq, int(batch[0]["seq"]))
            return batch
        # The last event read is not in the log any more, and nothing after it took its number's
        # place in order: the log restarted (a new store, or events not yet persisted were lost).
        self.restarts += 1
        self._report(f"the event log restarted (event #{aseq} is not in it any more); re-reading it, "
                     f"delivering only events newer than #{aseq}")
        self._after_at = float(a.get("at") or 0.0)
        self._anchor, self.since = None, 0
        return None

    def _gap(self, last: int, first: int) -> None:
        self.gaps += 1
        self._report(f"events #{last + 1}..#{first - 1} were dropped from the bounded log before they were read")

    def _deliver(self, batch: list[dict[str, Any]]) -> int:
        n = 0
        for event in batch:
            if self._stop.is_set():
                break
            self._anchor, self.since = dict(event), int(event["seq"])
            if self._after_at is not None and float(event.get("at") or 0.0) <= self._after_at:
                continue
            if self.kinds is not None and event.get("kind") not in self.kinds:
                continue
            n += 1
            self.delivered += 1
            try:
                self.fn(event)
            except Exception as exc:  # a callback's failure is reported, never stops the polling
                self.errors += 1
                key = (type(exc).__name__, str(exc))
                if key not in self._seen_errors:
                    self._seen_errors.add(key)
                    self._report(f"callback {getattr(self.fn, '__qualname__', self.fn)!s} raised {key[0]}: {key[1]} "
                                 f"on event #{event.get('seq')} ({event.get('kind')}); reported once, polling goes on")
        return n

    def _report(self, line: str) -> None:
        line = f"fabric.on({self.kind!r}): {line}"
        self.reports.append(line)
        try:
            print(line, file=self.err if self.err is not None else sys.stderr, flush=True)
        except Exception:  # a closed stderr must not stop the polling either
            pass


def on(kind: str, fn: Callable[[dict[str, Any]], object], *, since: int | None = None, interval_s: float = 0.2,
       handle: EventsSurface | None = None) -> Subscription:
    """Call ``fn(event)`` in this driver for each new event of ``kind`` (``"*"``: every kind), in
    order, from a daemon thread that polls the log every ``interval_s``. ``since``: deliver events
    after this number (None: from now on). ``handle``: the ``FabricHandle`` to read (default: a new one)."""
    if handle is None:
        from fabric.runtime.control import FabricHandle

        handle = FabricHandle()
    return Subscription(handle, kind, fn, since=since, interval_s=interval_s)

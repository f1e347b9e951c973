"""This driver's calls on leased slots: counted where they are sent, reported to the scheduler.

A call on a leased slot is placed by its client, not by the scheduler, so the client counts it
when it sends it (one more placement that succeeded, and a fallback when its slot sits below its
``min_tier``: the grant says which) and reports the counts to the scheduler in batches, on the
cadence of ``CallCounts`` (once the calls go quiet, every ``EVERY_S`` during a long burst). The
counts also go out, and are waited for, before this process reads the fabric's metrics
(``FabricHandle.metrics`` / ``fallback_count``), and when the process exits, before Ray's own
shutdown: a ``ray job submit`` driver that ends right after its calls loses none of them.

(Leased calls used to count themselves in their workers. A job's workers die with its driver,
and a worker that ran calls in its last half second died before it reported them.)

Spilled calls are still counted by the workers that ran them: only a worker knows which node took
the call, so whether it was a fallback. A worker's reports name its Ray job, and the scheduler
keeps, per job, how many spilled calls were reported (run, or refused past their queue deadline).
A driver that spilled waits at exit until the scheduler has seen every one of them, at most
``EXIT_WAIT_S`` (``EXIT_STALL_S`` once the count stops growing): its workers die with it, and on a
busy machine a worker's last report (an actor call, after a lookup of the scheduler) takes seconds
to go out.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from fabric.core.scheduling.reports import CallCounts

EXIT_WAIT_S = 15.0
"""How long a driver that spilled calls waits at most, at exit, for its workers' reports of them.
It waits that long only when some of its spilled calls never started (still queued, or their
workers gone): a worker reports within ``CallCounts.QUIET_S`` and a ``POLL_S`` of its last call's
start, plus an actor call."""
EXIT_STALL_S = 5.0
"""The wait also ends once the scheduler's count has not grown for this long: a report lost with
its worker (a node that died mid-call) never comes, and a retried call counts again anyway."""
EXIT_POLL_S = 0.1


class CallReporter:
    """Counts this session's calls on leased slots and sends them with ``send(placed, fallbacks)``
    (an actor call; its result is returned by ``flush``). Thread-safe; a daemon thread reports."""

    def __init__(self, send: Callable[[int, int], Any], clock: Callable[[], float] = time.monotonic) -> None:
        self.send = send
        self.clock = clock
        self.counts = CallCounts()
        self.lock = threading.Lock()
        self.spilled = 0
        """How many calls this session sent to the spill selector (see ``EXIT_WAIT_S``)."""
        self.closed = False
        self._thread: threading.Thread | None = None

    def count(self, fallback: bool, now: float) -> None:
        """One call sent to a leased slot at ``now`` (the ``clock``'s time)."""
        with self.lock:
            self.counts.count(fallback, now)
            if self._thread is None and not self.closed:
                self._thread = threading.Thread(target=self._run, name="fabric-call-counts", daemon=True)
                self._thread.start()

    def spilled_call(self) -> None:
        """One call sent to the spill selector (its worker counts it)."""
        with self.lock:
            self.spilled += 1

    def take_all(self) -> tuple[int, int] | None:
        """Everything counted and not yet sent (and forget it)."""
        with self.lock:
            return self.counts.take_all()

    def flush(self) -> Any:
        """Send everything counted now; the send's result (None when there was nothing)."""
        report = self.take_all()
        return None if report is None else self._send(report)

    def close(self) -> None:
        """Stop the reporting thread (what is still counted stays for ``flush``)."""
        self.closed = True

    def _send(self, report: tuple[int, int]) -> Any:
        try:
            return self.send(*report)
        except Exception:  # the scheduler is away: keep the counts for the next report
            with self.lock:
                self.counts.put_back(report)
            return None

    def _run(self) -> None:
        while not self.closed:
            time.sleep(CallCounts.POLL_S)
            with self.lock:
                report = self.counts.take(self.clock())
            if report is not None:
                self._send(report)

"""What runs in a Ray worker around the user's function of an ``@adaptive.remote`` call.

- ``wrap_for_fabric``: a call the scheduler placed itself holds a reservation; the worker gives
  it back when the call ends (fire and forget).
- ``wrap_spilled``: a spilled call (Ray queued it for the floor set) counts itself where it ran,
  as a fallback when it ran below its ``min_tier``; a daemon thread reports the counts to the
  scheduler when the worker goes quiet (``SpillCounts``). It also refuses to start past its queue
  deadline. A call on a leased slot runs the user's function as it is: its driver counts it
  (``fabric.runtime.counts``).

The driver side (leases, routing, submission) is ``fabric.runtime.dispatch``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable

import ray

from fabric.core import names
from fabric.core.errors import CapacityError
from fabric.core.scheduling.reports import CallCounts
from fabric.core.tiers import ComputeTier

_worker_scheduler = None
_worker_lock = threading.Lock()


def _release(allocation_id: int | None) -> None:
    """Tell the scheduler this work ended (fire and forget; a restarting scheduler gets it late)."""
    global _worker_scheduler
    if allocation_id is None:
        return
    try:
        with _worker_lock:
            if _worker_scheduler is None:
                _worker_scheduler = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
        _worker_scheduler.release.remote([allocation_id])
    except Exception:  # the scheduler is gone: it rebuilds its accounting when it comes back
        _worker_scheduler = None


def wrap_for_fabric(fn: Callable) -> Callable:
    """The function Ray runs: the user's function, then the bookkeeping its path needs.

    ``meta`` is an allocation id (a call the scheduler reserved a slot for: released when it
    ends) or ``None`` (a call inside a client's lease: the client tracks it)."""

    def run(__fabric_meta, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            if __fabric_meta is not None:
                _release(__fabric_meta)

    _name_like(run, fn)
    return run


def wrap_spilled(fn: Callable, min_rank: int, name: str) -> Callable:
    """The function Ray runs for a spilled call (queued by Ray for the floor set): its one argument
    of its own is its queue deadline (a float: the cheapest thing Ray serializes); past it the
    call refuses to start. It counts itself by its node's tier label, as a fallback when that is
    below ``min_rank``, so each call counts once whichever path it took."""

    def run(__fabric_deadline, *args, **kwargs):
        now = time.time()
        if now > __fabric_deadline:
            _count_call(False, now, ran=False)
            raise CapacityError(f"{name}: queued past its queue timeout before a node inside its floor took it",
                                reason="queue timeout")
        _count_call(node_rank() < min_rank, now)
        return fn(*args, **kwargs)

    _name_like(run, fn)
    return run


def _name_like(run: Callable, fn: Callable) -> None:
    run.__name__ = getattr(fn, "__name__", "adaptive_task")
    run.__qualname__ = getattr(fn, "__qualname__", run.__name__)


SpillCounts = CallCounts
"""A worker's spilled calls not yet reported (the cadence is ``CallCounts``'s)."""

_spill_counts = SpillCounts()
_spill_refused = 0
"""Spilled calls this worker refused to start (past their queue deadline), not yet reported."""
_spill_flusher: threading.Thread | None = None
_node_rank: int | None = None


def node_rank() -> int:
    """The rank of this worker's node's tier (its tier label, read once per process; 0 when it
    has none)."""
    global _node_rank
    if _node_rank is None:
        try:
            _node_rank = ComputeTier.parse(ray.get_runtime_context().get_node_labels().get(names.TIER_LABEL, "relay")).rank
        except Exception:
            _node_rank = 0
    return _node_rank


def _count_call(fallback: bool, now: float, ran: bool = True) -> None:
    """Count a spilled call (``ran``: it started; else it was refused); a daemon thread reports the
    counts to the scheduler with this worker's Ray job id (see ``SpillCounts``), for the job's driver
    to wait on at exit (``fabric.runtime.counts``)."""
    global _spill_flusher, _spill_refused
    with _worker_lock:
        if ran:
            _spill_counts.count(fallback, now)
        else:
            _spill_refused += 1
        if _spill_flusher is None:
            _spill_flusher = threading.Thread(target=_flush_spill_counts, name="fabric-spill-counts", daemon=True)
            _spill_flusher.start()


def _take_spill_report(now: float) -> tuple[int, int, int] | None:
    """``(placed, fallbacks, refused)`` to report now, if anything (and forget it)."""
    global _spill_refused
    with _worker_lock:
        report = _spill_counts.take(now)
        if report is None and (not _spill_refused or _spill_counts.placed):  # refused ones go with the burst
            return None
        (placed, fallbacks), refused = report or (0, 0), _spill_refused
        _spill_refused = 0
        return placed, fallbacks, refused


def _flush_spill_counts() -> None:
    global _worker_scheduler, _spill_refused
    job_id = ray.get_runtime_context().get_job_id()
    with contextlib.suppress(Exception):  # looked up at once: on a busy machine the lookup takes a while
        _worker_scheduler = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
    while True:
        time.sleep(SpillCounts.POLL_S)
        report = _take_spill_report(time.time())
        if report is None:
            continue
        try:
            if _worker_scheduler is None:
                _worker_scheduler = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
            _worker_scheduler.report_calls.remote(report[0], report[1], job_id, report[2])
        except Exception:  # the scheduler is away: the counts wait for the next report
            _worker_scheduler = None
            with _worker_lock:
                _spill_counts.put_back(report[:2])
                _spill_refused += report[2]
            time.sleep(1.0)

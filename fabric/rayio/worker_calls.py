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


def _count_call(fallback: bool, now: float) -> None:
    """Count a call under a lease; a daemon thread reports the counts to the scheduler (see
    ``SpillCounts``)."""
    global _spill_flusher
    with _worker_lock:
        _spill_counts.count(fallback, now)
        if _spill_flusher is None:
            _spill_flusher = threading.Thread(target=_flush_spill_counts, name="fabric-spill-counts", daemon=True)
            _spill_flusher.start()


def _flush_spill_counts() -> None:
    global _worker_scheduler
    while True:
        time.sleep(SpillCounts.POLL_S)
        with _worker_lock:
            report = _spill_counts.take(time.time())
        if report is not None:
            try:
                if _worker_scheduler is None:
                    _worker_scheduler = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
                _worker_scheduler.report_calls.remote(*report)
            except Exception:
                _worker_scheduler = None

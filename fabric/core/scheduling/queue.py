"""The deferred queue: calls that found no node yet wait here, priority first, then FIFO, each
with a deadline.

The core retries the queue on every capacity event (a node joins, work ends, a node is
uncordoned) with one pass (``place_waiting``) and expires what waited too long (``expire``).
A request queued again under the same id replaces its earlier entry; a cancelled entry stays in
the heap, marked, until a pass pops it (O(log n) cancel)."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterator

from fabric.core.placement import PlacementContext, Requirement


@dataclass(order=True)
class QueuedRequest:
    """One call waiting for capacity."""

    sort_key: tuple[int, int]
    """``(-priority, arrival number)``: the heap's order."""
    request_id: str = field(compare=False)
    requirement: Requirement = field(compare=False)
    context: PlacementContext | None = field(compare=False)
    deadline: float = field(compare=False)
    enqueued_at: float = field(compare=False)
    cancelled: bool = field(default=False, compare=False)
    held: int | None = field(default=None, compare=False)
    """The allocation it holds on a prospective node while that node comes up (None: none)."""

    @property
    def priority(self) -> int:
        return -self.sort_key[0]


class DeferredQueue:
    """Requests waiting for a node, by id, in priority-then-FIFO order."""

    def __init__(self) -> None:
        self._heap: list[QueuedRequest] = []
        self._live: dict[str, QueuedRequest] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._live

    def __iter__(self) -> Iterator[QueuedRequest]:
        """The live requests in the order a pass would try them."""
        return iter(sorted(self._live.values()))

    def get(self, request_id: str) -> QueuedRequest | None:
        return self._live.get(request_id)

    def push(self, request_id: str, requirement: Requirement, context: PlacementContext | None, *,
             priority: int, deadline: float, now: float) -> QueuedRequest:
        """Queue a request (replacing one queued under the same id)."""
        q = QueuedRequest((-priority, next(self._seq)), request_id, requirement, context, deadline, now)
        old = self._live.get(request_id)
        if old is not None:
            old.cancelled = True
        self._live[request_id] = q
        heapq.heappush(self._heap, q)
        return q

    def cancel(self, request_id: str) -> bool:
        """Forget a queued request; False when it was not queued."""
        q = self._live.pop(request_id, None)
        if q is None:
            return False
        q.cancelled = True
        self._compact()
        return True

    def expire(self, now: float) -> list[QueuedRequest]:
        """Take out and return every request whose deadline is ``now`` or earlier, in arrival order."""
        out = [q for q in self._live.values() if q.deadline <= now]
        for q in out:
            del self._live[q.request_id]
            q.cancelled = True
        if out:
            self._compact()
        return out

    def place_waiting(self, try_place: Callable[[QueuedRequest], "bool | None"],
                      class_of: Callable[[QueuedRequest], Hashable]) -> list[QueuedRequest]:
        """One pass in priority-then-FIFO order: ``try_place`` each request (True: it found a node
        and leaves the queue; None: it stays, holding a place on a node still coming up). Once one
        request of a class (``class_of``) fails, the rest of that class is skipped: the fleet only
        fills up during a pass, so they would fail too.
        Returns the requests placed, in the order placed."""
        if not self._live:
            return []
        placed: list[QueuedRequest] = []
        failed: set[Hashable] = set()
        keep: list[QueuedRequest] = []
        while self._heap:
            q = heapq.heappop(self._heap)
            if q.cancelled:
                continue
            key = class_of(q)
            if key in failed:
                keep.append(q)
                continue
            got = try_place(q)
            if got:
                del self._live[q.request_id]
                q.cancelled = True
                placed.append(q)
            elif got is None:  # it waits for a node coming up: no sign the rest of its class would fail
                keep.append(q)
            else:
                failed.add(key)
                keep.append(q)
        for q in keep:
            heapq.heappush(self._heap, q)
        return placed

    def _compact(self) -> None:
        if not self._live:
            self._heap.clear()  # only cancelled entries are left

    def problems(self) -> list[str]:
        """What is inconsistent (empty when nothing): every live request is in the heap exactly
        once and not cancelled, the heap is ordered, arrival numbers are unique, deadlines follow arrivals."""
        out: list[str] = []
        in_heap: dict[str, int] = {}
        seqs: set[int] = set()
        for q in self._heap:
            if q.sort_key[1] in seqs:
                out.append(f"queue: arrival number {q.sort_key[1]} used twice")
            seqs.add(q.sort_key[1])
            if not q.cancelled:
                in_heap[q.request_id] = in_heap.get(q.request_id, 0) + 1
        for rid, q in self._live.items():
            if q.request_id != rid:
                out.append(f"queue: {rid!r} filed under another id ({q.request_id!r})")
            if q.cancelled:
                out.append(f"queue: {rid!r} is queued but marked cancelled")
            if in_heap.get(rid, 0) != 1:
                out.append(f"queue: {rid!r} is in the heap {in_heap.get(rid, 0)} times, not once")
            if q.deadline < q.enqueued_at:
                out.append(f"queue: {rid!r} has its deadline {q.deadline} before its arrival {q.enqueued_at}")
        for rid in in_heap.keys() - self._live.keys():
            out.append(f"queue: {rid!r} is live in the heap but not queued")
        for i in range(1, len(self._heap)):
            if self._heap[i] < self._heap[(i - 1) // 2]:
                out.append("queue: the heap is out of order")
                break
        return out

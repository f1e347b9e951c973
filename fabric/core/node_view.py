"""``with_scheduler_view``: a node's registry record as the operator should see it.

The registry's record says what a node is and how it is (status, capabilities, last seen). Three
things it cannot say: whether the node is a hot spare *now* (its ``spare`` launch label is fixed
for the node's life in Ray, but a spare that took a job is an ordinary node from then on, and the
spare reconciler's tag in the scheduler's fleet is what placement reads), its slot cap in force
(``max_concurrent_tasks``: an operator's override, a vertical start cap, a raise, all of them the
scheduler's) and which jobs are bound there (the scheduler's job book). Pure: the records, the
scheduler's fleet and the job statuses come in, records go out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Sequence

from fabric.core.errors import MessageError
from fabric.core.jobs.book import JobStatus
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement.records import NodeRecord

__all__ = ["STATUSES", "every_node", "read_statuses", "with_scheduler_view"]

STATUSES = tuple(s.value for s in NodeStatus)
"""The registry statuses a node list may be filtered by."""


def with_scheduler_view(records: Sequence[NodeRecord], fleet: Iterable[NodeRecord],
                        statuses: Iterable[JobStatus]) -> list[NodeRecord]:
    """``records`` with the scheduler's spare tags (``spare``, ``spare_reserved_for``,
    ``spare_exclusive``) and slot cap (``max_concurrent_tasks``, so ``slots`` is the cap placement
    uses) for every node its ``fleet`` holds, and ``jobs``: the ids of the jobs
    whose binding is on that node. A node the fleet does not hold (offline, dead, not seen yet)
    keeps its record's tags."""
    tags = {n.node_id: n for n in fleet}
    bound: dict[str, set[str]] = {}
    for s in statuses:
        if s.binding is not None:
            bound.setdefault(s.binding.node_id, set()).add(s.job_id)
    out = []
    for rec in records:
        seen = tags.get(rec.node_id) or rec
        out.append(replace(rec, jobs=frozenset(bound.get(rec.node_id, ())), spare=seen.spare,
                           spare_reserved_for=seen.spare_reserved_for, spare_exclusive=seen.spare_exclusive,
                           max_concurrent_tasks=seen.max_concurrent_tasks))
    return out


def every_node(records: Sequence[NodeRecord], fleet: Iterable[NodeRecord], statuses: Iterable[JobStatus]) -> list[NodeRecord]:
    """Every node the registry holds (``records``), whatever its status: where the scheduler's
    ``fleet`` holds the node, its live record (reservations, spare tags) with the registry's
    status and last-seen time; else the registry's own (offline, dead, not in the scheduler's view
    yet). Then the nodes the fleet alone holds (provisions still launching), and on each the jobs
    bound there (``with_scheduler_view``)."""
    live = {n.node_id: n for n in fleet}
    known = {r.node_id for r in records}
    merged = [replace(live[r.node_id], status=r.status, last_seen=r.last_seen) if r.node_id in live else r for r in records]
    merged += [n for n in live.values() if n.node_id not in known]
    return with_scheduler_view(merged, live.values(), statuses)


def read_statuses(value: Iterable[str] | str | None, field: str = "status") -> frozenset[str] | None:
    """A status filter: None (or nothing) for every status, else the set of statuses named (a
    comma-separated string, or a list of them); ``MessageError`` naming ``field`` for an unknown one."""
    if value is None:
        return None
    items = [part for v in ([value] if isinstance(value, str) else value) for part in str(v).split(",")]
    wanted = {v.strip().lower() for v in items if v.strip()}
    unknown = sorted(wanted - set(STATUSES))
    if unknown:
        raise MessageError(field, f"unknown status {', '.join(unknown)}; one of {', '.join(STATUSES)}", value)
    return frozenset(wanted) or None

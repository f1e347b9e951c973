"""A store written by another Ray cluster: which of its jobs are held, the line that says so, their release.

The jobs store records the Ray cluster it was written by (``ClusterStamp``: Ray's cluster id, the
head's address, when the cluster was first and last seen). A scheduler that starts on a store whose
recorded cluster is not the one running is on a *new* cluster (a head cold-started on the same
address, with no GCS fault tolerance or a fresh GCS store): every instance the store names died with
the old cluster, and nobody asked for its jobs to run here. So its jobs are *held*, not resumed: a
job that was live or waiting becomes ``recovering`` (``pending`` and ``scheduled`` stay as they
are) with no binding, dormant (never placed), its reason naming the old cluster; a job that was
stopping has stopped. The operator sees them (``fabric jobs``, the one line ``fabric up`` prints)
and resumes them on purpose (``fabric up --resume``, ``fabric.up(resume=True)``,
``store.resume_inherited``), or stops them.

A restart of the same cluster (the scheduler actor restarted, a head restarted with GCS fault
tolerance: Ray keeps its cluster id) is not inheriting: everything resumes as it stood. A store with
no recorded cluster (written before the fabric recorded one) counts as the same cluster.

Pure: no Ray, no SQLite; the scheduler's ``actors.inherited`` reads and writes the store around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from fabric.core.jobs.book import Instruction, JobBook, JobEvent, JobRecord
from fabric.core.jobs.states import JobState

__all__ = ["ClusterStamp", "HELD_PREFIX", "Inherited", "age_text", "held_now", "hold", "inherited_line", "is_other_cluster", "release", "restamp",
           "to_hold"]

HELD_PREFIX = "held: "
"""The reason of a held job starts with it."""


@dataclass(frozen=True)
class ClusterStamp:
    """The Ray cluster a store was written by: its id (Ray's cluster id, hex), its head's GCS
    address, and when a scheduler of it first and last wrote the store (wall-clock seconds)."""

    cluster_id: str
    head: str = ""
    first_seen: float = 0.0
    last_seen: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "head": self.head, "first_seen": self.first_seen, "last_seen": self.last_seen}

    @classmethod
    def from_json(cls, data: Any) -> "ClusterStamp | None":
        """The stamp of a stored document; None for none (or one that does not read)."""
        if not isinstance(data, dict) or not isinstance(data.get("cluster_id"), str) or not data["cluster_id"]:
            return None
        try:
            return cls(data["cluster_id"], str(data.get("head") or ""), float(data.get("first_seen") or 0.0),
                       float(data.get("last_seen") or 0.0))
        except (TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Inherited:
    """What a scheduler found on a store of another cluster: that cluster, and the jobs it held
    (``jobs``; ``dormant``: those of them that were dormant already, and stay so when resumed).
    ``resumed``: they were resumed since (by request or by ``store.resume_inherited``)."""

    cluster: ClusterStamp
    jobs: tuple[str, ...] = ()
    dormant: tuple[str, ...] = ()
    found_at: float = 0.0
    resumed: bool = False
    stopped: tuple[str, ...] = field(default=())
    """Jobs that were stopping on the old cluster: their instance died with it, so they stopped."""

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster.to_json(), "jobs": list(self.jobs), "dormant": list(self.dormant),
                "found_at": self.found_at, "resumed": self.resumed, "stopped": list(self.stopped)}

    @classmethod
    def from_json(cls, data: Any) -> "Inherited | None":
        if not isinstance(data, dict):
            return None
        stamp = ClusterStamp.from_json(data.get("cluster"))
        if stamp is None:
            return None
        return cls(stamp, tuple(str(j) for j in data.get("jobs") or ()), tuple(str(j) for j in data.get("dormant") or ()),
                   float(data.get("found_at") or 0.0), bool(data.get("resumed")), tuple(str(j) for j in data.get("stopped") or ()))


def is_other_cluster(stored: ClusterStamp | None, running_id: str | None) -> bool:
    """Whether a store stamped ``stored`` was written by another cluster than ``running_id``. A
    store with no stamp (an older one), or a running id not known, counts as the same cluster."""
    return stored is not None and bool(running_id) and stored.cluster_id != running_id


def restamp(stored: ClusterStamp | None, running_id: str, head: str, now: float) -> ClusterStamp:
    """The stamp the store records now: the running cluster, first seen when it first wrote (now,
    for a new one), last seen now."""
    if stored is not None and stored.cluster_id == running_id:
        return replace(stored, head=head or stored.head, last_seen=now)
    return ClusterStamp(running_id, head, now, now)


def to_hold(jobs: list[JobRecord], stored: ClusterStamp, now: float) -> Inherited:
    """What a new cluster holds of a store ``stored`` wrote: every job that has not ended (oldest
    first), but a stopping one, which stops (its instance ended with the old cluster)."""
    live = [r for r in sorted(jobs, key=lambda r: (r.created_at, r.job_id)) if not r.terminal]
    held = [r for r in live if r.state != JobState.STOPPING]
    return Inherited(stored, tuple(r.job_id for r in held), tuple(r.job_id for r in held if r.dormant), now,
                     stopped=tuple(r.job_id for r in live if r.state == JobState.STOPPING))


def age_text(seconds: float) -> str:
    """``42 s``, ``59 m``, ``3 h``, ``2 d``: how long ago, roughly."""
    s = max(0.0, seconds)
    if s < 120:
        return f"{s:.0f} s"
    if s < 2 * 3600:
        return f"{s / 60:.0f} m"
    if s < 2 * 86400:
        return f"{s / 3600:.0f} h"
    return f"{s / 86400:.0f} d"


def _who(cluster: ClusterStamp, now: float) -> str:
    head = f", head {cluster.head}" if cluster.head else ""
    seen = f", last seen {age_text(now - cluster.last_seen)} ago" if cluster.last_seen else ""
    return f"id {cluster.cluster_id[:12]}…{head}{seen}"


def hold(book: JobBook, found: Inherited, now: float) -> list[Instruction]:
    """Hold ``found.jobs`` in ``book``: unbound (their instances died with the old cluster), live
    and waiting ones ``recovering`` (``pending`` and ``scheduled`` stay), dormant, their reason naming
    the old cluster; a stopping one ``stopped``. The events of the moves, and one ``jobs_inherited``."""
    out: list[Instruction] = []
    reason = f"{HELD_PREFIX}inherited from another Ray cluster ({_who(found.cluster, now)}); fabric up --resume resumes it"
    for job_id in (*found.stopped, *found.jobs):
        rec = book.jobs.get(job_id)
        if rec is None or rec.terminal:
            continue
        rec.binding, rec.started_at = None, None
        book.dirty.add(job_id)
        if rec.state == JobState.STOPPING:
            out += book.move(rec, JobState.STOPPED, now, "stopped (its instance ended with the old cluster)")
            continue
        rec.dormant = True
        if rec.state not in (JobState.PENDING, JobState.SCHEDULED):  # a waiting one keeps waiting
            out += book.move(rec, JobState.RECOVERING, now, reason)
        rec.reason, rec.not_before = reason, now
    out.append(JobEvent("jobs_inherited", {"cluster_id": found.cluster.cluster_id, "head": found.cluster.head,
                                           "last_seen": found.cluster.last_seen, "jobs": list(found.jobs),
                                           "stopped": list(found.stopped)}))
    return out


def release(book: JobBook, found: Inherited, now: float) -> tuple[list[str], list[Instruction]]:
    """Resume the jobs ``found`` held that are still held (not stopped meanwhile): dormant again only
    when they were before, placed from now on. The ids resumed and the events."""
    resumed: list[str] = []
    for job_id in found.jobs:
        rec = book.jobs.get(job_id)
        if rec is None or rec.terminal or not rec.reason.startswith(HELD_PREFIX):
            continue
        rec.dormant = job_id in found.dormant
        rec.reason = f"resumed: inherited from cluster {found.cluster.cluster_id[:12]}…"
        rec.not_before = now
        book.dirty.add(job_id)
        resumed.append(job_id)
    return resumed, [JobEvent("jobs_resumed", {"cluster_id": found.cluster.cluster_id, "jobs": resumed})]


def held_now(book: JobBook, found: Inherited) -> tuple[str, ...]:
    """Which of the jobs ``found`` held are held still (not stopped, not resumed meanwhile)."""
    return tuple(j for j in found.jobs if (r := book.jobs.get(j)) is not None and not r.terminal
                 and r.reason.startswith(HELD_PREFIX))


def inherited_line(found: Inherited | None, now: float) -> str:
    """The one line ``fabric up`` prints about the store; empty when it holds nothing of another cluster."""
    if found is None:
        return ""
    n = len(found.jobs)
    jobs = f"{n} job{'s' if n != 1 else ''}"
    where = f"found the store of another cluster ({_who(found.cluster, now)})"
    if found.resumed:
        return f"{where}: {jobs} resumed"
    if not n:
        return f"{where}: no job to hold"
    return f"{where}: {jobs} held; fabric up --resume resumes them"

"""The jobs side's durable state as plain, versioned rows (pure: dicts of JSON types in and out).

A restarted scheduler reads its jobs, bundles, drains and reclaim notices back from the store; what
it reads must not depend on a class's pickled layout, so every record is written as a JSON object
carrying ``ROW_SCHEMA`` and read back through the functions here, which refuse a row of a newer
schema (``RowError`` naming the row's kind and key) instead of guessing at it. What the fabric never
looks inside (a user's job classes and constructor arguments) stays an opaque blob beside the row:
``bundle_row`` hands those parts back separately and ``bundle_from_row`` takes them again.

Kinds: ``job`` (a ``JobRecord``), ``bundle`` (a ``BundleRecord`` without its user parts), ``drain``
(a ``NodeDrain``, in progress or ended), ``notice`` (a reclaim notice and its deadline). Schema 1 is
the first JSON schema; schema 0 was pickled objects (``fabric.store.jobs`` upgrades it on open).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterable

from fabric.core.errors import FabricError
from fabric.core.jobs.book import HISTORY, Binding, BundleRecord, JobRecord
from fabric.core.jobs.bundles import Bundle
from fabric.core.jobs.drains import DrainJob, JobDrainStatus, NodeDrain, NodeDrainPhase, NodeInterruptionState
from fabric.core.jobs.migration import Migration, MigrationPhase, MigrationStrategy
from fabric.core.jobs.restarts import Restart
from fabric.core.jobs.spec import JobSpec
from fabric.core.jobs.states import JobState
from fabric.core.placement import Requirement

ROW_SCHEMA = 1
"""The schema every row is written in; a row of a higher one is refused."""

_USER_FIELDS = ("cls", "args", "kwargs", "backup_overrides")
"""A bundle job's fields that hold user objects: kept out of the row, as an opaque blob."""


class RowError(FabricError):
    """A stored row cannot be read: written by a newer schema, or missing a field (``kind``, ``key``)."""

    kind: str | None
    key: str | None

    def __init__(self, message: str, *, kind: str | None = None, key: str | None = None) -> None:
        super().__init__(message, kind=kind, key=key)

    def __reduce__(self) -> tuple[Callable[[str, str | None, str | None], RowError], tuple[str, str | None, str | None]]:
        return (_rebuild_row_error, (self.message, self.kind, self.key))


def _rebuild_row_error(message: str, kind: str | None, key: str | None) -> "RowError":
    return RowError(message, kind=kind, key=key)


def _checked(row: object, kind: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise RowError(f"a {kind} row must be a JSON object, got {type(row).__name__}", kind=kind)
    schema = row.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        raise RowError(f"a {kind} row has no valid schema version ({schema!r})", kind=kind, key=_key(row))
    if schema > ROW_SCHEMA:
        raise RowError(f"a {kind} row was written by a newer fabric (schema {schema}; this one reads up to "
                       f"{ROW_SCHEMA}): upgrade the fabric, the row is left as it is", kind=kind, key=_key(row))
    return row


def _key(row: dict[str, Any]) -> str | None:
    for name in ("migration_id", "job_id", "bundle_id", "node_id"):
        if isinstance(row.get(name), str):
            return str(row[name])
    return None


# -- requirements and specs ------------------------------------------------------------------------
def requirement_row(req: Requirement) -> dict[str, Any]:
    kw = req.as_kwargs()
    kw["capabilities"] = list(kw["capabilities"])
    kw["ports"] = list(kw["ports"])
    return kw


def requirement_from_row(row: dict[str, Any]) -> Requirement:
    return Requirement(**row)


_SPEC_FIELDS = ("name", "on_runtime_failure", "max_restarts_per_hour", "essential", "template", "single_use",
                "start_mode", "health_period_s", "health_timeout_s", "health_failures", "call_timeout_s")


_SPEC_OPTIONAL = ("start_at", "drain_strategy")
"""Spec fields added later: a row written before them reads them as None."""


def spec_row(spec: JobSpec) -> dict[str, Any]:
    row: dict[str, Any] = {name: getattr(spec, name) for name in _SPEC_FIELDS + _SPEC_OPTIONAL}
    row["requirement"] = requirement_row(spec.requirement)
    row["co_locate_with"] = list(spec.co_locate_with)
    row["separate_from"] = list(spec.separate_from)
    return row


def spec_from_row(row: dict[str, Any]) -> JobSpec:
    kw = {name: row[name] for name in _SPEC_FIELDS}
    kw.update({name: row.get(name) for name in _SPEC_OPTIONAL})
    return JobSpec(requirement=requirement_from_row(row["requirement"]), co_locate_with=tuple(row["co_locate_with"]),
                   separate_from=tuple(row["separate_from"]), **kw)


# -- jobs -------------------------------------------------------------------------------------------
def job_row(rec: JobRecord) -> dict[str, Any]:
    b = rec.binding
    return {
        "schema": ROW_SCHEMA, "job_id": rec.job_id, "spec": spec_row(rec.spec), "created_at": rec.created_at,
        "bundle_id": rec.bundle_id, "replica": rec.replica, "state": rec.state.value,
        "binding": None if b is None else {"node_id": b.node_id, "instance_key": b.instance_key,
                                           "allocation_id": b.allocation_id},
        "restarts": [[r.at, r.counted] for r in rec.restarts],
        "history": [[at, state, reason] for at, state, reason in rec.history],
        "not_before": rec.not_before, "exclude": sorted(rec.exclude), "recovering": rec.recovering,
        "last_attempt": rec.last_attempt, "dormant": rec.dormant, "reason": rec.reason,
        "started_at": rec.started_at, "first_started_at": rec.first_started_at,
    }


def job_from_row(row: object) -> JobRecord:
    row = _checked(row, "job")
    try:
        b = row["binding"]
        return JobRecord(
            job_id=row["job_id"], spec=spec_from_row(row["spec"]), created_at=float(row["created_at"]),
            bundle_id=row["bundle_id"], replica=int(row["replica"]), state=JobState(row["state"]),
            binding=None if b is None else Binding(b["node_id"], b["instance_key"], b["allocation_id"]),
            restarts=[Restart(float(at), bool(counted)) for at, counted in row["restarts"]],
            history=deque(((float(at), state, reason) for at, state, reason in row["history"]), maxlen=HISTORY),
            not_before=float(row["not_before"]), exclude=frozenset(row["exclude"]), recovering=bool(row["recovering"]),
            last_attempt=row["last_attempt"], dormant=bool(row["dormant"]), reason=row["reason"],
            started_at=_seconds_or_none(row.get("started_at")), first_started_at=_seconds_or_none(row.get("first_started_at")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RowError(f"a job row cannot be read: {type(exc).__name__}: {exc}", kind="job", key=_key(row)) from exc


def _seconds_or_none(value: Any) -> float | None:
    """A time kept in a row (a row written before the field: None)."""
    return None if value is None else float(value)


# -- bundles ----------------------------------------------------------------------------------------
def bundle_row(rec: BundleRecord) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The bundle record as a row, and each job's user parts (its class, arguments and backup
    overrides), in job order, for the caller to keep as an opaque blob."""
    b = rec.bundle
    jobs, user = [], []
    for j in b.jobs:
        job = j.model_dump(exclude={*_USER_FIELDS, "requirement"})
        given = j._given
        if given is None:  # given as a Requirement object: rebuilt as one
            job["requirement"], job["requirement_object"] = requirement_row(j.requirement), True
        else:  # given as a dict: only its keys (a preset or the class's decorator fills the rest)
            full = requirement_row(j.requirement)
            job["requirement"] = {k: full[k] for k in sorted(given) if k in full}
        jobs.append(job)
        user.append({name: getattr(j, name) for name in _USER_FIELDS})
    bundle = b.model_dump(exclude={"jobs"})
    bundle["jobs"] = jobs
    row = {"schema": ROW_SCHEMA, "bundle_id": rec.bundle_id, "state": rec.state, "reasons": list(rec.reasons),
           "jobs": [[replica, name, job_id] for (replica, name), job_id in sorted(rec.jobs.items())],
           "bundle": bundle}
    return row, user


def bundle_from_row(row: object, user: Iterable[dict[str, Any]]) -> BundleRecord:
    row = _checked(row, "bundle")
    try:
        data = dict(row["bundle"])
        jobs = []
        for job, parts in zip(data["jobs"], list(user), strict=True):
            job = dict(job)
            if job.pop("requirement_object", False):
                job["requirement"] = requirement_from_row(job["requirement"])
            jobs.append({**job, **parts})
        data["jobs"] = jobs
        bundle = Bundle.model_validate(data)
        return BundleRecord(row["bundle_id"], bundle, state=row["state"], reasons=list(row["reasons"]),
                            jobs={(int(replica), name): job_id for replica, name, job_id in row["jobs"]})
    except (KeyError, TypeError, ValueError) as exc:
        raise RowError(f"a bundle row cannot be read: {type(exc).__name__}: {exc}", kind="bundle", key=_key(row)) from exc


# -- migrations -------------------------------------------------------------------------------------
_MIGRATION_FIELDS = ("migration_id", "job_id", "source_node", "source_key", "source_allocation", "started_at",
                     "target_pin", "override_reservation", "phase_deadline", "target_node", "target_key",
                     "target_allocation", "target_created", "target_alive", "source_stopped", "reason")


def migration_row(m: Migration) -> dict[str, Any]:
    row: dict[str, Any] = {name: getattr(m, name) for name in _MIGRATION_FIELDS}
    row.update(schema=ROW_SCHEMA, strategy=m.strategy.value, phase=m.phase.value, deadlines=dict(m.deadlines),
               history=[list(h) for h in m.history])
    return row


def migration_from_row(row: object) -> Migration:
    row = _checked(row, "migration")
    try:
        m = Migration(**{name: row[name] for name in _MIGRATION_FIELDS}, strategy=MigrationStrategy(row["strategy"]),
                      phase=MigrationPhase(row["phase"]), deadlines={k: float(v) for k, v in row["deadlines"].items()},
                      history=[(str(p), float(at), str(why)) for p, at, why in row["history"]])
    except (KeyError, TypeError, ValueError) as exc:
        raise RowError(f"a migration row cannot be read: {type(exc).__name__}: {exc}", kind="migration",
                       key=row.get("migration_id") if isinstance(row.get("migration_id"), str) else None) from exc
    return m


# -- drains and notices -------------------------------------------------------------------------------
def drain_row(d: NodeDrain) -> dict[str, Any]:
    return {
        "schema": ROW_SCHEMA, "node_id": d.node_id, "started": d.started, "timeout_s": d.timeout_s, "force": d.force,
        "strategy": d.strategy, "interruption": d.interruption, "interruption_deadline": d.interruption_deadline,
        "phase": d.phase.value, "reason": d.reason, "ray_drain": d.ray_drain, "ended_at": d.ended_at,
        "history": [[p.value, at, why] for p, at, why in d.history],
        "jobs": [j.as_dict() for j in d.snapshot().jobs.values()],
    }


def drain_from_row(row: object) -> NodeDrain:
    row = _checked(row, "drain")
    try:
        d = NodeDrain(row["node_id"], [j["job_id"] for j in row["jobs"]], row["started"], timeout_s=row["timeout_s"],
                      force=row["force"], strategy=row["strategy"], interruption=row["interruption"],
                      interruption_deadline=row["interruption_deadline"])
        d.restore(phase=NodeDrainPhase(row["phase"]), reason=row["reason"], ray_drain=row["ray_drain"],
                  ended_at=row["ended_at"],
                  history=[(NodeDrainPhase(p), float(at), why) for p, at, why in row["history"]],
                  jobs=[DrainJob(j["job_id"], JobDrainStatus(j["status"]), j["migration_id"], j["reason"])
                        for j in row["jobs"]])
        return d
    except (KeyError, TypeError, ValueError) as exc:
        raise RowError(f"a drain row cannot be read: {type(exc).__name__}: {exc}", kind="drain", key=_key(row)) from exc


def notice_row(notice: NodeInterruptionState) -> dict[str, Any]:
    """A reclaim notice: its kind and deadline (the drain it started is its own row)."""
    return {"schema": ROW_SCHEMA, "node_id": notice.node_id, "kind": notice.kind, "deadline": notice.deadline,
            "noticed_at": notice.noticed_at}


def notice_from_row(row: object, drain: NodeDrain | None) -> NodeInterruptionState | None:
    """The notice again, with its drain's snapshot; None when its drain was not kept."""
    row = _checked(row, "notice")
    if drain is None:
        return None
    try:
        return NodeInterruptionState(node_id=row["node_id"], kind=row["kind"], deadline=row["deadline"],
                                     noticed_at=float(row["noticed_at"]), drain=drain.snapshot())
    except (KeyError, TypeError, ValueError) as exc:
        raise RowError(f"a notice row cannot be read: {type(exc).__name__}: {exc}", kind="notice", key=_key(row)) from exc


__all__ = ["ROW_SCHEMA", "RowError", "bundle_from_row", "bundle_row", "drain_from_row", "drain_row", "job_from_row",
           "job_row", "migration_from_row", "migration_row", "notice_from_row", "notice_row", "requirement_from_row", "requirement_row", "spec_from_row",
           "spec_row"]

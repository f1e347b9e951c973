"""Bytes for the jobs store: each record as a JSON row (``fabric.core.jobs.rows``), user parts as a blob.

The one place the scheduler's records become what ``JobStore`` keeps and come back: a job, a
bundle (its row, and its jobs' classes and arguments cloudpickled into one opaque blob: the fabric
never looks inside them), an event, a drain, a reclaim notice. ``from_pickled_*`` read the first
format (schema 0, whole pickled objects) for the upgrade; old class paths load as they were.
"""

from __future__ import annotations

import json
import pickle
from typing import Any, Callable, Iterator, TypeVar

from ray import cloudpickle

from fabric.core.jobs.book import BundleRecord, JobRecord
from fabric.core.jobs.drains import NodeDrain, NodeInterruptionState
from fabric.core.jobs.rows import (
    ROW_SCHEMA, RowError, bundle_from_row, bundle_row, drain_from_row, drain_row, job_from_row, job_row,
    migration_from_row, migration_row, notice_from_row, notice_row,
)
from fabric.core.jobs.migration import Migration

T = TypeVar("T")


def _dumps(row: dict[str, Any]) -> bytes:
    return json.dumps(row, separators=(",", ":"), sort_keys=True, default=_plain).encode()


def _plain(value: Any) -> Any:
    """JSON for the few non-JSON values an event's data may carry (tiers are str enums already)."""
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _loads(blob: bytes | str, kind: str) -> Any:
    try:
        return json.loads(blob)
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        raise RowError(f"a {kind} row is not JSON: {exc}", kind=kind) from exc


def encode_job(rec: JobRecord) -> bytes:
    return _dumps(job_row(rec))


def decode_job(blob: bytes) -> JobRecord:
    return job_from_row(_loads(blob, "job"))


def encode_bundle(rec: BundleRecord) -> tuple[bytes, bytes]:
    """The bundle's row and its user parts' blob (its job classes travel by value, as a driver sent them)."""
    row, user = bundle_row(rec)
    return _dumps(row), cloudpickle.dumps(user)


def decode_bundle(blob: bytes, user_blob: bytes | None) -> BundleRecord:
    if user_blob is None:
        raise RowError("a bundle row has no user parts (its classes and arguments)", kind="bundle")
    return bundle_from_row(_loads(blob, "bundle"), pickle.loads(user_blob))


def encode_event(event: dict[str, Any]) -> bytes:
    return _dumps({"schema": ROW_SCHEMA, **event})


def decode_event(blob: bytes) -> dict[str, Any]:
    row = _loads(blob, "event")
    if not isinstance(row, dict) or not isinstance(row.get("schema"), int) or row["schema"] > ROW_SCHEMA:
        raise RowError(f"an event row of an unknown schema ({row.get('schema') if isinstance(row, dict) else row!r})",
                       kind="event")
    row.pop("schema")
    return row


def encode_drain(d: NodeDrain) -> bytes:
    return _dumps(drain_row(d))


def decode_drain(blob: bytes) -> NodeDrain:
    return drain_from_row(_loads(blob, "drain"))


def encode_migration(m: Migration) -> bytes:
    return _dumps(migration_row(m))


def decode_migration(blob: bytes) -> Migration:
    return migration_from_row(_loads(blob, "migration"))


def encode_notice(notice: NodeInterruptionState) -> bytes:
    return _dumps(notice_row(notice))


def decode_notice(blob: bytes, drain: NodeDrain | None) -> NodeInterruptionState | None:
    return notice_from_row(_loads(blob, "notice"), drain)


def read_rows(store: Any, kind: str, decode: Callable[[bytes], T], who: str) -> Iterator[tuple[str, bytes, T]]:
    """The ``state`` rows of ``kind`` in ``store``, decoded: ``(key, blob, value)`` each. A row that
    cannot be read is said (``[fabric.<who>] ...``) and skipped: the rest are read."""
    for key, blob in store.state(kind):
        try:
            value = decode(blob)
        except Exception as exc:
            print(f"[fabric.{who}] {kind} {key!r} could not be read back: {type(exc).__name__}: {exc}")
            continue
        yield key, blob, value


# -- the first format (schema 0) --------------------------------------------------------------------
def from_pickled_job(blob: bytes) -> bytes:
    """A schema-0 job row (a pickled ``JobRecord``) as a schema-1 row."""
    rec = pickle.loads(blob)
    if not isinstance(rec, JobRecord):
        raise RowError(f"a schema-0 job row holds a {type(rec).__name__}, not a JobRecord", kind="job")
    return encode_job(rec)


def from_pickled_bundle(bundle_id: str, blob: bytes) -> tuple[bytes, bytes]:
    """A schema-0 bundle row (a cloudpickled dict of the bundle, state, reasons, jobs) as a schema-1
    row and its user parts' blob."""
    old = pickle.loads(blob)
    return encode_bundle(BundleRecord(bundle_id, old["bundle"], state=old["state"], reasons=list(old["reasons"]),
                                      jobs=dict(old["jobs"])))


def from_pickled_event(blob: bytes) -> bytes:
    return encode_event(pickle.loads(blob))


__all__ = ["decode_bundle", "decode_drain", "decode_event", "decode_job", "decode_migration", "decode_notice",
           "encode_bundle", "encode_drain", "encode_event", "encode_job", "encode_migration", "encode_notice", "read_rows", "from_pickled_bundle", "from_pickled_event",
           "from_pickled_job"]

"""The registry's durable state: node records in a SQLite file (WAL), with a schema version.

If the orchestrator itself crashes, nothing is lost: state lives in the registry's store, not in memory; a
restarted registry, monitor or scheduler re-reads it and reconciles with Ray's node table. This
module is the store (the record model is ``fabric.core.records``), and nothing else: plain ``sqlite3``, no Ray, so the
registry actor and the unit tests use the very same code. A record leaves ``nodes`` only for the
``collected`` trail (``collect``, ``write``): nothing deletes one outright. The registry's change
feed for followers is ``fabric.store.changes`` (in memory, per registry incarnation).

Layout (schema version 1): ``nodes`` (one JSON record per Ray node id, with the columns a query
needs), ``collected`` (the trail of records garbage-collected after their drain grace), ``kv``
(small JSON documents other actors keep here, e.g. the health monitor's flap history), and
``schema_version``. A file that is not a SQLite database is moved aside (``*.corrupt-<time>``)
and a fresh store is started; a file written by a *newer* schema is refused, never clobbered.

The node records are also held in memory (``FabricStore`` is its file's only writer: one registry
actor): read once when the store opens, kept up to date by every write after it commits, so ``get``
and ``list`` parse no JSON. Heartbeats may be written behind (``heartbeat_flush_s``): ``touch``
then changes only the record in memory and ``flush`` writes every record touched since, in one
transaction. The trade: a store that crashes loses at most the last ``heartbeat_flush_s`` of
``last_seen`` and load updates; never a registration, status change, cordon or any other write,
which are written before the call returns, as always.
"""

from __future__ import annotations

import json
import operator
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from fabric.core.errors import FabricError
from fabric.core.lifecycle import NodeStatus
from fabric.core.records import RegistryRecord, Utilization

__all__ = ["FabricStore", "StoreError", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
    node_id    TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    status     TEXT NOT NULL,
    last_seen  REAL NOT NULL,
    record     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS nodes_name ON nodes(name);
CREATE TABLE IF NOT EXISTS collected (
    node_id      TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    collected_at REAL NOT NULL,
    record       TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_UPSERT = ("INSERT INTO nodes(node_id, name, status, last_seen, record) VALUES (?,?,?,?,?) "
           "ON CONFLICT(node_id) DO UPDATE SET name=excluded.name, status=excluded.status, "
           "last_seen=excluded.last_seen, record=excluded.record")
_HEARTBEAT = ("UPDATE nodes SET last_seen=?, record=json_set(record, '$.last_seen', json(?), '$.utilization', json(?)) "
              "WHERE node_id=?")
_PUT_JSON = "INSERT INTO kv(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value"
_COLLECT = "INSERT OR REPLACE INTO collected(node_id, name, collected_at, record) VALUES (?,?,?,?)"
_by_name = operator.attrgetter("name", "node_id")


def _row(record: RegistryRecord) -> tuple[Any, ...]:
    """The ``nodes`` row of ``record`` (the parameters of ``_UPSERT``)."""
    return (record.node_id, record.name, record.status.value, record.last_seen, record.model_dump_json())


class StoreError(FabricError):
    """The store cannot be used (written by a newer schema, unwritable path); ``path`` says which."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message, path=path)

    def __reduce__(self):
        return (_rebuild_store_error, (self.message, self.path))


def _rebuild_store_error(message: str, path: str | None) -> "StoreError":
    return StoreError(message, path=path)


def connect_wal(path: Path, schema: str) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` as the fabric's stores use it: autocommit (each
    write is its own explicit transaction), shared by an actor's threads, WAL, ``schema`` applied."""
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=10)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(schema)
    except BaseException:
        conn.close()
        raise
    return conn


def open_or_move_aside(path: Path, opener: Callable[[], sqlite3.Connection]) -> tuple[sqlite3.Connection, Path | None]:
    """``opener()``'s connection to the SQLite file ``path`` (its folder made first), and where a
    file SQLite could not read was moved aside first (None when none was): a corrupt store starts
    afresh, and says so, rather than stopping the fabric. ``StoreError`` when the file cannot be
    opened at all (a permission, a missing mount)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the store directory {path.parent}: {exc.strerror}", path=str(path)) from exc
    try:
        return opener(), None
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc):
            raise StoreError(f"cannot open store {path}: {exc}", path=str(path)) from exc
    target = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
    path.rename(target)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    return opener(), target


class FabricStore:
    """Node records in SQLite (WAL), and in memory. Thread-safe for the few calls an actor makes;
    every write is one short transaction, and the records in memory change only once it committed.

    ``heartbeat_flush_s``: None (the default), ``touch`` writes at once like every other write; a
    number of seconds, ``touch`` changes the record in memory only and marks it pending, and the
    owner calls ``flush`` every that many seconds (``close`` flushes too). Any other write of a
    record supersedes its pending heartbeat (the record written is the newer one)."""

    def __init__(self, path: str | Path, heartbeat_flush_s: float | None = None) -> None:
        if heartbeat_flush_s is not None and not heartbeat_flush_s > 0:
            raise ValueError(f"heartbeat_flush_s must be a positive number of seconds or None, got {heartbeat_flush_s!r}")
        self.path = Path(path)
        self.heartbeat_flush_s = heartbeat_flush_s
        """Heartbeats written behind, flushed by the owner every that many seconds (None: at once)."""
        self.recovered_from: Path | None = None
        """Where a corrupt file was moved aside when this store opened, if one was."""
        self._lock = threading.Lock()
        self._records: dict[str, RegistryRecord] = {}  # node id -> record, as committed (plus pending heartbeats)
        self._unreadable: dict[str, str] = {}  # node id -> a row's JSON that does not validate (reading it raises, as ever)
        self._order: list[str] | None = None  # node ids by name then id; None: to sort again
        self._collected: set[str] = set()
        self._dirty: set[str] = set()  # node ids whose heartbeat is not written yet
        self._conn, self.recovered_from = open_or_move_aside(self.path, self._open)
        try:
            self._load()
        except BaseException:
            self._conn.close()
            raise

    # -- opening ----------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        conn = connect_wal(self.path, _SCHEMA)
        try:
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                conn.execute("INSERT INTO schema_version(version) VALUES (?)", (SCHEMA_VERSION,))
            elif row[0] > SCHEMA_VERSION:
                raise StoreError(
                    f"store {self.path} has schema version {row[0]}, newer than this fabric's {SCHEMA_VERSION}: "
                    "refusing to use it (upgrade the fabric, or point store.url or store.path elsewhere)",
                    path=str(self.path),
                )
        except BaseException:
            conn.close()
            raise
        return conn

    def _load(self) -> None:
        """Read every node record and collected id into memory, once. A row that does not validate
        is kept as it is: reading that record raises as it did before the records were cached."""
        for node_id, text in self._conn.execute("SELECT node_id, record FROM nodes"):
            try:
                self._records[node_id] = RegistryRecord.model_validate_json(text)
            except ValueError:
                self._unreadable[node_id] = text
        self._collected = {r[0] for r in self._conn.execute("SELECT node_id FROM collected")}

    @property
    def schema_version(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT version FROM schema_version").fetchone()[0])

    @property
    def journal_mode(self) -> str:
        with self._lock:
            return str(self._conn.execute("PRAGMA journal_mode").fetchone()[0])

    def close(self) -> None:
        """Write the pending heartbeats, then close (the connection closes even when that fails)."""
        with self._lock:
            try:
                self._flush()
            finally:
                self._conn.close()

    # -- the records in memory (the lock held) ---------------------------------------------------
    def _cached(self, node_id: str) -> RegistryRecord | None:
        record = self._records.get(node_id)
        if record is None and node_id in self._unreadable:
            RegistryRecord.model_validate_json(self._unreadable[node_id])  # raises, naming what is wrong
        return record

    def _put(self, record: RegistryRecord) -> None:
        """``record`` was written: it is the node's record now, with no heartbeat pending."""
        before = self._records.get(record.node_id)
        if before is None or before.name != record.name:
            self._order = None
        self._records[record.node_id] = record
        self._unreadable.pop(record.node_id, None)
        self._dirty.discard(record.node_id)

    def _gone(self, node_id: str) -> None:
        """The node's record went to the collected trail."""
        self._records.pop(node_id, None)
        self._unreadable.pop(node_id, None)
        self._dirty.discard(node_id)
        self._collected.add(node_id)
        self._order = None

    # -- node records --------------------------------------------------------------------------
    def upsert(self, record: RegistryRecord) -> None:
        """Insert or replace the record of ``record.node_id``."""
        with self._lock:
            self._conn.execute(_UPSERT, _row(record))
            self._put(record)

    def get(self, node_id: str) -> RegistryRecord | None:
        with self._lock:
            return self._cached(node_id)

    def list(self, statuses: Iterable[NodeStatus] | None = None) -> list[RegistryRecord]:
        """All records (optionally only those in ``statuses``), ordered by name then id."""
        with self._lock:
            if self._unreadable:
                RegistryRecord.model_validate_json(next(iter(self._unreadable.values())))  # raises, as the listing did
            if self._order is None:
                self._order = [r.node_id for r in sorted(self._records.values(), key=_by_name)]
            records = [self._records[node_id] for node_id in self._order]
        if statuses is not None:
            wanted = set(statuses)
            records = [r for r in records if r.status in wanted]
        return records

    def collect(self, node_id: str, at: float) -> RegistryRecord | None:
        """Move the record to the ``collected`` trail (status ``dead``); None when unknown."""
        with self._lock:
            record = self._cached(node_id)
            if record is None:
                return None
            dead = record.model_copy(update={"status": NodeStatus.DEAD, "status_since": at})
            self._conn.execute("BEGIN")
            try:
                self._conn.execute("DELETE FROM nodes WHERE node_id=?", (node_id,))
                self._conn.execute(_COLLECT, (node_id, dead.name, at, dead.model_dump_json()))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._gone(node_id)
        return dead

    def collected(self) -> list[RegistryRecord]:
        with self._lock:
            rows = self._conn.execute("SELECT record FROM collected ORDER BY collected_at").fetchall()
        return [RegistryRecord.model_validate_json(r[0]) for r in rows]

    def collected_ids(self) -> set[str]:
        with self._lock:
            return set(self._collected)

    def was_collected(self, node_id: str) -> bool:
        """Whether ``node_id`` is on the collected trail (what every registration asks: no copy of the set)."""
        return node_id in self._collected

    def write(self, upserts: Iterable[RegistryRecord] = (), collect: Iterable[tuple[str, float]] = (),
              documents: dict[str, Any] | None = None) -> list[RegistryRecord]:
        """Several changes in one transaction, all or none: insert or replace ``upserts``, move the
        records of ``collect`` (node id, when) to the ``collected`` trail as ``dead``, and put the
        small ``documents``. Returns the records collected (an unknown id collects nothing)."""
        upserts = list(upserts)
        docs = {key: json.dumps(value) for key, value in (documents or {}).items()}  # fail before writing
        dead: list[RegistryRecord] = []
        with self._lock:
            staged: dict[str, RegistryRecord | None] = {}  # what this transaction wrote so far (None: collected)
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for record in upserts:
                    self._conn.execute(_UPSERT, _row(record))
                    staged[record.node_id] = record
                for node_id, at in collect:
                    held = staged[node_id] if node_id in staged else self._cached(node_id)
                    if held is None:
                        continue
                    gone = held.model_copy(update={"status": NodeStatus.DEAD, "status_since": at})
                    self._conn.execute("DELETE FROM nodes WHERE node_id=?", (node_id,))
                    self._conn.execute(_COLLECT, (node_id, gone.name, at, gone.model_dump_json()))
                    staged[node_id] = None
                    dead.append(gone)
                for key, value in docs.items():
                    self._conn.execute(_PUT_JSON, (key, value))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            for node_id, now in staged.items():
                if now is None:
                    self._gone(node_id)
                else:
                    self._put(now)
        return dead

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every table, in a stable order: two dumps are equal exactly when the stored
        state is (tests compare one from before a refused message with one from after). Pending
        heartbeats are written first."""
        with self._lock:
            self._flush()
            tables = [r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
            return {t: sorted(self._conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}

    def touch(self, node_id: str, last_seen: float, utilization: Utilization | None = None) -> RegistryRecord | None:
        """A heartbeat: update ``last_seen`` (and utilisation); the updated record, None when unknown.
        Written at once, or (``heartbeat_flush_s``) only marked pending for the next ``flush``."""
        with self._lock:
            record = self._cached(node_id)
            if record is None:
                return None
            update: dict[str, Any] = {"last_seen": max(record.last_seen, last_seen)}
            if utilization is not None:
                update["utilization"] = utilization
            record = record.model_copy(update=update)  # the values are validated already: no validation again
            if self.heartbeat_flush_s is None:
                self._conn.execute(_UPSERT, _row(record))
            else:
                self._dirty.add(node_id)
            self._records[node_id] = record  # name unchanged: the order holds
        return record

    @property
    def pending_heartbeats(self) -> int:
        """How many records hold a heartbeat ``flush`` has not written yet."""
        return len(self._dirty)

    def flush(self) -> int:
        """Write every pending heartbeat, all in one transaction; how many records it wrote. When
        it fails they stay pending (the next flush writes them)."""
        with self._lock:
            return self._flush()

    def _flush(self) -> int:
        """Only a heartbeat's two fields go: ``last_seen`` and ``utilization`` are set inside the
        stored JSON (SQLite's ``json_set``, the values as their exact JSON text), so a flush does not
        serialise whole records; a record whose row is missing is written whole."""
        if not self._dirty:
            return 0
        records = [self._records[node_id] for node_id in self._dirty]
        beats = [(r.last_seen, repr(float(r.last_seen)), r.utilization.model_dump_json(), r.node_id) for r in records]
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            try:
                whole = self._conn.executemany(_HEARTBEAT, beats).rowcount != len(beats)  # a row not there
            except sqlite3.OperationalError:  # an SQLite built without its JSON functions
                whole = True
            if whole:
                self._conn.executemany(_UPSERT, [_row(r) for r in records])
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._dirty.clear()
        return len(records)

    def last_seen(self) -> dict[str, float]:
        """Latest heartbeat per node id (as stored: pending heartbeats are written first)."""
        with self._lock:
            self._flush()
            return {r[0]: float(r[1]) for r in self._conn.execute("SELECT node_id, last_seen FROM nodes")}

    # -- small documents -------------------------------------------------------------------------
    def put_json(self, key: str, value: Any) -> None:
        with self._lock:
            self._conn.execute(_PUT_JSON, (key, json.dumps(value)))

    def get_json(self, key: str, default: Any = None) -> Any:
        with self._lock:
            row = self._conn.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default


__all__ = ["FabricStore", "StoreError", "SCHEMA_VERSION"]

"""The scheduler's durable jobs: ``JobStore`` (SQLite, WAL), beside the registry's node store.

Tables (schema version 1): ``jobs`` (one row per job: its record, and the pickled class and
constructor arguments it is started from), ``bundles`` (one row per bundle, and its jobs' user parts),
``events`` (the job and bundle events, numbered, the newest ``MAX_EVENTS`` kept), ``state`` (the rest
a restart must resume, by kind and key: node drains, reclaim notices), ``meta`` (small JSON documents
about the store itself: ``cluster``, the Ray cluster that wrote it, first and last seen; ``inherited``,
what a new cluster found of another's jobs; added to a schema-1 file when it is opened),
``decisions`` and ``decision_parts`` (the placement decisions on the record and the fleet slices,
node records, capabilities and settings they share: ``fabric.core.decisions.DecisionBook``'s
compressed blobs; added to a schema-1 file when it is opened) and ``schema_version``. The
store treats records as bytes; ``fabric.store.job_rows`` makes them versioned JSON rows (user classes
and arguments stay opaque blobs). A scheduler that restarts reads everything back from here.

Schema 0 (no ``schema_version`` table: whole pickled objects) is upgraded when it is opened: the file
is first copied aside (``*.v0-<time>``), then every row is rewritten in one transaction; a row that
cannot be read is kept in ``legacy`` (``upgrade_problems`` says which) rather than dropped. A file
of a *newer* schema is refused (``StoreError``) and left as it is. A file SQLite cannot read is
moved aside (as the node store does) and a fresh one is started; what it held is lost, so the
scheduler says so (``recovered_from``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from fabric.store import StoreError, connect_wal, open_or_move_aside

SCHEMA_VERSION = 1
MAX_EVENTS = 10_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, record BLOB NOT NULL, payload BLOB);
CREATE TABLE IF NOT EXISTS bundles (bundle_id TEXT PRIMARY KEY, record BLOB NOT NULL, payload BLOB);
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS state (kind TEXT NOT NULL, key TEXT NOT NULL, record BLOB NOT NULL, PRIMARY KEY (kind, key));
CREATE TABLE IF NOT EXISTS legacy (kind TEXT NOT NULL, key TEXT NOT NULL, record BLOB NOT NULL, problem TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS decisions (seq INTEGER PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS decision_parts (key TEXT PRIMARY KEY, record BLOB NOT NULL);
"""


class JobStore:
    """Jobs, bundles, their events and the state a restart resumes, in one SQLite file (thread-safe;
    short transactions)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.upgraded_from: int | None = None
        """The schema the file had when this store upgraded it on open (None: no upgrade)."""
        self.upgrade_backup: Path | None = None
        """The copy of the file taken before that upgrade."""
        self.upgrade_problems: list[str] = []
        """Rows the upgrade could not read (kept in ``legacy``), one line each."""
        self._conn, self.recovered_from = open_or_move_aside(self.path, self._open)

    def _open(self) -> sqlite3.Connection:
        conn = connect_wal(self.path, "")
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = SCHEMA_VERSION
            if "schema_version" in tables:
                row = conn.execute("SELECT version FROM schema_version").fetchone()
                version = SCHEMA_VERSION if row is None else int(row[0])
            elif "jobs" in tables:
                version = 0
            if version > SCHEMA_VERSION:
                raise StoreError(f"jobs store {self.path} has schema version {version}, newer than this fabric's "
                                 f"{SCHEMA_VERSION}: refusing to use it (upgrade the fabric, or point store.url "
                                 "elsewhere); it is left as it is", path=str(self.path))
            if version == 0:
                self._upgrade_from_0(conn)
            conn.executescript(_SCHEMA)
            if conn.execute("SELECT version FROM schema_version").fetchone() is None:
                conn.execute("INSERT INTO schema_version(version) VALUES (?)", (SCHEMA_VERSION,))
        except BaseException:
            conn.close()
            raise
        return conn

    def _upgrade_from_0(self, conn: sqlite3.Connection) -> None:
        from fabric.store.job_rows import from_pickled_bundle, from_pickled_event, from_pickled_job

        backup = self.path.with_name(f"{self.path.name}.v0-{int(time.time())}")
        copy = sqlite3.connect(str(backup))
        try:
            conn.backup(copy)
        finally:
            copy.close()
        problems: list[str] = []
        conn.execute("BEGIN")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS legacy (kind TEXT NOT NULL, key TEXT NOT NULL, "
                         "record BLOB NOT NULL, problem TEXT NOT NULL)")

            def keep(kind: str, key: str, record: bytes, exc: BaseException) -> None:
                problem = f"{kind} {key}: {type(exc).__name__}: {exc}"
                problems.append(problem)
                conn.execute("INSERT INTO legacy(kind, key, record, problem) VALUES (?, ?, ?, ?)", (kind, key, record, problem))

            for job_id, record in conn.execute("SELECT job_id, record FROM jobs").fetchall():
                try:
                    conn.execute("UPDATE jobs SET record = ? WHERE job_id = ?", (from_pickled_job(record), job_id))
                except Exception as exc:
                    keep("job", job_id, record, exc)
                    conn.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))
            columns = {r[1] for r in conn.execute("PRAGMA table_info(bundles)")}
            if "payload" not in columns:
                conn.execute("ALTER TABLE bundles ADD COLUMN payload BLOB")
            for bundle_id, record in conn.execute("SELECT bundle_id, record FROM bundles").fetchall():
                try:
                    row, user = from_pickled_bundle(bundle_id, record)
                    conn.execute("UPDATE bundles SET record = ?, payload = ? WHERE bundle_id = ?", (row, user, bundle_id))
                except Exception as exc:
                    keep("bundle", bundle_id, record, exc)
                    conn.execute("DELETE FROM bundles WHERE bundle_id = ?", (bundle_id,))
            for seq, record in conn.execute("SELECT seq, record FROM events").fetchall():
                try:
                    conn.execute("UPDATE events SET record = ? WHERE seq = ?", (from_pickled_event(record), seq))
                except Exception as exc:
                    keep("event", str(seq), record, exc)
                    conn.execute("DELETE FROM events WHERE seq = ?", (seq,))
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO schema_version(version) VALUES (?)", (SCHEMA_VERSION,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self.upgraded_from, self.upgrade_backup, self.upgrade_problems = 0, backup, problems

    @property
    def schema_version(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT version FROM schema_version").fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- jobs ---------------------------------------------------------------------------------------
    def write(self, jobs: Iterable[tuple[str, bytes | None, bytes | None]] = (),
              bundles: Iterable[tuple[str, bytes | None] | tuple[str, bytes | None, bytes | None]] = (),
              state: Iterable[tuple[str, str, bytes | None]] = ()) -> None:
        """One transaction: each ``(job_id, record, payload)`` upserted (a None record deletes the
        row; a None payload keeps the one stored), each ``(bundle_id, record[, payload])`` likewise,
        each ``(kind, key, record)`` of the ``state`` table likewise."""
        with self._lock:
            c = self._conn
            c.execute("BEGIN")
            try:
                for job_id, record, payload in jobs:
                    if record is None:
                        c.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))
                    elif payload is None:
                        cur = c.execute("UPDATE jobs SET record = ? WHERE job_id = ?", (record, job_id))
                        if cur.rowcount == 0:
                            c.execute("INSERT INTO jobs(job_id, record, payload) VALUES (?, ?, NULL)", (job_id, record))
                    else:
                        c.execute("INSERT OR REPLACE INTO jobs(job_id, record, payload) VALUES (?, ?, ?)",
                                  (job_id, record, payload))
                for bundle_id, brecord, *rest in bundles:
                    bpayload = rest[0] if rest else None
                    if brecord is None:
                        c.execute("DELETE FROM bundles WHERE bundle_id = ?", (bundle_id,))
                    elif bpayload is None:
                        cur = c.execute("UPDATE bundles SET record = ? WHERE bundle_id = ?", (brecord, bundle_id))
                        if cur.rowcount == 0:
                            c.execute("INSERT INTO bundles(bundle_id, record, payload) VALUES (?, ?, NULL)", (bundle_id, brecord))
                    else:
                        c.execute("INSERT OR REPLACE INTO bundles(bundle_id, record, payload) VALUES (?, ?, ?)",
                                  (bundle_id, brecord, bpayload))
                for kind, key, srecord in state:
                    if srecord is None:
                        c.execute("DELETE FROM state WHERE kind = ? AND key = ?", (kind, key))
                    else:
                        c.execute("INSERT OR REPLACE INTO state(kind, key, record) VALUES (?, ?, ?)", (kind, key, srecord))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

    def jobs(self) -> list[tuple[str, bytes]]:
        with self._lock:
            return [(r[0], r[1]) for r in self._conn.execute("SELECT job_id, record FROM jobs ORDER BY job_id")]

    def payload(self, job_id: str) -> bytes | None:
        with self._lock:
            row = self._conn.execute("SELECT payload FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else row[0]

    def bundles(self) -> list[tuple[str, bytes]]:
        with self._lock:
            return [(r[0], r[1]) for r in self._conn.execute("SELECT bundle_id, record FROM bundles ORDER BY bundle_id")]

    def bundle_payload(self, bundle_id: str) -> bytes | None:
        """A bundle's user parts (its jobs' classes and arguments), or None."""
        with self._lock:
            row = self._conn.execute("SELECT payload FROM bundles WHERE bundle_id = ?", (bundle_id,)).fetchone()
        return None if row is None else row[0]

    def state(self, kind: str) -> list[tuple[str, bytes]]:
        """The ``state`` rows of one kind (``drain``, ``notice``...), by key."""
        with self._lock:
            return [(r[0], r[1]) for r in self._conn.execute(
                "SELECT key, record FROM state WHERE kind = ? ORDER BY key", (kind,))]

    def legacy(self) -> list[tuple[str, str, bytes, str]]:
        """Rows an upgrade could not read: ``(kind, key, record, problem)``."""
        with self._lock:
            return [tuple(r) for r in self._conn.execute("SELECT kind, key, record, problem FROM legacy")]  # type: ignore[misc]

    # -- meta ---------------------------------------------------------------------------------------
    def get_meta(self, key: str) -> Any:
        """The ``meta`` document ``key`` (None when there is none, or it is not JSON)."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        try:
            return None if row is None else json.loads(row[0])
        except ValueError:
            return None

    def put_meta(self, documents: dict[str, Any]) -> None:
        """Put ``meta`` documents in one transaction (a None value deletes its key)."""
        rows = [(k, None if v is None else json.dumps(v)) for k, v in documents.items()]
        with self._lock:
            c = self._conn
            c.execute("BEGIN")
            try:
                for key, value in rows:
                    if value is None:
                        c.execute("DELETE FROM meta WHERE key = ?", (key,))
                    else:
                        c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

    # -- events ---------------------------------------------------------------------------------------
    def append_events(self, events: Iterable[tuple[int, bytes]]) -> None:
        rows = list(events)
        if not rows:
            return
        with self._lock:
            c = self._conn
            c.execute("BEGIN")
            try:
                c.executemany("INSERT OR REPLACE INTO events(seq, record) VALUES (?, ?)", rows)
                c.execute("DELETE FROM events WHERE seq <= ?", (rows[-1][0] - MAX_EVENTS,))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

    # -- decisions on the record ------------------------------------------------------------------------
    def write_decisions(self, rows: Iterable[tuple[int, bytes | None]], parts: Iterable[tuple[str, bytes | None]]) -> None:
        """Keep (a blob) or forget (None) decision rows by event number and their shared parts by key, in one transaction."""
        rows, parts = list(rows), list(parts)
        if not rows and not parts:
            return
        with self._lock:
            c = self._conn
            c.execute("BEGIN")
            try:
                c.executemany("INSERT OR REPLACE INTO decision_parts(key, record) VALUES (?, ?)",
                              [(k, b) for k, b in parts if b is not None])
                c.executemany("DELETE FROM decision_parts WHERE key = ?", [(k,) for k, b in parts if b is None])
                c.executemany("INSERT OR REPLACE INTO decisions(seq, record) VALUES (?, ?)", [(q, b) for q, b in rows if b is not None])
                c.executemany("DELETE FROM decisions WHERE seq = ?", [(q,) for q, b in rows if b is None])
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

    def decisions(self) -> tuple[list[tuple[int, bytes]], dict[str, bytes]]:
        """Every decision row (by event number) and every shared part (by key)."""
        with self._lock:
            rows = [(r[0], r[1]) for r in self._conn.execute("SELECT seq, record FROM decisions ORDER BY seq")]
            parts = {r[0]: r[1] for r in self._conn.execute("SELECT key, record FROM decision_parts")}
        return rows, parts

    def events(self, since: int = 0, limit: int = MAX_EVENTS) -> list[tuple[int, bytes]]:
        with self._lock:
            return [(r[0], r[1]) for r in self._conn.execute(
                "SELECT seq, record FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (since, limit))]

    def last_event(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT MAX(seq) FROM events").fetchone()
        return int(row[0] or 0)

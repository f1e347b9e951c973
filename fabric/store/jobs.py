"""The scheduler's durable jobs: ``JobStore`` (SQLite, WAL), beside the registry's node store.

Three tables: ``jobs`` (one row per job: its record, and the pickled class and constructor
arguments it is started from), ``bundles`` (one row per bundle), ``events`` (the job and bundle
events, numbered, the newest ``MAX_EVENTS`` kept). Rows are opaque bytes to the store: the
scheduler pickles what it keeps. A scheduler that restarts reads everything back from here.

A file SQLite cannot read is moved aside (as the node store does) and a fresh one is started;
what it held is lost, so the scheduler says so (``recovered_from``).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Iterable

from fabric.store import connect_wal, open_or_move_aside

MAX_EVENTS = 10_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, record BLOB NOT NULL, payload BLOB);
CREATE TABLE IF NOT EXISTS bundles (bundle_id TEXT PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, record BLOB NOT NULL);
"""


class JobStore:
    """Jobs, bundles and their events in one SQLite file (thread-safe; short transactions)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn, self.recovered_from = open_or_move_aside(self.path, self._open)

    def _open(self) -> sqlite3.Connection:
        return connect_wal(self.path, _SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- jobs ---------------------------------------------------------------------------------------
    def write(self, jobs: Iterable[tuple[str, bytes | None, bytes | None]] = (),
              bundles: Iterable[tuple[str, bytes | None]] = ()) -> None:
        """One transaction: each ``(job_id, record, payload)`` upserted (a None record deletes the
        row; a None payload keeps the one stored), each ``(bundle_id, record)`` likewise."""
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
                for bundle_id, brecord in bundles:
                    if brecord is None:
                        c.execute("DELETE FROM bundles WHERE bundle_id = ?", (bundle_id,))
                    else:
                        c.execute("INSERT OR REPLACE INTO bundles(bundle_id, record) VALUES (?, ?)", (bundle_id, brecord))
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

    def events(self, since: int = 0, limit: int = MAX_EVENTS) -> list[tuple[int, bytes]]:
        with self._lock:
            return [(r[0], r[1]) for r in self._conn.execute(
                "SELECT seq, record FROM events WHERE seq > ? ORDER BY seq LIMIT ?", (since, limit))]

    def last_event(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT MAX(seq) FROM events").fetchone()
        return int(row[0] or 0)

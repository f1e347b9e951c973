"""The jobs store's format: versioned JSON rows, and the upgrade from the first format (schema 0).

``tests/fixtures/store/v0/fabric.jobs.db`` was written by ``scripts/make_store_fixture_v0.py`` with
the scheduler of the day before the rows became JSON (pickled objects, no schema version): a running
job, a bundle with a backup replica, a broken bundle and their events. Today's store upgrades a copy
of it on open, and a job runner reads everything back from the upgraded rows."""

import json
import pickle
import shutil
import sqlite3
from pathlib import Path

import pytest

from fabric.core.jobs import JobState
from fabric.core.jobs.rows import ROW_SCHEMA, RowError, job_from_row
from fabric.store import StoreError
from fabric.store.job_rows import decode_bundle, decode_event, decode_job
from fabric.store.jobs import SCHEMA_VERSION, JobStore

FIXTURE = Path(__file__).parent.parent / "fixtures" / "store" / "v0" / "fabric.jobs.db"


@pytest.fixture
def v0(tmp_path):
    path = tmp_path / "fabric.jobs.db"
    shutil.copy(FIXTURE, path)
    return path


def test_the_fixture_is_the_first_format(v0):
    conn = sqlite3.connect(v0)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "schema_version" not in tables and {"jobs", "bundles", "events"} <= tables
    (blob,) = conn.execute("SELECT record FROM jobs WHERE job_id = 'solo'").fetchone()
    assert type(pickle.loads(blob)).__name__ == "JobRecord"  # the old pickled class path still loads
    conn.close()


def test_a_first_format_store_is_upgraded_to_json_rows_and_reads_back_whole(v0):
    store = JobStore(v0)
    assert store.upgraded_from == 0 and store.schema_version == SCHEMA_VERSION
    assert store.upgrade_problems == [] and store.legacy() == []
    assert store.upgrade_backup is not None and store.upgrade_backup.exists()  # the old file, copied first
    jobs = {job_id: decode_job(blob) for job_id, blob in store.jobs()}
    for job_id, blob in store.jobs():
        assert json.loads(blob)["schema"] == ROW_SCHEMA
    assert jobs["solo"].state is JobState.RUNNING and jobs["solo"].binding is not None
    assert jobs["solo"].spec.on_runtime_failure == "prefer_spare"
    assert store.payload("solo") is not None  # the class and arguments: an opaque blob, kept
    pair = [r for r in jobs.values() if r.bundle_id == "pair"]
    assert sorted((r.replica, r.spec.name) for r in pair) == [(0, "encoder"), (0, "muxer"), (1, "encoder"), (1, "muxer")]
    assert all(r.state is JobState.RUNNING for r in pair)
    (once,) = [r for r in jobs.values() if r.bundle_id == "fragile"]
    assert once.state is JobState.FAILED and "restart ceiling" in once.reason
    bundles = {bid: decode_bundle(blob, store.bundle_payload(bid)) for bid, blob in store.bundles()}
    assert bundles["pair"].state == "live" and bundles["pair"].bundle.replica_count == 2
    assert bundles["pair"].bundle.job("encoder").cls.__name__ == "Encoder"  # the user's class, by value
    assert bundles["pair"].bundle.job("encoder").backup_overrides == {"rate": 30}
    assert bundles["pair"].bundle.job("muxer").co_locate_with == ["encoder"]
    assert bundles["fragile"].state == "broken" and bundles["fragile"].reasons
    assert set(bundles["pair"].jobs.values()) <= {r.job_id for r in pair}  # the book re-links the rest on load
    events = [decode_event(blob) for _, blob in store.events(0)]
    assert [e["seq"] for e in events] == list(range(1, 39))
    assert {"bundle_updated", "bundle_broken", "job_state", "placement_decision"} <= {e["kind"] for e in events}
    store.close()
    again = JobStore(v0)  # a second open finds schema 1: nothing to upgrade
    assert again.upgraded_from is None and len(again.jobs()) == len(jobs)


def test_a_job_runner_reads_the_upgraded_store_back(v0, tmp_path):
    from test_job_runner import FakeLauncher, make
    from test_scheduling import Clock

    shutil.copy(v0, tmp_path / "jobs.db")
    sched = make(tmp_path, FakeLauncher(), Clock())
    runner = sched.jobs
    assert runner.store.upgraded_from == 0
    assert runner.book.jobs["solo"].state is JobState.RUNNING
    assert runner.book.bundles["fragile"].state == "broken"
    pair = {r.job_id for r in runner.book.jobs.values() if r.bundle_id == "pair"}
    assert set(runner.book.bundles["pair"].jobs.values()) == pair and len(pair) == 4
    assert runner.seq == 38 and runner.events[-1]["seq"] == 38
    assert runner.book.validate_state() == []


def test_a_row_the_upgrade_cannot_read_is_kept_aside_not_dropped(v0):
    conn = sqlite3.connect(v0)
    conn.execute("INSERT INTO jobs(job_id, record, payload) VALUES ('broken', X'00010203', NULL)")
    conn.commit()
    conn.close()
    store = JobStore(v0)
    assert [k for k, *_ in store.legacy()] == ["job"] and "broken" in store.upgrade_problems[0]
    assert "broken" not in dict(store.jobs()) and "solo" in dict(store.jobs())


def test_a_store_of_a_newer_schema_is_refused_and_left_as_it_is(tmp_path):
    path = tmp_path / "fabric.jobs.db"
    JobStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="newer than this fabric") as err:
        JobStore(path)
    assert err.value.path == str(path) and path.read_bytes() == before
    assert not list(tmp_path.glob("*.corrupt-*"))  # refused, not moved aside


def test_a_row_of_a_newer_schema_is_refused_naming_it():
    with pytest.raises(RowError, match="newer") as err:
        job_from_row({"schema": ROW_SCHEMA + 1, "job_id": "j1"})
    assert err.value.kind == "job" and err.value.key == "j1"
    assert pickle.loads(pickle.dumps(err.value)).key == "j1"

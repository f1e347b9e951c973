"""The scheduler's durable jobs (``fabric.store.jobs.JobStore``): rows written in one transaction,
read back by a new process, events numbered and trimmed, a corrupt file moved aside."""

from fabric.store import jobs as jobstore
from fabric.store.jobs import JobStore


def test_jobs_bundles_and_payloads_survive_a_reopen(tmp_path):
    path = tmp_path / "fabric.jobs.db"
    s = JobStore(path)
    s.write([("j1", b"rec1", b"payload1"), ("j2", b"rec2", b"payload2")], [("b1", b"bundle")])
    s.write([("j1", b"rec1-new", None)])  # a record update keeps the stored payload
    s.write([("j2", None, None)], [("b1", None)])  # deleted
    s.close()
    again = JobStore(path)
    assert again.jobs() == [("j1", b"rec1-new")] and again.payload("j1") == b"payload1"
    assert again.payload("j2") is None and again.bundles() == []
    assert again.recovered_from is None


def test_events_are_numbered_and_only_the_newest_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(jobstore, "MAX_EVENTS", 5)
    s = JobStore(tmp_path / "j.db")
    s.append_events([(i, b"e%d" % i) for i in range(1, 9)])
    assert [seq for seq, _ in s.events(0)] == [4, 5, 6, 7, 8] and s.last_event() == 8
    assert [seq for seq, _ in s.events(6)] == [7, 8]


def test_a_corrupt_file_is_moved_aside_and_a_fresh_store_started(tmp_path):
    path = tmp_path / "fabric.jobs.db"
    path.write_bytes(b"this is not a database" * 100)
    s = JobStore(path)
    assert s.recovered_from is not None and s.recovered_from.read_bytes().startswith(b"this is not")
    s.write([("j", b"r", b"p")])
    assert s.jobs() == [("j", b"r")]

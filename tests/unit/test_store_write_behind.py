"""The registry's store holds its node records in memory and may write heartbeats behind (issue 22).

``get`` and ``list`` answer from memory, kept up to date by every write; with ``heartbeat_flush_s``
a heartbeat changes the record in memory only, and ``flush`` (the owner's timer, ``close``, a read
of the file) writes every pending one in one transaction. Any other write of a record supersedes
its pending heartbeat."""

from __future__ import annotations

import sqlite3

import pytest

from fabric.core.capabilities import NodeCapabilities
from fabric.core.lifecycle import NodeStatus
from fabric.core.records import RegistryRecord, Utilization
from fabric.store import FabricStore


def rec(node_id="n1", name="box", **kw) -> RegistryRecord:
    capabilities = NodeCapabilities(name=name, cpu_logical=4, cpu_physical=2, cpu_usable=4, memory_mib=8192)
    return RegistryRecord(node_id=node_id, name=name, capabilities=capabilities, labels={"fabric.io/tier": capabilities.tier.value}, **kw)


def on_disk(path, node_id="n1") -> float | None:
    """``last_seen`` of ``node_id`` as another connection to the file reads it (None: no row)."""
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT last_seen FROM nodes WHERE node_id=?", (node_id,)).fetchone()
        return None if row is None else float(row[0])
    finally:
        conn.close()


@pytest.fixture
def behind(tmp_path):
    path = tmp_path / "fabric.db"
    store = FabricStore(path, heartbeat_flush_s=0.5)
    yield store, path
    try:
        store.close()
    except sqlite3.ProgrammingError:  # closed by the test
        pass


def test_get_answers_from_memory_after_every_write(tmp_path):
    s = FabricStore(tmp_path / "f.db")
    a, b = rec("n1", "alpha", last_seen=1.0), rec("n2", "beta")
    s.upsert(a)
    assert s.get("n1") is a  # the record written, not a parse of its JSON
    s.touch("n1", 5.0, Utilization(cpu_percent=30))
    assert s.get("n1").last_seen == 5.0 and s.get("n1").utilization.cpu_percent == 30
    s.write([b], documents={"k": 1})
    assert s.get("n2") == b
    assert s.collect("n1", at=9.0).status is NodeStatus.DEAD and s.get("n1") is None
    s.write(collect=[("n2", 10.0)])
    assert s.get("n2") is None and s.list() == []
    assert s.collected_ids() == {"n1", "n2"} and s.was_collected("n2") and not s.was_collected("n3")


def test_list_from_memory_keeps_the_order_and_the_status_filter(tmp_path):
    s = FabricStore(tmp_path / "f.db")
    s.upsert(rec("n3", "beta"))
    s.upsert(rec("n2", "alpha", status=NodeStatus.OFFLINE))
    s.upsert(rec("n1", "beta"))
    assert [r.node_id for r in s.list()] == ["n2", "n1", "n3"]
    s.upsert(rec("n1", "gamma"))  # a new name moves it
    assert [r.node_id for r in s.list()] == ["n2", "n3", "n1"]
    assert [r.node_id for r in s.list([NodeStatus.OFFLINE])] == ["n2"]
    s.close()
    again = FabricStore(tmp_path / "f.db")
    assert [r.node_id for r in again.list()] == ["n2", "n3", "n1"]


def test_a_deferred_heartbeat_reaches_the_file_only_when_flushed(behind):
    s, path = behind
    s.upsert(rec(last_seen=10.0))
    r = s.touch("n1", 12.0, Utilization(cpu_percent=70))
    assert r.last_seen == 12.0 and s.get("n1").last_seen == 12.0 and s.pending_heartbeats == 1
    assert on_disk(path) == 10.0  # not in SQLite yet
    assert s.flush() == 1 and s.pending_heartbeats == 0
    assert on_disk(path) == 12.0
    assert s.flush() == 0


def test_a_flush_writes_every_pending_heartbeat_in_one_go(behind):
    s, path = behind
    for i in range(5):
        s.upsert(rec(f"n{i}", f"box{i}", last_seen=1.0))
    for i in range(5):
        s.touch(f"n{i}", 2.0 + i)
    s.touch("n0", 3.0)  # twice: one pending record
    assert s.pending_heartbeats == 5 and s.flush() == 5
    assert [on_disk(path, f"n{i}") for i in range(5)] == [3.0, 3.0, 4.0, 5.0, 6.0]


def test_a_later_write_is_not_overwritten_by_an_older_pending_heartbeat(behind):
    s, path = behind
    s.upsert(rec(last_seen=10.0))
    s.touch("n1", 12.0)
    s.upsert(rec(last_seen=11.0, status=NodeStatus.DRAINING))  # written after the heartbeat: it wins
    assert s.pending_heartbeats == 0
    s.flush()
    assert on_disk(path) == 11.0 and s.get("n1").status is NodeStatus.DRAINING
    s.touch("n1", 13.0)
    s.write([s.get("n1").model_copy(update={"cordoned": True})])  # built on the heartbeat: it carries it
    assert s.pending_heartbeats == 0 and on_disk(path) == 13.0
    s.touch("n1", 14.0)
    s.write(collect=[("n1", 15.0)])
    assert s.pending_heartbeats == 0 and on_disk(path) is None
    assert s.collected()[0].last_seen == 14.0 and s.collected_ids() == {"n1"}
    assert s.touch("n1", 16.0) is None


def test_close_flushes_and_a_reopened_store_reads_what_was_flushed(behind):
    s, path = behind
    s.upsert(rec(last_seen=10.0))
    s.touch("n1", 12.0, Utilization(cpu_percent=40))
    s.close()
    assert on_disk(path) == 12.0
    again = FabricStore(path, heartbeat_flush_s=0.5)
    assert again.get("n1").last_seen == 12.0 and again.get("n1").utilization.cpu_percent == 40
    again.close()


def test_reads_see_pending_heartbeats(behind):
    s, path = behind
    s.upsert(rec(last_seen=10.0))
    s.touch("n1", 12.0)
    assert [r.last_seen for r in s.list()] == [12.0]
    assert s.pending_heartbeats == 1  # the listing answered from memory
    assert s.last_seen() == {"n1": 12.0} and s.pending_heartbeats == 0  # a read of the file flushes first
    s.touch("n1", 13.0)
    dump = s.dump()
    assert [row[3] for row in dump["nodes"]] == [13.0] and s.pending_heartbeats == 0


def test_collected_ids_stay_right(tmp_path):
    path = tmp_path / "f.db"
    s = FabricStore(path)
    for i in range(3):
        s.upsert(rec(f"n{i}", f"box{i}"))
    s.collect("n0", at=1.0)
    s.write(collect=[("n1", 2.0), ("ghost", 2.0)])
    assert s.collected_ids() == {"n0", "n1"}
    ids = s.collected_ids()
    ids.add("n2")  # a copy: the store's set is its own
    assert not s.was_collected("n2")
    s.close()
    assert FabricStore(path).collected_ids() == {"n0", "n1"}


def test_a_row_that_does_not_validate_still_raises_when_read(tmp_path):
    path = tmp_path / "f.db"
    s = FabricStore(path)
    s.upsert(rec("n1"))
    s.upsert(rec("n2", "other"))
    s.close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE nodes SET record='{\"node_id\": 7}' WHERE node_id='n2'")
    conn.commit()
    conn.close()
    again = FabricStore(path)  # the store opens; that record cannot be read, the others can
    assert again.get("n1").name == "box"
    with pytest.raises(ValueError):
        again.get("n2")
    with pytest.raises(ValueError):
        again.list()
    again.upsert(rec("n2", "other"))  # rewritten: readable again
    assert [r.node_id for r in again.list()] == ["n1", "n2"]


def test_heartbeat_flush_s_must_be_positive(tmp_path):
    with pytest.raises(ValueError):
        FabricStore(tmp_path / "f.db", heartbeat_flush_s=0)


def test_a_flush_sets_only_the_heartbeats_fields_in_the_stored_json_exactly(behind):
    store, path = behind
    store.upsert(rec("n1", "alpha", last_seen=1.0))
    store.upsert(rec("n2", "beta", last_seen=1.0))
    store.touch("n1", 1733390000.1234567, Utilization(cpu_percent=0.1 + 0.2, memory_percent=40.0))
    store.touch("n2", 1733390001.5, Utilization(cpu_percent=12.5))
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM nodes WHERE node_id='n2'")  # a row gone from under the cache: written whole
    conn.commit()
    conn.close()
    expected = {n: store.get(n) for n in ("n1", "n2")}
    assert store.flush() == 2
    store.close()
    again = FabricStore(path)
    try:
        for node_id, want in expected.items():
            got = again.get(node_id)
            assert got == want and got.last_seen == want.last_seen and got.utilization == want.utilization
        assert on_disk(path, "n1") == 1733390000.1234567
    finally:
        again.close()

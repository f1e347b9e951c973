"""The registry's SQLite store: WAL, schema version, reopen, collection trail, corrupt files."""

from __future__ import annotations

import pickle
import sqlite3

import pytest

from fabric.core.capabilities import NodeCapabilities
from fabric.core.lifecycle import NodeStatus
from fabric.core.records import GpuUtilization, RegistryRecord, Utilization
from fabric.store import SCHEMA_VERSION, FabricStore, StoreError


def rec(node_id="n1", name="box", **kw) -> RegistryRecord:
    caps = NodeCapabilities(name=name, cpu_logical=4, cpu_physical=2, cpu_usable=4, memory_mib=8192)
    return RegistryRecord(node_id=node_id, name=name, capabilities=caps, labels={"fabric.io/tier": caps.tier.value}, **kw)


def test_fresh_store_is_wal_with_schema_version(tmp_path):
    s = FabricStore(tmp_path / "sub" / "fabric.db")
    assert s.journal_mode == "wal"
    assert s.schema_version == SCHEMA_VERSION
    assert s.list() == [] and s.recovered_from is None


def test_upsert_get_list_and_reopen(tmp_path):
    path = tmp_path / "fabric.db"
    s = FabricStore(path)
    a, b = rec("n1", "alpha"), rec("n2", "beta", status=NodeStatus.OFFLINE)
    s.upsert(b)
    s.upsert(a)
    assert s.get("n1") == a and s.get("nope") is None
    assert [r.node_id for r in s.list()] == ["n1", "n2"]
    assert [r.node_id for r in s.list([NodeStatus.OFFLINE])] == ["n2"]
    s.upsert(a.model_copy(update={"status": NodeStatus.DRAINING}))
    assert s.get("n1").status is NodeStatus.DRAINING
    s.close()
    again = FabricStore(path)  # a restarted registry finds everything
    assert [r.node_id for r in again.list()] == ["n1", "n2"]
    assert again.get("n1").capabilities == a.capabilities


def test_touch_records_heartbeat_and_utilisation(tmp_path):
    s = FabricStore(tmp_path / "f.db")
    s.upsert(rec(last_seen=10.0))
    u = Utilization(cpu_percent=50, memory_percent=20, gpus=(GpuUtilization(index=0, gpu_percent=80),))
    r = s.touch("n1", 12.0, u)
    assert r.last_seen == 12.0 and r.utilization == u and u.fraction == pytest.approx(0.8)
    assert s.touch("n1", 11.0).last_seen == 12.0  # never goes backwards
    assert s.touch("ghost", 1.0) is None
    assert s.last_seen() == {"n1": 12.0}


def test_collect_moves_record_to_trail_as_dead(tmp_path):
    s = FabricStore(tmp_path / "f.db")
    s.upsert(rec("n1"))
    dead = s.collect("n1", at=99.0)
    assert dead.status is NodeStatus.DEAD and dead.status_since == 99.0
    assert s.get("n1") is None and s.collected_ids() == {"n1"}
    assert s.collected()[0].node_id == "n1"
    assert s.collect("n1", at=100.0) is None


def test_kv_documents(tmp_path):
    s = FabricStore(tmp_path / "f.db")
    assert s.get_json("flaps", {}) == {}
    s.put_json("flaps", {"box": {"toggles": [1.0]}})
    s.put_json("flaps", {"box": {"toggles": [1.0, 2.0]}})
    assert s.get_json("flaps") == {"box": {"toggles": [1.0, 2.0]}}


def test_corrupt_file_is_moved_aside_and_a_fresh_store_started(tmp_path):
    path = tmp_path / "fabric.db"
    path.write_bytes(b"this is not a sqlite database at all" * 100)
    s = FabricStore(path)
    assert s.recovered_from is not None and s.recovered_from.exists()
    assert s.recovered_from.read_bytes().startswith(b"this is not")
    assert s.list() == [] and s.schema_version == SCHEMA_VERSION


def test_newer_schema_is_refused_not_clobbered(tmp_path):
    path = tmp_path / "fabric.db"
    FabricStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version=?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError) as err:
        FabricStore(path)
    assert err.value.path == str(path) and "newer" in str(err.value)
    again = pickle.loads(pickle.dumps(err.value))
    assert isinstance(again, StoreError) and again.path == str(path)


def test_unwritable_location_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError):
        FabricStore(blocker / "sub" / "fabric.db")


def test_record_limitations_and_flap_hold():
    r = rec(degraded=("gpu vanished: X",), held_until=50.0)
    assert r.limitations[-1] == "gpu vanished: X"
    assert r.flap_held(49.0) and not r.flap_held(50.0)

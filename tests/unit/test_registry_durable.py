"""The registry keeps what it was told (issue 11): a drain survives a partition, a new head on the
same store turns the old cluster's records offline (never active), and the default store is a
stable per-cluster path rather than Ray's per-session folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.registry import Registry, default_store_path
from fabric.core.events import NodeLost, NodeRecovered
from fabric.core.health import ManualClock
from fabric.core.lifecycle import NodeStatus
from fabric.core.records import RegistryRecord
from fabric.store import FabricStore

from test_registry import A, B, FakeRay, caps, view


class FakeRayTable(FakeRay):
    def list_nodes(self):
        return list(self.nodes.values())


@pytest.fixture
def env(tmp_path):
    clock = ManualClock(1000.0)
    ray = FakeRayTable(view(A, profile="cpu-only-box"))
    store = FabricStore(tmp_path / "fabric.db")
    return Registry(store, ray, clock=clock), store, ray, clock


def test_a_drained_node_back_from_a_partition_is_draining_again(env):
    reg, store, _, clock = env
    reg.register(A, caps())
    reg.mark_draining(A)
    reg.apply([NodeLost(node_id=A, name="box", at=clock(), stimulus_id="s1", reason="missed heartbeats for 3.0 s")])
    assert store.get(A).status is NodeStatus.OFFLINE
    clock.advance(5)
    reg.apply([NodeRecovered(node_id=A, name="box", at=clock(), stimulus_id="s2", status=NodeStatus.ACTIVE,
                             reason="heartbeats resumed")])
    r = store.get(A)
    assert r.status is NodeStatus.DRAINING and r.cordoned and r.drained
    reg.set_cordoned(A, False)  # only an uncordon withdraws the drain
    r = store.get(A)
    assert r.status is NodeStatus.ACTIVE and not r.drained and not r.cordoned
    reg.apply([NodeLost(node_id=A, name="box", at=clock(), stimulus_id="s3", reason="x")])
    reg.apply([NodeRecovered(node_id=A, name="box", at=clock(), stimulus_id="s4", status=NodeStatus.ACTIVE, reason="back")])
    assert store.get(A).status is NodeStatus.ACTIVE  # an undrained node simply comes back


def test_records_ray_no_longer_knows_become_offline_on_start(env):
    reg, store, ray, clock = env
    reg.register(A, caps())
    old = RegistryRecord(node_id=B, name="other", capabilities=caps("other"), status=NodeStatus.ACTIVE, last_seen=900.0)
    store.upsert(old)  # a node of the cluster this store served before the head restarted
    drained = RegistryRecord(node_id="c" * 56, name="third", capabilities=caps("third"), status=NodeStatus.DRAINING,
                             cordoned=True, drained=True)
    store.upsert(drained)
    assert sorted(reg.reconcile_with_ray()) == sorted([B, "c" * 56])
    assert store.get(A).status is NodeStatus.ACTIVE
    assert store.get(B).status is NodeStatus.OFFLINE and store.get(B).status_since == clock()
    assert store.get(B).capabilities == old.capabilities  # the record itself is kept
    assert store.get("c" * 56).status is NodeStatus.OFFLINE and store.get("c" * 56).drained
    assert reg.reconcile_with_ray() == []


def test_the_default_store_is_keyed_by_the_head_address_not_the_session(tmp_path):
    env = {"HOME": str(tmp_path)}
    path = default_store_path("127.0.0.1:6379", env)
    assert path == tmp_path / ".local/share/adaptive-fabric/clusters/127.0.0.1-6379/fabric.db"
    assert default_store_path("127.0.0.1:6379", env) == path  # a restarted head on the same port finds it
    assert default_store_path("127.0.0.1:6380", env) != path  # another cluster does not
    xdg = default_store_path("10.0.0.5:6379", {"HOME": "/nowhere", "XDG_DATA_HOME": str(tmp_path / "data")})
    assert xdg == Path(tmp_path / "data/adaptive-fabric/clusters/10.0.0.5-6379/fabric.db")

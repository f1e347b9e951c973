"""The scheduler's fleet feed diff (pure part): joined, changed, lost; heartbeats alone are no change."""

from fabric import NodeCapabilities
from fabric.core.capabilities import Limitations
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import NodeRecord

from actors.fleet_feed import diff_fleet


def rec(node_id, **kw):
    caps = NodeCapabilities(name=node_id, cpu_logical=4, cpu_physical=4, cpu_usable=4, memory_mib=8192,
                            limitations=Limitations(max_concurrent_tasks=2))
    return NodeRecord(node_id=node_id, name=node_id, capabilities=caps, **kw)


def test_joined_changed_lost():
    known = {"a": rec("a"), "b": rec("b")}
    wanted = {"a": rec("a", cordoned=True), "c": rec("c")}
    changes = {(c.kind, c.node_id): c for c in diff_fleet(known, wanted)}
    assert set(changes) == {("lost", "b"), ("changed", "a"), ("joined", "c")}
    assert changes[("changed", "a")].fields == {"cordoned": True}


def test_heartbeats_and_small_load_wobble_are_not_changes():
    known = {"a": rec("a", last_seen=1.0, utilization=0.50)}
    assert diff_fleet(known, {"a": rec("a", last_seen=2.0, utilization=0.52)}) == []
    (c,) = diff_fleet(known, {"a": rec("a", last_seen=2.0, utilization=0.9)})
    assert c.fields == {"utilization": 0.9}


def test_status_change_is_reported():
    (c,) = diff_fleet({"a": rec("a")}, {"a": rec("a", status=NodeStatus.DRAINING)})
    assert c.kind == "changed" and c.fields == {"status": NodeStatus.DRAINING}

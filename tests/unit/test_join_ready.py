"""``fabric join``'s wait for the registry, without Ray: which node is the new one, what the registry
says of it, and the deadline, over a fake ``ReadySeam`` with a fake clock."""

from __future__ import annotations

from fabric.cli.join_ready import NotReady, Ready, SeenNode, new_node_id, ready_from, ready_line, wait_ready
from fabric.core.lifecycle import NodeStatus
from fabric.core.records import RegistryRecord
from probes import RecordedSources, probe_node
from probes.profiles import profile_path

CAPS = probe_node(RecordedSources(profile_path("edge-relay")), name="edge-1")
NEW = "5c0e2b9f1a3d" + "0" * 44
OLD = "9a" * 28


def record(node_id=NEW, name="edge-1", status=NodeStatus.ACTIVE, registered_at=100.0):
    return RegistryRecord(node_id=node_id, name=name, capabilities=CAPS, status=status, registered_at=registered_at)


def test_the_new_node_is_the_alive_one_with_this_name_that_was_not_there_before():
    before = {OLD}
    table = [SeenNode(OLD, "edge-1", "127.0.0.2", True), SeenNode(NEW, "edge-1", "127.0.0.2", True),
             SeenNode("ab" * 28, "other", "127.0.0.2", True), SeenNode("cd" * 28, "edge-1", "127.0.0.2", False)]
    assert new_node_id(before, table, "edge-1", "127.0.0.2") == NEW
    assert new_node_id(None, table[1:2], "edge-1", None) == NEW  # no earlier table: the only one named so
    assert new_node_id(None, table[:2], "edge-1", None) is None  # two candidates: cannot tell
    assert new_node_id(before, [SeenNode(NEW, "edge-1", "10.0.0.9", True), SeenNode("ef" * 28, "edge-1", "127.0.0.2", True)],
                       "edge-1", "127.0.0.2") == "ef" * 28


def test_ready_from_the_registry_record_and_the_ready_line():
    ready, why = ready_from([record(OLD, registered_at=1.0), record()], NEW, "edge-1", "127.0.0.2", 200.0)
    assert why == "" and ready == Ready(NEW, "edge-1", "relay", CAPS.limitations.max_concurrent_tasks, "127.0.0.2")
    assert ready_line(ready) == f"ready: node edge-1 (5c0e2b9f1a3d) tier=relay slots={ready.slots} address=127.0.0.2"
    assert ready_from([], NEW, "edge-1", None, 0)[1] == "the fabric's registry does not list node 5c0e2b9f1a3d yet"
    assert ready_from([record(status=NodeStatus.OFFLINE)], NEW, "edge-1", None, 0)[1] == \
        "the fabric's registry lists node edge-1 (5c0e2b9f1a3d) as offline, not active"
    by_name, _ = ready_from([record(OLD, registered_at=1.0, status=NodeStatus.OFFLINE), record()], None, "edge-1", None, 0)
    assert by_name is not None and by_name.node_id == NEW  # no node id: the newest record of the name


class FakeSeam:
    """A node table and a registry that change with each poll; a clock that moves ``step_s`` per call."""

    def __init__(self, tables, registries, attach_s=0.0, step_s=0.1, attach_error=None):
        self.tables, self.registries = list(tables), list(registries)
        self.t, self.attach_s, self.step_s, self.attach_error = 0.0, attach_s, step_s, attach_error
        self.attached = self.detached = 0

    def now(self):
        return self.t

    def sleep(self, s):
        self.t += s

    def nodes(self):
        return self.tables.pop(0) if len(self.tables) > 1 else self.tables[0]

    def attach(self):
        self.t += self.attach_s
        self.attached += 1
        return self.attach_error

    def records(self):
        self.t += self.step_s
        return self.registries.pop(0) if len(self.registries) > 1 else self.registries[0]

    def detach(self):
        self.detached += 1


ROW = SeenNode(NEW, "edge-1", "127.0.0.2", True)


def test_it_waits_until_the_registry_lists_the_node_active_then_detaches():
    seam = FakeSeam([[ROW]], [None, [], [record(status=NodeStatus.OFFLINE)], [record()]])
    result = wait_ready(seam, name="edge-1", ip="127.0.0.2", before=set(), timeout_s=30)
    assert isinstance(result, Ready) and result.node_id == NEW and result.address == "127.0.0.2"
    assert seam.attached == 1 and seam.detached == 1


def test_a_cluster_without_the_fabric_is_not_ready_naming_fabric_up():
    seam, said = FakeSeam([[ROW]], [None]), []
    result = wait_ready(seam, name="edge-1", ip="127.0.0.2", before=set(), timeout_s=5, say=said.append)
    assert said == ["the fabric is not up on this cluster yet: waiting for `fabric up` (--no-wait skips this wait)"]  # once
    assert isinstance(result, NotReady) and result.node_id == NEW
    assert result.reason == "the fabric is not up on this cluster (no registry): `fabric up` on the head brings it up"
    assert seam.t < 6


def test_the_registry_is_not_asked_once_the_time_is_up():
    seam = FakeSeam([[ROW]], [[record()]], attach_s=3.0)
    result = wait_ready(seam, name="edge-1", ip="127.0.0.2", before=set(), timeout_s=0.1)
    assert isinstance(result, NotReady)
    assert result.reason == "connected to the cluster after 3.0 s, the registry not asked yet"


def test_a_node_the_head_holds_dead_is_not_ready_at_once():
    seam = FakeSeam([[SeenNode(NEW, "edge-1", "127.0.0.2", True)], [SeenNode(NEW, "edge-1", "127.0.0.2", False)]], [[]])
    result = wait_ready(seam, name="edge-1", ip="127.0.0.2", before=set(), timeout_s=60)
    assert result == NotReady("the head holds node edge-1 (5c0e2b9f1a3d) dead", NEW) and seam.t < 2


def test_a_driver_that_cannot_connect_says_ray_s_words():
    seam = FakeSeam([None], [[record()]], attach_error="ConnectionError: Failed to connect to Ray cluster")
    result = wait_ready(seam, name="edge-1", ip=None, before=None, timeout_s=1)
    assert result == NotReady("could not connect to the cluster as a driver (ConnectionError: Failed to connect to Ray cluster)")
    assert seam.detached == 0


def test_the_join_command_prints_why_the_node_is_not_ready_and_exits_1(capsys):
    from fabric.cli.node import _wait_ready

    seam = FakeSeam([[ROW]], [[record()]], attach_s=3.0)
    assert _wait_ready(seam, "edge-1", "127.0.0.2", set(), 0.1) == 1
    out, err = capsys.readouterr()
    assert out == "waiting up to 0.1 s for the fabric's registry to list edge-1 as active\n"
    assert err == ("fabric join: error: edge-1 (node 5c0e2b9f1a3d) not ready within 0.1 s: connected to the cluster after 3.0 s, the registry not "
                   "asked yet; the node stays in Ray (`fabric nodes` shows it once registered; --no-wait skips this wait)\n")
    held_dead = FakeSeam([[SeenNode(NEW, "edge-1", "127.0.0.2", True)], [SeenNode(NEW, "edge-1", "127.0.0.2", False)]], [[]])
    assert _wait_ready(held_dead, "edge-1", "127.0.0.2", set(), 60) == 1
    assert "fabric join: error: edge-1 (node 5c0e2b9f1a3d) not ready within 60 s: the head holds node" in capsys.readouterr().err


def test_the_join_command_prints_one_ready_line_and_exits_0(capsys):
    from fabric.cli.node import _wait_ready

    seam = FakeSeam([[ROW]], [[record()]])
    assert _wait_ready(seam, "edge-1", "127.0.0.2", set(), 30) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("ready: node edge-1 (5c0e2b9f1a3d) tier=relay slots=") and lines[-1].endswith(" address=127.0.0.2")
    assert [ln for ln in lines if ln.startswith("ready: ")] == lines[-1:]

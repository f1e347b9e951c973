"""``RayAdapter.drain_node`` / ``is_draining`` against Ray 2.60's GCS on a real local cluster
(issue 16): what Ray does with a drain request, as the fabric's drain and interruption rely on it.

- IDLE_TERMINATION on an idle worker node is accepted, and the raylet leaves at once: Ray's node
  table then says it died drained idle (``AUTOSCALER_DRAIN_IDLE``) with our message.
- IDLE_TERMINATION on a node where an actor lives is refused, with Ray's reason; nothing changes.
- PREEMPTION with a deadline is accepted on a busy node: Ray lists it draining with that deadline
  (ms), the node stays up while its actor lives, and leaves drained once the actor is gone.
- A node id Ray does not know alive, and the head node, are refused here without asking Ray (its
  GCS accepts an unknown id and does nothing).

No fabric actors run (``fabric=False``): on a fabric node the probe actor alone makes Ray refuse
IDLE_TERMINATION, as the busy-node case shows with an actor of the test's own.
"""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from fabric.rayio.adapter import RayAdapter  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(["cpu-only-box", "edge-relay"], fabric=False, max_slots=1, timeout_s=90) as fabric_:
        yield fabric_


def row(node_id: str) -> dict:
    return next(n for n in ray.nodes() if n["NodeID"] == node_id)


def death_reason(node_id: str) -> tuple[str, str] | None:
    from ray.core.generated import common_pb2

    r = row(node_id)
    return None if r["Alive"] else (common_pb2.NodeDeathInfo.Reason.Name(r["DeathReason"]), r["DeathReasonMessage"])


@ray.remote(num_cpus=0)
class Sitter:
    def where(self) -> str:
        return ray.get_runtime_context().get_node_id()


def test_idle_termination_of_an_idle_node_is_accepted_and_the_node_leaves_drained(lf):
    adapter = RayAdapter()
    node = lf.node("cpu-only-box")
    assert adapter.drain_node(node.node_id, "IDLE_TERMINATION", "fabric test: idle") == (True, "")
    got = lf.wait_until(lambda: death_reason(node.node_id), "the drained node to leave Ray's table")
    assert got == ("AUTOSCALER_DRAIN_IDLE", "fabric test: idle")
    node.alive = False  # it left on its own: LocalFabric must not stop it again
    assert not adapter.is_draining(node.node_id)  # the GCS lists only live draining nodes
    ok, why = adapter.drain_node(node.node_id, "IDLE_TERMINATION")  # gone now: refused here, Ray not asked
    assert not ok and "no alive Ray node" in why


def test_a_busy_node_refuses_idle_termination_then_takes_preemption_with_its_deadline(lf):
    adapter = RayAdapter()
    node = lf.node("edge-relay")
    sitter = Sitter.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False)).remote()
    assert ray.get(sitter.where.remote(), timeout=60) == node.node_id

    ok, why = adapter.drain_node(node.node_id, "IDLE_TERMINATION", "fabric test: busy")
    assert (ok, why) == (False, "The node to be idle terminated is no longer idle.")
    assert not adapter.is_draining(node.node_id) and row(node.node_id)["Alive"]

    deadline = time.time() + 120
    assert adapter.drain_node(node.node_id, "PREEMPTION", "fabric test: spot notice", deadline_s=deadline) == (True, "")
    lf.wait_until(lambda: adapter.is_draining(node.node_id), "Ray to list the node draining", timeout_s=10)
    assert adapter.draining_nodes()[node.node_id] == pytest.approx(int(deadline * 1000) / 1000.0)
    assert ray.get(sitter.where.remote(), timeout=30) == node.node_id  # what runs there keeps running

    ray.kill(sitter)  # idle now: a draining node leaves
    got = lf.wait_until(lambda: death_reason(node.node_id), "the preempted node to leave once idle")
    assert got == ("AUTOSCALER_DRAIN_PREEMPTED", "fabric test: spot notice")
    node.alive = False


def test_unknown_and_head_nodes_are_refused_without_asking_ray(lf):
    adapter = RayAdapter()
    ok, why = adapter.drain_node("ab" * 28, "PREEMPTION")
    assert not ok and "no alive Ray node" in why
    head = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"])
    ok, why = adapter.drain_node(head, "IDLE_TERMINATION")
    assert not ok and "head node" in why
    assert row(head)["Alive"] and not adapter.is_draining(head)


def test_alive_node_asks_the_gcs_for_one_row_that_agrees_with_the_table(lf, monkeypatch):
    """The registry looks a node up at every registration and re-probe: one row by id, not the
    whole table (the table is not read at all here), the same view ``list_nodes`` gives."""
    adapter = RayAdapter()
    table = {n.node_id: n for n in adapter.list_nodes()}
    alive = [n for n in table.values() if n.alive]
    dead = [n for n in table.values() if not n.alive]
    assert alive and dead  # the head and edge-relay alive; cpu-only-box drained by the first test

    def no_table(self):
        raise AssertionError("alive_node read the whole node table")

    monkeypatch.setattr(RayAdapter, "list_nodes", no_table)
    for n in alive:
        assert adapter.alive_node(n.node_id) == n
    for n in dead:
        assert adapter.alive_node(n.node_id) is None
    assert adapter.alive_node("ab" * 28) is None  # an id Ray never knew

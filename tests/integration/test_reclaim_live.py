"""``LocalFabric.reclaim`` on a real local fabric (issue 16): a spot notice is delivered to the
scheduler (a ``NodeInterruptionState`` comes back, a ``node_interrupted`` event is logged), Ray
is told (the GCS lists the node draining with the notice's deadline, PREEMPTION), and the node's
raylet is SIGKILLed at the deadline, not before: Ray then records it as a preempted drain."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from fabric.rayio.adapter import RayAdapter  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration

SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 30.0, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0}}


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(["cpu-only-box", "edge-relay"], settings=SETTINGS, max_slots=1, timeout_s=90) as fabric_:
        yield fabric_


def test_a_reclaim_notifies_the_fabric_tells_ray_and_kills_the_node_at_the_deadline(lf):
    from ray.core.generated import common_pb2

    node = lf.node("edge-relay")
    before = time.time()
    notice = lf.reclaim("edge-relay", 8)
    assert notice.node_id == node.node_id and notice.kind == "spot-interruption"
    assert before + 8 <= notice.deadline <= time.time() + 8
    assert notice.drain.interruption == "spot-interruption" and notice.drain.force
    events = lf.handle.job_events(kinds=["node_interrupted"])
    assert [e["data"]["node_id"] for e in events] == [node.node_id]

    adapter = RayAdapter()
    lf.wait_until(lambda: adapter.is_draining(node.node_id), "Ray to list the node draining", timeout_s=10)
    assert adapter.draining_nodes()[node.node_id] == pytest.approx(notice.deadline, abs=0.002)
    assert node.alive and time.time() < notice.deadline  # still up before its deadline (the fabric's own drain is done)

    lf.wait_until(lambda: not node.alive, "the reclaim to kill the node", timeout_s=30)
    assert time.time() >= notice.deadline - 0.05  # not before it (a timer's wake-up against the wall clock)
    row = lf.wait_until(lambda: next((r for r in ray.nodes() if r["NodeID"] == node.node_id and not r["Alive"]), None),
                        "Ray to see the node gone")
    assert common_pb2.NodeDeathInfo.Reason.Name(row["DeathReason"]) == "AUTOSCALER_DRAIN_PREEMPTED"


def test_reclaim_refuses_a_node_that_is_not_running(lf):
    if lf.node("edge-relay").alive:  # run alone: the test above did not reclaim it
        lf.kill_node("edge-relay")
    with pytest.raises(ValueError, match="not running"):
        lf.reclaim("edge-relay", 5)
    with pytest.raises(ValueError, match="deadline_s"):
        lf.reclaim("cpu-only-box", -1)
    with pytest.raises(KeyError):
        lf.reclaim("no-such-node", 5)

"""``LocalFabric.reclaim`` on a real local fabric (issue 16): a spot notice is delivered to the
scheduler (a ``NodeInterruptionState`` comes back, a ``node_interrupted`` event is logged), Ray
is told (the GCS lists the node draining with the notice's deadline, PREEMPTION), and the node's
raylet is SIGKILLed at the deadline, not before: Ray then records it as a preempted drain.

And a cloud's own notice: a node labelled ``fabric.io/cloud: aws`` has its probe actor read a fake
IMDSv2 service on loopback (``spot_notices.metadata_url``); once that serves an instance-action, the
node's job moves off by the forced drain without counting a restart."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from fabric import JobState, adaptive  # noqa: E402
from fabric.core.names import CLOUD_LABEL  # noqa: E402
from fabric.core.spot import AWS_INSTANCE_ACTION, AWS_TOKEN  # noqa: E402
from fabric.rayio.adapter import RayAdapter  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.counter import CounterJob  # noqa: E402
from fabric.testing.fake_metadata import FakeMetadata  # noqa: E402

pytestmark = pytest.mark.integration

SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 30.0, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0}}


Spotted = adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1)(CounterJob)


@pytest.fixture(scope="module")
def imds():
    with FakeMetadata() as fake:
        yield fake


@pytest.fixture(scope="module")
def lf(imds):
    settings = {**SETTINGS, "spot_notices": {"poll_interval_s": 0.5, "metadata_url": imds.url}}  # only a cloud node reads it
    with LocalFabric(["cpu-only-box", "edge-relay"], settings=settings, max_slots=1, timeout_s=90) as fabric_:
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


def test_a_cloud_nodes_own_spot_notice_moves_its_job_off_without_counting_a_restart(lf, imds, tmp_path):
    assert imds.requests == []  # the nodes without a cloud label contacted nothing
    spot = lf.add_node("spot-box", profile="cpu-only-box", cloud="aws")
    assert spot.labels[CLOUD_LABEL] == "aws"
    job = Spotted.remote(str(tmp_path / "spot"))
    job.wait_running(120)
    if job.node_id != spot.node_id:  # placed on the other cpu node: moved onto the spot node first
        mid = lf.handle.migrate_job(job.job_id, strategy="stop_then_start", target_node=spot.node_id)
        lf.wait_until(lambda: lf.handle.migration(mid).phase.value == "done", "the move onto the spot node", timeout_s=60)
    lf.wait_until(lambda: imds.sent("GET", AWS_INSTANCE_ACTION.path), "the spot node's probe to read its IMDS")
    assert imds.sent("PUT", AWS_TOKEN.path)[0].header("X-aws-ec2-metadata-token-ttl-seconds")  # IMDSv2: a token first
    assert lf.handle.drain_status(spot.node_id) is None  # 404 so far: no notice

    imds.aws_instance_action("terminate", time.time() + 60)  # the moves get 30 s (60 s less the margin)
    final = lf.wait_until(lambda: (lambda s: s if s is not None and s.terminal else None)(lf.handle.drain_status(spot.node_id)),
                          "the notice's drain to end", timeout_s=60)
    assert final.interruption == "spot-interruption" and final.force, final
    assert set(final.jobs) == {job.job_id} and final.jobs[job.job_id].status.value in ("migrated", "moved"), final
    status = lf.handle.job(job.job_id)
    assert status.state == JobState.RUNNING and status.node_id not in (None, spot.node_id), status
    assert status.restarts_last_hour == 0, [h[1:] for h in status.history]
    assert [e["data"]["node_id"] for e in lf.handle.job_events(kinds=["node_interrupted"])].count(spot.node_id) == 1
    [seen] = [e["data"] for e in lf.handle.job_events(kinds=["spot_notice"]) if e["data"]["node_id"] == spot.node_id]
    assert seen["cloud"] == "aws" and seen["kind"] == "spot-interruption" and seen["deadline"] > time.time()
    job.stop()
    lf.kill_node("spot-box")

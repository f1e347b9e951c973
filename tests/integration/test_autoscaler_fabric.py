"""The fabric on Ray's autoscaler (issue 15): a pool tier whose provider is ``ray-autoscaler``.

The cluster is ``FakeAutoscalingCluster`` (Ray's autoscaler v2 over the fake multi-node provider,
node types from ``node_types_for(settings)``). Calls that no node fits make the scheduler provision
through the ``ray-autoscaler`` provider (the fabric rewrites ``request_resources``); the
autoscaler brings up a node labelled with the pool tier; its probe replays the shape's profile and
it registers; the scheduler claims it for the provision and the waiting calls run there. Once the
pool is idle for the scaling window the scheduler terminates it through the provider (its demand
goes, and the fabric's probe leaves the node: Ray's autoscaler counts a node with a running actor
as busy) and the autoscaler gives the node back.
"""

from __future__ import annotations

import sys

import pytest

ray = pytest.importorskip("ray")

import fabric  # noqa: E402
from fabric import adaptive  # noqa: E402
from fabric.core.names import POOL_TIER_LABEL  # noqa: E402
from fabric.core.settings import FabricSettings  # noqa: E402
from fabric.providers import node_types_for  # noqa: E402
from fabric.testing.fake_autoscaler import FakeAutoscalingCluster  # noqa: E402

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SETTINGS = {
    "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "monitor_interval_s": 0.25, "join_timeout_s": 90.0},
    "queue_timeout_s": 240.0,
    "scaling": {"burst_queue_depth": 1000, "low_window_s": 3.0, "high_window_s": 3600.0},
    "pools": [{"name": "default", "tiers": [
        {"name": "fixed"},
        {"name": "cloud", "scale_out": "elastic", "provider": "ray-autoscaler", "max_nodes": 1, "provision_timeout_s": 180,
         "candidate_shapes": [{"name": "cpu-box", "profile": "cpu-only-box", "tier": "cpu_ffmpeg", "num_cpus": 2}]},
    ]}],
}


@pytest.fixture(scope="module")
def cluster():
    settings = FabricSettings.load(SETTINGS)
    with FakeAutoscalingCluster(node_types_for(settings), head_cpus=1, update_interval_s=1, idle_timeout_minutes=0.05) as c:
        h = fabric.up(settings, timeout_s=90)
        try:
            yield c, h
        finally:
            fabric.down()


def where() -> str:
    return ray.get_runtime_context().get_node_id()


def cloud_nodes() -> list[dict]:
    return [n for n in ray.nodes() if n["Alive"] and n["Labels"].get(POOL_TIER_LABEL) == "cloud"]


def test_calls_bring_up_an_autoscaler_node_that_serves_them_and_is_given_back_when_idle(cluster):
    c, h = cluster
    call = adaptive.remote(min_tier="cpu_ffmpeg", fallback=False, num_cpus=1)(where)
    ran = ray.get([call.remote() for _ in range(3)], timeout=240)
    (node,) = cloud_nodes()
    assert set(ran) == {node["NodeID"]}  # the head serves no cpu_ffmpeg: the provisioned node took every call
    view = h.provisions()
    (inst,) = [i for i in view["instances"] if i["provider"] == "ray-autoscaler"]
    assert inst["pool_tier"] == "cloud" and view["serving_s"].get(inst["instance_id"], 0) > 0
    rec = next(n for n in h.nodes() if n.node_id == node["NodeID"])
    assert rec.pool_tier == "cloud" and rec.capabilities.tier.value == "cpu_ffmpeg"
    c.wait_until(lambda: not cloud_nodes(), "the autoscaler giving the idle node back", timeout_s=120)
    downs = [e["data"] for e in h.job_events(kinds=["scale_down"])]
    assert [d["pool_tier"] for d in downs] == ["cloud"] and downs[0]["instance_id"] == inst["instance_id"]

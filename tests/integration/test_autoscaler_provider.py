"""The ``ray-autoscaler`` provider against Ray's real autoscaler (v2) on one machine: the fake
multi-node provider loaded as an ``external`` module (``fabric.testing.fake_autoscaler``) with the
node types ``node_types_for`` derives from the settings. A provision brings up a node of its pool
tier's type (its labels in ``ray.nodes()``), ``claim`` binds it, the node stays while it is
demanded though idle past the idle timeout, and after ``terminate`` the autoscaler gives it back.

The head has a CPU of its own: a bundle without its label selector would fit there and launch
nothing, so a node that comes up shows the selector picked the type. Every node the fake provider
starts is recorded by pid; ``close`` stops the head and SIGKILLs any such node still running.
"""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from fabric.core.names import POOL_LABEL, POOL_TIER_LABEL, PROFILE_LABEL, PROVIDER_LABEL, RAY_NODE_ID_LABEL, SHAPE_LABEL  # noqa: E402
from fabric.core.settings import FabricSettings  # noqa: E402
from fabric.providers import RayAutoscalerProvider, node_type_name, node_types_for, providers_for  # noqa: E402
from fabric.testing.fake_autoscaler import FakeAutoscalingCluster  # noqa: E402

pytestmark = pytest.mark.integration

IDLE_TIMEOUT_S = 3.0
SETTINGS = FabricSettings.load({"pools": [{"name": "default", "tiers": [
    {"name": "fixed"},
    {"name": "burst", "scale_out": "elastic", "provider": "ray-autoscaler", "max_nodes": 1,
     "candidate_shapes": [{"name": "cpu-box", "profile": "cpu-only-box", "num_cpus": 1}]},
]}]})


@pytest.fixture(scope="module")
def cluster():
    with FakeAutoscalingCluster(node_types_for(SETTINGS), head_cpus=1, update_interval_s=1,
                                idle_timeout_minutes=IDLE_TIMEOUT_S / 60) as c:
        yield c


def alive_in(pool_tier: str) -> list[dict]:
    return [n for n in ray.nodes() if n["Alive"] and n["Labels"].get(POOL_TIER_LABEL) == pool_tier]


def test_provision_brings_up_a_labelled_node_claim_binds_it_terminate_gives_it_back(cluster):
    provider = providers_for(SETTINGS)["ray-autoscaler"]
    assert isinstance(provider, RayAutoscalerProvider)
    shape = SETTINGS.pools[0].tiers[1].candidate_shapes[0]
    assert alive_in("burst") == [] and cluster.launched() == {}
    try:
        node = provider.provision(shape, pool="default", pool_tier="burst")
        assert provider.pending() == [node]

        row = cluster.wait_until(lambda: (rows := alive_in("burst")) and rows[0], "a burst node in ray.nodes()", timeout_s=90)
        labels = row["Labels"]
        assert labels[POOL_LABEL] == "default" and labels[PROVIDER_LABEL] == "ray-autoscaler"
        assert labels[SHAPE_LABEL] == "cpu-box" and labels[PROFILE_LABEL] == "cpu-only-box"
        assert row["Resources"]["CPU"] == 1 and row["Resources"]["fabric.slots"] == 1
        assert {k: v for k, v in node.labels.items()}.items() <= labels.items()  # what provision said it would carry
        cluster.wait_until(lambda: list(cluster.launched()) == [row["NodeID"]], "the fake provider's record of the node")
        assert cluster.config["available_node_types"][node_type_name("default", "burst", "cpu-box")]["labels"] == \
            node_types_for(SETTINGS)[node_type_name("default", "burst", "cpu-box")]["labels"]

        assert provider.claim(row["NodeID"], labels) == node.instance_id
        assert provider.node_id_of(node.instance_id) == row["NodeID"] and provider.pending() == []
        assert provider.list()[0].labels[RAY_NODE_ID_LABEL] == row["NodeID"]
        provider.sync(busy=[row["NodeID"]])

        # Idle well past the idle timeout, the node stays: its instance is still demanded.
        time.sleep(IDLE_TIMEOUT_S * 3)
        assert [r["NodeID"] for r in alive_in("burst")] == [row["NodeID"]]

        provider.terminate(node.instance_id)
        assert provider.list() == [] and provider.last_demand.bundles == ()
        cluster.wait_until(lambda: not alive_in("burst"), "the burst node to leave ray.nodes()", timeout_s=90)
        cluster.wait_until(lambda: cluster.launched() == {}, "the fake provider to terminate the node", timeout_s=60)
    finally:
        provider.close()

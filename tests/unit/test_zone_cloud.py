"""Where a node runs: a shape's ``zone`` and ``cloud`` reach the labels of the nodes providers make
(the local provider's ``ray start``, the autoscaler's node type), ``fabric join --cloud`` labels a
joined machine, and the registry's record carries both into placement, where ``same_az`` and
``same_cloud`` read them."""

from __future__ import annotations

import pytest

from fabric.core.capabilities import Limitations, NodeCapabilities
from fabric.core.errors import SettingsError
from fabric.core.names import CLOUD_LABEL, ZONE_LABEL
from fabric.core.placement import FleetView, Requirement, place
from fabric.core.placement.context import PlacementContext
from fabric.core.records import RegistryRecord
from fabric.core.settings import FabricSettings, NodeShape

CAPS = NodeCapabilities(name="box", arch="x86_64", cpu_logical=8, cpu_physical=4, cpu_usable=8.0, memory_mib=16384,
                        limitations=Limitations(max_concurrent_tasks=4))


def test_a_shapes_zone_and_cloud_are_labels_of_the_nodes_the_local_provider_starts() -> None:
    from fabric.providers.local import node_args

    shape = NodeShape(name="box", profile="cpu-only-box", zone="eu-west-1a", cloud="aws")
    spec = node_args("cpu-only-box", zone=shape.zone, cloud=shape.cloud)
    assert (spec.labels[ZONE_LABEL], spec.labels[CLOUD_LABEL]) == ("eu-west-1a", "aws")
    assert CLOUD_LABEL not in node_args("cpu-only-box").labels and ZONE_LABEL not in node_args("cpu-only-box").labels


def test_the_autoscaler_node_type_of_a_shape_carries_its_zone_and_cloud() -> None:
    from fabric.providers.autoscaler import node_type_for

    labels = node_type_for(NodeShape(name="box", profile="cpu-only-box", zone="z1", cloud="gcp"), pool="p", pool_tier="t")["labels"]
    assert (labels[ZONE_LABEL], labels[CLOUD_LABEL]) == ("z1", "gcp")
    assert CLOUD_LABEL not in node_type_for(NodeShape(name="box"), pool="p", pool_tier="t")["labels"]


def test_shapes_take_zone_and_cloud_in_the_settings() -> None:
    doc = {"pools": [{"name": "default", "tiers": [{"name": "cloud", "scale_out": "elastic", "provider": "local", "max_nodes": 2,
                                                    "candidate_shapes": [{"name": "box", "cloud": "azure", "zone": "westeurope-1"}]}]}]}
    shape = FabricSettings.load(doc).pools[0].tiers[0].candidate_shapes[0]
    assert (shape.zone, shape.cloud) == ("westeurope-1", "azure")
    doc["pools"][0]["tiers"][0]["candidate_shapes"][0]["cloud"] = 3
    with pytest.raises(SettingsError) as caught:
        FabricSettings.load(doc)
    assert caught.value.problems[0].path.endswith("candidate_shapes.0.cloud")


def test_join_cloud_is_a_label_and_an_unknown_cloud_is_refused(capsys) -> None:
    from fabric.cli import main

    code = main(["join", "--address", "127.0.0.1:6379", "--profile", "cpu-only-box", "--cloud", "aws", "--zone", "z", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and "fabric.io/cloud=aws" in out and "fabric.io/zone=z" in out
    with pytest.raises(SystemExit):
        main(["join", "--address", "127.0.0.1:6379", "--profile", "cpu-only-box", "--cloud", "mars", "--dry-run"])
    assert "--cloud" in capsys.readouterr().err


def test_the_record_carries_zone_and_cloud_and_same_cloud_forbid_keeps_a_replica_off_that_cloud() -> None:
    def record(node_id: str, cloud: str, zone: str) -> RegistryRecord:
        return RegistryRecord(node_id=node_id, name=node_id, capabilities=CAPS,
                              labels={"fabric.io/tier": "cpu_ffmpeg", CLOUD_LABEL: cloud, ZONE_LABEL: zone})

    nodes = [record("a", "aws", "z1").to_node_record(0.0), record("b", "aws", "z2").to_node_record(0.0),
             record("c", "gcp", "z3").to_node_record(0.0)]
    assert [(n.cloud, n.zone) for n in nodes] == [("aws", "z1"), ("aws", "z2"), ("gcp", "z3")]
    fast = record("a", "aws", "z1").to_node_record(1.0, previous=nodes[0])  # the feed's fast path keeps them
    assert (fast.cloud, fast.zone) == ("aws", "z1")
    fleet = FleetView(nodes, FabricSettings())
    ctx = PlacementContext(other_node="a", other_zone="z1", other_cloud="aws", same_node="forbid", same_cloud="forbid")
    decision = place(fleet, Requirement(min_tier="cpu_ffmpeg"), ctx)
    assert decision.node_id == "c", decision

"""The ``ray-autoscaler`` provider without Ray: its demand model (what each ``request_resources``
write asks for), the node types it derives from settings, which provision a registering node
claims, and its refusals. ``request_resources`` is a recorder; ids and the clock are counters."""

from __future__ import annotations

import itertools

import pytest

from fabric.core.names import (
    POOL_LABEL, POOL_TIER_LABEL, PROFILE_LABEL, PROVIDER_LABEL, RAY_NODE_ID_LABEL, SHAPE_LABEL, SLOTS_RESOURCE, TIER_LABEL,
)
from fabric.core.settings import FabricSettings, NodeShape
from fabric.providers import NodeProvider, ProviderError, RayAutoscalerProvider, node_type_name, node_types_for, providers_for
from fabric.providers.autoscaler import DEFAULT_MAX_WORKERS, bundle_for
from fabric.providers.base import ProvisionedNode

CPU_BOX = {"name": "cpu-box", "profile": "cpu-only-box", "num_cpus": 1}
BIG = {"name": "big", "num_cpus": 4, "gpus": 1, "tier": "gpu_cuda"}


def settings(max_nodes: int | None = 2) -> FabricSettings:
    return FabricSettings.load({"pools": [
        {"name": "default", "tiers": [
            {"name": "fixed"},
            {"name": "burst", "scale_out": "elastic", "provider": "ray-autoscaler", "max_nodes": max_nodes,
             "candidate_shapes": [CPU_BOX, BIG]},
            {"name": "local", "scale_out": "elastic", "provider": "local", "candidate_shapes": [CPU_BOX]},
        ]},
        {"name": "gpu", "tiers": [{"name": "cloud", "scale_out": "elastic", "provider": "ray-autoscaler", "candidate_shapes": [BIG]}]},
    ]})


SETTINGS = settings()
SMALL = SETTINGS.pools[0].tiers[1].candidate_shapes[0]
LARGE = SETTINGS.pools[0].tiers[1].candidate_shapes[1]
SEL_SMALL = {POOL_LABEL: "default", POOL_TIER_LABEL: "burst", SHAPE_LABEL: "cpu-box"}
SEL_LARGE = {POOL_LABEL: "default", POOL_TIER_LABEL: "burst", SHAPE_LABEL: "big"}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[list, list]] = []
        self.fail: Exception | None = None

    def __call__(self, *, bundles, bundle_label_selectors):
        if self.fail is not None:
            raise self.fail
        self.calls.append((bundles, bundle_label_selectors))

    @property
    def last(self) -> tuple[list, list]:
        return self.calls[-1]


def make(settings=SETTINGS) -> tuple[RayAutoscalerProvider, Recorder]:
    rec, ids, ticks = Recorder(), itertools.count(1), itertools.count(100)
    return RayAutoscalerProvider(settings, request_resources=rec, clock=lambda: float(next(ticks)),
                                 new_id=lambda: f"ras-{next(ids):02d}"), rec


def node_labels(shape: str = "cpu-box", pool: str = "default", pool_tier: str = "burst", **extra: str) -> dict[str, str]:
    return {PROVIDER_LABEL: "ray-autoscaler", POOL_LABEL: pool, POOL_TIER_LABEL: pool_tier, SHAPE_LABEL: shape, **extra}


# -- node types ------------------------------------------------------------------------------------------------
def test_node_types_one_per_autoscaler_pool_tier_and_shape_with_what_a_node_declares():
    types = node_types_for(SETTINGS)
    assert sorted(types) == ["fabric.default.burst.big", "fabric.default.burst.cpu-box", "fabric.gpu.cloud.big"]
    small = types[node_type_name("default", "burst", "cpu-box")]
    # The profile's node: one slot per CPU (capped at the shape's CPUs), its tier markers and labels.
    assert small["resources"]["CPU"] == 1 and small["resources"][SLOTS_RESOURCE] == 1 and "GPU" not in small["resources"]
    assert small["resources"]["fabric.tier.cpu_ffmpeg"] == 1
    assert small["labels"] == {**SEL_SMALL, PROVIDER_LABEL: "ray-autoscaler", TIER_LABEL: "cpu_ffmpeg", "fabric.io/slots": "1",
                               PROFILE_LABEL: "cpu-only-box"}
    assert (small["min_workers"], small["max_workers"], small["node_config"]) == (0, 2, {})
    big = types["fabric.default.burst.big"]
    assert big["resources"] == {"CPU": 4, "GPU": 1, SLOTS_RESOURCE: 4, "fabric.tier.gpu_cuda": 1}
    assert PROFILE_LABEL not in big["labels"] and big["labels"][TIER_LABEL] == "gpu_cuda"
    assert types["fabric.gpu.cloud.big"]["max_workers"] == DEFAULT_MAX_WORKERS  # no max_nodes
    assert node_types_for(None) == {}


def test_a_bundle_fits_its_node_type_and_its_selector_only_that_type_carries():
    types = node_types_for(SETTINGS)
    for (pool, pt, shape) in (("default", "burst", SMALL), ("default", "burst", LARGE), ("gpu", "cloud", LARGE)):
        resources, selector = bundle_for(shape, pool, pt)
        own = types[node_type_name(pool, pt, shape.name)]
        assert all(own["resources"][k] >= v for k, v in resources.items())
        matching = [name for name, t in types.items() if all(t["labels"].get(k) == v for k, v in selector.items())]
        assert matching == [node_type_name(pool, pt, shape.name)]


def test_a_profile_that_is_not_bundled_is_refused_naming_it():
    bad = FabricSettings.load({"pools": [{"name": "p", "tiers": [{"name": "t", "scale_out": "elastic", "provider": "ray-autoscaler",
                                                                  "candidate_shapes": [{"name": "x", "profile": "no-such"}]}]}]})
    with pytest.raises(ProviderError) as info:
        node_types_for(bad)
    assert info.value.reason == "unknown_profile" and info.value.field == "profile" and info.value.profile == "no-such"


# -- the demand model ----------------------------------------------------------------------------------------------
def test_every_provision_and_terminate_rewrites_the_whole_request():
    p, rec = make()
    assert isinstance(p, NodeProvider) and p.name == "ray-autoscaler"
    a = p.provision(SMALL, pool="default", pool_tier="burst")
    assert a.instance_id == "ras-01" and a.pid is None and a.profile == "cpu-only-box" and a.started_at == 100.0
    assert a.labels[POOL_TIER_LABEL] == "burst" and a.labels[PROVIDER_LABEL] == "ray-autoscaler"
    assert rec.last == ([{"CPU": 1}], [SEL_SMALL])
    b = p.provision(LARGE, pool="default", pool_tier="burst", spare=True)
    assert b.spare and rec.last == ([{"CPU": 1}, {"CPU": 4, "GPU": 1}], [SEL_SMALL, SEL_LARGE])
    p.terminate(a.instance_id)
    assert rec.last == ([{"CPU": 4, "GPU": 1}], [SEL_LARGE])
    p.terminate(b.instance_id)
    assert rec.last == ([], []) and len(rec.calls) == 4 and p.list() == []


def test_running_instances_stay_demanded_until_terminated_and_claimed_ones_come_first():
    p, rec = make()
    a = p.provision(SMALL, pool="default", pool_tier="burst")
    b = p.provision(LARGE, pool="default", pool_tier="burst")
    assert p.claim("node-b", node_labels("big")) == b.instance_id
    d = p.sync()
    assert d.bundles == ({"CPU": 4, "GPU": 1}, {"CPU": 1}) and d.selectors == (SEL_LARGE, SEL_SMALL)
    assert rec.last == ([{"CPU": 4, "GPU": 1}, {"CPU": 1}], [SEL_LARGE, SEL_SMALL]) and p.last_demand == d
    assert [n.instance_id for n in p.list()] == [a.instance_id, b.instance_id]
    assert [n.instance_id for n in p.pending()] == [a.instance_id]


def test_busy_nodes_not_held_are_added_once_other_providers_ignored_the_rest_unresolved():
    p, rec = make()
    a = p.provision(SMALL, pool="default", pool_tier="burst")
    p.claim("node-a", node_labels())
    adopted = node_labels("big", **{RAY_NODE_ID_LABEL: "node-x"})  # carried work for an earlier incarnation
    strange = node_labels("nope")
    d = p.sync(busy=["node-a", a.instance_id, node_labels(**{RAY_NODE_ID_LABEL: "node-a"}), adopted, strange,
                     {PROVIDER_LABEL: "local", POOL_LABEL: "default"}])
    assert d.bundles == ({"CPU": 1}, {"CPU": 4, "GPU": 1}) and d.selectors == (SEL_SMALL, SEL_LARGE)
    assert d.unresolved == (strange,)
    # The busy set is the last sync's: a provision keeps it, the next sync replaces it.
    p.provision(SMALL, pool="default", pool_tier="burst")
    assert rec.last[0] == [{"CPU": 1}, {"CPU": 1}, {"CPU": 4, "GPU": 1}]
    assert p.sync().bundles == ({"CPU": 1}, {"CPU": 1})
    # Without settings a node's labels cannot name its shape.
    bare, _ = make(settings=None)
    assert bare.sync(busy=[adopted]).unresolved == (adopted,)


def test_a_failed_write_keeps_nothing_and_is_a_provider_error():
    p, rec = make()
    a = p.provision(SMALL, pool="default", pool_tier="burst")
    rec.fail = RuntimeError("Ray is not initialized yet")
    with pytest.raises(ProviderError, match="Ray is not initialized") as info:
        p.provision(SMALL, pool="default", pool_tier="burst")
    assert info.value.reason == "request_failed" and [n.instance_id for n in p.list()] == [a.instance_id]
    with pytest.raises(ProviderError):
        p.terminate(a.instance_id)
    assert [n.instance_id for n in p.list()] == [a.instance_id]  # still held: its bundle was never dropped
    rec.fail = None
    p.terminate(a.instance_id)
    assert rec.last == ([], [])


def test_close_forgets_everything_and_writes_an_empty_request():
    p, rec = make()
    a = p.provision(SMALL, pool="default", pool_tier="burst")
    p.close()
    assert rec.last == ([], []) and p.list() == []
    p.terminate(a.instance_id)  # ended: a no-op


# -- claim ---------------------------------------------------------------------------------------------------------
def test_claim_binds_the_oldest_pending_provision_of_the_nodes_pool_tier_and_shape():
    p, _ = make(settings(max_nodes=None))
    a1 = p.provision(SMALL, pool="default", pool_tier="burst")
    g = p.provision(LARGE, pool="gpu", pool_tier="cloud")
    a2 = p.provision(SMALL, pool="default", pool_tier="burst")
    big = p.provision(LARGE, pool="default", pool_tier="burst")
    assert p.claim("n1", node_labels()) == a1.instance_id
    assert p.claim("n1", node_labels()) == a1.instance_id  # already bound: the same instance again
    assert p.claim("n2", node_labels("big", pool="gpu", pool_tier="cloud")) == g.instance_id
    assert p.claim("n3", node_labels("big")) == big.instance_id  # the shape picks past the older cpu-box
    assert p.claim("n4", node_labels()) == a2.instance_id
    assert p.claim("n5", node_labels()) is None  # nothing of theirs pending
    assert p.node_id_of(a1.instance_id) == "n1" and p.node_id_of(a2.instance_id) == "n4"
    listed = {n.instance_id: n for n in p.list()}
    assert listed[a1.instance_id].labels[RAY_NODE_ID_LABEL] == "n1" and p.pending() == []


def test_claim_ignores_nodes_that_do_not_say_ray_autoscaler_pool_and_pool_tier():
    p, _ = make()
    a = p.provision(SMALL, pool="default", pool_tier="burst")
    assert p.claim("x", {**node_labels(), PROVIDER_LABEL: "local"}) is None
    assert p.claim("x", {PROVIDER_LABEL: "ray-autoscaler", POOL_LABEL: "default"}) is None
    assert p.claim("x", node_labels(pool_tier="other")) is None
    assert p.node_id_of(a.instance_id) is None
    # A node without a shape label takes the oldest of its pool tier.
    labels = node_labels()
    del labels[SHAPE_LABEL]
    assert p.claim("y", labels) == a.instance_id
    with pytest.raises(ProviderError) as info:
        p.claim("", node_labels())
    assert info.value.field == "node_id"


def test_a_terminated_running_instance_is_no_longer_claimable_or_listed():
    p, rec = make()
    a = p.provision(SMALL, pool="default", pool_tier="burst")
    p.claim("n1", node_labels())
    p.terminate(a.instance_id)
    assert p.list() == [] and rec.last == ([], []) and p.node_id_of(a.instance_id) is None
    p.terminate(a.instance_id)  # twice: a no-op
    assert p.claim("n1", node_labels()) is None


# -- refusals ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, reason, field", [
    ({"pool": "default", "pool_tier": "nope"}, "unknown_pool_tier", "pool_tier"),
    ({"pool": "default", "pool_tier": "local"}, "wrong_provider", "provider"),
    ({"pool": "gpu", "pool_tier": "cloud"}, "unknown_shape", "shape"),  # cpu-box is not one of its shapes
    ({"pool": "bad pool", "pool_tier": "burst"}, "invalid_pool", "pool"),
    ({"pool": "default", "pool_tier": ""}, "invalid_pool", "pool_tier"),
    ({"pool": "default", "pool_tier": "burst", "tags": {"warm": "yes"}}, "unsupported_tags", "tags"),
])
def test_bad_provisions_are_refused_naming_the_field_and_write_nothing(kwargs, reason, field):
    p, rec = make()
    with pytest.raises(ProviderError) as info:
        p.provision(SMALL, **kwargs)
    assert (info.value.reason, info.value.field, info.value.provider) == (reason, field, "ray-autoscaler")
    assert rec.calls == [] and p.list() == []


def test_max_nodes_caps_held_instances_of_a_pool_tier():
    p, _ = make()
    a = p.provision(SMALL, pool="default", pool_tier="burst")
    p.provision(LARGE, pool="default", pool_tier="burst")
    with pytest.raises(ProviderError) as info:
        p.provision(SMALL, pool="default", pool_tier="burst")
    assert info.value.reason == "max_nodes" and info.value.field == "max_nodes"
    p.terminate(a.instance_id)
    assert p.provision(SMALL, pool="default", pool_tier="burst").instance_id == "ras-03"


def test_unknown_instance_is_refused_listing_what_is_held():
    p, _ = make()
    a = p.provision(SMALL, pool="default", pool_tier="burst")
    with pytest.raises(ProviderError, match="ras-01") as info:
        p.terminate("ras-99")
    assert info.value.reason == "unknown_instance" and info.value.instance_id == "ras-99" and a.instance_id == "ras-01"


def test_without_settings_any_pool_tier_is_accepted_and_ids_are_fresh():
    p = RayAutoscalerProvider(request_resources=Recorder())
    a = p.provision(NodeShape(name="any", num_cpus=2), pool="p", pool_tier="t")
    b = p.provision(NodeShape(name="any", num_cpus=2), pool="p", pool_tier="t")
    assert a.instance_id.startswith("ras-") and a.instance_id != b.instance_id and len(a.instance_id) == 14


def test_providers_for_builds_it_over_the_settings_with_its_options():
    rec = Recorder()
    p = providers_for(SETTINGS, address="127.0.0.2:6379", autoscaler_options={"request_resources": rec})["ray-autoscaler"]
    assert isinstance(p, RayAutoscalerProvider) and p.settings == SETTINGS
    p.provision(SMALL, pool="default", pool_tier="burst")
    assert rec.last == ([{"CPU": 1}], [SEL_SMALL])


# -- adoption after a scheduler restart -----------------------------------------------------------------------------
def test_a_restarted_provider_adopts_its_rows_pending_and_running_and_demands_them_again():
    first, _ = make()
    a = first.provision(SMALL, pool="default", pool_tier="burst")
    b = first.provision(LARGE, pool="default", pool_tier="burst", spare=True)
    first.claim("n1", node_labels())
    pending_row = ProvisionedNode.from_row(a.as_row())  # the row written at the ask
    running_row = ProvisionedNode.from_row(next(n for n in first.list() if n.instance_id == a.instance_id).as_row())
    second, rec = make()
    assert second.adopt(running_row) and second.adopt(ProvisionedNode.from_row(b.as_row()))
    assert second.adopt(running_row)  # twice: held once
    assert [n.instance_id for n in second.list()] == [a.instance_id, b.instance_id]
    assert second.node_id_of(a.instance_id) == "n1" and [n.instance_id for n in second.pending()] == [b.instance_id]
    assert second.claim("n2", node_labels("big")) == b.instance_id  # its node joins the restarted scheduler's view
    assert second.sync().selectors == (SEL_SMALL, SEL_LARGE) and rec.last[1] == [SEL_SMALL, SEL_LARGE]
    # A row read back without its node (written at the ask) is pending until its node is seen again.
    third, _ = make()
    assert third.adopt(pending_row) and third.claim("n1", node_labels()) == a.instance_id
    third.terminate(a.instance_id)
    third.terminate(a.instance_id)  # terminated once: the second is a no-op
    assert third.list() == [] and third.adopt(pending_row) is False  # nor is one it terminated held again


def test_adopt_refuses_another_providers_node_and_a_pool_tier_the_settings_dropped():
    p, rec = make()
    local = ProvisionedNode("local-1", "local", "default", "local", SMALL, False, 1.0, "local-1", pid=1)
    gone = ProvisionedNode("ras-77", "ray-autoscaler", "default", "retired", SMALL, False, 1.0, "ras-77")
    assert p.adopt(local) is False and p.adopt(gone) is False
    assert p.list() == [] and rec.calls == []

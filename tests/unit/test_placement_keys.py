"""Every key component, one hand-built fleet each: two nodes that differ only where that
component looks, with the loser's id sorting first (so node id alone would pick it)."""

from fabric.core.placement import KEY_COMPONENTS, Peer, PlacementContext, Requirement
from fabric.core.settings import FabricSettings, Pool, PoolTier

from placement_helpers import both, fleet, node

REQ = Requirement(min_tier="cpu_ffmpeg")


def _key(d, node_id):
    return dict((nid, k) for k, nid in d.trace.survivors())[node_id]


def test_components_are_the_ten_of_the_design():
    assert len(KEY_COMPONENTS) == 10
    assert KEY_COMPONENTS[0] == "resilience_violations" and KEY_COMPONENTS[-1] == "node_id"


def test_1_resilience_violations_best_effort():
    f = fleet(node("a", zone="z1", cloud="aws"), node("b", zone="z2", cloud="aws", utilization=0.9))
    ctx = PlacementContext(replica_index=1, other_node="a", other_zone="z1", other_cloud="aws", same_node="forbid", same_az="forbid")
    d = both(f, REQ, ctx)
    assert d.node_id == "b" and d.resilience_violations == ()
    assert _key(d, "a")[0] == 2 and _key(d, "b")[0] == 0
    # only a violating node fits: placed anyway, and the violation is reported
    alone = fleet(node("a", zone="z1", cloud="aws"))
    d2 = both(alone, REQ, ctx)
    assert d2.node_id == "a" and d2.resilience_violations == ("same_node", "same_az")
    # same_cloud forbids a whole cloud
    ctx3 = PlacementContext(other_node="x", other_cloud="aws", same_cloud="forbid")
    f3 = fleet(node("a", cloud="aws"), node("b", cloud="oci", utilization=0.9))
    assert both(f3, REQ, ctx3).node_id == "b"


def test_1_resilience_beats_level_and_pool_tier():
    # the compliant node is a level lower: best-effort resilience still prefers it
    f = fleet(node("a", "gpu_cuda", zone="z1"), node("b", "cpu_ffmpeg", zone="z2"))
    ctx = PlacementContext(other_node="q", other_zone="z1", same_az="forbid")
    d = both(f, Requirement(min_tier="gpu_cuda", floor="cpu_ffmpeg"), ctx)
    assert d.node_id == "b" and d.fallback_levels == 3 and d.resilience_violations == ()


def test_2_booted_over_launching():
    f = fleet(node("a", launching=True), node("b", utilization=0.9))
    d = both(f, REQ)
    assert d.node_id == "b" and _key(d, "a")[1] == 1 and _key(d, "b")[1] == 0
    assert both(fleet(node("a", launching=True)), REQ).node_id == "a"  # launching nodes are placeable


def test_3_unconsumed_spare_avoided_by_policy():
    f = fleet(node("a", spare=True), node("b", utilization=0.9))
    assert both(f, REQ).node_id == "b"  # launch default: avoid_spare
    assert both(f, REQ, PlacementContext(launch_policy="allow_spare")).node_id == "a"
    assert both(f, REQ, PlacementContext(recovering=True, on_runtime_failure="avoid_spare")).node_id == "b"
    # a consumed spare is an ordinary node
    g = fleet(node("a", spare=True, running=1, reserved_cpus=1.0), node("b", utilization=0.9))
    assert both(g, REQ).node_id == "a"


def test_3_avoid_spare_outranks_tier():
    f = fleet(node("a", "gpu_cuda", spare=True), node("b", "cpu_ffmpeg"))
    d = both(f, REQ)
    assert d.node_id == "b"


def test_4_tier_highest_first_or_lowest_that_serves():
    f = fleet(node("a", "cpu_ffmpeg"), node("b", "gpu_cuda", utilization=0.9))
    assert both(f, REQ).node_id == "b"
    assert both(f, Requirement(min_tier="cpu_ffmpeg", prefer="lowest")).node_id == "a"
    g = fleet(node("a", "gpu_cuda"), node("b", "cpu_ffmpeg", utilization=0.9))
    d = both(g, Requirement(min_tier="cpu_ffmpeg", prefer="lowest"))
    assert d.node_id == "b" and d.tier.value == "cpu_ffmpeg" and d.node_tier.value == "cpu_ffmpeg"


def test_5_warmth():
    f = fleet(node("a"), node("b", warm={"enc"}, utilization=0.9))
    d = both(f, REQ, PlacementContext(template="enc"))
    assert d.node_id == "b" and _key(d, "b")[4] == -1 and _key(d, "a")[4] == 0
    images = PlacementContext(template="enc", template_images=("img1", "img2"))
    g = fleet(node("a", warm={"img1"}), node("b", warm={"img1", "img2"}, utilization=0.9))
    assert both(g, REQ, images).node_id == "b"


def test_5_avoid_spare_outranks_warmth():
    f = fleet(node("a", spare=True, warm={"enc"}), node("b"))
    assert both(f, REQ, PlacementContext(template="enc")).node_id == "b"


def test_6_spare_reserved_for_this_template():
    f = fleet(node("a", spare=True), node("b", spare=True, spare_reserved_for={"enc"}, utilization=0.9))
    d = both(f, REQ, PlacementContext(template="enc", launch_policy="allow_spare"))
    assert d.node_id == "b" and _key(d, "b")[5] == 0 and _key(d, "a")[5] == 1


def test_7_recovering_job_prefers_spares():
    f = fleet(node("a"), node("b", spare=True, utilization=0.9))
    ctx = PlacementContext(recovering=True, on_runtime_failure="prefer_spare")
    d = both(f, REQ, ctx)
    assert d.node_id == "b" and _key(d, "b")[6] == 0
    # below warmth: a warm ordinary node beats a cold spare
    g = fleet(node("a", warm={"enc"}), node("b", spare=True))
    assert both(g, REQ, PlacementContext(recovering=True, on_runtime_failure="prefer_spare", template="enc")).node_id == "a"


def test_8_packing_spread_and_binpack():
    f = fleet(node("a", utilization=0.5), node("b", utilization=0.1))
    assert both(f, REQ).node_id == "b"  # default pool tier spreads: emptiest first
    binpack = FabricSettings(pools=(Pool(name="default", tiers=(PoolTier(name="fixed", packing="binpack"),)),))
    g = fleet(node("a", utilization=0.1), node("b", utilization=0.5), settings=binpack)
    assert both(g, REQ).node_id == "b"
    # load counts reservations and slots too, not only reported utilisation
    h = fleet(node("a", running=4, reserved_cpus=1.0), node("b", running=1, reserved_cpus=1.0))
    d = both(h, REQ)
    assert d.node_id == "b" and _key(d, "a")[7] == 0.5 and _key(d, "b")[7] == 0.125


def test_9_soft_zone_with_peers():
    f = fleet(node("a", zone="x"), node("b", zone="y"))  # equal packing: the zone decides
    ctx = PlacementContext(job="me", intra_zone="soft", peers=(Peer("p", "q", zone="y"),))
    d = both(f, REQ, ctx)
    assert d.node_id == "b" and _key(d, "b")[8] == 0 and _key(d, "a")[8] == 1
    off = PlacementContext(job="me", intra_zone="off", peers=(Peer("p", "q", zone="y"),))
    assert both(f, REQ, off).node_id == "a"
    busier = fleet(node("a", zone="x"), node("b", zone="y", utilization=0.9))
    assert both(busier, REQ, ctx).node_id == "a"  # packing (8) decides before the zone (9)


def test_10_node_id_breaks_ties():
    f = fleet(node("b"), node("a"), node("c"))
    d = both(f, REQ)
    assert d.node_id == "a" and [nid for _, nid in d.trace.survivors()] == ["a", "b", "c"]

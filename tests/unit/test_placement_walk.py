"""The walk: levels, fallback, wait vs spill, provisioning, bursts, pins, explain."""

from fabric.core.placement import FleetView, PlacementContext, Requirement, dry_run, place, place_many, reference
from fabric.core.placement.synth import mixed_settings
from fabric.core.settings import FabricSettings, NodeShape, Pool, PoolTier
from fabric.core.tiers import ComputeTier

from placement_helpers import both, fleet, node

FIXED = FabricSettings()  # one pool, one fixed pool tier: nothing can be provisioned


def test_falls_back_one_level_at_a_time_and_counts_it():
    f = fleet(node("cpu", "cpu_ffmpeg"), node("relay", "relay"))
    d = both(f, Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", num_cpus=1, payload_size=1024))
    assert d.status == "placed" and d.node_id == "cpu"
    assert d.tier is ComputeTier.CPU_FFMPEG and d.fallback_levels == 1
    assert f.commit(d) is d.allocation and f.node("cpu").running == 1
    # the floor is a floor: nothing at or above it -> deferred
    g = fleet(node("relay", "relay"), settings=FIXED)
    d2 = both(g, Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg"))
    assert d2.status == "deferred" and "cpu_ffmpeg" in d2.reason


def test_hard_requirement_never_degrades():
    f = fleet(node("cpu", "cpu_ffmpeg"), settings=FIXED)
    d = both(f, Requirement(min_tier="gpu_cuda", fallback=False))
    assert d.status == "deferred" and d.reason.startswith("no capacity")
    assert both(fleet(node("g", "gpu_cuda")), Requirement(min_tier="gpu_cuda", fallback=False)).node_id == "g"


def test_no_fallback_while_a_higher_level_fits():
    f = fleet(node("a-cpu", "cpu_ffmpeg"), node("z-apu", "gpu_apu", utilization=0.9))
    d = both(f, Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg"))
    assert d.node_id == "z-apu" and d.fallback_levels == 0


def test_when_full_wait_defers_instead_of_spilling():
    full_apu = node("apu", "gpu_apu", slots=1, running=1, reserved_cpus=1.0)
    f = fleet(full_apu, node("cpu", "cpu_ffmpeg"), settings=FIXED)
    spill = both(f, Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg"))
    assert spill.node_id == "cpu" and spill.fallback_levels == 1
    wait = both(f, Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", when_full="wait"))
    assert wait.status == "deferred" and wait.reason == "waiting for a slot at gpu_apu"
    # nothing serves the best level at all (not full: absent) -> wait still spills
    g = fleet(node("cpu", "cpu_ffmpeg"), settings=FIXED)
    assert both(g, Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", when_full="wait")).node_id == "cpu"
    # a cordoned best node is not "full": spill
    h = fleet(node("apu", "gpu_apu", cordoned=True), node("cpu", "cpu_ffmpeg"), settings=FIXED)
    assert both(h, Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", when_full="wait")).node_id == "cpu"
    # with an elastic pool tier, a full best level provisions at that level before waiting
    e = fleet(full_apu, node("cpu", "cpu_ffmpeg"))
    p = both(e, Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", when_full="wait"))
    assert p.status == "provision" and p.tier is ComputeTier.GPU_APU


def test_provision_after_degrading_by_default_or_before_when_asked():
    f = fleet(node("cpu", "cpu_ffmpeg"))
    req = Requirement(min_tier="gpu_cuda", floor="cpu_ffmpeg", num_gpus=0)
    d = both(f, req)
    assert d.status == "placed" and d.node_id == "cpu" and d.fallback_levels == 3
    p = both(f, req.replace(scale="provision_first"))
    assert p.status == "provision" and p.pool_tier == "burst" and p.shape.name == "gpu-box"
    assert p.tier is ComputeTier.GPU_CUDA and p.fallback_levels == 0 and p.node_id is None
    # nothing exists: the walk provisions the first shape serving the best level
    empty = fleet()
    e = both(empty, Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg"))
    assert e.status == "provision" and e.shape.name == "gpu-box" and e.tier is ComputeTier.GPU_APU
    c = both(empty, Requirement(min_tier="cpu_ffmpeg", num_cpus=2))
    assert c.shape.name == "small-cpu"
    assert both(empty, Requirement(min_tier="cpu_ffmpeg", num_cpus=4)).shape.name == "gpu-box"  # first fitting
    assert both(empty, Requirement(min_tier="cpu_ffmpeg", num_cpus=64)).status == "deferred"


def test_provision_respects_max_nodes_counting_launching_nodes():
    nodes = [node(f"b{i}", "relay", pool_tier="burst", launching=(i == 0)) for i in range(3)]
    f = fleet(*nodes)
    d = both(f, Requirement(min_tier="cpu_ffmpeg", fallback=False))
    assert d.status == "deferred"  # burst holds 3 of max 3
    f.remove("b1")
    f.validate()
    assert both(f, Requirement(min_tier="cpu_ffmpeg", fallback=False)).status == "provision"


def test_pinned_placement_never_provisions():
    f = fleet(node("a", "cpu_ffmpeg", cordoned=True))
    d = both(f, Requirement(min_tier="cpu_ffmpeg"), PlacementContext(target_node="a"))
    assert d.status == "deferred" and "pinned node a" in d.reason
    assert both(f, Requirement(min_tier="cpu_ffmpeg"), PlacementContext(target_node="gone")).status == "deferred"


def test_fixed_pool_tier_first_then_elastic_in_cost_order():
    f = fleet(node("a-burst", "cpu_ffmpeg", pool_tier="burst"), node("z-fixed", "cpu_ffmpeg", utilization=0.9))
    d = both(f, Requirement(min_tier="cpu_ffmpeg"))
    assert d.node_id == "z-fixed" and d.pool_tier == "fixed"
    f.update("z-fixed", cordoned=True)
    d2 = both(f, Requirement(min_tier="cpu_ffmpeg"))
    assert d2.node_id == "a-burst" and d2.pool_tier == "burst"


def test_pool_selection_and_unknown_pool():
    f = fleet(node("d"), node("e", pool="edge"))
    assert both(f, Requirement(pool="edge")).node_id == "e"
    assert both(f, Requirement()).node_id == "d"
    assert both(f, Requirement(pool="nope")).reason == "no capacity: unknown pool 'nope'"


def test_degraded_node_is_demoted_in_the_fleet_view():
    f = fleet(node("g", "gpu_cuda"), settings=FIXED)
    f.update("g", tier=ComputeTier.CPU_FFMPEG)
    f.validate()
    assert f.node("g").tier is ComputeTier.CPU_FFMPEG
    assert both(f, Requirement(min_tier="gpu_cuda", fallback=False)).status == "deferred"
    assert both(f, Requirement(min_tier="gpu_cuda", floor="cpu_ffmpeg")).fallback_levels == 3


def test_burst_never_double_books_and_spills_down():
    apu = node("apu", "gpu_apu", cpus=2, slots=2)
    cpu = node("cpu", "cpu_ffmpeg", cpus=2, slots=2)
    f = fleet(apu, cpu)
    reqs = [Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", num_cpus=1) for _ in range(6)]
    ds = place_many(f, reqs)
    assert [d.status for d in ds] == ["placed"] * 4 + ["provision"] * 2
    assert [d.node_id for d in ds[:4]] == ["apu", "apu", "cpu", "cpu"]
    assert sum(d.fallback_levels > 0 for d in ds) == 2
    f.validate()
    assert f.node("apu").running == 2 and f.node("cpu").running == 2
    ref = reference.place_many(fleet(apu, cpu), reqs)
    assert all(a.same_outcome(b) for a, b in zip(ds, ref))


def test_seed_002_burst_verification():
    f = FleetView([node("deck", "gpu_apu", cpus=4), node("box", "cpu_ffmpeg", cpus=8)], FabricSettings())
    placed = fallbacks = 0
    for _ in range(100):
        d = place(f, Requirement(min_tier="gpu_apu", payload_size=1024))
        f.commit(d)
        placed += d.placed
        fallbacks += d.fallback_levels > 0
        if d.allocation:
            f.release(d.allocation)
    assert fallbacks == 0 and placed == 100
    burst = []
    for _ in range(12):
        d = place(f, Requirement(min_tier="gpu_apu", payload_size=1024))
        f.commit(d)
        burst.append(d)
    assert sum(d.fallback_levels > 0 for d in burst) == 8  # 4 slots on the deck, then 8 spill down to the CPU box


def test_dry_run_does_not_act_and_explains():
    f = fleet(node("cpu", "cpu_ffmpeg"), node("relay", "relay"), node("off", "cpu_ffmpeg", cordoned=True))
    d = dry_run(f, Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg"))
    assert f.node("cpu").running == 0 and f.node("cpu").reserved_cpus == 0
    text = d.explain()
    assert "placed on cpu" in text and "1 level below gpu_apu" in text
    assert "level gpu_apu, pool tier default/fixed: 0 of 3 nodes fit" in text
    assert "filter level" in text and "filter cordoned" in text
    assert "decided at level cpu_ffmpeg, pool tier fixed" in text
    verbose = d.explain(verbose=True)
    assert "off" in verbose and "cordoned" in verbose
    assert "no trace" in place(f, Requirement()).explain()
    deferred = dry_run(fleet(), Requirement(min_tier="gpu_cuda", fallback=False, pool="edge"))
    assert deferred.explain().startswith("deferred: no capacity")


def test_launching_node_ranks_below_booted_at_the_same_level():
    f = fleet(node("a", "cpu_ffmpeg", launching=True), node("b", "cpu_ffmpeg", utilization=0.9))
    assert both(f, Requirement(min_tier="cpu_ffmpeg")).node_id == "b"


def test_settings_with_only_elastic_pool_tier():
    s = FabricSettings(pools=(Pool(name="default", tiers=(PoolTier(
        name="cloud", provider="local", scale_out="elastic", max_nodes=1,
        candidate_shapes=(NodeShape(name="c2", tier=ComputeTier.CPU_FFMPEG),)),)),))
    f = FleetView([node("n")], s)
    assert f.node("n").pool_tier == "cloud"  # no fixed tier: the first one holds unlabelled nodes
    assert both(f, Requirement(min_tier="cpu_ffmpeg")).node_id == "n"


def test_test_settings_are_valid():
    assert FabricSettings.load(mixed_settings().model_dump()).problems() == []

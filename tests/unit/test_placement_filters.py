"""Every hard filter, one hand-built fleet each: a node that fails exactly that filter (and
would otherwise win: its id sorts first and it is emptier), and one that passes."""

import pytest

from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import FILTER_NAMES, Peer, PlacementContext, Requirement
from fabric.core.placement.filters import FILTERS

from placement_helpers import both, fleet, node

REQ = Requirement(min_tier="cpu_ffmpeg", num_cpus=1)

# (filter, bad node kwargs, good node kwargs, requirement, context)
CASES = [
    ("target_node", {}, {}, REQ, PlacementContext(target_node="z")),
    ("pool", {"pool": "edge"}, {}, REQ, None),
    ("pool_tier", {"pool_tier": "burst"}, {}, REQ, None),
    ("excluded", {}, {}, REQ, PlacementContext(exclude_nodes=frozenset({"a"}))),
    ("status", {"status": NodeStatus.DRAINING}, {}, REQ, None),
    ("status", {"status": NodeStatus.OFFLINE}, {}, REQ, None),
    ("status", {"flap_held": True}, {}, REQ, None),
    ("status", {"unhealthy": True}, {}, REQ, None),
    ("cordoned", {"cordoned": True}, {}, REQ, None),
    ("spare_reserved", {"spare": True, "spare_exclusive": True, "spare_reserved_for": {"enc"}}, {},
     REQ, PlacementContext(launch_policy="allow_spare", template="mux")),
    ("capabilities", {}, {"arch": "aarch64"}, Requirement(min_tier="cpu_ffmpeg", capabilities=("arch:aarch64",)), None),
    ("capabilities", {}, {}, Requirement(min_tier="cpu_ffmpeg", capabilities=("ffmpeg:libx264", "nonexistent")), "skip-good"),
    ("resources", {"ray_resources": {"x": 0.5}}, {"ray_resources": {"x": 2.0}},
     Requirement(min_tier="cpu_ffmpeg", resources={"x": 1}), None),
    ("resources", {}, {}, Requirement(min_tier="cpu_ffmpeg", resources={"nowhere": 1}), "skip-good"),
    ("accelerator_type", {"ray_resources": {"accelerator_type:T4": 1.0}}, {"ray_resources": {"accelerator_type:A100": 1.0}},
     Requirement(min_tier="cpu_ffmpeg", accelerator_type="A100"), None),
    ("label_selector", {"ray_labels": {"rack": "r1"}}, {"ray_labels": {"rack": "r2"}},
     Requirement(min_tier="cpu_ffmpeg", label_selector={"rack": "r2"}), None),
    ("label_selector", {"ray_labels": {"rack": "r1"}}, {},
     Requirement(min_tier="cpu_ffmpeg", label_selector={"rack": "!in(r1,r3)"}), None),
    ("level", {"kind": "relay"}, {}, REQ, None),
    ("level", {"kind": "gpu_cuda", "tier": "cpu_ffmpeg"}, {"kind": "gpu_apu"}, Requirement(min_tier="gpu_apu", fallback=False), None),
    ("cpu", {"reserved_cpus": 7.5, "running": 0}, {"utilization": 0.9}, REQ, None),
    ("cpu", {"utilization_cap": 0.1}, {"utilization": 0.9}, REQ, None),
    ("memory", {"reserved_memory_mib": 16000}, {"utilization": 0.9}, Requirement(min_tier="cpu_ffmpeg", memory_mib=1024), None),
    ("cores", {"cpus": 2}, {"utilization": 0.9}, Requirement(min_tier="cpu_ffmpeg", num_cores=3), None),
    ("concurrency", {"slots": 2, "running": 2}, {"utilization": 0.9}, REQ, None),
    ("ports", {"ports": {"1935/tcp"}}, {"utilization": 0.9}, Requirement(min_tier="cpu_ffmpeg", ports=("1935/tcp",)), None),
    ("gpu", {"kind": "gpu_cuda", "gpu_model": "NVIDIA A100-SXM4-40GB"}, {"kind": "gpu_cuda", "utilization": 0.9},
     Requirement(min_tier="gpu_cuda", num_gpus=0.5, gpu_model="GeForce-RTX-4070"), None),
    ("gpu", {"kind": "cpu_ffmpeg"}, {"kind": "gpu_cuda", "utilization": 0.9}, Requirement(min_tier="cpu_ffmpeg", num_gpus=1), None),
    ("gpu_capacity", {"kind": "gpu_cuda", "gpu_reserved": (0.75,)}, {"kind": "gpu_cuda", "utilization": 0.9},
     Requirement(min_tier="gpu_cuda", num_gpus=0.5), None),
    ("exclusive", {"running": 1, "reserved_cpus": 1.0}, {"utilization": 0.9}, Requirement(min_tier="cpu_ffmpeg", exclusive=True), None),
    ("exclusive", {"running": 1, "jobs": {"j1"}, "exclusive_job": "j1"}, {"utilization": 0.9}, REQ, None),
    ("co_location", {}, {}, REQ, PlacementContext(job="me", co_locate_with=("peer",), peers=(Peer("peer", "z"),))),
    ("separation", {}, {}, REQ, PlacementContext(job="me", separate_from=("peer",), peers=(Peer("peer", "a"),))),
    ("zone", {"zone": "x"}, {"zone": "y"}, REQ, PlacementContext(job="me", intra_zone="hard", peers=(Peer("peer", "q", zone="y"),))),
]


def test_every_filter_has_a_case():
    assert {c[0] for c in CASES} == set(FILTER_NAMES)
    assert FILTER_NAMES[:3] == ("target_node", "pool", "pool_tier")


@pytest.mark.parametrize("name,bad,good,req,ctx", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_filter_rejects_and_is_named_in_the_trace(name, bad, good, req, ctx):
    skip_good = ctx == "skip-good"
    ctx = None if skip_good else ctx
    nodes = [node("a", **{"kind": "cpu_ffmpeg", **bad})]
    if not skip_good:
        nodes.append(node("z", **{"kind": "cpu_ffmpeg", **good}))
    f = fleet(*nodes)
    d = both(f, req, ctx)
    if skip_good:
        assert d.status != "placed"
        assert d.trace.steps[0].verdicts["a"] == name
        return
    assert d.status == "placed" and d.node_id == "z", d.explain(verbose=True)
    first_step = d.trace.steps[0]
    assert first_step.verdicts["a"] == name, d.explain(verbose=True)
    # without the offending difference, "a" would have won: it is the same node otherwise
    assert dict(FILTERS)[name] is not None


def test_spare_reservation_can_be_overridden_or_matched():
    spare = node("a", spare=True, spare_exclusive=True, spare_reserved_for={"enc"})
    f = fleet(spare)
    assert both(f, REQ, PlacementContext(launch_policy="allow_spare")).status != "placed"
    assert both(f, REQ, PlacementContext(override_reservation=True)).node_id == "a"
    assert both(f, REQ, PlacementContext(template="enc")).node_id == "a"
    # a spare that took work is an ordinary node: its reservation no longer applies
    consumed = fleet(node("a", spare=True, spare_exclusive=True, spare_reserved_for={"enc"}, running=1, reserved_cpus=1.0))
    assert both(consumed, REQ).node_id == "a"


def test_exclusive_node_takes_its_co_located_peer():
    held = node("a", running=1, jobs={"peer"}, exclusive_job="peer")
    f = fleet(held)
    ctx = PlacementContext(job="me", co_locate_with=("peer",), peers=(Peer("peer", "a"),))
    assert both(f, REQ, ctx).node_id == "a"


def test_same_node_default_co_locates_rule_less_jobs():
    f = fleet(node("a"), node("b"))
    ctx = PlacementContext(job="me", same_node_default=True, peers=(Peer("p1", "b", rule_less=True),))
    assert both(f, REQ, ctx).node_id == "b"
    ruled = PlacementContext(job="me", same_node_default=True, peers=(Peer("p1", "b", rule_less=False),))
    assert both(f, REQ, ruled).node_id == "a"


def test_gpu_picks_fullest_device_that_fits_and_whole_devices():
    f = fleet(node("a", "gpu_cuda", gpus=3, gpu_reserved=(0.25, 0.5, 0.0)))
    d = both(f, Requirement(min_tier="gpu_cuda", num_gpus=0.5))
    assert d.gpu_index == 1 and d.allocation.gpu_positions == (1,)
    d2 = both(f, Requirement(min_tier="gpu_cuda", num_gpus=0.75))
    assert d2.gpu_index == 0
    whole = both(f, Requirement(min_tier="gpu_cuda", num_gpus=1))
    assert whole.gpu_index == 2
    assert both(f, Requirement(min_tier="gpu_cuda", num_gpus=2)).status == "deferred"
    f.commit(d)
    assert f.node("a").gpu_reserved == (0.25, 1.0, 0.0)
    assert both(f, Requirement(min_tier="gpu_cuda", num_gpus=0.5)).gpu_index == 0  # 0.25 + 0.5 fits: fullest first


def test_utilization_cap_limits_free_cpus():
    f = fleet(node("a", cpus=8, utilization_cap=0.5, reserved_cpus=3.0, running=1))
    assert both(f, Requirement(min_tier="cpu_ffmpeg", num_cpus=1)).node_id == "a"
    assert both(f, Requirement(min_tier="cpu_ffmpeg", num_cpus=1.5)).status != "placed"

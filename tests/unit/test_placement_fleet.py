"""NodeRecord and FleetView: defaults, serialisation, events, reservations, copies, snapshots."""

import json
import pickle

import pytest

from fabric.core.errors import NodeNotFoundError
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import FleetView, NodeRecord, PlacementContext, Requirement, place
from fabric.core.placement.synth import node_capabilities
from fabric.core.tiers import ComputeTier

from placement_helpers import fleet, node


def test_record_from_three_fields_has_sensible_defaults():
    caps = node_capabilities("cuda", 8, 16384)
    rec = NodeRecord(node_id="abc", name="ws", capabilities=caps)
    assert rec.status is NodeStatus.ACTIVE and rec.tier is ComputeTier.GPU_CUDA
    assert rec.utilization == 0.0 and rec.running == 0 and rec.last_seen is None and not rec.cordoned
    assert rec.slots == caps.limitations.max_concurrent_tasks == 8
    assert NodeRecord(node_id="abc", name="ws", capabilities=caps, max_concurrent_tasks=2).slots == 2
    assert rec.gpu_reserved == (0.0,) and rec.free_cpus == 8.0 and rec.placeable
    assert rec.pool is None  # resolved when it joins a fleet


@pytest.mark.parametrize("cap,read", [(0.5, 0.5), (1.0, 1.0), (0.0, 1.0), (-1, 1.0), (1.5, 1.0), (float("nan"), 1.0), (8, 1.0)])
def test_utilization_cap_outside_unit_interval_reads_as_one(cap, read):
    assert node("a", utilization_cap=cap).utilization_cap == read


def test_record_pickles_and_round_trips_json():
    rec = node("a", "gpu_cuda", ports={"1935/tcp"}, jobs={"j"}, spare=True, warm={"t"}, zone="z", gpu_reserved=(0.5,),
               tier=ComputeTier.CPU_FFMPEG, last_seen=12.5)
    again = pickle.loads(pickle.dumps(rec))
    assert again == rec and again.load == rec.load and again.capability_tags == rec.capability_tags
    data = json.loads(json.dumps(rec.to_dict()))
    assert data["tier"] == "cpu_ffmpeg" and data["status"] == "active" and data["ports"] == ["1935/tcp"]
    assert NodeRecord.from_dict(data) == rec
    for name in ("node_id", "name", "status", "tier", "capabilities", "utilization", "running", "last_seen", "cordoned"):
        assert name in data


def test_events_keep_indexes_in_step():
    f = fleet(node("a"), node("b", "gpu_cuda"), node("c", "relay", pool="edge"))
    assert len(f) == 3 and "a" in f and f.node("a").pool == "default" and f.node("a").pool_tier == "fixed"
    f.update("a", cordoned=True)
    f.validate()
    assert not f.node("a").placeable
    f.update("a", cordoned=False, status=NodeStatus.DRAINING)
    f.validate()
    f.remove("b")
    f.validate()
    assert f.get("b") is None and f.remove("b") is None
    with pytest.raises(NodeNotFoundError):
        f.node("b")
    f.add(node("b", "gpu_cuda", launching=True))
    f.validate()
    f.add(node("b", "gpu_cuda"))  # launched: the same node, booted now
    f.validate()
    assert not f.node("b").launching


def test_commit_and_release_are_exact_inverses():
    f = fleet(node("a", "gpu_cuda", gpus=2))
    req = Requirement(min_tier="gpu_cuda", num_cpus=1.5, memory_mib=1000, num_gpus=0.3, ports=("1935/tcp",))
    d = place(f, req, PlacementContext(job_id="job-1", job="enc"))
    a = f.commit(d)
    rec = f.node("a")
    assert (rec.running, rec.reserved_cpus, rec.reserved_memory_mib) == (1, 1.5, 1000)
    assert rec.gpu_reserved == (0.3, 0.0) and rec.ports == {"1935/tcp"} and rec.jobs == {"job-1"}
    f.validate()
    # the port is now taken on this node
    assert place(f, Requirement(min_tier="gpu_cuda", ports=("1935/tcp",))).status != "placed"
    f.release(a)
    rec = f.node("a")
    assert (rec.running, rec.reserved_cpus, rec.reserved_memory_mib, rec.gpu_reserved, rec.ports, rec.jobs) == (0, 0, 0, (0, 0), frozenset(), frozenset())
    f.remove("a")
    assert f.release(a) is None  # a node already gone is ignored


def test_exclusive_job_holds_the_node():
    f = fleet(node("a"), node("b", utilization=0.5))
    d = place(f, Requirement(min_tier="cpu_ffmpeg", exclusive=True), PlacementContext(job_id="solo"))
    f.commit(d)
    assert f.node("a").exclusive_job == "solo"
    assert place(f, Requirement(min_tier="cpu_ffmpeg")).node_id == "b"
    f.release(d.allocation)
    assert f.node("a").exclusive_job is None


def test_non_placing_decisions_commit_nothing():
    f = fleet()
    d = place(f, Requirement(min_tier="gpu_cuda", fallback=False, pool="edge"))
    assert d.status == "deferred" and f.commit(d) is None


def test_re_adding_a_node_keeps_its_reservations_unless_told():
    f = fleet(node("a"))
    f.commit(place(f, Requirement(min_tier="cpu_ffmpeg")))
    f.add(node("a", utilization=0.3))  # a re-probe
    assert f.node("a").running == 1 and f.node("a").utilization == 0.3
    f.add(node("a"), keep_usage=False)
    assert f.node("a").running == 0
    f.validate()


def test_copy_is_independent():
    f = fleet(node("a"), node("b"))
    g = f.copy()
    g.commit(place(g, Requirement(min_tier="cpu_ffmpeg")))
    g.update("b", cordoned=True)
    assert f.node("a").running == 0 and not f.node("b").cordoned
    assert g.node("a").running == 1
    f.validate()
    g.validate()
    f.commit(place(f, Requirement(min_tier="cpu_ffmpeg")))
    assert g.node("a").running == 1 and f.node("a").running == 1


def test_snapshot_is_stable_while_the_fleet_moves_on():
    f = fleet(node("a"), node("b"))
    snap = f.snapshot()
    for _ in range(5):
        f.commit(place(f, Requirement(min_tier="cpu_ffmpeg")))
    f.update("a", cordoned=True)
    f.remove("b")
    f.add(node("c"))
    assert [r.running for r in snap.records()] == [0, 0] and [r.node_id for r in snap.records()] == ["a", "b"]
    assert not snap.get("a").cordoned
    assert f.node("a").cordoned and f.get("b") is None


def test_lazy_trace_reads_the_fleet_as_it_was():
    f = fleet(node("a"), node("b", utilization=0.5))
    d = place(f, Requirement(min_tier="cpu_ffmpeg"), trace=True)
    f.commit(d)
    f.update("b", cordoned=True)
    survivors = [nid for _, nid in d.trace.survivors()]
    assert survivors == ["a", "b"] and d.trace.verdicts() == {"a": "survivor", "b": "survivor"}


def test_fleet_iterates_in_id_order_and_default_settings():
    f = FleetView([node("b"), node("a")])
    assert [r.node_id for r in f] == ["a", "b"] and f.default_pool == "default"


def test_stale_decision_is_refused_at_commit():
    from fabric.core.errors import CapacityError

    f = fleet(node("a", slots=1))
    d1 = place(f, Requirement(min_tier="cpu_ffmpeg"))
    d2 = place(f, Requirement(min_tier="cpu_ffmpeg"))  # decided before d1 was committed
    f.commit(d1)
    with pytest.raises(CapacityError):
        f.commit(d2)
    f.validate()


def test_decisions_and_traces_pickle():
    f = fleet(node("a"), node("b", cordoned=True))
    d = place(f, Requirement(min_tier="cpu_ffmpeg"), trace=True)
    again = pickle.loads(pickle.dumps(d))
    assert again.same_outcome(d) and again.trace == d.trace and again.allocation == d.allocation
    assert "cordoned" in again.explain(verbose=True)
    assert json.loads(json.dumps(d.to_dict()))["node_id"] == "a"

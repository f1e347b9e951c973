"""SchedulerCore: queueing, release, node churn, cordon/drain and hard-fail, with an injected clock."""

import pytest

from fabric import CapacityError, ComputeTier, GpuInfo, NodeCapabilities
from fabric.core.capabilities import Limitations
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import NodeRecord, Requirement
from fabric.core.scheduling import Expired, MarkDraining, Placed, SchedulerCore

VAAPI = {"VAProfileH264Main": ("VAEntrypointVLD", "VAEntrypointEncSlice")}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def caps(tier: str, slots: int = 2, name: str = "n") -> NodeCapabilities:
    gpus = []
    if tier == "gpu_cuda":
        gpus = [GpuInfo(vendor="nvidia", model="NVIDIA GeForce RTX 4070", vram_mib=12282, discrete=True, cuda=True)]
    elif tier == "gpu_apu":
        gpus = [GpuInfo(vendor="amd", model="AMD Custom GPU 0405", discrete=False, vaapi_profiles=VAAPI)]
    cpus = 1 if tier == "relay" else 4
    caps = NodeCapabilities(name=name, cpu_logical=cpus, cpu_physical=cpus, cpu_usable=cpus,
                            memory_mib=8192 if tier != "relay" else 1024, gpus=gpus,
                            limitations=Limitations(max_concurrent_tasks=slots))
    assert caps.tier.value == tier
    return caps


def rec(node_id: str, tier: str, slots: int = 2) -> NodeRecord:
    return NodeRecord(node_id=node_id, name=node_id, capabilities=caps(tier, slots, node_id))


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def core(clock):
    c = SchedulerCore(clock=clock)
    for r in (rec("cuda", "gpu_cuda"), rec("apu", "gpu_apu"), rec("cpu", "cpu_ffmpeg"), rec("relay", "relay", 1)):
        c.node_joined(r)
    return c


APU_DOWN_TO_CPU = Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", num_cpus=1, payload_size=1024)


def test_best_tier_first_then_spill_down_when_full(core):
    got = [core.place(APU_DOWN_TO_CPU) for _ in range(6)]
    nodes = [a.node_id for a in got]
    # gpu_apu level: cuda and apu both serve it (tier >= level); the higher tier ranks first
    assert nodes[:4] == ["cuda", "cuda", "apu", "apu"]
    assert nodes[4:] == ["cpu", "cpu"]
    assert [a.fallback_levels for a in got] == [0, 0, 0, 0, 1, 1]
    assert core.fallback_count == 2
    over = core.place(APU_DOWN_TO_CPU)
    assert over.status == "deferred"  # the relay node is below the floor: never used


def test_never_past_max_concurrent_tasks(core):
    for _ in range(50):
        core.place(Requirement(min_tier="relay", num_cpus=0))
    for r in core.fleet.records():
        assert r.running <= r.slots
    assert sum(r.running for r in core.fleet.records()) == 7


def test_release_returns_capacity_and_drains_queue_fifo(core, clock):
    held = [core.place(APU_DOWN_TO_CPU) for _ in range(6)]
    core.place(APU_DOWN_TO_CPU, request_id="q1", queue=True)
    core.place(APU_DOWN_TO_CPU, request_id="q2", queue=True)
    assert core.queue_depth == 2
    out = core.release([held[0].allocation_id])
    assert [type(i) for i in out] == [Placed] and out[0].request_id == "q1"
    assert out[0].assignment.node_id == held[0].node_id  # back to the best tier once a slot frees
    assert core.queue_depth == 1
    assert core.release([held[0].allocation_id]) == []  # releasing twice is harmless


def test_priority_before_fifo(core):
    for _ in range(6):
        core.place(APU_DOWN_TO_CPU)
    core.place(APU_DOWN_TO_CPU, request_id="low", queue=True, priority=0)
    core.place(APU_DOWN_TO_CPU, request_id="high", queue=True, priority=5)
    out = core.node_joined(rec("cpu2", "cpu_ffmpeg", slots=1))
    assert [i.request_id for i in out] == ["high"]


def test_queue_timeout_expires_with_capacity_error(core, clock):
    for _ in range(6):
        core.place(APU_DOWN_TO_CPU)
    core.place(APU_DOWN_TO_CPU, request_id="late", queue=True, timeout_s=30)
    clock.t += 29
    assert core.tick() == []
    clock.t += 2
    (exp,) = core.tick()
    assert isinstance(exp, Expired) and exp.request_id == "late"
    assert isinstance(exp.error, CapacityError) and exp.error.reason == "queue timeout"
    assert exp.error.waited_s == pytest.approx(31)
    assert core.queue_depth == 0 and core.counters["queue_expired"] == 1


def test_node_join_absorbs_the_queue(core):
    for _ in range(6):
        core.place(APU_DOWN_TO_CPU)
    for i in range(3):
        core.place(APU_DOWN_TO_CPU, request_id=f"w{i}", queue=True)
    out = core.node_joined(rec("cuda2", "gpu_cuda", slots=2))
    assert [(i.request_id, i.assignment.node_id, i.assignment.fallback_levels) for i in out] == [
        ("w0", "cuda2", 0), ("w1", "cuda2", 0)]
    assert core.queue_depth == 1


def test_all_gpu_nodes_lost_falls_back_to_cpu(core):
    core.node_lost("cuda")
    core.node_lost("apu")
    a = core.place(APU_DOWN_TO_CPU)
    assert (a.node_id, a.tier, a.fallback_levels) == ("cpu", ComputeTier.CPU_FFMPEG, 1)


def test_hard_requirement_fails_at_once_without_a_serving_node(core):
    lupine = Requirement(min_tier="gpu_cuda", fallback=False)
    assert core.place(lupine).node_id == "cuda"
    core.node_lost("cuda")
    with pytest.raises(CapacityError) as exc:
        core.place(lupine, request_id="x", queue=True)
    assert "gpu_cuda" in str(exc.value) and core.queue_depth == 0


def test_hard_requirement_waits_when_its_node_is_only_busy(core):
    lupine = Requirement(min_tier="gpu_cuda", fallback=False)
    core.place(lupine), core.place(lupine)
    a = core.place(lupine, request_id="x", queue=True)
    assert a.status == "deferred" and core.queue_depth == 1


def test_lost_node_drops_its_allocations(core):
    a = core.place(Requirement(min_tier="gpu_cuda", fallback=False))
    core.node_lost("cuda")
    assert core.running_on("cuda") == 0 and a.allocation_id not in core.allocations
    assert core.counters["work_lost_with_node"] == 1
    assert core.release([a.allocation_id]) == []  # the late release of lost work is ignored


def test_cordon_keeps_new_work_off_and_uncordon_drains_queue(core):
    core.cordon("cuda")
    core.cordon("apu")
    a = core.place(APU_DOWN_TO_CPU)
    assert a.node_id == "cpu"
    core.place(APU_DOWN_TO_CPU)
    core.place(APU_DOWN_TO_CPU, request_id="q", queue=True)
    out = core.uncordon("apu")
    assert [(i.request_id, i.assignment.node_id) for i in out] == [("q", "apu")]


def test_drain_waits_for_running_work_then_marks_draining(core, clock):
    a = core.place(Requirement(min_tier="gpu_cuda", fallback=False))
    assert core.drain("cuda", grace_s=300) == []
    assert core.place(Requirement(min_tier="gpu_cuda", fallback=False)).status == "deferred"
    out = core.release([a.allocation_id])
    assert out == [MarkDraining("cuda")]
    assert core.node("cuda").status is NodeStatus.DRAINING


def test_drain_grace_runs_out(core, clock):
    core.place(Requirement(min_tier="gpu_cuda", fallback=False))
    core.drain("cuda", grace_s=10)
    clock.t += 11
    assert core.tick() == [MarkDraining("cuda")]


def test_select_worker_counts_fallbacks_without_reserving(core):
    core.cordon("cuda")
    core.cordon("apu")
    for _ in range(100):
        a = core.select_worker(APU_DOWN_TO_CPU)
        assert a.status == "assigned" and a.allocation_id is None
    assert core.fallback_count == 100
    assert core.fleet.node("cpu").running == 0


def test_demoted_node_ranks_by_its_new_tier(core):
    core.node_changed("cuda", tier=ComputeTier.CPU_FFMPEG)  # its GPU vanished: demoted, not removed
    a = core.place(Requirement(min_tier="gpu_cuda", floor="cpu_ffmpeg"))
    assert (a.node_id, a.tier) == ("apu", ComputeTier.GPU_APU)
    with pytest.raises(CapacityError):
        core.place(Requirement(min_tier="gpu_cuda", fallback=False))


def test_metrics_report_tiers_and_counters(core):
    core.place(APU_DOWN_TO_CPU)
    m = core.metrics()
    assert m["placements_attempted"] == 1 and m["placements_succeeded"] == 1
    assert list(m["tiers"]) == ["gpu_cuda", "gpu_apu", "cpu_ffmpeg", "relay"]
    assert m["tiers"]["gpu_cuda"]["running"] == 1 and m["running"] == 1


def test_cancelled_request_is_not_placed(core):
    for _ in range(6):
        core.place(APU_DOWN_TO_CPU)
    core.place(APU_DOWN_TO_CPU, request_id="gone", queue=True)
    assert core.cancel("gone") and not core.cancel("gone")
    assert core.node_joined(rec("cpu2", "cpu_ffmpeg")) == []


# -- placement leases (issue 6) ----------------------------------------------------------------
def test_lease_grants_slots_in_policy_order_and_reserves_them(core):
    g = core.lease("c1", APU_DOWN_TO_CPU, want=5)
    assert [(s.node_id, s.capacity) for s in g.slots] == [("cuda", 2), ("apu", 2), ("cpu", 1)]
    assert [s.fallback_levels for s in g.slots] == [0, 0, 1]
    assert core.fleet.node("cuda").running == 2 and core.running_on("cpu") == 1
    assert core.place(Requirement(min_tier="gpu_cuda", fallback=False)).status == "deferred"  # reserved for the lease


def test_lease_renewal_keeps_running_calls_and_frees_the_rest(core):
    core.lease("c1", APU_DOWN_TO_CPU, want=4)
    g = core.lease("c1", APU_DOWN_TO_CPU, holding={"cuda": 1}, want=1)
    assert sum(r.running for r in core.fleet.records()) == 2  # one still running + one new slot
    assert [(s.node_id, s.capacity) for s in g.slots] == [("cuda", 2)]


def test_cordoned_node_gets_no_new_lease_slots_and_leaves_the_spill_set(core):
    core.cordon("cuda")
    g = core.lease("c1", APU_DOWN_TO_CPU, holding={"cuda": 1}, want=1)
    assert ("cuda", 0) in [(s.node_id, s.capacity) for s in g.slots]  # still counted, no new calls
    assert all(s.node_id != "cuda" or s.capacity == 0 for s in g.slots)
    assert g.spill == {"fabric.io/tier": "in(gpu_cuda,gpu_vaapi,gpu_apu,cpu_ffmpeg)", "ray.io/node-id": "!in(cuda)"}


def test_spill_selector_respects_floor_wait_and_what_labels_cannot_say(core):
    def selector(req):
        return core.spill_target(req)[0]

    assert selector(APU_DOWN_TO_CPU) == {"fabric.io/tier": "in(gpu_cuda,gpu_vaapi,gpu_apu,cpu_ffmpeg)"}
    wait = APU_DOWN_TO_CPU.replace(when_full="wait")
    assert selector(wait) == {"fabric.io/tier": "in(gpu_cuda,gpu_vaapi,gpu_apu)"}
    assert selector(APU_DOWN_TO_CPU.replace(ports=("1935/tcp",))) is None
    assert selector(APU_DOWN_TO_CPU.replace(capabilities=("arch:aarch64",))) is None
    core.node_lost("cuda")
    assert selector(Requirement(min_tier="gpu_cuda", fallback=False)) is None  # nothing left to spill to
    # demoted below the wait level, as a re-probe does it (new capabilities; its Ray label keeps gpu_apu)
    core.node_changed("apu", capabilities=caps("cpu_ffmpeg", name="apu"), tier=ComputeTier.CPU_FFMPEG)
    assert selector(wait) is None
    assert selector(APU_DOWN_TO_CPU)["ray.io/node-id"] == "!in(apu)"  # its label would still match: left out by id


def test_spilled_calls_go_first_to_the_node_the_tier_preference_ranks_first(core):
    assert core.spill_target(APU_DOWN_TO_CPU)[1] == "cuda"
    assert core.lease("c1", APU_DOWN_TO_CPU, want=1).spill_via == "cuda"
    # the lowest tier that serves the preferred level, not the floor
    assert core.spill_target(APU_DOWN_TO_CPU.replace(prefer="lowest"))[1] == "apu"
    core.cordon("cuda")
    selector, via = core.spill_target(APU_DOWN_TO_CPU)
    assert via == "apu" and selector["ray.io/node-id"] == "!in(cuda)"  # never a node the selector leaves out
    core.node_lost("apu")
    assert core.spill_target(APU_DOWN_TO_CPU)[1] == "cpu"
    assert core.spill_target(APU_DOWN_TO_CPU.replace(ports=("1935/tcp",))) == (None, None)


def test_unrenewed_lease_is_taken_back_and_the_queue_drains(core, clock):
    core.lease("c1", APU_DOWN_TO_CPU, want=6)
    core.place(APU_DOWN_TO_CPU, request_id="q", queue=True)
    clock.t += 10 * core.lease_ttl_s
    out = core.tick()
    assert [i.request_id for i in out if isinstance(i, Placed)] == ["q"]
    assert core.counters["leases_expired"] == 1


def test_lost_node_takes_its_lease_slots_with_it(core):
    core.lease("c1", APU_DOWN_TO_CPU, want=2)
    core.node_lost("cuda")
    assert core.end_lease("c1") == [] and core.running_on("cuda") == 0


def test_reported_calls_count_fallbacks(core):
    core.report_calls(placed=10, fallbacks=3)
    assert core.fallback_count == 3 and core.counters["calls_reported"] == 10

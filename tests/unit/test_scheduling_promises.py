"""SchedulerCore keeps the task path's promises (issue 11): the spill selector leaves out demoted
nodes and raylets the fleet does not hold; a lease granted while releasing another is filed under
its own id; a grant is not a call; GPUs are asked of Ray only where Ray has them; an unknown pool
is an error where the scheduler receives the requirement."""

import pytest

from fabric import CapacityError, ComputeTier, GpuInfo, RequirementError
from fabric.core.placement import Requirement
from fabric.core.scheduling import SchedulerCore
from fabric.core.settings import FabricSettings

from test_scheduling import APU_DOWN_TO_CPU, Clock, caps, rec

FLOOR_TIERS = "in(gpu_cuda,gpu_vaapi,gpu_apu,cpu_ffmpeg)"


@pytest.fixture
def core():
    c = SchedulerCore(clock=Clock())
    for r in (rec("cuda", "gpu_cuda"), rec("apu", "gpu_apu"), rec("cpu", "cpu_ffmpeg"), rec("relay", "relay", 1)):
        c.node_joined(r)
    return c


def demote_by_reprobe(core, node_id, tier):
    """What the fleet feed sends when a re-probe found less: new capabilities and the tier they
    serve; the record keeps the tier its Ray label says."""
    core.node_changed(node_id, capabilities=caps(tier, name=node_id), tier=ComputeTier.parse(tier))


def test_a_demoted_node_leaves_the_spill_selector_by_id(core):
    demote_by_reprobe(core, "cuda", "cpu_ffmpeg")  # its GPU vanished; its label still says gpu_cuda
    rec_ = core.fleet.node("cuda")
    assert rec_.tier is ComputeTier.CPU_FFMPEG and rec_.label_tier is ComputeTier.GPU_CUDA
    selector, via = core.spill_target(Requirement(min_tier="gpu_cuda", floor="gpu_apu"))
    assert selector == {"fabric.io/tier": "in(gpu_cuda,gpu_vaapi,gpu_apu)", "ray.io/node-id": "!in(cuda)"} and via == "apu"
    # even where its new tier is inside the floor: a spilled call reads its fallback from the label
    selector, _ = core.spill_target(APU_DOWN_TO_CPU)
    assert selector["ray.io/node-id"] == "!in(cuda)"
    # a CUDA-only requirement has nowhere to spill at all
    assert core.spill_target(Requirement(min_tier="gpu_cuda", fallback=False)) == (None, None)


def test_raylets_outside_the_fleet_leave_the_spill_selector(core):
    core.node_lost("cpu")  # offline by missed heartbeats: out of the fleet, while Ray still runs it
    core.ray_outsiders({"cpu": ComputeTier.CPU_FFMPEG, "relay2": ComputeTier.RELAY, "new-gpu": ComputeTier.GPU_CUDA})
    selector, _ = core.spill_target(APU_DOWN_TO_CPU)
    assert selector == {"fabric.io/tier": FLOOR_TIERS, "ray.io/node-id": "!in(cpu,new-gpu)"}  # the relay is outside anyway
    core.node_joined(rec("cpu", "cpu_ffmpeg"))  # back in the fleet: it is judged as a member again
    core.ray_outsiders({"cpu": ComputeTier.CPU_FFMPEG})
    assert core.spill_target(APU_DOWN_TO_CPU)[0] == {"fabric.io/tier": FLOOR_TIERS}


def test_a_lease_granted_while_releasing_another_is_filed_under_its_own_id(core):
    core.lease("a", APU_DOWN_TO_CPU, want=2)
    grant, _ = core.grant_lease("b", APU_DOWN_TO_CPU, want=2, release=["a"])
    assert grant.lease_id == "b"
    assert sum(r.running for r in core.fleet.records()) == 2  # a's slots given back, b's held
    core.end_lease("b")
    assert sum(r.running for r in core.fleet.records()) == 0
    assert core.end_lease("a") == [] and core.counters["leases_granted"] == 2


def test_released_leases_let_the_queue_run(core):
    core.lease("a", APU_DOWN_TO_CPU, want=7)  # every slot inside the floor
    core.place(APU_DOWN_TO_CPU, request_id="q", queue=True)
    _, out = core.grant_lease("b", Requirement(min_tier="relay"), want=1, release=["a"])
    assert [i.request_id for i in out] == ["q"]


def test_a_grant_is_not_a_call(core):
    for _ in range(5):
        grant = core.lease("c1", Requirement(min_tier="gpu_cuda", floor="cpu_ffmpeg"), want=4)
    assert [s.fallback_levels for s in grant.slots] == [0, 2]  # slots below min_tier granted ...
    assert core.fallback_count == 0 and core.counters["placements_succeeded"] == 0  # ... none counted
    core.report_calls(placed=3, fallbacks=1)  # the calls that ran, from their workers
    assert core.fallback_count == 1 and core.counters["placements_succeeded"] == 3


def test_a_hard_requirement_no_node_serves_fails_the_lease(core):
    core.node_lost("cuda")
    with pytest.raises(CapacityError):
        core.grant_lease("c1", Requirement(min_tier="gpu_cuda", fallback=False))
    assert core.end_lease("c1") == [] and core.counters["placements_failed"] == 1


def test_gpus_are_asked_of_ray_only_on_nodes_that_declared_them(core):
    core.node_joined(rec("apu2", "gpu_apu"))
    gpu_work = Requirement(min_tier="gpu_apu", floor="gpu_apu", num_gpus=0.5)
    assert core.ray_gpus("cuda", gpu_work) == 0.5  # a CUDA device: Ray holds it
    assert core.ray_gpus("apu", gpu_work) == 0.0  # a VA-API GPU: the engine's to account for
    assert core.ray_gpus("cuda", APU_DOWN_TO_CPU) == 0.0
    grant = core.lease("g", gpu_work.replace(min_tier="gpu_cuda", floor="gpu_apu"), want=2)
    assert {(s.node_id, s.ray_gpus) for s in grant.slots} == {("cuda", 0.5)}  # two calls on the one CUDA device
    core.end_lease("g")
    assignment = core.place(Requirement(min_tier="gpu_cuda", fallback=False, num_gpus=1))
    assert (assignment.node_id, assignment.ray_gpus) == ("cuda", 1.0)
    assert core.place(gpu_work).ray_gpus == 0.0  # on an APU


def test_an_unknown_pool_is_an_error_where_the_scheduler_receives_it():
    core = SchedulerCore(FabricSettings.load({"pools": [{"name": "default"}, {"name": "gpu"}]}), clock=Clock())
    core.node_joined(rec("cpu", "cpu_ffmpeg"))
    unknown = Requirement(min_tier="cpu_ffmpeg", pool="gpu-typo")
    for call in (lambda: core.select_worker(unknown), lambda: core.place(unknown),
                 lambda: core.lease("l", unknown), lambda: core.grant_lease("l", unknown)):
        with pytest.raises(RequirementError) as exc:
            call()
        assert exc.value.field == "pool" and "gpu-typo" in str(exc.value)
    assert core.counters["placements_attempted"] == 0 and core.queue_depth == 0
    assert core.select_worker(Requirement(min_tier="cpu_ffmpeg", pool="gpu")).status == "deferred"  # known, empty

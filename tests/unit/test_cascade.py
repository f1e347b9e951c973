"""The cascade acts (issue 15): a ``provision`` decision opens a provision the actor carries out,
the node is prospective until it registers, a burst sizes its provisions by holding places on the
prospective nodes, ``max_nodes`` spills the cascade on, a provision that never registers is
abandoned and its work re-placed, a failed one holds its pool tier, and ``provision_first`` never
makes a call wait while a booted node inside its floor fits. Pure: an injected clock, milliseconds."""

from collections import Counter

import pytest

from fabric.core.placement import NodeRecord, Requirement
from fabric.core.scheduling import (
    Answer, LeaseRequested, NodeJoined, Placed, PlaceRequested, ProvisionFailed, ProvisionNode, ProvisionStarted,
    SchedulerCore, SelectRequested, TerminateNode, Tick, reply,
)
from fabric.core.scheduling.lease_desk import OBSERVED_SETTLE_S
from fabric.core.scheduling.provisions import PROVISION_BACKOFF_S, is_prospective
from fabric.core.settings import FabricSettings

from test_scheduling import Clock, caps, rec

CPU = Requirement(min_tier="cpu_ffmpeg", fallback=False, num_cpus=1)
SHAPE = {"name": "cpu-box", "tier": "cpu_ffmpeg", "num_cpus": 2, "memory_mib": 2048, "profile": "cpu-only-box"}


def cascade_settings(timeout_s: float = 30.0) -> FabricSettings:
    return FabricSettings.load({"pools": [{"name": "default", "tiers": [
        {"name": "onprem", "scale_out": "fixed"},
        {"name": "burst", "scale_out": "elastic", "provider": "local", "max_nodes": 2, "provision_timeout_s": timeout_s,
         "candidate_shapes": [SHAPE]},
        {"name": "overflow", "scale_out": "elastic", "provider": "local", "provision_timeout_s": timeout_s,
         "candidate_shapes": [SHAPE]},
    ]}]})


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def core(clock):
    c = SchedulerCore(cascade_settings(), clock=clock)
    c.handle(NodeJoined(rec("fixed-1", "cpu_ffmpeg", slots=2)))
    return c


def burst(core, n, start=0):
    out = []
    for i in range(start, start + n):
        out += core.handle(PlaceRequested(CPU, request_id=f"r{i}", queue=True))
        core.validate_state()
    return out


def provisioned(rec_id: str, instance_id: str, pool_tier: str, slots: int = 2) -> NodeRecord:
    return NodeRecord(node_id=rec_id, name=instance_id, capabilities=caps("cpu_ffmpeg", slots, instance_id),
                      pool="default", pool_tier=pool_tier, instance_id=instance_id, provider="local")


def test_a_burst_fills_the_fixed_tier_then_provisions_up_to_max_nodes_then_spills_to_the_next(core):
    out = burst(core, 10)
    answers = [i.value for i in out if isinstance(i, Answer)]
    assert [a.node_id for a in answers[:2]] == ["fixed-1", "fixed-1"]  # booted capacity first
    assert all(a.status == "deferred" and "provisioning" in a.reason for a in answers[2:])
    asks = [i for i in out if isinstance(i, ProvisionNode)]
    # 8 calls wait, 2 per prospective node: two in the capped pool tier, then two in the next
    assert Counter(p.pool_tier for p in asks) == {"burst": 2, "overflow": 2}
    assert all(p.provider == "local" and p.shape.name == "cpu-box" for p in asks)
    prospective = [r for r in core.fleet.records() if r.launching]
    assert len(prospective) == 4 and all(is_prospective(r.node_id) and r.running == 2 for r in prospective)
    assert core.metrics()["provisions_pending"] == 4 and core.counters["provisions_requested"] == 4


def test_a_registered_node_takes_the_work_that_waited_for_it(core):
    out = burst(core, 4)
    (ask,) = [i for i in out if isinstance(i, ProvisionNode)]
    assert core.handle(ProvisionStarted(ask.provision_id, "local-abc", "local")) == []
    joined = core.handle(NodeJoined(provisioned("ray-node-7", "local-abc", "burst")))
    core.validate_state()
    placed = [i for i in joined if isinstance(i, Placed)]
    assert sorted(p.request_id for p in placed) == ["r2", "r3"]
    assert {p.assignment.node_id for p in placed} == {"ray-node-7"}
    assert not any(r.launching for r in core.fleet.records()) and len(core.provisions) == 0
    assert core.counters["provisions_registered"] == 1


def test_a_node_that_registers_before_its_provider_answers_is_matched_when_it_does(core):
    (ask,) = [i for i in burst(core, 3) if isinstance(i, ProvisionNode)]
    core.handle(NodeJoined(provisioned("ray-node-8", "local-early", "burst")))
    assert len(core.provisions) == 1  # not matched yet: the instance id is not known
    core.handle(ProvisionStarted(ask.provision_id, "local-early", "local"))
    core.validate_state()
    assert len(core.provisions) == 0 and not any(r.launching for r in core.fleet.records())


def test_a_provision_that_never_registers_is_abandoned_terminated_and_its_work_placed_again(core, clock):
    (ask,) = [i for i in burst(core, 3) if isinstance(i, ProvisionNode)]
    core.handle(ProvisionStarted(ask.provision_id, "local-slow", "local"))
    clock.t += 29.0
    assert not [i for i in core.handle(Tick()) if isinstance(i, TerminateNode)]
    clock.t += 1.0
    out = core.handle(Tick())
    core.validate_state()
    (term,) = [i for i in out if isinstance(i, TerminateNode)]
    assert (term.provider, term.instance_id, term.reason) == ("local", "local-slow", "provision_timeout")
    (again,) = [i for i in out if isinstance(i, ProvisionNode)]  # its work is placed again
    assert again.provision_id != ask.provision_id and core.counters["provisions_abandoned"] == 1
    assert "r2" in core.queue


def test_one_abandoned_before_its_provider_answered_is_terminated_when_it_does(core, clock):
    (ask,) = [i for i in burst(core, 3) if isinstance(i, ProvisionNode)]
    clock.t += 31.0
    core.handle(Tick())
    (term,) = core.handle(ProvisionStarted(ask.provision_id, "local-late", "local"))
    assert isinstance(term, TerminateNode) and term.instance_id == "local-late"
    assert core.handle(ProvisionStarted(ask.provision_id, "local-late", "local")) == []  # once


def test_a_failed_provision_leaves_no_phantom_node_and_holds_its_pool_tier(core, clock):
    (ask,) = [i for i in burst(core, 3) if isinstance(i, ProvisionNode)]
    out = core.handle(ProvisionFailed(ask.provision_id, "ray start exited"))
    core.validate_state()
    assert core.counters["provisions_failed"] == 1
    (spill,) = [i for i in out if isinstance(i, ProvisionNode)]  # the waiting call re-placed: next pool tier
    assert spill.pool_tier == "overflow"
    assert [r.pool_tier for r in core.fleet.records() if r.launching] == ["overflow"]
    text = core.explain(CPU)["text"]
    assert "prospective:" in text and "pool tier overflow" in text  # the next call waits on the overflow node too
    clock.t += PROVISION_BACKOFF_S
    core.handle(Tick())
    assert core.fleet.provision_held == frozenset()
    later = [i for i in burst(core, 3, start=10) if isinstance(i, ProvisionNode)]
    assert later and later[0].pool_tier == "burst"  # the hold is over


def test_provision_first_runs_the_call_on_a_booted_node_inside_its_floor_and_provisions_for_the_next(clock):
    settings = FabricSettings.load({"pools": [{"name": "default", "tiers": [
        {"name": "onprem", "scale_out": "fixed"},
        {"name": "gpu", "scale_out": "elastic", "provider": "local",
         "candidate_shapes": [{"name": "vaapi-box", "tier": "gpu_vaapi", "num_cpus": 2}]},
    ]}]})
    want = dict(min_tier="gpu_vaapi", floor="cpu_ffmpeg", num_cpus=1)
    first = SchedulerCore(settings, clock=clock)
    first.handle(NodeJoined(rec("cpu-1", "cpu_ffmpeg")))
    out = first.handle(s := PlaceRequested(Requirement(**want, scale="provision_first"), request_id="a", queue=True))
    first.validate_state()
    a = reply(out, s.stimulus_id)
    assert a.status == "assigned" and a.node_id == "cpu-1" and a.fallback_levels > 0  # no wait
    assert [i.pool_tier for i in out if isinstance(i, ProvisionNode)] == ["gpu"]  # and capacity is coming
    degrade = SchedulerCore(settings, clock=clock)
    degrade.handle(NodeJoined(rec("cpu-1", "cpu_ffmpeg")))
    out = degrade.handle(s := PlaceRequested(Requirement(**want), request_id="a", queue=True))
    assert reply(out, s.stimulus_id).node_id == "cpu-1" and not [i for i in out if isinstance(i, ProvisionNode)]


def test_leases_and_select_worker_never_hand_out_a_prospective_node(core):
    burst(core, 3)
    (ans,) = core.handle(LeaseRequested("lease-1", CPU, want=4))
    assert all(not is_prospective(s.node_id) for s in ans.value.slots)
    (sel,) = core.handle(SelectRequested(CPU))
    assert sel.value.status == "deferred" and "provisioning" in sel.value.reason
    core.validate_state()


def test_calls_beyond_a_lease_queue_to_provision_instead_of_spilling_while_a_pool_tier_may_grow(core):
    (grant,) = core.handle(LeaseRequested("lease-1", CPU, want=8))
    assert grant.value.spill is None  # they take the queued path, which provisions
    settings = FabricSettings.load({})
    fixed_only = SchedulerCore(settings, clock=Clock())
    fixed_only.handle(NodeJoined(rec("fixed-1", "cpu_ffmpeg", slots=2)))
    (grant,) = fixed_only.handle(LeaseRequested("lease-1", CPU, want=8))
    assert grant.value.spill is not None  # nothing can grow: spill onto the floor's nodes as before


def test_a_pool_tier_provisions_in_waves_of_max_pending(clock):
    from fabric.core.scheduling.provisions import MAX_PENDING

    settings = FabricSettings.load({"pools": [{"name": "default", "tiers": [
        {"name": "onprem", "scale_out": "fixed"},
        {"name": "cloud", "scale_out": "elastic", "provider": "local", "candidate_shapes": [{**SHAPE, "num_cpus": 1}]},
    ]}]})
    c = SchedulerCore(settings, clock=clock)
    out = []
    for i in range(3 * MAX_PENDING):
        out += c.handle(PlaceRequested(CPU, request_id=f"r{i}", queue=True))
    c.validate_state()
    asks = [i for i in out if isinstance(i, ProvisionNode)]
    assert len(asks) == MAX_PENDING and c.queue_depth == 3 * MAX_PENDING
    c.handle(ProvisionStarted(asks[0].provision_id, "i-0", "local"))
    joined = c.handle(NodeJoined(provisioned("n-0", "i-0", "cloud", slots=1)))
    c.validate_state()
    assert len([i for i in joined if isinstance(i, Placed)]) == 1
    assert len([i for i in joined if isinstance(i, ProvisionNode)]) == 1  # one slot of the wave freed: one more


def test_a_worker_group_opens_prospective_nodes_the_queue_waits_on(core):
    from fabric.core.scheduling import ProvisionRequested
    from fabric.core.settings import NodeShape

    burst(core, 2)  # the fixed node is full
    core.handle(PlaceRequested(CPU.replace(num_cpus=1), request_id="late", queue=True))
    before = len(core.provisions)
    out = core.handle(ProvisionRequested("default", "overflow", NodeShape.model_validate(SHAPE), 2, "burst"))
    core.validate_state()
    assert len([i for i in out if isinstance(i, ProvisionNode) and i.pool_tier == "overflow"]) == 2
    assert len(core.provisions) == before + 2


def test_a_lease_that_expires_while_ray_is_observed_keeps_its_slots_until_its_calls_end(core, clock):
    from fabric.core.scheduling import SlotsObserved

    core.handle(SlotsObserved({"fixed-1": 0}))
    core.handle(LeaseRequested("lease-1", CPU, want=2))
    core.handle(SlotsObserved({"fixed-1": 2}))  # both leased calls running
    clock.t += 10.0
    core.handle(SlotsObserved({"fixed-1": 2}))
    core.handle(PlaceRequested(CPU.replace(num_cpus=0.5), request_id="waiting", queue=True))  # work waits meanwhile
    core.handle(Tick())  # the driver stopped renewing: the lease expires, its calls still run
    core.validate_state()
    assert len(core.leases) == 0 and core.node("fixed-1").running == 2
    clock.t += OBSERVED_SETTLE_S  # an observation can vouch for the expired lease's calls from now
    out = core.handle(SlotsObserved({"fixed-1": 1}))  # one ended
    core.validate_state()
    assert [p.assignment.node_id for p in out if isinstance(p, Placed)] == ["fixed-1"]
    core.handle(SlotsObserved({"fixed-1": 5}))  # observations only ever free: spilled calls are Ray's to queue
    assert core.node("fixed-1").running == 2


def test_an_expired_lease_frees_its_slots_once_ray_vouches_that_its_calls_ended(core, clock):
    from fabric.core.scheduling import SlotsObserved

    core.handle(LeaseRequested("lease-1", CPU, want=2))
    core.handle(PlaceRequested(CPU, request_id="waiting", queue=True))
    core.handle(SlotsObserved({"fixed-1": 0}))  # its calls are done
    clock.t += 3.0
    core.handle(SlotsObserved({"fixed-1": 0}))
    out = core.handle(Tick())
    core.validate_state()
    assert not [p for p in out if isinstance(p, Placed)]  # Ray may not count a call sent just before the expiry yet
    clock.t += OBSERVED_SETTLE_S
    out = core.handle(SlotsObserved({"fixed-1": 0}))  # the first observation that can vouch: its calls are done
    core.validate_state()
    assert [p.request_id for p in out if isinstance(p, Placed)] == ["waiting"]
    core.handle(LeaseRequested("lease-2", CPU, want=1))
    core.handle(SlotsObserved({"fixed-1": 2}))  # its call runs beside the one placed above
    clock.t += 3.0
    core.handle(SlotsObserved({"fixed-1": 2}))
    core.handle(Tick())  # nothing waits, but a call placed now would be double-booked: the slot stays
    core.validate_state()
    assert core.node("fixed-1").running == 2
    clock.t += OBSERVED_SETTLE_S
    core.handle(SlotsObserved({"fixed-1": 1}))  # its call ended
    core.validate_state()
    assert core.node("fixed-1").running == 1  # the call placed above; the lease's slot is free


def test_without_fresh_observations_an_expired_lease_frees_its_slots_at_once(core, clock):
    core.handle(LeaseRequested("lease-1", CPU, want=2))  # no Ray seam: no SlotsObserved ever
    core.handle(PlaceRequested(CPU, request_id="waiting", queue=True))
    clock.t += 3.0
    out = core.handle(Tick())
    core.validate_state()
    assert [p.request_id for p in out if isinstance(p, Placed)] == ["waiting"]


def test_a_call_placed_right_after_a_lease_expired_is_not_double_booked_onto_its_running_calls(core, clock):
    """The clean-clone CI failure of test_cascade_live: nothing was queued when the lease expired, so
    its slot was freed at once while its call still ran; the next call was placed there and waited
    behind it on a full node while a provisioned node had room."""
    from fabric.core.scheduling import SlotsObserved

    core.handle(LeaseRequested("lease-1", CPU, want=1))
    core.handle(PlaceRequested(CPU, request_id="second"))  # the node's other slot
    core.handle(SlotsObserved({"fixed-1": 2}))
    clock.t += 3.0
    core.handle(Tick())  # the driver stopped renewing: the lease expires, its call still runs
    core.validate_state()
    third = PlaceRequested(CPU, request_id="third", queue=True)
    a = reply(core.handle(third), third.stimulus_id)
    assert a.status == "deferred" and a.node_id is None  # it waits for a node (here: provisions one), not on fixed-1
    renewal = LeaseRequested("lease-1", CPU, holding={"fixed-1": 1}, want=1)  # renewed: holding replaces what it left
    grant = reply(core.handle(renewal), renewal.stimulus_id)
    core.validate_state()
    assert core.node("fixed-1").running == 2
    assert len(core.ledger.owned_on("fixed-1", "lease-1")) == 1 and not core.ledger.owned_on("fixed-1", "observed")
    assert all(s.capacity <= 1 for s in grant.slots if s.node_id == "fixed-1")  # its own call: room for none new


def test_an_expired_lease_call_ray_does_not_count_yet_keeps_its_slot(core, clock):
    """The clean-clone CI failure of test_cascade_live: a lease expired while its last call was on
    its way to the raylet; an observation from before that call (or right after the expiry) read
    its slot as free, a queued call was placed there and waited behind it on a full node while
    another node had room. Only an observation ``OBSERVED_SETTLE_S`` after the expiry may free it."""
    from fabric.core.scheduling import SlotsObserved

    core.handle(LeaseRequested("lease-1", CPU, want=2))
    core.handle(SlotsObserved({"fixed-1": 1}))  # taken before the lease's second call reached Ray
    core.handle(PlaceRequested(CPU.replace(num_cpus=0.5), request_id="waiting", queue=True))
    clock.t += 3.0
    out = core.handle(Tick())  # the lease expires
    out += core.handle(SlotsObserved({"fixed-1": 1}))  # still not counted (the raylet is slow to report)
    core.validate_state()
    assert not [p for p in out if isinstance(p, Placed)] and core.node("fixed-1").running == 2
    clock.t += OBSERVED_SETTLE_S
    out = core.handle(SlotsObserved({"fixed-1": 2}))  # both calls are running
    assert not [p for p in out if isinstance(p, Placed)] and core.node("fixed-1").running == 2
    out = core.handle(SlotsObserved({"fixed-1": 1}))  # one ended: now its slot is free
    core.validate_state()
    assert [p.request_id for p in out if isinstance(p, Placed)] == ["waiting"]


def test_hard_work_no_node_serves_waits_for_a_node_the_cascade_may_provision(clock):
    c = SchedulerCore(cascade_settings(), clock=clock)  # no node at all yet
    (grant,) = c.handle(LeaseRequested("l", CPU, want=2))
    assert isinstance(grant, Answer) and not grant.value.slots  # not refused: the queued path provisions
    out = c.handle(s := PlaceRequested(CPU, request_id="q", queue=True))
    assert reply(out, s.stimulus_id).status == "deferred" and [i.pool_tier for i in out if isinstance(i, ProvisionNode)] == ["burst"]
    held_all = FabricSettings.load({"pools": [{"name": "default", "tiers": [{"name": "onprem"}]}]})
    with pytest.raises(Exception, match="no node serves"):
        reply(SchedulerCore(held_all, clock=clock).handle(s := PlaceRequested(CPU)), s.stimulus_id)


def test_the_trace_says_why_a_held_pool_tier_does_not_provision(core):
    from fabric.core.placement import dry_run

    burst(core, 2)  # the fixed node is full
    core.fleet.provision_held = frozenset({("default", "burst")})
    d = dry_run(core.fleet, CPU)
    assert d.status == "provision" and d.pool_tier == "overflow"
    assert "provisioning held" in d.explain(verbose=True)

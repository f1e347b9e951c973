"""SchedulerCore.handle (issue 13): one way in, every instruction carrying the id of the stimulus
that produced it, replies as Answer/Refused, a bounded stimulus log, and validate_state holding
after every step of any sequence of stimuli."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric import CapacityError, ComputeTier, RequirementError
from fabric.core.placement import Requirement
from fabric.core.scheduling import (
    Answer, CallsReported, Cancelled, Cordoned, DrainRequested, InvalidStateError, LeaseEnded, LeaseGrant,
    LeaseRequested, NodeAssignment, NodeChanged, NodeJoined, NodeLost, OutsidersSeen, Placed, PlaceRequested,
    Refused, SchedulerCore, SelectRequested, SlotsReleased, Tick, Uncordoned, reply,
)
from fabric.core.settings import FabricSettings

from test_scheduling import APU_DOWN_TO_CPU, Clock, rec

CUDA_ONLY = Requirement(min_tier="gpu_cuda", fallback=False)


@pytest.fixture
def core():
    c = SchedulerCore(clock=Clock())
    for r in (rec("cuda", "gpu_cuda"), rec("cpu", "cpu_ffmpeg")):
        c.handle(NodeJoined(r))
    return c


def test_a_placement_is_answered_under_its_stimulus_id(core):
    s = PlaceRequested(APU_DOWN_TO_CPU)
    (ans,) = core.handle(s)
    assert isinstance(ans, Answer) and ans.stimulus_id == s.stimulus_id
    assert isinstance(ans.value, NodeAssignment) and ans.value.node_id == "cuda"
    assert reply([ans], s.stimulus_id) is ans.value and reply([ans], "other") is None


def test_queued_work_placed_later_carries_the_id_of_what_freed_the_slot(core):
    held = [reply(core.handle(s := PlaceRequested(CUDA_ONLY)), s.stimulus_id) for _ in range(2)]
    core.handle(PlaceRequested(CUDA_ONLY, request_id="q", queue=True))
    release = SlotsReleased((held[0].allocation_id,), stimulus_id="worker-release-1")
    (placed,) = core.handle(release)
    assert isinstance(placed, Placed) and placed.request_id == "q" and placed.stimulus_id == "worker-release-1"


def test_a_refusal_is_an_instruction_and_changes_nothing(core):
    core.handle(NodeLost("cuda"))
    before = (dict(core.counters), core.queue_depth, len(core.ledger))
    s = PlaceRequested(CUDA_ONLY, request_id="x", queue=True)
    (ref,) = core.handle(s)
    assert isinstance(ref, Refused) and isinstance(ref.error, CapacityError) and ref.stimulus_id == s.stimulus_id
    with pytest.raises(CapacityError):
        reply([ref], s.stimulus_id)
    assert core.queue_depth == 0 and core.counters["placements_failed"] == before[0]["placements_failed"] + 1
    pools = SchedulerCore(FabricSettings.load({"pools": [{"name": "default"}, {"name": "gpu"}]}), clock=Clock())
    for stim in (PlaceRequested(Requirement(min_tier="relay", pool="typo")),
                 LeaseRequested("l", Requirement(min_tier="relay", pool="typo"), release=("x",)),
                 SelectRequested(Requirement(min_tier="relay", pool="typo"))):
        (ref,) = pools.handle(stim)
        assert isinstance(ref.error, RequirementError) and ref.error.field == "pool"
    assert pools.counters == SchedulerCore(clock=Clock()).counters


def test_a_lease_is_answered_with_its_grant_and_the_queue_it_let_run(core):
    core.handle(LeaseRequested("a", APU_DOWN_TO_CPU, want=4))
    core.handle(PlaceRequested(APU_DOWN_TO_CPU, request_id="q", queue=True))
    s = LeaseRequested("b", Requirement(min_tier="relay"), want=0, release=("a",))
    out = core.handle(s)
    assert [type(i) for i in out] == [Placed, Answer] and {i.stimulus_id for i in out} == {s.stimulus_id}
    assert isinstance(out[-1].value, LeaseGrant) and out[-1].value.lease_id == "b"


def test_ids_are_fresh_unless_given_and_kinds_are_named():
    a, b = Tick(), Tick()
    assert a.stimulus_id != b.stimulus_id and a.stimulus_id.startswith("tick-")
    assert NodeLost("n", stimulus_id="registry-9").stimulus_id == "registry-9"
    assert LeaseEnded("l").kind == "lease-ended"
    with pytest.raises(ValueError):
        PlaceRequested(APU_DOWN_TO_CPU, queue=True)


def test_the_stimulus_log_is_bounded_and_says_kind_id_and_time():
    clock = Clock()
    core = SchedulerCore(clock=clock, log_size=3)
    for i in range(5):
        clock.t = 1000.0 + i
        core.handle(CallsReported(1, 0, stimulus_id=f"r{i}"))
    core.handle(Tick(now=2000.0, stimulus_id="t"))
    assert core.stimulus_log() == [
        {"kind": "calls-reported", "stimulus_id": "r3", "at": 1003.0},
        {"kind": "calls-reported", "stimulus_id": "r4", "at": 1004.0},
        {"kind": "tick", "stimulus_id": "t", "at": 2000.0},
    ]
    assert core.metrics()["stimuli_handled"] == 6


def test_tick_now_is_the_time_it_stands_for(core):
    core.handle(PlaceRequested(CUDA_ONLY)), core.handle(PlaceRequested(CUDA_ONLY))
    core.handle(PlaceRequested(CUDA_ONLY, request_id="q", queue=True, timeout_s=10))
    assert core.handle(Tick(now=core.clock() + 5)) == []
    (exp,) = core.handle(Tick(now=core.clock() + 11))
    assert exp.request_id == "q"


def test_only_stimuli_are_handled(core):
    with pytest.raises(TypeError):
        core.handle("place")


def test_validate_state_lists_every_broken_invariant(core):
    a = reply(core.handle(s := PlaceRequested(CUDA_ONLY)), s.stimulus_id)
    core.validate_state()
    core.fleet.release(core.ledger.get(a.allocation_id))  # behind the ledger's back
    core.counters["released"] = -1
    with pytest.raises(InvalidStateError) as err:
        core.validate_state()
    assert any("released" in p for p in err.value.problems)
    assert any("cuda has 0 running, the ledger holds 1" in p for p in err.value.problems)
    core.counters["released"] = 0
    core.fleet.reserve(core.ledger.get(a.allocation_id))


# -- any sequence of stimuli keeps the core consistent -------------------------------------------------
NODES = ["cuda", "apu", "cpu", "relay"]
TIERS = {"cuda": "gpu_cuda", "apu": "gpu_apu", "cpu": "cpu_ffmpeg", "relay": "relay"}
REQS = [APU_DOWN_TO_CPU, CUDA_ONLY, Requirement(min_tier="relay"), APU_DOWN_TO_CPU.replace(when_full="wait")]

nodes = st.sampled_from(NODES)
reqs = st.sampled_from(REQS)
place = st.builds(lambda r, q, p: ("place", r, q, p), reqs, st.booleans(), st.integers(0, 2))
other = st.one_of(
    st.builds(lambda n, s: ("join", n, s), nodes, st.integers(1, 3)),
    st.builds(lambda n: ("lose", n), nodes),
    st.builds(lambda n, s: ("change", n, s), nodes, st.integers(1, 3)),
    st.builds(lambda n, c: ("flap", n, c), nodes, st.booleans()),
    st.builds(lambda r, i, w, h: ("lease", r, i, w, h), reqs, st.integers(0, 2), st.integers(0, 4),
              st.dictionaries(nodes, st.integers(0, 3), max_size=2)),
    st.builds(lambda i: ("end", i), st.integers(0, 2)),
    st.builds(lambda k: ("release", k), st.integers(0, 3)),
    st.builds(lambda i: ("cancel", i), st.integers(0, 5)),
    st.builds(lambda n: ("cordon", n), nodes),
    st.builds(lambda n: ("uncordon", n), nodes),
    st.builds(lambda n, g: ("drain", n, g), nodes, st.sampled_from([0.0, 5.0, None])),
    st.builds(lambda dt: ("tick", dt), st.floats(0, 40)),
    st.builds(lambda o: ("outsiders", o), st.dictionaries(st.sampled_from(NODES + ["x"]), st.just(ComputeTier.RELAY), max_size=2)),
    st.builds(lambda p, f: ("report", p, min(p, f)), st.integers(0, 5), st.integers(0, 5)),
)
step = st.integers(0, 9).flatmap(lambda k: place if k < 4 else other)  # placements often enough to fill the fleet


def stimulus(core, op, placed):
    kind = op[0]
    if kind == "join":
        return NodeJoined(rec(op[1], TIERS[op[1]], op[2]))
    if kind == "lose":
        return NodeLost(op[1])
    if kind == "change":
        return NodeChanged(op[1], {"max_concurrent_tasks": op[2]})
    if kind == "flap":
        return NodeChanged(op[1], {"flap_held": op[2], "cordoned": not op[2]})
    if kind == "place":
        rid = f"q{len(core.stimulus_log())}"
        return PlaceRequested(op[1], request_id=rid, queue=op[2], priority=op[3], timeout_s=10)
    if kind == "lease":
        return LeaseRequested(f"l{op[2]}", op[1], op[4], op[3], release=(f"l{(op[2] + 1) % 3}",))
    if kind == "end":
        return LeaseEnded(f"l{op[1]}")
    if kind == "release":
        return SlotsReleased(tuple(placed[: op[1]]))
    if kind == "cancel":
        return Cancelled(f"q{op[1]}")
    if kind == "cordon":
        return Cordoned(op[1])
    if kind == "uncordon":
        return Uncordoned(op[1])
    if kind == "drain":
        return DrainRequested(op[1], op[2])
    if kind == "tick":
        core.clock.t += op[1]
        return Tick()
    if kind == "outsiders":
        return OutsidersSeen(op[1])
    return CallsReported(op[1], op[2])


@settings(max_examples=80, deadline=None)
@given(st.lists(step, min_size=10, max_size=50))
def test_any_sequence_of_stimuli_keeps_every_invariant(ops):
    core = SchedulerCore(clock=Clock())
    for n in NODES:
        core.handle(NodeJoined(rec(n, TIERS[n], 2)))
    placed: list[int] = []
    for op in ops:
        s = stimulus(core, op, placed)
        out = core.handle(s)
        assert all(i.stimulus_id == s.stimulus_id for i in out)
        for ins in out:
            value = ins.value if isinstance(ins, Answer) else getattr(ins, "assignment", None)
            if isinstance(value, NodeAssignment) and value.allocation_id is not None:
                placed.append(value.allocation_id)
        if isinstance(s, SlotsReleased):
            del placed[: len(s.allocation_ids)]
        core.validate_state()

"""The lease book and a grant's slot reservation on their own: held calls are kept whatever the
node's state, new slots go best first, expiry is twice the ttl after the grant, and the core files
every lease slot under its lease (renewals counted, expiry frees them)."""

from fabric.core.placement import FleetView, Requirement
from fabric.core.scheduling import SchedulerCore
from fabric.core.scheduling.leases import LeaseBook, reserve_slots

from test_scheduling import APU_DOWN_TO_CPU, Clock, rec


def fleet():
    return FleetView([rec("cuda", "gpu_cuda"), rec("apu", "gpu_apu"), rec("cpu", "cpu_ffmpeg")])


def no_gpus(node_id, req):
    return 0.0


def test_held_calls_are_reserved_before_new_slots_are_placed():
    f = fleet()
    f.update("cuda", cordoned=True)
    res = reserve_slots(f, APU_DOWN_TO_CPU, {"cuda": 1, "elsewhere": 3, "apu": 0}, 3, no_gpus)
    assert [a.node_id for a in res.held] == ["cuda"]  # unknown nodes and zero counts skipped
    assert [(s.node_id, s.capacity) for s in res.slots] == [("apu", 2), ("cpu", 1), ("cuda", 0)]
    assert [cap for _, cap in res.placed] == [2, 2, 2]
    assert f.node("cuda").running == 1 and f.node("apu").running == 2


def test_want_zero_places_nothing_and_a_full_fleet_stops_early():
    f = fleet()
    assert reserve_slots(f, APU_DOWN_TO_CPU, {}, 0, no_gpus).slots == ()
    res = reserve_slots(f, APU_DOWN_TO_CPU, {}, 100, no_gpus)
    assert sum(s.capacity for s in res.slots) == 6


def test_the_book_expires_a_lease_twice_its_ttl_after_its_grant():
    book = LeaseBook(ttl_s=2.0)
    book.file("a", [1, 2], now=10.0)
    assert book.expired(13.9) == [] and book.expired(14.0) == ["a"]
    assert book.pop("a").allocation_ids == [1, 2] and book.pop("a") is None
    book.file("b", [3, 3], now=0.0)
    assert any("twice" in p for p in book.problems({}))
    book.file("c", [4], now=0.0)
    assert any("files under" in p for p in book.problems({4: "b"}))


def test_the_core_counts_renewals_and_files_every_slot_under_its_lease():
    core = SchedulerCore(clock=Clock())
    for r in (rec("cuda", "gpu_cuda"), rec("cpu", "cpu_ffmpeg")):
        core.node_joined(r)
    core.lease("c1", APU_DOWN_TO_CPU, want=2)
    core.lease("c1", APU_DOWN_TO_CPU, holding={"cuda": 1}, want=1)
    lease = core.leases.get("c1")
    assert lease.renewals == 1 and len(lease.allocation_ids) == 2
    assert {e.owner for e in core.ledger.entries()} == {"c1"}
    assert sorted(e.held for e in core.ledger.entries()) == [False, True]
    core.validate_state()
    core.end_lease("c1")
    assert core.leases.get("c1") is None and len(core.ledger) == 0


def test_held_calls_past_a_nodes_slots_are_no_broken_invariant():
    core = SchedulerCore(clock=Clock())
    core.node_joined(rec("cpu", "cpu_ffmpeg", slots=2))
    core.lease("c1", Requirement(min_tier="cpu_ffmpeg"), holding={"cpu": 5}, want=4)
    assert core.fleet.node("cpu").running == 5  # what the client says still runs there, kept counted
    core.validate_state()


def test_a_slot_cap_lowered_under_running_work_is_no_broken_invariant():
    core = SchedulerCore(clock=Clock())
    core.node_joined(rec("cpu", "cpu_ffmpeg", slots=2))
    core.place(Requirement(min_tier="cpu_ffmpeg")), core.place(Requirement(min_tier="cpu_ffmpeg"))
    core.node_changed("cpu", max_concurrent_tasks=1)  # a re-probe found less: the two running stay
    core.validate_state()
    core.fleet.reserve(core.ledger.entries()[0].allocation)  # an untracked reservation is caught
    problems = __import__("fabric.core.scheduling.invariants", fromlist=["x"]).state_problems(core)
    assert any("ledger holds 2 slots" in p for p in problems)
    core.fleet.release(core.ledger.entries()[0].allocation)

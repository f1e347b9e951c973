"""How a client's lease routes calls (``fabric.runtime.leases.LeaseState``), without a cluster: leased
nodes with room first, then Ray's queue for the floor set, and behind queued spilled calls while any
wait. Renewals and idle release go through ``fabric.runtime.dispatch`` with a fake driver seam (its
``answer`` is the scheduler's, its ``all_finished`` what ``ray.wait(timeout=0)`` would say): nothing
here patches Ray."""

from __future__ import annotations

import pytest

from fabric.runtime import dispatch
from fabric.rayio import tasks, worker_calls
from fabric.runtime.leases import SPILL, LeaseState
from fabric.runtime.session import Session
from fabric.core.placement import Requirement
from fabric.core.scheduling import LeaseGrant, LeaseSlot

REQ = Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", num_cpus=1)
A, B = "aa" * 28, "bb" * 28  # node ids are hex (Ray checks them)
SELECTOR = {"fabric.io/tier": "in(gpu_cuda,gpu_vaapi,gpu_apu,cpu_ffmpeg)"}


class FakeRef:
    def __init__(self) -> None:
        self.callbacks = []
        self.done = False

    def _on_completed(self, callback) -> None:
        self.callbacks.append(callback)

    def finish(self) -> None:
        self.done = True
        for cb in self.callbacks:
            cb(None)


class FakeWatch:
    """Completion callbacks go to the ref; a direct look says what ``ray.wait(timeout=0)`` would."""

    def when_done(self, ref, callback) -> None:
        ref._on_completed(callback)

    def all_finished(self, refs) -> bool:
        return all(r.done for r in refs)


@pytest.fixture
def lease() -> LeaseState:
    lease = LeaseState("client:0", FakeWatch())
    grant = LeaseGrant("client:0", (LeaseSlot(A, 1), LeaseSlot(B, 1)), SELECTOR, 1.0)
    lease.install(grant, asked_at=0.0)
    return lease


class RecordingRemote:
    def __init__(self) -> None:
        self.options_seen: list[dict] = []

    def options(self, **kwargs):
        self.options_seen.append(kwargs)
        return self


class RecordingRemotes:
    """``FunctionRemotes`` as a plan sees it: every remote function records the options it is given."""

    def __init__(self) -> None:
        self.rf = RecordingRemote()

    def leased(self):
        return self.rf

    def spilled(self, min_rank, name):
        return self.rf

    def placed(self):
        return self.rf


def bound_lease(grant: LeaseGrant, remotes: RecordingRemotes) -> dispatch.Lease:
    lease = dispatch.Lease("client:0", tasks.CallPlan(remotes, REQ, 3, "tiny"), FakeWatch())
    lease.state.install(grant, asked_at=0.0)
    lease.bind()
    return lease


def test_spilled_calls_go_to_the_grants_spill_node_and_move_on_when_it_is_busy():
    remotes = RecordingRemotes()
    spill_rf = remotes.rf
    bound_lease(LeaseGrant("client:0", (LeaseSlot(A, 1),), SELECTOR, 1.0, spill_via=B), remotes)
    opts = spill_rf.options_seen[-1]
    assert opts["label_selector"] == SELECTOR and opts["resources"] == {"fabric.slots": 1}
    strategy = opts["scheduling_strategy"]
    assert (strategy.node_id, strategy.soft, strategy._spill_on_unavailable) == (B, True, True)
    bound_lease(LeaseGrant("client:0", (LeaseSlot(A, 1),), SELECTOR, 1.0), remotes)
    assert "scheduling_strategy" not in spill_rf.options_seen[-1]  # no spill node named: the selector alone


def start(lease: LeaseState, node: str) -> FakeRef:
    ref = FakeRef()
    lease.started(node, ref)
    return ref


def test_leased_nodes_first_in_the_engines_order_then_the_spill_queue(lease):
    assert lease.route(0.0, may_spill=True) == A
    start(lease, A)
    assert lease.route(0.0, may_spill=True) == B
    start(lease, B)
    assert lease.route(0.0, may_spill=True) == SPILL
    assert lease.route(0.0, may_spill=False) is None  # on_no_capacity="raise": the per-call path


def test_a_finished_call_frees_its_leased_slot(lease):
    ref = start(lease, A)
    start(lease, B)
    ref.finish()
    assert lease.route(0.0, may_spill=True) == A


def test_new_calls_queue_behind_spilled_calls_until_the_newest_has_finished(lease):
    a, b = start(lease, A), start(lease, B)
    first, second = FakeRef(), FakeRef()
    lease.spilled_call(first, 0.0)
    a.finish()
    b.finish()
    # leased slots look free to this client, but its spilled calls still hold the floor set's slots
    assert lease.route(0.0, may_spill=True) == SPILL  # a callback now waits on the newest spilled call
    lease.spilled_call(second, 0.001)
    first.finish()
    assert lease.route(0.001, may_spill=True) == SPILL  # a newer one still queues
    assert second.callbacks == []  # moved to the newest only after SPILL_CHECK_S
    assert lease.route(LeaseState.SPILL_CHECK_S, may_spill=True) == SPILL
    assert len(second.callbacks) == 1
    second.finish()
    assert lease.route(LeaseState.SPILL_CHECK_S + 0.001, may_spill=True) == A
    assert lease.last_spill is None  # its result is not kept alive by the lease


def test_once_the_burst_is_over_the_newest_spilled_call_is_looked_at_directly(lease):
    start(lease, A).finish()
    spilled = FakeRef()
    lease.spilled_call(spilled, 0.0)
    spilled.done = True  # finished, but its callback has not been delivered
    assert lease.route(0.001, may_spill=True) == SPILL  # still bursting: no direct look
    assert lease.route(0.02, may_spill=True) == A  # nothing spilled for SPILL_CHECK_S: looked, finished


def test_calls_that_may_not_spill_still_take_a_free_leased_slot(lease):
    lease.spilled_call(FakeRef(), 0.0)
    assert lease.route(0.0, may_spill=False) == A


def test_without_a_spill_selector_a_free_leased_slot_is_used():
    lease = LeaseState("client:1", FakeWatch())
    lease.install(LeaseGrant("client:1", (LeaseSlot(A, 1),), None, 1.0), asked_at=0.0)
    lease.spilled_call(FakeRef(), 0.0)  # left from an earlier grant that had a selector
    assert lease.route(0.0, may_spill=True) == A
    start(lease, A)
    assert lease.route(0.0, may_spill=True) is None


# -- renewal: asked for ahead of time, never waited for unless the tick ran out ------------------
class FakeScheduler:
    def __init__(self) -> None:
        self.asked: list[tuple] = []
        self.refs: list[FakeRef] = []
        self.lease = self

    def remote(self, lease_id, req, holding, want, release):
        self.asked.append((lease_id, dict(holding), want, list(release)))
        ref = FakeRef()
        self.refs.append(ref)
        return ref


class FakeDriver(FakeWatch):
    """The driver seam: the scheduler's answer to a lease request, waited for when not yet there."""

    def __init__(self) -> None:
        self.grants: dict[int, LeaseGrant] = {}
        self.waited: list[FakeRef] = []

    def session_key(self):
        return None

    def answer(self, ref, timeout_s):
        if not ref.done:
            self.waited.append(ref)  # not answered yet: the scheduler answers with one slot on A
        return self.grants.get(id(ref)) or LeaseGrant("client:0", (LeaseSlot(A, 1),), SELECTOR, 1.0)


@pytest.fixture
def renewing():
    from fabric import adaptive

    driver = FakeDriver()
    conn = Session(driver, None)
    conn.scheduler = FakeScheduler()
    conn.client_id = "client"
    af = adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")(lambda x: x)
    conn.remotes[af.function] = RecordingRemotes()  # what its calls would be submitted with

    def grant_next(*slots: LeaseSlot) -> None:
        ref = conn.scheduler.refs[-1]
        driver.grants[id(ref)] = LeaseGrant("client:0", slots, SELECTOR, 1.0)
        ref.finish()

    return conn, af, grant_next, driver.waited


def key_and_plan(conn: Session, af) -> tuple:
    return dispatch.plan_for(conn, af.function, af.requirement, af.dispatch.max_retries, af.task_name)


def new_lease(conn: Session, af, lease_id: str = "client:0") -> dispatch.Lease:
    key, plan = key_and_plan(conn, af)
    lease = conn.leases[key] = dispatch.Lease(lease_id, plan, conn.driver)
    return lease


def lease_for(conn: Session, af, now: float) -> LeaseState:
    """What one call of ``af`` at ``now`` does to its lease before routing (and the lease)."""
    return dispatch.lease_for(conn, *key_and_plan(conn, af), now).state


def first_grant(conn: Session, af, grant_next) -> LeaseState:
    """A lease whose first call asked at 0.0 and got two slots on A (answered at once)."""
    lease = new_lease(conn, af)
    dispatch.ask_renewal(conn, lease, af.requirement, 0.0, [])
    grant_next(LeaseSlot(A, 2))
    assert lease_for(conn, af, 0.0) is lease.state
    return lease.state


def test_renewals_are_asked_for_ahead_and_taken_into_use_when_they_arrive(renewing):
    conn, af, grant_next, waited = renewing
    scheduler, req = conn.scheduler, af.requirement
    lease = first_grant(conn, af, grant_next)  # the first call has nothing to go on: it waits
    assert lease.capacity == {A: 2} and lease.renewal is None
    assert lease.expires == pytest.approx(1.0) and lease.renew_at == pytest.approx(LeaseState.RENEW_AT)

    lease_for(conn, af, 0.5)
    assert len(scheduler.asked) == 1  # before RENEW_AT of the tick nothing is asked
    start(lease, A)
    lease_for(conn, af, 0.8)  # at RENEW_AT: asked, holding what runs now, not waited for
    assert len(scheduler.asked) == 2 and scheduler.asked[-1][1] == {A: 1}
    assert lease.renewal is not None and lease.capacity == {A: 2}

    grant_next(LeaseSlot(A, 1), LeaseSlot(B, 1))  # it arrives: the next call takes it into use
    lease_for(conn, af, 0.85)
    assert lease.capacity == {A: 1, B: 1} and lease.renewal is None
    assert lease.expires == pytest.approx(1.8)  # one tick from when it was asked for
    assert waited == []


def test_a_call_waits_for_the_renewal_only_when_the_tick_has_run_out(renewing):
    conn, af, grant_next, waited = renewing
    scheduler, req = conn.scheduler, af.requirement
    lease = first_grant(conn, af, grant_next)

    lease_for(conn, af, 0.9)  # asked; until it arrives the old grant serves
    pending = scheduler.refs[-1]
    assert lease.renewal is pending and lease.capacity == {A: 2} and waited == []

    grant_next(LeaseSlot(B, 1))
    pending.done, lease.arrived_seq = False, 0  # as if still on its way when the tick runs out
    lease_for(conn, af, 1.0)
    assert waited == [pending] and lease.capacity == {B: 1}


def test_a_renewal_asked_for_a_tick_ago_or_more_is_not_used(renewing):
    conn, af, grant_next, waited = renewing
    scheduler, req = conn.scheduler, af.requirement
    lease = first_grant(conn, af, grant_next)
    lease_for(conn, af, 0.8)  # the burst's last call asks for the next grant...
    grant_next(LeaseSlot(B, 1))  # ...which arrives, but no call comes to take it for a while
    lease_for(conn, af, 1.9)  # a cordon since then would not show in it
    assert len(scheduler.asked) == 3 and waited == [scheduler.refs[-1]]  # asked anew and waited for
    assert lease.renewal is None and lease.expires == pytest.approx(2.9) and lease.capacity == {A: 1}


def test_a_late_callback_of_an_earlier_renewal_does_not_pass_for_the_next_one(renewing):
    conn, af, grant_next, waited = renewing
    scheduler, req = conn.scheduler, af.requirement
    lease = new_lease(conn, af)
    dispatch.ask_renewal(conn, lease, req, 0.0, [])
    first = scheduler.refs[-1]
    dispatch.ask_renewal(conn, lease, req, 0.1, [])
    first.finish()  # the earlier one's callback fires after the next was asked for
    assert not lease.state.renewal_arrived()


# -- idle leases are given back: a class that stopped calling does not keep the best nodes ----------
@pytest.fixture
def two_classes(renewing):
    from fabric import adaptive

    conn, af, grant_next, waited = renewing
    first = first_grant(conn, af, grant_next)
    other = adaptive.remote(operation="vaapi_encode")(lambda x: x)
    conn.remotes[other.function] = RecordingRemotes()
    new_lease(conn, other, "client:1")
    return conn, first, other, grant_next


def ask_for_other(conn, other, grant_next, now: float) -> list[str]:
    """The other class's first call: a grant asked for (and answered); what it gave back."""
    lease = conn.leases[key_and_plan(conn, other)[0]]
    dispatch.ask_renewal(conn, lease, other.requirement, now, dispatch.release_idle(conn, now, keep=lease))
    grant_next(LeaseSlot(A, 1))
    return conn.scheduler.asked[-1][3]


def test_an_idle_lease_is_given_back_with_the_next_request_and_asks_anew_on_its_next_call(two_classes):
    conn, first, other, grant_next = two_classes
    first.last_call_at = 0.0
    start(first, A).finish()
    idle_from = LeaseState.IDLE_AFTER * first.grant.ttl_s
    assert ask_for_other(conn, other, grant_next, idle_from) == ["client:0"]
    assert first.grant is None and first.route(idle_from, may_spill=True) is None  # nothing left to route to
    assert first.renew_at == 0.0 and first.expires == 0.0  # its next call asks for a new grant and waits for it


def test_a_lease_is_kept_while_a_call_runs_or_one_came_recently(two_classes):
    conn, first, other, grant_next = two_classes
    first.last_call_at = 0.0
    running = start(first, A)
    assert ask_for_other(conn, other, grant_next, 0.5) == []  # a call still runs on its slot
    running.finish()
    first.last_call_at = 0.45
    assert ask_for_other(conn, other, grant_next, 0.5) == []  # called 50 ms ago: still in use
    assert first.grant is not None


def test_a_finished_call_whose_callback_lags_does_not_keep_the_lease(two_classes):
    conn, first, other, grant_next = two_classes
    first.last_call_at = 0.0
    lagging = start(first, A)
    lagging.done = True  # the task has finished; its completion callback has not been delivered
    assert ask_for_other(conn, other, grant_next, 0.5) == ["client:0"]
    lagging.finish()  # delivered late: lands in the forgotten bookkeeping, not the next grant's
    first.install(LeaseGrant("client:0", (LeaseSlot(A, 1),), SELECTOR, 1.0), asked_at=1.0)
    assert first.holding() == {} and first.route(1.0, may_spill=True) == A


def test_spilled_calls_still_queued_keep_the_lease(two_classes):
    conn, first, other, grant_next = two_classes
    first.last_call_at = 0.0
    first.spilled_call(FakeRef(), 0.0)
    assert ask_for_other(conn, other, grant_next, 0.5) == []


def test_a_renewal_on_its_way_does_not_keep_an_idle_lease(two_classes):
    conn, first, other, grant_next = two_classes
    first.last_call_at = 0.0
    lease = next(lease for lease in conn.leases.values() if lease.state is first)
    dispatch.ask_renewal(conn, lease, REQ, 0.75, [])  # asked at RENEW_AT by its last call; never taken
    assert ask_for_other(conn, other, grant_next, 1.0) == ["client:0"]
    assert first.renewal is None and not first.renewal_arrived()


# -- a worker's spilled-call counts reach the scheduler when it goes quiet, and every EVERY_S ------
def test_spill_counts_are_reported_once_the_worker_goes_quiet():
    c = worker_calls.SpillCounts()
    assert c.take(0.0) is None  # nothing counted: nothing to send
    c.count(False, 0.0)
    c.count(True, 0.01)
    assert c.take(0.01 + c.QUIET_S / 2) is None  # calls still coming: no actor call per spilled call
    assert c.take(0.01 + c.QUIET_S) == (2, 1)
    assert c.take(1.0) is None  # reported once


def test_spill_counts_are_reported_during_a_long_burst_every_few_seconds():
    c = worker_calls.SpillCounts()
    t = 0.0
    while t < c.EVERY_S:
        c.count(False, t)
        assert c.take(t) is None
        t += 0.01
    c.count(False, t)
    assert c.take(t) == (round(t / 0.01) + 1, 0)
    c.count(False, t + 0.01)
    assert c.take(t + 0.01) is None  # the next batch starts its own EVERY_S

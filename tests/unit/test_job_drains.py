"""Node drains and interruption notices, pure (issue 16): the phase and job-status tables, what
``step`` asks for (Ray's drain once every job is off, ``ForceStop`` then Ray at a forced timeout,
``partial`` with stuck jobs without force), Ray's answer, tightening by a second notice, the
uncordon, the interruption's timeout, the snapshots' plain-JSON form, and random sequences that
keep ``NodeDrains.problems()`` empty."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import HealthCheck, settings as hsettings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fabric.core.errors import JobNotFoundError, NodeNotFoundError, RequirementError, TransitionError
from fabric.core.jobs.drains import (
    FINISHED_KEPT, JOB_DRAIN_LIFECYCLE, NODE_DRAIN_LIFECYCLE, AskRayToDrain, DrainState, ForceStop, JobDrainStatus,
    NodeDrain, NodeDrainPhase, NodeDrains, NodeInterruptionState, interruption_timeout,
)
from fabric.core.settings_moves import DrainSettings

P, S = NodeDrainPhase, JobDrainStatus


def drain(jobs=("a", "b"), now=100.0, **kw) -> NodeDrain:
    kw = {"timeout_s": 60.0, "force": False, "strategy": None, **kw}
    return NodeDrain("n1", jobs, now, **kw)


# -- the tables ------------------------------------------------------------------------------------
def test_phase_table():
    t = {k.value: sorted(v.value for v in vs) for k, vs in NODE_DRAIN_LIFECYCLE.table().items()}
    assert t == {
        "migrating": ["cancelled", "draining", "failed", "partial", "waiting"],
        "waiting": ["cancelled", "draining", "failed", "partial"],
        "draining": ["done", "failed"],
        "done": [], "partial": [], "failed": [], "cancelled": [],
    }
    with pytest.raises(TransitionError, match="only its answer"):
        NODE_DRAIN_LIFECYCLE.check("drain", P.DRAINING, P.CANCELLED)


def test_job_status_table():
    t = {k.value: sorted(v.value for v in vs) for k, vs in JOB_DRAIN_LIFECYCLE.table().items()}
    assert t == {
        "migrating": ["migrated", "moved", "stuck", "terminated"],
        "stuck": ["migrating", "moved", "terminated"],
        "migrated": [], "moved": [], "terminated": [],
    }


# -- the way through --------------------------------------------------------------------------------
def test_jobs_leave_then_ray_is_asked_and_accepts():
    books = NodeDrains()
    d = books.start("n1", ["a", "b"], 100.0, timeout_s=60, force=False, strategy="handover")
    assert d.phase is P.MIGRATING and d.snapshot().job_ids(S.MIGRATING) == ["a", "b"]
    assert d.set_job("a", S.MIGRATING, migration_id="m-a") is True
    assert d.set_job("a", S.MIGRATING, migration_id="m-a") is False  # nothing changed
    assert d.started_all(101.0) is True and d.started_all(101.0) is False
    assert d.phase is P.WAITING
    assert books.step(102.0) == []  # jobs still on the node
    assert d.set_job("a", S.MIGRATED) is True
    assert d.job("a").migration_id == "m-a"  # kept when not given again
    d.set_job("b", S.MOVED, reason="died; recovered on n2")
    assert books.step(103.0) == [AskRayToDrain("n1", "IDLE_TERMINATION", None, "fabric drain: every job is off the node")]
    assert d.phase is P.DRAINING and books.step(104.0) == []  # asked once
    state = books.ray_answered("n1", True, "", 105.0)
    assert (state.phase, state.ray_drain, state.terminal) == (P.DONE, "accepted", True)
    assert books.get("n1") is None and len(books) == 0
    assert books.status("n1") == state and books.recent() == [state]
    assert books.problems() == []


def test_a_node_without_jobs_goes_straight_to_asking_ray():
    d = drain(jobs=())
    (ask,) = d.step(100.0)
    assert isinstance(ask, AskRayToDrain) and d.phase is P.DRAINING
    assert [p for p, _, _ in d.history] == [P.MIGRATING, P.DRAINING]


def test_a_refusal_is_reported_not_ignored():
    books = NodeDrains()
    books.start("n1", [], 0.0, timeout_s=10, force=False, strategy=None)
    books.step(0.0)
    state = books.ray_answered("n1", False, "node is not idle", 1.0)
    assert (state.phase, state.reason, state.ray_drain) == (P.FAILED, "node is not idle", "refused: node is not idle")
    with pytest.raises(NodeNotFoundError):
        books.ray_answered("n1", True, "", 2.0)  # it ended
    assert books.problems() == []


def test_ray_cannot_answer_a_drain_it_was_not_asked():
    d = drain()
    with pytest.raises(TransitionError):
        d.ray_answered(True, "", 101.0)


def test_timeout_without_force_ends_partial_with_the_jobs_stuck():
    d = drain(jobs=("a", "b", "c"))
    d.set_job("a", S.MIGRATED)
    d.set_job("b", S.STUCK, reason="no target")
    assert d.step(159.9) == [] and d.phase is P.MIGRATING
    assert d.step(160.0) == []
    state = d.snapshot()
    assert state.phase is P.PARTIAL and "2 job(s)" in state.reason and "b, c" in state.reason
    assert state.jobs["a"].status is S.MIGRATED
    assert (state.jobs["b"].status, state.jobs["b"].reason) == (S.STUCK, "no target")
    assert state.jobs["c"].status is S.STUCK and "timeout" in state.jobs["c"].reason
    assert d.set_job("c", S.MIGRATING) is False  # an ended drain takes no more reports


def test_timeout_with_force_stops_what_is_left_then_asks_ray():
    d = drain(jobs=("a", "b", "c"), force=True)
    d.set_job("a", S.MIGRATED)
    d.set_job("b", S.STUCK, reason="no target")
    actions = d.step(200.0)
    assert actions[0] == ForceStop("n1", ("b", "c"))
    assert isinstance(actions[1], AskRayToDrain) and len(actions) == 2
    assert d.snapshot().job_ids(S.TERMINATED) == ["b", "c"] and d.phase is P.DRAINING


def test_a_stuck_job_may_be_retried_and_waits_for_the_timeout():
    d = drain(jobs=("a",))
    d.set_job("a", S.STUCK, reason="migration aborted")
    assert d.step(110.0) == [] and d.phase is P.MIGRATING
    assert d.set_job("a", S.MIGRATING, migration_id="m2") is True
    assert d.job("a") == d.snapshot().jobs["a"] and d.job("a").reason == ""
    d.set_job("a", S.MIGRATED)
    assert isinstance(d.step(111.0)[0], AskRayToDrain)


def test_set_job_refuses_what_the_table_refuses():
    d = drain()
    d.set_job("a", S.MIGRATED)
    with pytest.raises(TransitionError):
        d.set_job("a", S.STUCK)
    with pytest.raises(JobNotFoundError):
        d.set_job("zz", S.MOVED)
    with pytest.raises(RequirementError) as err:
        d.set_job("b", "gone")
    assert err.value.field == "status"
    assert d.set_job("b", "moved") is True  # the wire name works too


# -- interruptions ---------------------------------------------------------------------------------
def test_an_interruption_is_a_forced_drain_told_to_ray_as_preemption():
    d = drain(jobs=(), force=False, interruption="spot-interruption", interruption_deadline=190.0)
    assert d.force is True
    (ask,) = d.step(100.0)
    assert (ask.reason, ask.deadline) == ("PREEMPTION", 190.0) and "spot-interruption" in ask.message
    assert d.snapshot().interruption == "spot-interruption"


def test_a_second_notice_tightens_the_running_drain():
    books = NodeDrains()
    first = books.start("n1", ["a"], 100.0, timeout_s=300, force=False, strategy=None)
    again = books.start("n1", ["a", "b"], 150.0, timeout_s=5, force=True, strategy="overlap")
    assert again is first and first.timeout_s == 300 and not first.force  # unchanged
    assert first.tighten(60, 150.0, interruption="rebalance") is True
    assert (first.deadline, first.timeout_s, first.force, first.interruption) == (210.0, 110.0, True, "rebalance")
    assert first.tighten(600, 160.0, force=False) is False  # never looser, force stays
    assert first.deadline == 210.0 and first.force
    assert first.tighten(10, 160.0, interruption="spot-interruption", interruption_deadline=200.0) is True
    assert (first.deadline, first.interruption, first.interruption_deadline) == (170.0, "spot-interruption", 200.0)
    first.tighten(10, 160.0, interruption_deadline=250.0)
    assert first.interruption_deadline == 200.0  # the earliest
    assert ForceStop("n1", ("a",)) in books.step(170.0)
    assert books.problems() == []


def test_interruption_timeout():
    s = DrainSettings()
    assert interruption_timeout("spot-interruption", 1040.0, 1000.0, s) == 10.0
    assert interruption_timeout("rebalance", 1010.0, 1000.0, s) == 0.0  # never below 0
    assert interruption_timeout("spot-interruption", None, 1000.0, s) == 90.0
    assert interruption_timeout("rebalance", None, 1000.0, s) == 300.0
    own = DrainSettings(spot_drain_s=7, rebalance_drain_s=8, interruption_margin_s=1)
    assert [interruption_timeout(k, None, 0, own) for k in ("spot-interruption", "rebalance")] == [7, 8]
    assert interruption_timeout("spot-interruption", 5.0, 0.0, own) == 4.0
    with pytest.raises(RequirementError) as err:
        interruption_timeout("earthquake", None, 0.0, s)
    assert err.value.field == "kind"
    with pytest.raises(RequirementError) as err:
        interruption_timeout("rebalance", float("nan"), 0.0, s)
    assert err.value.field == "deadline"


# -- the uncordon, the end ------------------------------------------------------------------------------
def test_an_uncordon_withdraws_a_drain_ray_was_not_asked_about():
    books = NodeDrains()
    assert books.withdraw("n1", 0.0) is None
    books.start("n1", ["a"], 0.0, timeout_s=10, force=False, strategy=None)
    state = books.withdraw("n1", 1.0)
    assert state.phase is P.CANCELLED and "n1" not in books
    books.start("n1", [], 2.0, timeout_s=10, force=False, strategy=None)
    books.step(2.0)
    with pytest.raises(TransitionError):
        books.withdraw("n1", 3.0)
    assert books.get("n1").phase is P.DRAINING and books.problems() == []


def test_a_drain_that_cannot_go_on_fails_with_its_reason():
    books = NodeDrains()
    assert books.fail("n1", "gone", 0.0) is None
    books.start("n1", ["a"], 0.0, timeout_s=10, force=False, strategy=None)
    state = books.fail("n1", "the node left the fleet", 1.0)
    assert (state.phase, state.reason, state.ray_drain) == (P.FAILED, "the node left the fleet", None)
    assert books.problems() == []


def test_recent_keeps_the_last_drains_that_ended():
    books = NodeDrains()
    for i in range(FINISHED_KEPT + 3):
        books.start(f"n{i}", [], float(i), timeout_s=1, force=False, strategy=None)
        books.withdraw(f"n{i}", float(i))
    ended = books.recent()
    assert len(ended) == FINISHED_KEPT and ended[0].node_id == "n3" and ended[-1].node_id == f"n{FINISHED_KEPT + 2}"
    assert books.status("n0") is None and books.status("n4").phase is P.CANCELLED


def test_a_new_drain_after_one_ended_starts_afresh():
    books = NodeDrains()
    books.start("n1", ["a"], 0.0, timeout_s=10, force=False, strategy=None)
    books.withdraw("n1", 1.0)
    d = books.start("n1", ["b"], 2.0, timeout_s=10, force=False, strategy=None)
    assert d.phase is P.MIGRATING and list(d.snapshot().jobs) == ["b"] and books.status("n1").phase is P.MIGRATING


# -- input and output ------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, field", [
    ({"timeout_s": -1}, "timeout_s"), ({"timeout_s": float("inf")}, "timeout_s"), ({"timeout_s": True}, "timeout_s"),
    ({"strategy": "teleport"}, "strategy"), ({"jobs": ("a", "a")}, "job_ids"), ({"jobs": ("",)}, "job_ids"),
    ({"interruption": "earthquake"}, "interruption"), ({"now": float("nan")}, "now"),
    ({"interruption_deadline": float("inf")}, "interruption_deadline"),
])
def test_bad_input_names_the_field(kw, field):
    with pytest.raises(RequirementError) as err:
        drain(**kw)
    assert err.value.field == field


def test_bad_tighten_input_names_the_field():
    d = drain()
    for kw, field in (({"timeout_s": -1}, "timeout_s"), ({"interruption": "x"}, "interruption")):
        with pytest.raises(RequirementError) as err:
            d.tighten(**{"timeout_s": 1, "now": 100.0, **kw})
        assert err.value.field == field


def test_snapshots_are_plain_json_and_pickle():
    d = drain(jobs=("a",), interruption="rebalance", interruption_deadline=500.0)
    d.set_job("a", S.MIGRATING, migration_id="m1")
    state = d.snapshot()
    data = json.loads(json.dumps(state.as_dict()))
    assert data["phase"] == "migrating" and data["deadline"] == 160.0 and data["force"] is True
    assert data["jobs"] == {"a": {"job_id": "a", "status": "migrating", "migration_id": "m1", "reason": ""}}
    assert (data["interruption"], data["ray_drain"], data["terminal"]) == ("rebalance", None, False)
    notice = NodeInterruptionState("n1", "rebalance", 500.0, 100.0, state)
    assert json.loads(json.dumps(notice.as_dict()))["drain"] == data
    assert pickle.loads(pickle.dumps(notice)) == notice
    assert isinstance(pickle.loads(pickle.dumps(state)), DrainState)


def test_problems_finds_what_is_wrong():
    books = NodeDrains()
    d = books.start("n1", ["a"], 0.0, timeout_s=10, force=False, strategy=None)
    d.interruption = "rebalance"  # an interruption without force
    d.phase = P.DRAINING  # with a job on the node, and a history that does not say so
    got = books.problems()
    assert any("without force" in p for p in got)
    assert any("with jobs on the node" in p for p in got)
    assert any("does not run from migrating" in p for p in got)


# -- random sequences --------------------------------------------------------------------------------
NODES = ("n1", "n2")
JOBS = ("a", "b", "c")


class DrainsMachine(RuleBasedStateMachine):
    """Random drains of two nodes: reports, steps, Ray's answers, notices, uncordons, a clock that
    only moves forward. Refused moves raise ``TransitionError`` and change nothing; after every
    step the book is consistent."""

    def __init__(self):
        super().__init__()
        self.books = NodeDrains()
        self.now = 0.0
        self.asked: set[str] = set()

    @rule(dt=st.sampled_from([0.0, 1.0, 5.0, 30.0]))
    def tick(self, dt):
        self.now += dt

    @rule(node=st.sampled_from(NODES), jobs=st.lists(st.sampled_from(JOBS), unique=True, max_size=3),
          timeout=st.sampled_from([0.0, 10.0, 60.0]), force=st.booleans())
    def start(self, node, jobs, timeout, force):
        running = self.books.get(node)
        d = self.books.start(node, jobs, self.now, timeout_s=timeout, force=force, strategy=None)
        assert running is None or d is running

    @rule(node=st.sampled_from(NODES), job=st.sampled_from(JOBS), status=st.sampled_from(list(JobDrainStatus)))
    def report(self, node, job, status):
        d = self.books.get(node)
        if d is None or job not in d.snapshot().jobs:
            return
        before = d.snapshot()
        try:
            changed = d.set_job(job, status, reason="r")
        except TransitionError:
            assert d.snapshot() == before
            return
        assert changed == (d.snapshot() != before)

    @rule(node=st.sampled_from(NODES))
    def started_all(self, node):
        d = self.books.get(node)
        if d is not None:
            d.started_all(self.now)

    @rule()
    def step(self):
        for a in self.books.step(self.now):
            if isinstance(a, AskRayToDrain):
                assert a.node_id not in self.asked  # asked once per drain
                self.asked.add(a.node_id)
                assert self.books.get(a.node_id).remaining() == []
            else:
                assert self.books.get(a.node_id).force

    @precondition(lambda self: self.asked)
    @rule(accepted=st.booleans(), data=st.data())
    def answer(self, accepted, data):
        node = data.draw(st.sampled_from(sorted(self.asked)))
        self.asked.discard(node)
        state = self.books.ray_answered(node, accepted, "" if accepted else "busy", self.now)
        assert state.phase is (P.DONE if accepted else P.FAILED)

    @rule(node=st.sampled_from(NODES), timeout=st.sampled_from([0.0, 20.0, 1000.0]),
          kind=st.sampled_from([None, "spot-interruption", "rebalance"]))
    def notice(self, node, timeout, kind):
        d = self.books.get(node)
        if d is not None:
            deadline = d.deadline
            d.tighten(timeout, self.now, interruption=kind)
            assert d.deadline <= deadline and d.force

    @rule(node=st.sampled_from(NODES))
    def uncordon(self, node):
        d = self.books.get(node)
        try:
            self.books.withdraw(node, self.now)
        except TransitionError:
            assert d is not None and d.phase is P.DRAINING

    @invariant()
    def consistent(self):
        assert self.books.problems() == []
        assert len(self.books.recent()) <= FINISHED_KEPT


DrainsMachine.TestCase.settings = hsettings(max_examples=60, stateful_step_count=30, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
test_drains_machine = DrainsMachine.TestCase

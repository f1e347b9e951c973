"""``JobBook`` (``fabric.core.jobs.book``): the pure state of every job and bundle, and the
instructions each report leads to (issue 14 § Recovery by policy).

Every book here is wrapped so that ``validate_state()`` is empty, and every job's history only
holds moves ``JOB_LIFECYCLE`` allows, after every call of every test."""

from __future__ import annotations

import pytest

from fabric.core.errors import InvalidSpecError, JobNotFoundError
from fabric.core.jobs.book import (RETRY_S, Binding, EndNode, JobBook, JobEvent, PlaceJob, ReleaseSlot, StartInstance,
                                   StopInstance)
from fabric.core.jobs.spec import JobSpec
from fabric.core.jobs.states import JOB_LIFECYCLE, JobState
from fabric.core.placement import PlacementContext, Requirement
from fabric.core.settings import FabricSettings

J = JobState


def WHERE(node_id):  # noqa: N802 - the brief's where function: every node in one zone and cloud
    return ("zone-a", "cloud-1")


NODES = ("n0", "n1", "n2")
ZONES = {"n0": ("zone-a", "cloud-1"), "n1": ("zone-a", "cloud-1"), "n2": ("zone-b", "cloud-2")}


def where3(node_id):
    """Three nodes in two zones and two clouds (None: a node the fleet does not hold)."""
    return ZONES.get(node_id)


def history_problems(book: JobBook) -> list[str]:
    """Consecutive history entries that are not a move the lifecycle allows, or go back in time."""
    out = []
    for rec in book.jobs.values():
        h = list(rec.history)
        for (t0, s0, _), (t1, s1, r1) in zip(h, h[1:]):
            if not JOB_LIFECYCLE.allows(J(s0), J(s1)) or t1 < t0:
                out.append(f"{rec.job_id}: {s0}@{t0} -> {s1}@{t1} ({r1})")
        if h and J(h[-1][1]) != rec.state:
            out.append(f"{rec.job_id}: history ends in {h[-1][1]} but the job is {rec.state}")
    return out


def assert_consistent(book: JobBook) -> None:
    assert book.validate_state() == []
    assert history_problems(book) == []


class Checked:
    """A ``JobBook`` whose every call is followed by ``assert_consistent``."""

    def __init__(self, failure=None):
        self.book = JobBook(failure if failure is not None else FabricSettings().failure)

    def __getattr__(self, name):
        attr = getattr(self.book, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            out = attr(*args, **kwargs)
            assert_consistent(self.book)
            return out
        return call


def of(out, cls, kind=None):
    return [i for i in out if isinstance(i, cls) and (kind is None or i.kind == kind)]


def ctx(b, p: PlaceJob, where=WHERE) -> PlacementContext:
    """The context ``p`` is placed with: its own, or (a ``PlaceJob`` whose context is built when it
    is placed) the book's at that moment."""
    c = p.context if p.context is not None else b.context(b.job(p.job_id), where)
    assert isinstance(c, PlacementContext)
    return c


def spec(name="encode", **kw):
    return JobSpec(name=name, **kw)


def launch(b: Checked, job_id: str, node: str, key: str, alloc: int | None, now: float) -> list:
    """due -> placed -> started for one job (the only one due); the instructions of all three."""
    due = [p for p in b.due(now, WHERE) if p.job_id == job_id]
    assert len(due) == 1, due
    out = list(due) + b.placed(job_id, node, alloc, key, now, WHERE)
    out += b.started(job_id, key, now)
    assert b.job(job_id).state == J.RUNNING
    return out


# -- one job, start to end -------------------------------------------------------------------------
def test_add_due_place_start_run():
    b = Checked()
    s = spec(requirement=Requirement(num_cpus=2), template="tpl")
    assert b.add("j1", s, 0.0) == []
    assert b.job("j1").state == J.PENDING
    (p,) = b.due(0.0, WHERE)
    assert isinstance(p, PlaceJob) and p.job_id == "j1" and p.requirement == s.requirement
    c = ctx(b, p)
    assert (c.job_id, c.job, c.recovering) == ("j1", "encode", False)
    assert c.exclude_nodes == frozenset() and c.template == "tpl"
    assert c.launch_policy == "avoid_spare" and not c.prefer_spares

    out = b.placed("j1", "n1", 7, "primary@aaaa", 1.0, WHERE)
    binding = Binding("n1", "primary@aaaa", 7)
    assert of(out, StartInstance) == [StartInstance("j1", binding)]
    assert out[-1] == StartInstance("j1", binding)  # the event comes before the instruction
    (ev,) = of(out, JobEvent, "job_state")
    assert (ev.data["job_id"], ev.data["from"], ev.data["to"]) == ("j1", "pending", "starting")
    assert b.job("j1").state == J.STARTING and b.job("j1").binding == binding
    assert b.due(1.0, WHERE) == []  # a starting job is not placed again

    assert b.started("j1", "primary@other", 2.0) == []  # not its instance
    assert b.job("j1").state == J.STARTING
    out = b.started("j1", "primary@aaaa", 2.0)
    assert [(e.data["from"], e.data["to"]) for e in of(out, JobEvent)] == [("starting", "running")]
    assert b.job("j1").state == J.RUNNING and b.due(100.0, WHERE) == []
    assert b.started("j1", "primary@aaaa", 3.0) == []  # a second report changes nothing
    assert [h[1] for h in b.job("j1").history] == ["pending", "starting", "running"]
    assert "j1" in b.dirty


def test_unknown_jobs():
    b = Checked()
    with pytest.raises(JobNotFoundError):
        b.job("nope")
    with pytest.raises(JobNotFoundError):
        b.stop("nope", 0.0)
    with pytest.raises(JobNotFoundError):
        b.placed("nope", "n1", 1, "k", 0.0)
    assert b.died("nope", "k", 0.0) == [] and b.started("nope", "k", 0.0) == [] and b.stopped("nope", "k", 0.0) == []


def test_dormant_jobs_are_not_placed():
    b = Checked()
    b.add("j1", spec(start_mode="manual"), 0.0, dormant=True)
    assert b.due(100.0, WHERE) == []


@pytest.mark.parametrize("policy", ["prefer_spare", "avoid_spare"])
def test_a_death_releases_the_slot_and_recovers_elsewhere_by_policy(policy):
    b = Checked()
    b.add("j1", spec(on_runtime_failure=policy), 0.0)
    launch(b, "j1", "n1", "primary@1", 11, 0.0)

    out = b.died("j1", "primary@1", 10.0, reason="actor died")
    assert out[0] == ReleaseSlot(11)
    rec = b.job("j1")
    assert rec.state == J.RECOVERING and rec.binding is None and rec.recovering
    assert rec.restarts_last_hour(10.0) == 1
    (ev,) = of(out, JobEvent, "job_state")
    assert ev.data["to"] == "recovering" and "actor died" in ev.data["reason"]

    (p,) = b.due(10.0, WHERE)  # the first recovery goes at once
    assert ctx(b, p).recovering and ctx(b, p).job_id == "j1"
    assert ctx(b, p).exclude_nodes == {"n1"} and ctx(b, p).on_runtime_failure == policy
    assert ctx(b, p).prefer_spares == (policy == "prefer_spare")
    assert ctx(b, p).avoid_spares == (policy == "avoid_spare")

    b.placed("j1", "n2", 12, "primary@2", 10.0, WHERE)
    b.started("j1", "primary@2", 11.0)
    assert b.job("j1").exclude == frozenset() and not b.job("j1").recovering

    # a second death 2 s after the last attempt waits until that attempt + 5 s
    b.died("j1", "primary@2", 12.0)
    assert b.job("j1").not_before == 15.0
    assert b.due(14.999, WHERE) == []
    (p,) = b.due(15.0, WHERE)
    assert ctx(b, p).exclude_nodes == {"n2"} and ctx(b, p).recovering  # only the node it last died on
    assert b.job("j1").restarts_last_hour(15.0) == 2


def test_the_recovery_interval_is_the_settings_one():
    b = Checked(FabricSettings.load({"failure": {"min_recovery_interval_s": 30}}).failure)
    b.add("j1", spec(), 0.0)
    launch(b, "j1", "n1", "k1", 1, 0.0)
    b.died("j1", "k1", 0.0)
    launch(b, "j1", "n2", "k2", 2, 0.0)
    b.died("j1", "k2", 1.0)
    assert b.due(29.9, WHERE) == [] and len(b.due(30.0, WHERE)) == 1


def test_a_stale_instance_key_changes_nothing():
    b = Checked()
    b.add("j1", spec(), 0.0)
    launch(b, "j1", "n1", "primary@old", 1, 0.0)
    b.died("j1", "primary@old", 1.0)
    launch(b, "j1", "n2", "primary@new", 2, 1.0)
    before = (b.job("j1").state, b.job("j1").binding, list(b.job("j1").restarts), len(b.job("j1").history))
    assert b.died("j1", "primary@old", 50.0) == []
    assert b.stopped("j1", "primary@old", 50.0) == []
    assert b.started("j1", "primary@old", 50.0) == []
    assert (b.job("j1").state, b.job("j1").binding, list(b.job("j1").restarts), len(b.job("j1").history)) == before
    # and while recovering (no binding at all) a late report of either instance is ignored too
    b.died("j1", "primary@new", 60.0)
    assert b.died("j1", "primary@new", 61.0) == [] and b.died("j1", "primary@old", 61.0) == []
    assert b.job("j1").state == J.RECOVERING and b.job("j1").restarts_last_hour(61.0) == 2


def test_node_lost_kills_every_job_bound_there_and_only_those():
    b = Checked()
    for i, node in enumerate(["n1", "n1", "n2"]):
        b.add(f"j{i}", spec(f"job{i}"), 0.0)
        launch(b, f"j{i}", node, f"k{i}", 100 + i, 0.0)
    assert {r.job_id for r in b.on_node("n1")} == {"j0", "j1"}
    out = b.node_lost("n1", 10.0)
    assert sorted(r.allocation_id for r in of(out, ReleaseSlot)) == [100, 101]
    assert (b.job("j0").state, b.job("j1").state, b.job("j2").state) == (J.RECOVERING, J.RECOVERING, J.RUNNING)
    assert b.job("j2").binding == Binding("n2", "k2", 102)
    assert all("n1" in b.job(j).reason for j in ("j0", "j1"))
    places = b.due(10.0, WHERE)
    assert {p.job_id for p in places} == {"j0", "j1"} and all(ctx(b, p).exclude_nodes == {"n1"} for p in places)
    assert b.node_lost("n1", 11.0) == [] and b.node_lost("nowhere", 11.0) == []


def test_a_preempted_node_loss_recovers_without_counting():
    b = Checked(FabricSettings.load({"failure": {"max_restarts_per_hour": 1}}).failure)
    b.add("j1", spec(), 0.0)
    t = 0.0
    for i in range(5):
        launch(b, "j1", f"n{i}", f"k{i}", i, t)
        b.node_lost(f"n{i}", t + 1, preempted=True)
        assert b.job("j1").state == J.RECOVERING
        t += 10
    assert b.job("j1").restarts_last_hour(t) == 0 and len(b.job("j1").restarts) == 5
    launch(b, "j1", "m1", "km1", 50, t)
    b.died("j1", "km1", t + 1)  # the one counted restart the ceiling allows
    assert b.job("j1").state == J.RECOVERING
    launch(b, "j1", "m2", "km2", 51, t + 10)
    b.died("j1", "km2", t + 11)
    assert b.job("j1").state == J.FAILED


# -- stop ------------------------------------------------------------------------------------------
def test_stop_a_running_job_stops_its_instance_then_releases_its_slot():
    b = Checked()
    b.add("j1", spec(), 0.0)
    launch(b, "j1", "n1", "k1", 5, 0.0)
    out = b.stop("j1", 1.0)
    assert of(out, StopInstance) == [StopInstance("j1", Binding("n1", "k1", 5), graceful=True)]
    assert of(out, ReleaseSlot) == [] and b.job("j1").state == J.STOPPING
    assert b.stop("j1", 1.5) == []  # already stopping
    assert b.started("j1", "k1", 1.5) == []
    assert b.due(100.0, WHERE) == []
    out = b.stopped("j1", "k1", 2.0)
    assert of(out, ReleaseSlot) == [ReleaseSlot(5)]
    assert b.job("j1").state == J.STOPPED and b.job("j1").binding is None and b.job("j1").terminal
    assert b.stop("j1", 3.0) == [] and b.due(100.0, WHERE) == []


def test_a_stopping_job_that_dies_is_stopped_not_recovered():
    b = Checked()
    b.add("j1", spec(), 0.0)
    launch(b, "j1", "n1", "k1", 5, 0.0)
    b.stop("j1", 1.0)
    out = b.died("j1", "k1", 2.0, reason="actor died")
    assert of(out, ReleaseSlot) == [ReleaseSlot(5)] and b.job("j1").state == J.STOPPED
    assert b.job("j1").restarts == []


def test_stop_a_job_being_started_waits_for_its_instance():
    b = Checked()
    b.add("j1", spec(), 0.0)
    b.due(0.0, WHERE)
    b.placed("j1", "n1", 5, "k1", 0.0)
    out = b.stop("j1", 1.0)
    assert of(out, StopInstance) == [StopInstance("j1", Binding("n1", "k1", 5))]
    assert b.started("j1", "k1", 1.5) == [] and b.job("j1").state == J.STOPPING


@pytest.mark.parametrize("recovering", [False, True])
def test_stop_a_job_with_no_instance_stops_it_at_once(recovering):
    b = Checked()
    b.add("j1", spec(), 0.0)
    if recovering:
        launch(b, "j1", "n1", "k1", 5, 0.0)
        b.died("j1", "k1", 1.0)
    out = b.stop("j1", 2.0)
    assert of(out, StopInstance) == [] and of(out, ReleaseSlot) == []
    assert [e.data["to"] for e in of(out, JobEvent, "job_state")] == ["stopping", "stopped"]
    assert b.job("j1").state == J.STOPPED and b.due(100.0, WHERE) == []


@pytest.mark.parametrize("alloc, expected", [(9, [ReleaseSlot(9)]), (None, [])])
def test_placed_after_a_stop_gives_the_slot_back(alloc, expected):
    b = Checked()
    b.add("j1", spec(), 0.0)
    b.due(0.0, WHERE)
    b.stop("j1", 0.5)
    assert b.placed("j1", "n1", alloc, "k1", 1.0, WHERE) == expected
    assert b.job("j1").state == J.STOPPED and b.job("j1").binding is None


def test_a_second_placement_of_a_job_already_placed_gives_its_slot_back():
    b = Checked()
    b.add("j1", spec(), 0.0)
    b.due(0.0, WHERE)
    b.placed("j1", "n1", 1, "k1", 0.0)
    assert b.placed("j1", "n2", 2, "k2", 0.1) == [ReleaseSlot(2)]
    assert b.job("j1").binding == Binding("n1", "k1", 1)


# -- no node could take it -------------------------------------------------------------------------
def test_unplaced_is_retried_after_retry_s_with_an_event():
    b = Checked()
    b.add("j1", spec(), 0.0)
    (p,) = b.due(0.0, WHERE)
    out = b.unplaced("j1", "no capacity in any pool", 0.0)
    assert out == [JobEvent("placement_failed",
                            {"job_id": "j1", "reason": "no capacity in any pool", "bundle_id": None})]
    assert b.job("j1").state == J.PENDING
    assert b.due(RETRY_S / 2, WHERE) == []
    assert [p.job_id for p in b.due(RETRY_S, WHERE)] == ["j1"]


def test_unplaced_after_a_stop_changes_nothing():
    b = Checked()
    b.add("j1", spec(), 0.0)
    b.due(0.0, WHERE)
    b.stop("j1", 0.5)
    assert b.unplaced("j1", "no capacity", 1.0) == []
    assert b.job("j1").state == J.STOPPED and b.job("j1").reason == "stopped by request"


def test_an_unplaced_recovery_keeps_its_context():
    b = Checked()
    b.add("j1", spec(on_runtime_failure="prefer_spare"), 0.0)
    launch(b, "j1", "n1", "k1", 1, 0.0)
    b.died("j1", "k1", 10.0)
    b.due(10.0, WHERE)
    b.unplaced("j1", "none", 10.0)
    (p,) = b.due(10.0 + RETRY_S, WHERE)
    assert ctx(b, p).recovering and ctx(b, p).exclude_nodes == {"n1"} and ctx(b, p).on_runtime_failure == "prefer_spare"


# -- the ceiling, standalone -----------------------------------------------------------------------
def fail_repeatedly(b: Checked, job_id: str, times: int, *, start=0.0, gap=60.0, **died_kw) -> list:
    """Place, start and kill ``job_id`` ``times`` times, ``gap`` seconds apart; all instructions."""
    out, t = [], start
    for i in range(times):
        if b.job(job_id).terminal:
            break
        out += launch(b, job_id, f"n{i % 3}", f"{job_id}@{i}", i, t)
        out += b.died(job_id, f"{job_id}@{i}", t + 1, **died_kw)
        t += gap
    return out


def test_seven_failures_in_an_hour_drop_a_non_essential_job():
    b = Checked()
    b.add("j1", spec(essential=False), 0.0)
    out = fail_repeatedly(b, "j1", 6)
    assert b.job("j1").state == J.RECOVERING and not of(out, JobEvent, "job_dropped")
    out = fail_repeatedly(b, "j1", 1, start=400.0)
    rec = b.job("j1")
    assert rec.state == J.DROPPED and rec.binding is None and "restart ceiling" in rec.reason
    (ev,) = of(out, JobEvent, "job_dropped")
    assert ev.data["job_id"] == "j1" and "restart ceiling" in ev.data["reason"]
    assert of(out, ReleaseSlot) == [ReleaseSlot(0)]  # the last instance's slot is still given back
    assert b.due(10_000.0, WHERE) == []


def test_seven_failures_in_an_hour_fail_an_essential_job():
    b = Checked()
    b.add("j1", spec(), 0.0)
    out = fail_repeatedly(b, "j1", 7)
    assert b.job("j1").state == J.FAILED
    assert not of(out, JobEvent, "job_dropped") and not of(out, JobEvent, "bundle_broken")
    assert b.due(10_000.0, WHERE) == []


def test_failures_spread_over_more_than_an_hour_keep_recovering():
    b = Checked()
    b.add("j1", spec(essential=False), 0.0)
    fail_repeatedly(b, "j1", 30, gap=601.0)
    assert b.job("j1").state == J.RECOVERING and b.job("j1").restarts_last_hour(30 * 601.0) <= 6


@pytest.mark.parametrize("conf, job_ceiling, policy, allowed", [
    ({}, 2, "avoid_spare", 2),                                                   # the job's own
    ({"prefer_spare_max_restarts_per_hour": 1}, None, "prefer_spare", 1),        # its policy's
    ({"prefer_spare_max_restarts_per_hour": 1}, None, "avoid_spare", 6),         # not the other policy's
    ({"max_restarts_per_hour": 3}, None, "avoid_spare", 3),                      # the flat one
    ({"avoid_spare_max_restarts_per_hour": 4, "max_restarts_per_hour": 1}, None, "avoid_spare", 4),
    ({"avoid_spare_max_restarts_per_hour": 4}, 0, "avoid_spare", 0),             # own 0 beats the policy's
])
def test_the_book_uses_the_ceiling_precedence(conf, job_ceiling, policy, allowed):
    b = Checked(FabricSettings.load({"failure": conf}).failure)
    b.add("j1", spec(essential=False, on_runtime_failure=policy, max_restarts_per_hour=job_ceiling), 0.0)
    fail_repeatedly(b, "j1", allowed)
    assert b.job("j1").state == (J.RECOVERING if allowed else J.PENDING)
    fail_repeatedly(b, "j1", 1, start=allowed * 60.0)
    assert b.job("j1").state == J.DROPPED


@pytest.mark.parametrize("essential, end", [(True, J.FAILED), (False, J.DROPPED)])
def test_policy_drop_ends_on_the_first_death(essential, end):
    b = Checked()
    b.add("j1", spec(on_runtime_failure="drop", essential=essential), 0.0)
    out = fail_repeatedly(b, "j1", 1)
    assert b.job("j1").state == end and len(of(out, JobEvent, "job_dropped")) == (0 if essential else 1)


@pytest.mark.parametrize("essential, end", [(True, J.FAILED), (False, J.DROPPED)])
def test_an_invalid_spec_ends_on_the_first_rejection(essential, end):
    b = Checked()
    b.add("j1", spec(essential=essential), 0.0)
    out = fail_repeatedly(b, "j1", 1, invalid_spec="channel must be a string")
    assert b.job("j1").state == end and "channel must be a string" in b.job("j1").reason
    (ev,) = of(out, JobEvent, "job_rejected")
    assert ev.data == {"job_id": "j1", "reason": "channel must be a string", "bundle_id": None}


def test_adding_a_job_id_twice_does_not_forget_the_running_one():
    b = Checked()
    b.add("j1", spec(), 0.0)
    launch(b, "j1", "n1", "k1", 5, 0.0)
    with pytest.raises(InvalidSpecError) as err:
        b.add("j1", spec("other"), 1.0)
    assert err.value.field == "job_id"
    assert b.job("j1").binding == Binding("n1", "k1", 5)


def test_a_job_waiting_for_a_node_is_tried_again_as_soon_as_one_joins():
    b = Checked()
    b.add("j1", spec(), 0.0)
    (p,) = b.due(0.0, WHERE)
    b.unplaced("j1", "no capacity: waiting for cpu-box (provisioning)", 0.0)
    assert b.due(0.5, WHERE) == []  # not before RETRY_S ...
    assert b.capacity_joined(0.5) == 1  # ... unless a node joins
    (again,) = b.due(0.5, WHERE)
    assert again.job_id == "j1"
    assert b.capacity_joined(0.6) == 0  # nothing waits now (it is due already)


# -- single-use jobs -------------------------------------------------------------------------------
def single_use(**kw):
    return spec(requirement=Requirement(exclusive=True), single_use=True, **kw)


def test_a_stopped_single_use_job_ends_its_node_before_its_slot_goes_back():
    b = Checked()
    b.add("j1", single_use(), 0.0)
    launch(b, "j1", "n1", "k1", 5, 0.0)
    assert of(b.stop("j1", 1.0), EndNode) == []  # not while its instance still runs
    out = b.stopped("j1", "k1", 2.0)
    assert of(out, EndNode) == [EndNode("j1", "n1")] and b.job("j1").state == J.STOPPED
    assert out.index(EndNode("j1", "n1")) < out.index(ReleaseSlot(5))  # nothing else lands there meanwhile


@pytest.mark.parametrize("policy, essential, end", [("drop", False, J.DROPPED), ("drop", True, J.FAILED),
                                                    ("avoid_spare", True, J.FAILED)])
def test_a_single_use_job_that_ends_for_good_ends_the_node_it_died_on(policy, essential, end):
    b = Checked()
    b.add("j1", single_use(on_runtime_failure=policy, essential=essential, max_restarts_per_hour=0), 0.0)
    out = fail_repeatedly(b, "j1", 1)
    assert b.job("j1").state == end and of(out, EndNode) == [EndNode("j1", "n0")]


@pytest.mark.parametrize("preempted", [False, True])
def test_a_single_use_job_that_recovers_keeps_the_node_it_died_on(preempted):
    b = Checked()
    b.add("j1", single_use(on_runtime_failure="prefer_spare"), 0.0)
    launch(b, "j1", "n1", "k1", 5, 0.0)
    out = b.died("j1", "k1", 1.0, reason="actor died", preempted=preempted)
    out += b.node_lost("n1", 1.5)
    assert b.job("j1").state == J.RECOVERING and of(out, EndNode) == []
    (p,) = b.due(10.0, WHERE)
    out = b.placed("j1", "n2", 6, "k2", 10.0, WHERE) + b.started("j1", "k2", 10.0)
    assert of(out, EndNode) == [] and b.job("j1").binding.node_id == "n2"
    out = b.stop("j1", 11.0) + b.stopped("j1", "k2", 12.0)  # it ends on the node it was re-placed on
    assert of(out, EndNode) == [EndNode("j1", "n2")]


def test_a_single_use_job_that_migrated_keeps_its_source_node():
    b = Checked()
    b.add("j1", single_use(), 0.0)
    launch(b, "j1", "n1", "k1", 5, 0.0)
    out = b.migrating("j1", 1.0, "moved") + b.migrated("j1", "n2", "k2", 6, 2.0, "moved")
    assert of(out, EndNode) == [] and b.job("j1").binding == Binding("n2", "k2", 6)


def test_a_single_use_job_stopped_with_no_instance_ends_no_node():
    b = Checked()
    b.add("j1", single_use(), 0.0)
    launch(b, "j1", "n1", "k1", 5, 0.0)
    b.died("j1", "k1", 1.0)  # recovering: its node was kept, and it has none now
    assert of(b.stop("j1", 2.0), EndNode) == [] and b.job("j1").state == J.STOPPED


@pytest.mark.parametrize("how", ["stopped", "dropped", "failed", "recovered"])
def test_a_job_that_is_not_single_use_never_ends_its_node(how):
    b = Checked()
    b.add("j1", spec(requirement=Requirement(exclusive=True), essential=how != "dropped",
                     on_runtime_failure="avoid_spare" if how == "recovered" else "drop"), 0.0)
    launch(b, "j1", "n1", "k1", 5, 0.0)
    out = b.stop("j1", 1.0) + b.stopped("j1", "k1", 2.0) if how == "stopped" else b.died("j1", "k1", 1.0)
    assert b.job("j1").state == {"stopped": J.STOPPED, "dropped": J.DROPPED, "failed": J.FAILED,
                                 "recovered": J.RECOVERING}[how]
    assert of(out, EndNode) == []

"""``with_scheduler_view``: the spare tags, the slot cap and the jobs bound to each node come from
the scheduler's fleet and job book; a node the scheduler does not hold keeps its record's tags."""

from __future__ import annotations

from dataclasses import replace

from fabric.core.jobs.book import Binding, JobStatus
from fabric.core.jobs.states import JobState
from fabric.core.lifecycle import NodeStatus
from fabric.core.node_view import with_scheduler_view
from placement_helpers import node


def test_a_consumed_spare_is_no_spare_and_its_jobs_are_listed() -> None:
    launched = [node("s1", spare=True), node("s2", spare=True), node("n1"), node("gone", spare=True, status=NodeStatus.OFFLINE)]
    fleet = [replace(launched[0], spare=False), replace(launched[1], spare_reserved_for=frozenset({"enc"}), spare_exclusive=True),
             launched[2]]
    jobs = [JobStatus("j1", "enc", JobState.RUNNING, binding=Binding("s1", "k1")),
            JobStatus("j2", "enc", JobState.STARTING, binding=Binding("n1", "k2")),
            JobStatus("j3", "enc", JobState.RUNNING, binding=Binding("n1", "k3")),
            JobStatus("j4", "enc", JobState.STOPPED)]
    out = {r.node_id: r for r in with_scheduler_view(launched, fleet, jobs)}
    assert [r.node_id for r in with_scheduler_view(launched, fleet, jobs)] == ["s1", "s2", "n1", "gone"]  # same order
    assert (out["s1"].spare, out["s1"].jobs) == (False, frozenset({"j1"}))
    assert (out["s2"].spare, out["s2"].spare_reserved_for, out["s2"].spare_exclusive) == (True, frozenset({"enc"}), True)
    assert out["n1"].jobs == frozenset({"j2", "j3"}) and not out["n1"].spare
    assert out["gone"].spare and out["gone"].jobs == frozenset() and out["gone"].status is NodeStatus.OFFLINE
    assert launched[0].spare  # the inputs are left as they were


def test_the_slot_cap_is_the_schedulers() -> None:
    launched = [node("low", slots=8), node("raised", slots=8, max_concurrent_tasks=2), node("off", slots=8)]
    fleet = [replace(launched[0], max_concurrent_tasks=4), replace(launched[1], max_concurrent_tasks=8)]
    out = {r.node_id: r for r in with_scheduler_view(launched, fleet, [])}
    assert (out["low"].max_concurrent_tasks, out["low"].slots) == (4, 4)  # a vertical start cap
    assert (out["raised"].max_concurrent_tasks, out["raised"].slots) == (8, 8)  # raised since
    assert (out["off"].max_concurrent_tasks, out["off"].slots) == (None, 8)  # not in the fleet: its record's


def test_without_a_fleet_or_jobs_the_records_are_unchanged_but_for_empty_jobs() -> None:
    recs = [node("a", spare=True, running=2), node("b")]
    out = with_scheduler_view(recs, [], [])
    assert [(r.node_id, r.spare, r.running, r.jobs) for r in out] == [("a", True, 2, frozenset()), ("b", False, 0, frozenset())]


def test_every_node_lists_offline_and_dead_records_with_the_live_view_where_the_scheduler_has_one() -> None:
    from fabric.core.node_view import every_node

    registry = [node("a", status=NodeStatus.ACTIVE, last_seen=50.0), node("off", status=NodeStatus.OFFLINE, last_seen=10.0),
                node("dead", status=NodeStatus.DEAD)]
    live_a = node("a", running=3, spare=True, status=NodeStatus.ACTIVE, last_seen=40.0)
    launching = node("new", status=NodeStatus.ACTIVE)
    jobs = [JobStatus("j", "enc", JobState.RUNNING, binding=Binding("a", "k"))]
    out = every_node(registry, [live_a, launching], jobs)
    assert [(r.node_id, r.status, r.last_seen) for r in out] == [
        ("a", NodeStatus.ACTIVE, 50.0), ("off", NodeStatus.OFFLINE, 10.0), ("dead", NodeStatus.DEAD, None), ("new", NodeStatus.ACTIVE, None)]
    assert (out[0].running, out[0].spare, out[0].jobs) == (3, True, frozenset({"j"}))  # the scheduler's live record


def test_read_statuses_takes_a_list_or_a_comma_list_and_names_the_field_for_an_unknown_one() -> None:
    import pytest

    from fabric.core.errors import MessageError
    from fabric.core.node_view import read_statuses

    assert read_statuses(None) is None and read_statuses([]) is None and read_statuses("") is None
    assert read_statuses("offline, DEAD") == frozenset({"offline", "dead"}) == read_statuses(["dead", "offline"])
    assert read_statuses(["offline,dead"]) == frozenset({"offline", "dead"})  # a repeated parameter may hold a list too
    with pytest.raises(MessageError) as caught:
        read_statuses(["active", "gone"], "statuses")
    assert caught.value.field == "statuses" and "gone" in str(caught.value)

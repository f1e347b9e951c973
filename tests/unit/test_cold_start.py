"""A store another Ray cluster wrote (``fabric.core.jobs.inherit``): which jobs a new cluster holds,
the one line that says so, and their release; pure, on a ``JobBook``."""

from __future__ import annotations

from fabric.core.jobs import JobSpec, JobState
from fabric.core.jobs.book import Binding, JobBook, JobEvent
from fabric.core.jobs.inherit import (
    ClusterStamp, Inherited, age_text, held_now, hold, inherited_line, is_other_cluster, release, restamp, to_hold,
)
from fabric.core.placement import Requirement
from fabric.core.settings import FabricSettings

SPEC = JobSpec("enc", Requirement(min_tier="cpu_ffmpeg"))
OLD = ClusterStamp("3f9c1e2a7b6d5c4e3f2a1b0c9d8e7f6a", "127.0.0.6:6379", first_seen=1000.0, last_seen=6460.0)
NOW = 10_000.0


def book_with_every_state() -> JobBook:
    """Jobs as a cluster that died left them: running, starting, pending, dormant, stopping, stopped."""
    settings = FabricSettings()
    book = JobBook(settings.failure, settings)
    for i, name in enumerate(["run", "start", "wait", "manual", "stopping", "done"]):
        book.add(name, SPEC, 100.0 + i, dormant=name == "manual")
    for name, state in [("run", JobState.RUNNING), ("start", JobState.STARTING), ("stopping", JobState.STOPPING),
                        ("done", JobState.STOPPED)]:
        rec = book.jobs[name]
        rec.state = state
        if state != JobState.STOPPED:
            rec.binding = Binding("old-node", f"primary@{name}", 7)
    book.dirty.clear()
    return book


def test_only_a_store_stamped_by_another_cluster_is_another_clusters():
    assert is_other_cluster(OLD, "a-new-id")
    assert not is_other_cluster(OLD, OLD.cluster_id)  # a scheduler or fault-tolerant head restart
    assert not is_other_cluster(None, "a-new-id")  # an older store, with no stamp: the same cluster
    assert not is_other_cluster(OLD, None)  # the running id not known: nothing is decided on it


def test_the_stamp_keeps_first_seen_for_the_same_cluster_and_starts_anew_for_another():
    same = restamp(OLD, OLD.cluster_id, "127.0.0.6:6379", NOW)
    assert (same.first_seen, same.last_seen) == (OLD.first_seen, NOW)
    new = restamp(OLD, "b" * 56, "127.0.0.6:6379", NOW)
    assert new == ClusterStamp("b" * 56, "127.0.0.6:6379", NOW, NOW)
    assert restamp(None, "b", "h:1", NOW) == ClusterStamp("b", "h:1", NOW, NOW)
    assert ClusterStamp.from_json(new.to_json()) == new and ClusterStamp.from_json({"cluster_id": ""}) is None
    assert ClusterStamp.from_json(None) is None and ClusterStamp.from_json({"cluster_id": "x", "last_seen": "?"}) is None


def test_every_job_that_has_not_ended_is_held_unbound_dormant_and_named_after_the_old_cluster():
    book = book_with_every_state()
    found = to_hold(list(book.jobs.values()), OLD, NOW)
    assert found.jobs == ("run", "start", "wait", "manual") and found.dormant == ("manual",)
    assert found.stopped == ("stopping",)
    out = hold(book, found, NOW)
    j = book.jobs
    assert [j[n].state for n in ("run", "start", "wait", "manual", "stopping", "done")] == [
        JobState.RECOVERING, JobState.RECOVERING, JobState.PENDING, JobState.PENDING, JobState.STOPPED, JobState.STOPPED]
    assert all(j[n].binding is None and j[n].dormant for n in found.jobs)
    for n in found.jobs:
        assert j[n].reason == ("held: inherited from another Ray cluster (id 3f9c1e2a7b6d…, head 127.0.0.6:6379, "
                               "last seen 59 m ago); fabric up --resume resumes it")
    assert j["stopping"].binding is None and "ended with the old cluster" in j["stopping"].reason
    assert book.due(NOW + 60, lambda _n: None) == []  # nothing is placed
    assert book.validate_state() == []
    assert book.dirty >= {"run", "start", "wait", "manual", "stopping"}
    kinds = [e.kind for e in out if isinstance(e, JobEvent)]
    assert kinds.count("job_state") == 3 and kinds[-1] == "jobs_inherited"


def test_resuming_places_the_held_jobs_but_a_stopped_one_and_keeps_a_dormant_one_dormant():
    book = book_with_every_state()
    found = to_hold(list(book.jobs.values()), OLD, NOW)
    hold(book, found, NOW)
    book.stop("start", NOW + 1)  # stopped while held: stays stopped
    assert held_now(book, found) == ("run", "wait", "manual")
    resumed, events = release(book, found, NOW + 2)
    assert resumed == ["run", "wait", "manual"]
    assert [e.kind for e in events] == ["jobs_resumed"]
    assert book.jobs["manual"].dormant and not book.jobs["run"].dormant
    assert sorted(p.job_id for p in book.due(NOW + 2, lambda _n: None)) == ["run", "wait"]
    assert book.jobs["start"].state == JobState.STOPPED
    assert held_now(book, found) == ()


def test_the_line_says_which_cluster_how_long_ago_and_how_many_jobs():
    found = Inherited(OLD, ("a", "b", "c"))
    assert inherited_line(found, NOW) == ("found the store of another cluster (id 3f9c1e2a7b6d…, head 127.0.0.6:6379, "
                                          "last seen 59 m ago): 3 jobs held; fabric up --resume resumes them")
    assert inherited_line(Inherited(OLD, ("a",), resumed=True), NOW).endswith("): 1 job resumed")
    assert inherited_line(Inherited(OLD), NOW).endswith("): no job to hold")
    assert inherited_line(None, NOW) == ""
    assert Inherited.from_json(found.to_json()) == found and Inherited.from_json({"jobs": []}) is None


def test_ages_read_at_a_glance():
    assert [age_text(s) for s in (-3, 42, 3540, 3 * 3600, 3 * 86400)] == ["0 s", "42 s", "59 m", "3 h", "3 d"]

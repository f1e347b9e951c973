"""A bundle's resilience events (``onResilienceDegraded``): a backup placed in a failure
domain its policy forbids sharing, and a primary on interruptible capacity with no durable backup."""

from fabric.core.jobs import JobBook, JobSpec
from fabric.core.jobs.book import JobEvent
from fabric.core.jobs.bundles import Bundle, BundleJob, ResiliencePolicy
from fabric.core.settings import FabricSettings

A, B, SPOT = "aa" * 28, "bb" * 28, "cc" * 28
ZONES = {A: ("z1", "c1"), B: ("z2", "c1"), SPOT: ("z3", "c1")}


def where(node_id):
    return ZONES.get(node_id)


def book_with(bundle: Bundle) -> JobBook:
    book = JobBook(FabricSettings().failure)
    book.interruptible = lambda node_id: node_id == SPOT
    book.add_bundle(bundle.bundle_id, bundle)
    for rj in bundle.expand():
        book.add(f"{rj.replica}", rj.spec, 0.0, bundle_id=bundle.bundle_id, replica=rj.replica)
    return book


def degraded(out) -> list[dict]:
    return [i.data for i in out if isinstance(i, JobEvent) and i.kind == "resilience_degraded"]


def test_a_backup_on_its_primarys_node_names_the_flag_it_broke():
    book = book_with(Bundle(bundle_id="b", resilience=ResiliencePolicy(same_node="forbid", same_zone="allow"),
                            jobs=[BundleJob(name="enc")]))
    assert degraded(book.placed("0", A, 1, "primary@1", 0.0, where)) == []
    ev = degraded(book.placed("1", A, 2, "backup@1", 0.0, where))
    assert ev and ev[0]["violated"] == ["same_node"] and not ev[0]["primary_interruptible"]


def test_a_backup_elsewhere_raises_nothing():
    book = book_with(Bundle(bundle_id="b", resilience=ResiliencePolicy(), jobs=[BundleJob(name="enc")]))
    book.placed("0", A, 1, "primary@1", 0.0, where)
    assert degraded(book.placed("1", B, 2, "backup@1", 0.0, where)) == []


def test_a_primary_on_spot_capacity_without_a_durable_backup_is_reported():
    alone = book_with(Bundle(bundle_id="b", jobs=[BundleJob(name="enc")]))  # no backup at all
    ev = degraded(alone.placed("0", SPOT, 1, "primary@1", 0.0, where))
    assert ev and ev[0]["primary_interruptible"] and ev[0]["violated"] == []
    covered = book_with(Bundle(bundle_id="c", resilience=ResiliencePolicy(), jobs=[BundleJob(name="enc")]))
    covered.placed("1", B, 2, "backup@1", 0.0, where)  # a durable backup is already there
    assert degraded(covered.placed("0", SPOT, 1, "primary@1", 0.0, where)) == []


def test_standalone_jobs_have_no_resilience_events():
    book = JobBook(FabricSettings().failure)
    book.interruptible = lambda node_id: True
    book.add("j", JobSpec("solo"), 0.0)
    assert degraded(book.placed("j", SPOT, 1, "primary@1", 0.0, where)) == []

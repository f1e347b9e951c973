"""A co-location group's first placement sizes its node for the whole group: while none of the group
is placed, its first job takes a node with the CPUs, memory and slots free for all of them (or has
one provisioned of a shape that fits them all); once one is placed, the rest follow it and each
reserves only its own. Both engines decide the same (``both``); the job book hands the group's
needs to the engine for the first mover only."""

from __future__ import annotations

from fabric.core.jobs import JobBook, JobState
from fabric.core.jobs.bundles import Bundle, BundleJob
from fabric.core.placement import Peer, PlacementContext, Requirement
from fabric.core.settings import FabricSettings

from placement_helpers import both, fleet, node

REQ = Requirement(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=1.0, memory_mib=512)
GROUP = PlacementContext(job="a", co_locate_with=("b", "c"), group_cpus=3.5, group_memory_mib=1536, group_jobs=3)


def test_the_first_of_a_group_takes_a_node_the_whole_group_fits():
    small = node("small", cpus=2, slots=4)
    assert both(fleet(small), REQ, PlacementContext(job="a")).node_id == "small"  # the job alone fits it
    assert both(fleet(small), REQ, GROUP).status != "placed"  # its group (3.5 CPUs) does not
    first = both(fleet(small, node("big", cpus=8, slots=8)), REQ, GROUP)
    assert first.node_id == "big"
    assert first.allocation.cpus == 1.0 and first.allocation.memory_mib == 512  # it reserves its own share only


def test_slots_count_for_each_job_of_the_group():
    two_free = node("two-free", cpus=16, slots=3, running=1)
    assert both(fleet(two_free), REQ, PlacementContext(job="a")).node_id == "two-free"
    assert both(fleet(two_free), REQ, GROUP).status != "placed"  # two slots free, three jobs to hold
    assert both(fleet(two_free, node("roomy", cpus=16, slots=8, running=4)), REQ, GROUP).node_id == "roomy"


def test_once_a_peer_is_placed_the_rest_follow_it_with_their_own_needs():
    f = fleet(node("small", cpus=2, slots=4, running=1, reserved_cpus=0.5), node("big", cpus=8, slots=8))
    follower = PlacementContext(job="b", co_locate_with=("a", "c"), peers=(Peer("a", "small"),),
                                group_cpus=3.5, group_memory_mib=1536, group_jobs=3)
    assert follower.need(REQ) == (1.0, 512, 1)
    assert both(f, REQ, follower).node_id == "small"


def test_a_provisioned_node_is_of_a_shape_the_whole_group_fits():
    settings = FabricSettings.load({"pools": [{"name": "default", "tiers": [
        {"name": "burst", "scale_out": "elastic", "provider": "local", "max_nodes": 4, "candidate_shapes": [
            {"name": "c2", "tier": "cpu_ffmpeg", "num_cpus": 2, "memory_mib": 4096},
            {"name": "c8", "tier": "cpu_ffmpeg", "num_cpus": 8, "memory_mib": 16384}]}]}]})
    f = fleet(settings=settings)
    assert both(f, REQ, PlacementContext(job="a")).shape.name == "c2"
    d = both(f, REQ, GROUP)
    assert d.status == "provision" and d.shape.name == "c8"


def bundle_book() -> tuple[JobBook, dict[str, str]]:
    settings = FabricSettings.load({})
    bundle = Bundle(bundle_id="chan", jobs=[
        BundleJob(name="a", co_locate_with=["b"], requirement={"min_tier": "cpu_ffmpeg", "num_cpus": 1.0}),
        BundleJob(name="b", requirement={"min_tier": "cpu_ffmpeg", "num_cpus": 2.0, "memory_mib": 1024}),
        BundleJob(name="solo", requirement={"min_tier": "cpu_ffmpeg", "num_cpus": 0.5})])
    book = JobBook(settings.failure, settings)
    book.add_bundle("chan", bundle)
    ids = {}
    for rj in bundle.expand(settings=settings):
        ids[rj.name] = f"chan-{rj.name}"
        book.add(ids[rj.name], rj.spec, 0.0, bundle_id="chan", replica=rj.replica)
    return book, ids


def test_the_book_hands_the_group_needs_to_its_first_mover_only():
    book, ids = bundle_book()
    where = lambda node_id: (None, None)  # noqa: E731
    first = book.context(book.job(ids["a"]), where)
    assert (first.group_jobs, first.group_cpus, first.group_memory_mib) == (2, 3.0, 1024)
    solo = book.context(book.job(ids["solo"]), where)
    assert solo.group_jobs == 0 and solo.need(book.job(ids["solo"]).spec.requirement)[2] == 1
    book.placed(ids["a"], "n1", 1, "primary@1", 1.0)  # the first mover placed: the rest follow it
    follower = book.context(book.job(ids["b"]), where)
    assert follower.group_jobs == 0 and follower.co_locate_nodes == {"n1"}
    assert book.job(ids["a"]).state == JobState.STARTING


def test_admission_sizes_the_first_of_a_group_as_placement_does():
    from fabric.core.jobs.validation import place_dry_run

    settings = FabricSettings.load({})
    bundle = Bundle(bundle_id="chan", jobs=[
        BundleJob(name="a", co_locate_with=["b"], requirement={"min_tier": "cpu_ffmpeg", "floor": "cpu_ffmpeg", "num_cpus": 1.0}),
        BundleJob(name="b", requirement={"min_tier": "cpu_ffmpeg", "floor": "cpu_ffmpeg", "num_cpus": 2.0})])
    f = fleet(node("a-small", cpus=2, slots=4), node("z-big", cpus=8, slots=8), settings=settings)
    alone = Bundle(bundle_id="solo", jobs=[bundle.jobs[0].model_copy(update={"co_locate_with": []})])
    assert place_dry_run(alone, settings, f, 0, "a").node_id == "a-small"  # a alone fits the small node
    assert place_dry_run(bundle, settings, f, 0, "a").node_id == "z-big"  # a and b together only the big one

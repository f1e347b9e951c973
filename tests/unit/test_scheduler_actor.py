"""The scheduler actor's logic without Ray (issue 13): ``Scheduler`` (the class ``SchedulerActor``
wraps) driven with a fake fleet feed and a recording metrics sink. Its sync turns feed changes
into stimuli for the core, and it carries out what the core says: wake or fail waiting calls,
free a slot nobody claimed, write cordons and drains to the registry in order."""

import asyncio
from types import SimpleNamespace

import pytest

from actors.fleet_feed import FleetChange
from actors.scheduler import Scheduler, SchedulerActor, stimulus_for
from fabric import CapacityError, ComputeTier
from fabric.core.errors import MessageError
from fabric.core.placement import Requirement
from fabric.core.scheduling import NodeChanged, NodeJoined, NodeLost
from fabric.rayio.metrics import RecordingMetrics

from test_scheduling import APU_DOWN_TO_CPU, Clock, rec

CPU_ONLY = Requirement(min_tier="cpu_ffmpeg", num_cpus=1)


class FakeFeed:
    """What ``FleetFeed`` offers the scheduler: ``poll`` returns the next batch of changes."""

    def __init__(self, *batches):
        self.batches = list(batches)
        self.outsiders = {}
        self.writes = []
        self.causes = []

    async def poll(self):
        return self.batches.pop(0) if self.batches else []

    async def set_cordoned(self, node_id, cordoned, *, stimulus_id=None, reason=None):
        self.writes.append(("set_cordoned", node_id, cordoned))
        self.causes.append((stimulus_id, reason))

    async def mark_draining(self, node_id, *, stimulus_id=None, reason=None):
        self.writes.append(("mark_draining", node_id))
        self.causes.append((stimulus_id, reason))


def joined(node_id, tier, slots=2):
    r = rec(node_id, tier, slots)
    return FleetChange("joined", node_id, r)


def scheduler(*batches, clock=None):
    feed = FakeFeed(*batches)
    return Scheduler(feed=feed, metrics=RecordingMetrics(), clock=clock or Clock(), run_loop=False), feed


def run(coro):
    return asyncio.run(coro)


def test_the_ray_actor_is_the_plain_class():
    assert issubclass(SchedulerActor.__ray_actor_class__, Scheduler)


def test_sync_turns_feed_changes_into_the_cores_fleet():
    sched, feed = scheduler([joined("cuda", "gpu_cuda"), joined("cpu", "cpu_ffmpeg")])
    feed.outsiders = {"gone": ComputeTier.CPU_FFMPEG}

    async def go():
        await sched._sync()
        assert sorted(r.node_id for r in sched.core.fleet.records()) == ["cpu", "cuda"]
        assert sched.core.outsiders == {"gone": ComputeTier.CPU_FFMPEG}
        feed.batches.append([FleetChange("changed", "cuda", None, {"tier": ComputeTier.CPU_FFMPEG}),
                             FleetChange("lost", "cpu")])
        assert await sched.sync_now() == 1
        assert sched.core.node("cuda").tier is ComputeTier.CPU_FFMPEG  # demoted, still a member

    run(go())
    kinds = [e["kind"] for e in sched.stimulus_log()]
    assert kinds == ["outsiders-seen", "node-joined", "node-joined", "node-changed", "node-lost"]  # outsiders sent once
    gauges = sched.metrics_sink.gauges
    assert gauges[("fabric_nodes", (("tier", "cpu_ffmpeg"),))] == 1
    assert sched._ready.is_set()


def test_a_feed_change_keeps_the_stimulus_id_and_cause_of_what_caused_it():
    change = SimpleNamespace(kind="changed", node_id="n", record=None, fields={"cordoned": True},
                             cause="operator cordon", stimulus_id="registry-apply-7")
    s = stimulus_for(change)
    assert isinstance(s, NodeChanged) and s.stimulus_id == "registry-apply-7" and s.cause == "operator cordon"
    assert s.changes == {"cordoned": True}
    fresh = stimulus_for(FleetChange("lost", "n"))  # no id from the feed: a fresh one
    assert isinstance(fresh, NodeLost) and fresh.stimulus_id.startswith("feed-")
    assert isinstance(stimulus_for(joined("a", "relay")), NodeJoined)
    assert stimulus_for(SimpleNamespace(kind="renamed", node_id="n")) is None


def test_a_queued_call_wakes_when_a_node_joins_through_the_feed():
    sched, feed = scheduler([joined("cpu", "cpu_ffmpeg", slots=1)])

    async def go():
        await sched._sync()
        first = await sched.place_task(CPU_ONLY)
        assert first.status == "assigned"
        waiting = asyncio.ensure_future(sched.wait_for_placement("w1", CPU_ONLY, timeout_s=60))
        await asyncio.sleep(0)
        assert sched.core.queue_depth == 1
        feed.batches.append([joined("cpu2", "cpu_ffmpeg")])
        await sched._sync()
        got = await waiting
        assert (got.status, got.node_id) == ("assigned", "cpu2") and got.allocation_id is not None
        sched.release([first.allocation_id, got.allocation_id])

    run(go())
    assert sched.core.queue_depth == 0 and sched.core.running_on("cpu2") == 0
    assert sched.metrics_sink.counters[("fabric_placements", (("outcome", "attempted"),))] == sched.metrics()["placements_attempted"] == 2


def test_a_slot_placed_for_a_caller_that_left_is_freed():
    sched, feed = scheduler([joined("cpu", "cpu_ffmpeg", slots=1)])

    async def go():
        await sched._sync()
        await sched.place_task(CPU_ONLY)
        waiting = asyncio.ensure_future(sched.wait_for_placement("w1", CPU_ONLY, timeout_s=60))
        await asyncio.sleep(0)
        waiting.cancel()  # its future is cancelled now; its coroutine has not run its cleanup yet
        feed.batches.append([joined("cpu2", "cpu_ffmpeg")])
        await sched._sync()  # places w1 on cpu2: nobody claims it
        assert sched.core.running_on("cpu2") == 0
        with pytest.raises(asyncio.CancelledError):
            await waiting

    run(go())
    log = [e["kind"] for e in sched.stimulus_log()]
    assert "placement-unclaimed" in log and sched.core.counters["released"] == 1


def test_a_queued_call_fails_at_its_deadline_on_a_tick():
    clock = Clock()
    sched, feed = scheduler([joined("cpu", "cpu_ffmpeg", slots=1)], clock=clock)

    async def go():
        await sched._sync()
        await sched.place_task(CPU_ONLY)
        waiting = asyncio.ensure_future(sched.wait_for_placement("late", CPU_ONLY, timeout_s=5))
        await asyncio.sleep(0)
        clock.t += 6
        await sched._step()
        with pytest.raises(CapacityError) as err:
            await waiting
        assert err.value.reason == "queue timeout"

    run(go())


def test_a_hard_requirement_no_node_serves_fails_the_call():
    sched, _ = scheduler([joined("cpu", "cpu_ffmpeg")])

    async def go():
        await sched._sync()
        with pytest.raises(CapacityError):
            await sched.place_task(Requirement(min_tier="gpu_cuda", fallback=False))
        with pytest.raises(CapacityError):
            await sched.lease("l1", Requirement(min_tier="gpu_cuda", fallback=False))
        grant = await sched.lease("l2", APU_DOWN_TO_CPU, want=1)
        assert [s.node_id for s in grant.slots] == ["cpu"]

    run(go())


def test_a_drain_writes_the_cordon_then_marks_draining_once_the_work_ends():
    sched, feed = scheduler([joined("cpu", "cpu_ffmpeg")])

    async def go():
        await sched._sync()
        a = await sched.place_task(CPU_ONLY)
        assert await sched.drain("cpu", 300) == "cpu"
        assert feed.writes == [("set_cordoned", "cpu", True)]  # written before drain() answered
        drain_id = sched.stimulus_log()[-1]["stimulus_id"]
        assert feed.causes == [(drain_id, "operator drain")]  # the registry learns what caused it
        sched.release([a.allocation_id])
        await asyncio.sleep(0.01)
        assert feed.writes[-1] == ("mark_draining", "cpu")
        release_id = sched.stimulus_log()[-1]["stimulus_id"]
        assert feed.causes[-1] == (release_id, "drained: no fabric work left")
        assert await sched.uncordon("cpu") == "cpu"
        assert feed.writes[-1] == ("set_cordoned", "cpu", False)
        await sched.cordon("cpu")
        assert feed.writes[-1] == ("set_cordoned", "cpu", True)

    run(go())
    drain = sched.core.drains.recent()[0]
    assert [p.value for p, _ in drain.history] == ["requested", "cordoned", "waiting", "handed_off"]


def test_an_operator_call_names_a_node_by_name_or_id():
    sched, _ = scheduler([joined("node-id-1", "cpu_ffmpeg")])

    async def go():
        await sched._sync()
        assert await sched.cordon("node-id-1") == "node-id-1"
        from fabric.core.errors import NodeNotFoundError
        with pytest.raises(NodeNotFoundError):
            await sched.cordon("nope")

    run(go())


def test_spilled_calls_are_tallied_per_ray_job_run_or_refused_and_only_run_ones_count_as_placements():
    """A worker's report of spilled calls names its Ray job; the job's driver waits at exit until the
    scheduler has seen every call it spilled (``spilled_seen``). Refused calls are seen, not placed."""
    sched, _ = scheduler()
    sched.report_calls(3, 1, "02000000")
    sched.report_calls(0, 0, "02000000", 2)  # two refused past their queue deadline
    sched.report_calls(1, 0, "03000000")
    sched.report_calls(4, 2)  # a driver's own calls on leased slots: no job named
    assert (sched.spilled_seen("02000000"), sched.spilled_seen("03000000"), sched.spilled_seen("ff")) == (5, 1, 0)
    counters = sched.metrics()
    assert counters["placements_succeeded"] == 8 and counters["fallbacks"] == 3
    with pytest.raises(MessageError, match="job_id"):
        sched.report_calls(1, 0, "")
    with pytest.raises(MessageError, match="refused"):
        sched.report_calls(1, 0, "02000000", -1)

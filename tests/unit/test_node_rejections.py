"""Nodes that keep failing to start jobs, no Ray: ``Strikes`` (pure) marks a node unhealthy after
``escalation_count`` rejections inside ``window_s``, clears it when a job runs there or once the
cooldown has passed; the scheduler (``actors.node_strikes.NodeStrikes``) writes that into its fleet,
so placement leaves the node out, and into the event log (``node_unhealthy`` / ``node_healthy``);
a node that comes back into the fleet while marked stays marked; the settings are checked."""

from __future__ import annotations

import asyncio

import pytest

from actors.fleet_feed import FleetChange
from actors.jobs import JobRunner
from actors.scheduler import Scheduler
from fabric.core.errors import SettingsError
from fabric.core.placement import PlacementContext, Requirement
from fabric.core.scheduling.rejections import Marked, Strikes
from fabric.core.settings import FabricSettings
from fabric.core.settings_rejections import RejectionSettings
from fabric.rayio.metrics import RecordingMetrics
from fabric.store.jobs import JobStore

from test_job_runner import FakeLauncher
from test_scheduler_actor import FakeFeed
from test_scheduling import Clock, rec

CPU = Requirement(min_tier="cpu_ffmpeg", num_cpus=1)


# -- the counting (pure) -----------------------------------------------------------------------------------
def test_the_third_rejection_inside_the_window_marks_the_node_and_no_sooner():
    s = Strikes(RejectionSettings())
    assert s.rejected("n1", 100.0) is None and s.rejected("n1", 101.0) is None
    assert s.rejected("n2", 101.5) is None  # another node's count is its own
    assert s.rejected("n1", 104.0) == Marked("n1", 3, 5.0, 704.0)
    assert s.is_unhealthy("n1") and not s.is_unhealthy("n2")
    assert s.rejected("n1", 104.5) is None  # marked already: no second mark


def test_rejections_further_apart_than_the_window_never_add_up():
    s = Strikes(RejectionSettings(escalation_count=3, window_s=5.0))
    for t in (0.0, 4.0, 8.0, 12.0, 16.0):  # never three inside 5 s
        assert s.rejected("n1", t) is None
    assert not s.is_unhealthy("n1")
    assert s.rejected("n1", 19.0) is None
    assert s.rejected("n1", 20.0) is not None  # 16, 19, 20


def test_a_job_that_runs_clears_the_mark_and_the_count_and_the_cooldown_ends_it_too():
    s = Strikes(RejectionSettings(escalation_count=2, window_s=10.0, unhealthy_cooldown_s=60.0))
    s.rejected("n1", 0.0)
    assert s.ran("n1") is False  # not marked: nothing to clear, but the count starts over
    assert s.rejected("n1", 1.0) is None
    assert s.rejected("n1", 2.0) is not None
    assert s.ran("n1") is True and not s.is_unhealthy("n1")
    s.rejected("n2", 10.0), s.rejected("n2", 11.0)
    assert s.expired(70.9) == [] and s.expired(71.0) == ["n2"] and not s.is_unhealthy("n2")
    s.rejected("n3", 0.0), s.rejected("n3", 0.5)
    s.forget("n3")
    assert not s.is_unhealthy("n3") and s.expired(1e9) == []


def test_the_settings_section_is_checked_and_named():
    assert FabricSettings.load({}).rejections == RejectionSettings()
    got = FabricSettings.load({"rejections": {"escalation_count": 5, "window_s": 30, "unhealthy_cooldown_s": 0}}).rejections
    assert (got.escalation_count, got.window_s, got.unhealthy_cooldown_s) == (5, 30.0, 0.0)
    for bad in ({"escalation_count": 0}, {"window_s": 0}, {"unhealthy_cooldown_s": -1}, {"escalation_count": "x"},
                {"retries": 2}):
        with pytest.raises(SettingsError) as info:
            FabricSettings.load({"rejections": bad})
        assert "rejections." in str(info.value)


# -- on the scheduler ----------------------------------------------------------------------------------------
def scheduler(tmp_path, settings=None):
    clock = Clock()
    feed = FakeFeed([FleetChange("joined", "bad", rec("bad", "cpu_ffmpeg")), FleetChange("joined", "good", rec("good", "cpu_ffmpeg"))])
    sched = Scheduler(settings or {}, feed=feed, metrics=RecordingMetrics(), clock=clock, run_loop=False,
                      jobs=lambda s: JobRunner(s, JobStore(tmp_path / "jobs.db"), FakeLauncher(), clock=clock))
    asyncio.run(sched._sync())
    return sched, clock, feed


def node_events(sched):
    return [(e["kind"], e["data"]["node_id"], e["data"].get("reason")) for e in sched.events()
            if e["kind"] in ("node_unhealthy", "node_healthy")]


def test_three_failed_starts_keep_the_node_out_of_placement_until_a_job_runs_there(tmp_path):
    sched, clock, _ = scheduler(tmp_path)
    before = {r.node_id for r in sched.core.fleet.records() if not r.unhealthy}
    assert before == {"bad", "good"}
    assert [sched.strikes.rejected("bad", f"j{i}", "died while starting") for i in range(3)] == [False, False, True]
    assert sched.core.fleet.get("bad").unhealthy and not sched.core.fleet.get("good").unhealthy
    got = [sched.core.place(CPU, PlacementContext()).node_id for _ in range(3)]
    assert got == ["good", "good", None]  # good's two slots, then nothing: the unhealthy node's free slots are not used
    unhealthy = next(e for e in sched.events() if e["kind"] == "node_unhealthy")
    assert unhealthy["data"]["reason"] == "rejections" and unhealthy["data"]["rejections"] == 3
    assert unhealthy["data"]["last_job_id"] == "j2" and unhealthy["data"]["cooldown_s"] == 600.0
    m = sched.metrics()
    assert (m["nodes_unhealthy"], m["nodes_marked_unhealthy"]) == (1, 1)
    sched._export_gauges()
    assert sched.metrics_sink.gauges[("fabric_nodes_unhealthy", ())] == 1
    sched.strikes.ran("bad")
    assert not sched.core.fleet.get("bad").unhealthy
    m = sched.metrics()
    assert (m["nodes_unhealthy"], m["nodes_marked_unhealthy"]) == (0, 1)  # a gauge, and a counter since start
    assert node_events(sched) == [("node_unhealthy", "bad", "rejections"), ("node_healthy", "bad", "job_ran")]


def test_the_cooldown_ends_the_mark_on_a_tick_and_a_node_that_comes_back_stays_marked(tmp_path):
    sched, clock, feed = scheduler(tmp_path, {"rejections": {"escalation_count": 2, "unhealthy_cooldown_s": 30}})
    sched.strikes.rejected("bad", "j1", "x"), sched.strikes.rejected("bad", "j2", "x")
    assert sched.core.fleet.get("bad").unhealthy
    feed.batches.append([FleetChange("joined", "bad", rec("bad", "cpu_ffmpeg"))])  # registered again (it was offline)
    asyncio.run(sched._sync())
    assert sched.core.fleet.get("bad").unhealthy  # the mark is the scheduler's: a fresh record keeps it
    feed.batches.append([FleetChange("changed", "bad", None, {"utilization": 0.5})])  # a heartbeat leaves it alone
    asyncio.run(sched._sync())
    assert sched.core.fleet.get("bad").unhealthy
    clock.t += 29.0
    sched.strikes.tick()
    assert sched.core.fleet.get("bad").unhealthy
    clock.t += 1.0
    sched.strikes.tick()
    assert not sched.core.fleet.get("bad").unhealthy
    assert node_events(sched)[-1] == ("node_healthy", "bad", "cooldown")


def test_a_node_that_leaves_is_forgotten(tmp_path):
    sched, _, feed = scheduler(tmp_path, {"rejections": {"escalation_count": 1}})
    assert sched.strikes.rejected("bad", "j1", "x") is True
    feed.batches.append([FleetChange("lost", "bad")])
    asyncio.run(sched._sync())
    assert not sched.strikes.strikes.is_unhealthy("bad")
    assert sched.strikes.rejected("ghost", "j2", "x") is False  # not in the fleet: nothing marked, nothing kept
    assert not sched.strikes.strikes.is_unhealthy("ghost")


# -- from the job runner's watch -----------------------------------------------------------------------------
def runner_on(tmp_path, *nodes):
    from test_job_runner import FakeLauncher

    clock, launcher = Clock(), FakeLauncher()
    feed = FakeFeed([FleetChange("joined", n, rec(n, "cpu_ffmpeg", slots=4)) for n in nodes])
    sched = Scheduler(feed=feed, metrics=RecordingMetrics(), clock=clock, run_loop=False,
                      jobs=lambda s: JobRunner(s, JobStore(tmp_path / "jobs.db"), launcher, clock=clock))
    return sched, launcher, feed


async def settle():
    for _ in range(20):
        await asyncio.sleep(0.005)


def test_instances_that_die_before_they_come_up_mark_their_node_and_one_that_runs_clears_it(tmp_path):
    from test_job_runner import SPEC

    async def go():
        sched, launcher, feed = runner_on(tmp_path, "bad")
        await sched._sync()
        ids = [sched.jobs.submit(SPEC, b"cls", b"args") for _ in range(3)]
        sched.jobs.tick()
        await settle()
        assert [i.node_id for i in launcher.started] == ["bad"] * 3
        launcher.started[0].die(), launcher.started[1].die()
        await settle()
        assert not sched.core.fleet.get("bad").unhealthy  # two rejections: not yet
        launcher.started[2].die()
        await settle()
        assert sched.core.fleet.get("bad").unhealthy
        marked = [e["data"] for e in sched.events() if e["kind"] == "node_unhealthy"]
        assert len(marked) == 1 and marked[0]["rejections"] == 3 and marked[0]["last_job_id"] == launcher.started[2].job_id in ids
        feed.batches.append([FleetChange("joined", "good", rec("good", "cpu_ffmpeg", slots=4))])
        await sched._sync()
        clock_t = sched.core.clock()
        sched.core.clock.t = clock_t + 10  # past each job's recovery spacing
        sched.jobs.tick()
        await settle()
        assert {i.node_id for i in launcher.started[3:]} == {"good"}  # recovered, never onto the unhealthy node
        return sched, launcher

    sched, launcher = asyncio.run(go())
    assert node_events(sched) == [("node_unhealthy", "bad", "rejections")]


def test_a_constructor_that_fails_or_a_node_that_dies_is_no_rejection_and_a_job_running_clears_the_count(tmp_path):
    from test_job_runner import SPEC

    async def go():
        sched, launcher, _ = runner_on(tmp_path, "n1")
        await sched._sync()
        for _ in range(3):
            sched.jobs.submit(SPEC, b"cls", b"args")
        sched.jobs.tick()
        await settle()
        a, b, c = launcher.started
        a.__fabric_started__.futures[0].set_result(("error", "ValueError: bad argument"))  # the job's own fault
        b.__fabric_started__.futures[0].set_exception(node_gone())
        c.die()
        await settle()
        assert not sched.core.fleet.get("n1").unhealthy
        assert sched.strikes.strikes.recent["n1"] and len(sched.strikes.strikes.recent["n1"]) == 1  # c alone counted
        sched.jobs.submit(SPEC, b"cls", b"args")  # a fresh job lands there and runs
        sched.jobs.tick()
        await settle()
        fresh = launcher.started[-1]
        assert fresh.node_id == "n1"
        fresh.__fabric_started__.futures[0].set_result(None)
        await settle()
        assert "n1" not in sched.strikes.strikes.recent  # a job ran there: the count starts over
        return sched

    asyncio.run(go())


def node_gone() -> Exception:
    """Ray's error for an actor it holds dead because its node died (``died_with_its_node``)."""
    from ray.exceptions import RayActorError

    from fabric.rayio.instances import NODE_DIED

    return RayActorError(error_msg=f"The actor died {NODE_DIED}.")

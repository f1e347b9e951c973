"""Vertical scaling, opt-in (``scaling.vertical_start_share``, ``scaling.vertical_step``): a node joins
below its limit (``start_cap``) and the high-utilisation rule raises it toward its ceiling
(``raise_target``), window by window, only while it stays working; the scheduler's side
(``actors.scaling_ops.ScalingOps``) writes the start cap when a node joins, keeps a cap when the
node joins again and records each raise as ``concurrency_raised``. The defaults keep every node at
its limit (``test_scaling.py`` holds the rest of the rules to that).

The clock is an integer of milliseconds, as in ``test_scaling.py``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from actors.fleet_feed import FleetChange
from actors.scaling_ops import ScalingOps
from actors.scheduler import Scheduler
from fabric.core.errors import SettingsError
from fabric.core.placement import Requirement
from fabric.core.scheduling import NodeJoined, SchedulerCore
from fabric.core.scheduling.scaling import (ProvisionGroup, RaiseConcurrency, Scaler, concurrency_limit, raise_target,
                                            start_cap)
from fabric.core.settings import FabricSettings, NodeOverride
from fabric.rayio.metrics import RecordingMetrics
from test_scaling import MINUTE, cfg, drive, full, n
from test_scaling_changes import SETTINGS as CHANGES_SETTINGS, _run
from test_scheduling import Clock

VERTICAL = cfg(vertical_start_share=0.5)
STEPPED = cfg(vertical_start_share=0.25, vertical_step=2)


# -- the pure rule -------------------------------------------------------------------------------------------
def test_the_start_cap_is_the_share_of_the_ceiling_rounded_up_at_least_one_and_only_when_it_lowers_it():
    assert start_cap(n("a", slots=8), VERTICAL) == 4
    assert start_cap(n("a", slots=7), VERTICAL) == 4  # rounded up
    assert start_cap(n("a", slots=10), cfg(vertical_start_share=0.3)) == 3  # 10 × 0.3 is not 3.0000000000000004
    assert start_cap(n("a", slots=8), cfg(vertical_start_share=0.01)) == 1  # at least one slot
    assert start_cap(n("a", slots=1), VERTICAL) is None  # nothing to lower: it starts at its limit
    assert start_cap(n("a", slots=8), cfg(vertical_start_share=1.0)) is None
    # the ceiling is the operator's override where that is lower
    s = cfg(nodes={"host-o": NodeOverride(max_concurrent_tasks=4)}, vertical_start_share=0.5)
    assert concurrency_limit(n("o", slots=8), s) == 4 and start_cap(n("o", slots=8), s) == 2


def test_without_the_opt_in_or_with_scaling_off_or_in_an_unknown_pool_a_node_starts_at_its_limit():
    assert start_cap(n("a", slots=8), cfg()) is None
    assert start_cap(n("a", slots=8), cfg(enabled=False, vertical_start_share=0.5)) is None  # nothing would raise it
    assert start_cap(n("x", slots=8, pool="nowhere"), VERTICAL) is None  # the scaler never looks at it
    assert start_cap(n("e", slots=8, pool="edge"), VERTICAL) == 4 and start_cap(n("d", slots=8, pool=None), VERTICAL) == 4


def test_a_raise_goes_to_the_ceiling_or_one_step_up_never_past_it():
    assert raise_target(n("a", slots=8, cap=2), VERTICAL) == 8  # no step: straight to the ceiling (as before)
    assert raise_target(n("a", slots=8, cap=2), STEPPED) == 4
    assert raise_target(n("a", slots=8, cap=7), STEPPED) == 8
    assert raise_target(n("a", slots=8), STEPPED) == 8  # at the ceiling: no headroom
    s = cfg(nodes={"host-o": NodeOverride(max_concurrent_tasks=5)}, vertical_step=2)
    assert raise_target(n("o", slots=8, cap=4), s) == 5


def test_a_busy_node_that_joined_low_is_raised_step_by_step_one_window_apart_up_to_its_ceiling():
    s = cfg(vertical_start_share=0.25, vertical_step=2, high_window_s=60)
    hot = {"cap": start_cap(n("h1", slots=8), s)}
    assert hot["cap"] == 2

    def fleet(ms):  # the node keeps every slot it has busy; a cool neighbour keeps the pool from scaling out
        return [n("h1", slots=8, cap=hot["cap"], running=hot["cap"]), n("f2", slots=16)]

    sc, raises = Scaler(), []
    for ms in range(0, 10 * MINUTE + 1, 500):
        for a in sc.observe(ms / 1000, fleet(ms), {}, {}, s):
            assert isinstance(a, RaiseConcurrency) and a.reason == "high_utilization"
            raises.append((ms, a.slots))
            hot["cap"] = a.slots
    assert raises == [(60_000, 4), (120_000, 6), (180_000, 8)]  # then at its ceiling: nothing more


def test_a_node_that_is_not_working_or_not_busy_is_not_raised():
    s = cfg(vertical_start_share=0.5, high_window_s=60)
    for quiet in (n("c1", slots=8, cap=4, running=4, cordoned=True), n("u1", slots=8, cap=4, running=4, unhealthy=True),
                  n("s1", "burst", slots=8, cap=4, spare=True), n("h1", slots=8, cap=4, running=3)):
        assert drive(Scaler(), 0, 10 * MINUTE, 1000, [quiet, n("f2", slots=16)], settings=s) == [], quiet.node_id
    # a break in the load restarts the window: busy for 59 s of every 60 s, never raised
    flicker = lambda ms: [n("h1", slots=8, cap=4, running=4 if ms % 60_000 < 59_000 else 0), n("f2", slots=16)]
    assert drive(Scaler(), 0, 10 * MINUTE, 1000, flicker, settings=s) == []


def test_a_burst_raises_started_nodes_by_a_step_and_provisions_only_once_they_are_at_their_ceiling():
    s = cfg(vertical_start_share=0.5, vertical_step=1, burst_window_s=30)
    caps = {"b1": 2}

    def fleet(ms):
        return [full("f1"), n("b1", "burst", slots=4, cap=caps["b1"], running=caps["b1"])]

    sc, out = Scaler(), []
    for ms in range(0, 100_001, 1000):  # (the next group, from the next pool tier, would come at 120 s)
        for a in sc.observe(ms / 1000, fleet(ms), {"default": 20}, {}, s):
            out.append((ms, a))
            if isinstance(a, RaiseConcurrency):
                caps[a.node_id] = a.slots
    assert [(ms, type(a).__name__, getattr(a, "slots", None)) for ms, a in out] == [
        (30_000, "RaiseConcurrency", 3), (60_000, "RaiseConcurrency", 4), (90_000, "ProvisionGroup", None)]
    assert out[-1][1] == ProvisionGroup("default", "burst", s.pools[0].tiers[1].candidate_shapes[0], 1, "burst")


def test_the_vertical_settings_are_checked_and_default_off():
    with pytest.raises(SettingsError) as exc:
        FabricSettings.load({"scaling": {"vertical_start_share": 0, "vertical_step": 0}})
    assert {p.path for p in exc.value.problems} == {"scaling.vertical_start_share", "scaling.vertical_step"}
    with pytest.raises(SettingsError):
        FabricSettings.load({"scaling": {"vertical_start_share": 1.5}})
    s = FabricSettings()
    assert s.scaling.vertical_start_share is None and s.scaling.vertical_step is None


@hsettings(max_examples=60, deadline=None)
@given(st.integers(1, 32), st.floats(0.01, 1.0), st.one_of(st.none(), st.integers(1, 8)), st.one_of(st.none(), st.integers(1, 32)))
def test_start_caps_and_raises_stay_within_one_and_the_ceiling(limit, share, step, override):
    nodes = {"host-a": NodeOverride(max_concurrent_tasks=override)} if override is not None else None
    s = cfg(nodes=nodes, vertical_start_share=share, vertical_step=step)
    rec = n("a", slots=limit)
    ceiling = concurrency_limit(rec, s)
    cap = start_cap(rec, s)
    assert cap is None or 1 <= cap < ceiling
    slots = cap if cap is not None else ceiling
    seen = [slots]
    while raise_target(n("a", slots=limit, cap=slots), s) > slots:
        slots = raise_target(n("a", slots=limit, cap=slots), s)
        seen.append(slots)
    assert seen == sorted(seen) and seen[-1] == ceiling and all(x <= ceiling for x in seen)


@pytest.mark.parametrize("seed", range(4))
def test_observing_the_changes_acts_as_observing_the_whole_fleet_when_raises_go_by_steps(seed):
    stepped = CHANGES_SETTINGS.model_copy(update={"scaling": CHANGES_SETTINGS.scaling.model_copy(
        update={"vertical_start_share": 0.5, "vertical_step": 1})})
    acts = _run(seed, stepped)
    assert any(isinstance(a, RaiseConcurrency) for a in acts)


# -- the scheduler's side ---------------------------------------------------------------------------------
class FakeFeed:
    def __init__(self):
        self.batches: list = []
        self.outsiders: dict = {}

    async def poll(self):
        return self.batches.pop(0) if self.batches else []


def joined(node_id, slots, **kw):
    return FleetChange("joined", node_id, n(node_id, slots=slots, **kw))


def test_the_scheduler_gives_a_joining_node_its_start_cap_and_a_node_that_joins_again_keeps_its_cap():
    feed = FakeFeed()
    sched = Scheduler({"scaling": {"vertical_start_share": 0.5}}, feed=feed, metrics=RecordingMetrics(), clock=Clock(),
                      run_loop=False)
    feed.batches.append([joined("a", 8), joined("b", 1)])
    asyncio.run(sched._sync())
    assert sched.core.fleet.get("a").slots == 4 and sched.core.fleet.get("b").slots == 1
    sched.scaling.caps["a"] = 8  # as a raise leaves it
    feed.batches += [[joined("a", 8)], [FleetChange("lost", "a")], [joined("a", 8)]]
    asyncio.run(sched._sync())
    assert sched.core.fleet.get("a").slots == 8  # joined again: it keeps its cap
    asyncio.run(sched._sync())
    asyncio.run(sched._sync())
    assert sched.core.fleet.get("a").slots == 4  # lost, then joined: it starts afresh


def test_the_scheduler_keeps_every_node_at_its_limit_by_default():
    feed = FakeFeed()
    sched = Scheduler({}, feed=feed, metrics=RecordingMetrics(), clock=Clock(), run_loop=False)
    feed.batches.append([joined("a", 8)])
    asyncio.run(sched._sync())
    assert sched.core.fleet.get("a").slots == 8 and sched.scaling.caps == {}


def test_scaling_ops_raises_a_busy_node_by_steps_writes_the_cap_and_records_each_raise():
    settings = FabricSettings.load({"scaling": {"vertical_start_share": 0.25, "vertical_step": 1, "high_window_s": 2}})
    clock = Clock()
    core = SchedulerCore(settings, clock=clock)
    events: list = []
    host = SimpleNamespace(settings=settings, core=core, jobs=None, provisioner=None,
                           handle_stimulus=core.handle, record_event=lambda kind, data: events.append((kind, data)))
    ops = ScalingOps(host)
    rec = n("a", slots=4)
    core.handle(NodeJoined(rec.evolve(**ops.joined(rec))))
    assert core.fleet.get("a").slots == 1
    req = Requirement(min_tier="cpu_ffmpeg", num_cpus=0.1)
    for _ in range(40):  # keep every slot busy; a tick every half second
        while core.place(req).status == "assigned":
            pass
        ops.tick()
        clock.t += 0.5
    assert [d["slots"] for kind, d in events if kind == "concurrency_raised"] == [2, 3, 4]
    assert all(d == {"node_id": "a", "slots": d["slots"], "reason": "high_utilization"} for _, d in events)
    assert core.fleet.get("a").slots == 4 and ops.caps == {"a": 4}
    core.validate_state()

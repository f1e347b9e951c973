"""``Scaler.observe_changes`` (what the scheduler calls each tick) against ``Scaler.observe`` over the
whole fleet: the same actions and the same windows, step after step, over random fleets that
change the way a scheduler's fleet does (nodes join and leave, take and give back work, are
cordoned, become spares, get a new slot cap, report a new load), with queues that come and go.
Also ``FleetView.group_sums`` and ``take_changed``, which it reads."""

from __future__ import annotations

import random

import pytest

from fabric.core.placement import FleetView
from fabric.core.placement.decision import Allocation
from fabric.core.placement.fleet import GROUP_FIELDS
from fabric.core.scheduling.scaling import Scaler
from fabric.core.settings import FabricSettings, NodeShape, Pool, PoolTier, ScalingSettings
from placement_helpers import node

SMALL = NodeShape(name="small", num_cpus=2)
SETTINGS = FabricSettings(
    pools=(Pool(name="default", tiers=(PoolTier(name="fixed"),
                                       PoolTier(name="burst", provider="local", scale_out="elastic", max_nodes=6,
                                                min_nodes=1, candidate_shapes=(SMALL,)),
                                       PoolTier(name="cloud", provider="local", scale_out="elastic", candidate_shapes=(SMALL,)))),
           Pool(name="edge")),
    scaling=ScalingSettings(burst_window_s=3.0, high_window_s=5.0, low_window_s=8.0, group_interval_s=4.0))


def _windows(sc: Scaler) -> tuple:
    return (dict(sc.burst_since), dict(sc.pool_high_since), dict(sc.low_since), dict(sc.node_high_since),
            dict(sc.idle_since), dict(sc.last_group))


def _new_node(rnd: random.Random, i: int):
    pool = rnd.choice(["default", "default", "default", "edge", "other"])
    tier = rnd.choice(["fixed", "burst", "cloud"]) if pool == "default" else None
    node_id = f"prospective:p{i}" if rnd.random() < 0.05 else f"n{i:03d}"
    slots = rnd.choice([1, 2, 4, 8])
    return node(node_id, "cpu", slots=slots, max_concurrent_tasks=rnd.choice([None, 1, slots]), pool=pool,
                pool_tier=tier, spare=rnd.random() < 0.1, launching=rnd.random() < 0.1)


def _run(seed: int, settings: FabricSettings = SETTINGS) -> list:
    """One random run, both scalers side by side (under ``settings``); every action taken."""
    rnd = random.Random(seed)
    fleet = FleetView((), SETTINGS)
    whole, changes = Scaler(), Scaler()
    held: list[Allocation] = []
    made = 0
    acts: list = []
    for step in range(300):
        now = step * 0.5
        for _ in range(rnd.randint(0, 4)):
            roll, ids = rnd.random(), [r.node_id for r in fleet.records()]
            if roll < 0.25 or not ids:
                fleet.add(_new_node(rnd, made))
                made += 1
            elif roll < 0.35:
                gone = rnd.choice(ids)
                fleet.remove(gone)
                held = [a for a in held if a.node_id != gone]
            elif roll < 0.6:
                rec = fleet.get(rnd.choice(ids))
                if rec is not None and rec.running < rec.slots:
                    a = Allocation(rec.node_id, job_id=f"j{step}" if rnd.random() < 0.2 else None)
                    fleet.reserve(a)
                    held.append(a)
            elif roll < 0.8 and held:
                fleet.release(held.pop(rnd.randrange(len(held))))
            elif roll < 0.9:
                nid = rnd.choice(ids)
                field = rnd.choice(["cordoned", "spare", "max_concurrent_tasks"])
                value = {"cordoned": rnd.random() < 0.3, "spare": rnd.random() < 0.2,
                         "max_concurrent_tasks": rnd.choice([None, 2, 8])}[field]
                rec = fleet.get(nid)
                if field != "max_concurrent_tasks" or value is None or rec.running <= value:
                    fleet.update(nid, **{field: value})
            else:
                fleet.update(rnd.choice(ids), utilization=rnd.random())
        if step % 25 == 0:  # queues and provisions last a while, so windows can run out
            depth = {"default": rnd.choice([0, 0, 3, 12]), "edge": rnd.choice([0, 9])}
            pending = {("default", "burst"): rnd.choice([0, 0, 0, 1])}
        got = changes.observe_changes(now, fleet, fleet.take_changed("scaler"), depth, pending, settings)
        want = whole.observe(now, fleet.records(), depth, pending, settings)
        assert got == want, f"step {step}"
        acts.extend(got)
        assert _windows(changes) == _windows(whole), f"step {step}"
        fleet.validate()  # the group sums too
    return acts


SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
def test_observing_the_changes_acts_as_observing_the_whole_fleet(seed):
    _run(seed)


def test_the_random_runs_exercise_every_kind_of_action():
    kinds = {type(a).__name__ for seed in SEEDS[:6] for a in _run(seed)}
    assert kinds == {"RaiseConcurrency", "ProvisionGroup", "ScaleDown"}, kinds


def test_group_sums_follow_every_kind_of_change_and_take_changed_names_what_changed():
    fleet = FleetView((), SETTINGS)
    a = fleet.add(node("a", "cpu", slots=4, pool="default", pool_tier="fixed"))
    fleet.add(node("b", "cpu", slots=2, pool="edge", spare=True))
    assert fleet.take_changed("r") == {"a", "b"}  # everything, the first time
    sums = fleet.group_sums()
    figures = dict(zip(GROUP_FIELDS, sums[("cpu_ffmpeg", "default")]))
    assert figures == {"nodes": 1, "placeable": 1, "running": 0, "slots": 4, "live_spares": 0, "running_settled": 0,
                       "slots_settled": 4, "working_running": 0, "working_slots": 4}
    assert dict(zip(GROUP_FIELDS, sums[("cpu_ffmpeg", "edge")]))["live_spares"] == 1
    alloc = Allocation(a.node_id)
    fleet.reserve(alloc)
    assert fleet.take_changed("r") == {"a"}
    assert dict(zip(GROUP_FIELDS, fleet.group_sums()[("cpu_ffmpeg", "default")]))["working_running"] == 1
    fleet.update("a", utilization=0.7)  # a load change alone: made in place
    assert fleet.take_changed("r") == {"a"} and fleet.get("a").utilization == 0.7
    fleet.update("a", cordoned=True)
    assert dict(zip(GROUP_FIELDS, fleet.group_sums()[("cpu_ffmpeg", "default")]))["working_slots"] == 0
    fleet.remove("b")
    assert fleet.take_changed("r") == {"a", "b"}
    assert ("cpu_ffmpeg", "edge") not in fleet.group_sums()
    assert fleet.take_changed("r") == set()
    fleet.validate()

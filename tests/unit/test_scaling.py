"""Burst and utilisation scaling (``fabric.core.scheduling.scaling``).

Fleets are hand-built records; the clock is an integer of milliseconds, driven through hours of
windows in steps (``drive``), so every window edge is checked to the millisecond."""

from __future__ import annotations

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from fabric.core.errors import SettingsError
from fabric.core.lifecycle import NodeStatus
from fabric.core.scheduling.scaling import (ProvisionGroup, RaiseConcurrency, ScaleDown, Scaler, concurrency_limit)
from fabric.core.settings import FabricSettings, NodeOverride, NodeShape, Pool, PoolTier, ScalingSettings
from placement_helpers import node

SMALL = NodeShape(name="small", num_cpus=2)
BIG = NodeShape(name="big", num_cpus=8)
MINUTE = 60_000
HOUR = 60 * MINUTE


def cfg(burst_max: int | None = 2, burst_min: int = 0, cloud_min: int = 0, nodes=None, **scaling) -> FabricSettings:
    """``default``: fixed -> burst (elastic, capped) -> cloud (elastic); ``edge``: fixed only."""
    tiers = (PoolTier(name="fixed"),
             PoolTier(name="burst", provider="local", scale_out="elastic", max_nodes=burst_max, min_nodes=burst_min,
                      candidate_shapes=(SMALL, BIG)),
             PoolTier(name="cloud", provider="local", scale_out="elastic", min_nodes=cloud_min, candidate_shapes=(BIG,)))
    return FabricSettings(pools=(Pool(name="default", tiers=tiers), Pool(name="edge")), nodes=nodes or {},
                          scaling=ScalingSettings(**scaling))


S = cfg()


def n(node_id: str, tier: str | None = "fixed", *, slots: int = 8, cap: int | None = None, running: int = 0, **kw):
    """A CPU node of ``tier`` whose probed limit is ``slots`` and whose cap is ``cap`` (None: the limit)."""
    return node(node_id, "cpu", slots=slots, max_concurrent_tasks=cap, running=running, pool_tier=tier, **kw)


def full(node_id: str, tier: str = "fixed", slots: int = 4, **kw):
    return n(node_id, tier, slots=slots, running=slots, **kw)


def drive(scaler: Scaler, start_ms: int, end_ms: int, step_ms: int, records, depth=None, pending=None,
          settings: FabricSettings = S):
    """Observe every ``step_ms`` from ``start_ms``, and at ``end_ms - 1`` and ``end_ms`` (a window's
    edge, to the millisecond); -> [(ms, action)]. ``records``/``depth``/``pending`` may be
    callables of the time in ms."""
    out = []
    times = sorted(set(range(start_ms, end_ms + 1, step_ms)) | {t for t in (end_ms - 1, end_ms) if t >= start_ms})
    for ms in times:
        recs = records(ms) if callable(records) else records
        d = depth(ms) if callable(depth) else (depth or {})
        p = pending(ms) if callable(pending) else (pending or {})
        out += [(ms, a) for a in scaler.observe(ms / 1000, recs, d, p, settings)]
    return out


# -- bursts ------------------------------------------------------------------------------------------
BUSY = [full("f1"), n("f2", slots=8)]
"""4 of 12 slots: neither hot nor cool; only ``f2`` could take more, and it is at its limit."""


def test_a_queue_at_the_threshold_or_a_burst_shorter_than_the_window_does_nothing():
    busy = BUSY
    assert drive(Scaler(), 0, 2 * HOUR, 1000, busy, {"default": 8}) == []  # at the threshold, not over it
    # over it for 29.999 s, at it for a moment (the window closes), over it again: 30 s from then
    sc = Scaler()
    for ms, depth in ((0, 9), (29_998, 9), (29_999, 8), (30_000, 9), (59_999, 9)):
        assert sc.observe(ms / 1000, busy, {"default": depth}, {}, S) == []
    assert sc.observe(60.0, busy, {"default": 9}, {}, S) == [ProvisionGroup("default", "burst", SMALL, 1, "burst")]
    # over it for 29 s of every 31 s, observed each second
    assert drive(Scaler(), 0, HOUR, 1000, busy, lambda ms: {"default": 9 if (ms % 31_000) < 29_000 else 0}) == []


def test_the_burst_window_is_thirty_seconds_to_the_millisecond():
    sc = Scaler()
    out = drive(sc, 0, 30_000, 1000, BUSY, {"default": 20})
    assert out == [(30_000, ProvisionGroup("default", "burst", SMALL, 1, "burst"))]


def test_a_burst_raises_headroom_first_within_limits_and_overrides():
    nodes = {"host-o1": NodeOverride(max_concurrent_tasks=4), "host-o2": NodeOverride(max_concurrent_tasks=2)}
    s = cfg(nodes=nodes)
    fleet = [full("f1"),                                   # no headroom
             n("h1", slots=8, cap=2, running=2),           # lowered: 6 slots of headroom
             n("o1", slots=8, cap=2, running=2),           # operator override 4: raised to 4, not 8
             n("o2", slots=8, cap=2, running=2),           # override 2: no headroom
             n("c1", slots=8, cap=2, cordoned=True),       # not working: not raised
             n("s1", "burst", slots=8, cap=2, spare=True)]  # an unconsumed spare is reserve: not raised
    sc = Scaler()
    out = drive(sc, 0, 30_000, 500, fleet, {"default": 50}, settings=s)
    assert out == [(30_000, RaiseConcurrency("h1", 8, "burst")), (30_000, RaiseConcurrency("o1", 4, "burst"))]
    assert concurrency_limit(fleet[2], s) == 4 and concurrency_limit(fleet[3], s) == 2 and concurrency_limit(fleet[0], s) == 4
    # the window reset: nothing until another full window; then, the raises applied, a provision
    raised = [r.evolve(max_concurrent_tasks=8 if r.node_id == "h1" else 4) if r.node_id in ("h1", "o1") else r for r in fleet]
    out = drive(sc, 30_500, 60_000, 500, raised, {"default": 50}, settings=s)
    assert out == [(60_000, ProvisionGroup("default", "burst", SMALL, 1, "burst"))]


def test_without_headroom_one_group_per_sixty_seconds_per_pool_tier_then_the_next_tier():
    sc = Scaler()
    out = drive(sc, 0, 10 * MINUTE, 250, BUSY, {"default": 100})
    groups = [(ms, a.pool_tier) for ms, a in out]
    assert all(isinstance(a, ProvisionGroup) and a.count == 1 and a.reason == "burst" for _, a in out)
    assert groups[:3] == [(30_000, "burst"), (60_000, "cloud"), (90_000, "burst")]  # burst is inside its 60 s at 60 s
    for tier in ("burst", "cloud"):
        times = [ms for ms, t in groups if t == tier]
        assert all(b - a >= 60_000 for a, b in zip(times, times[1:])), (tier, times)
    # every tick over the whole run is 30 s from the last action: each group reset the window
    assert [ms for ms, _ in groups] == list(range(30_000, 10 * MINUTE + 1, 30_000))


def test_a_pool_tier_at_max_nodes_spills_to_the_next_and_the_group_fits_under_the_cap():
    at_cap = [full("f1"), full("b1", "burst"), full("b2", "burst")]
    out = drive(Scaler(), 0, 30_000, 1000, at_cap, {"default": 100})
    assert out == [(30_000, ProvisionGroup("default", "cloud", BIG, 1, "burst"))]
    # a dead node does not count toward the cap; group_size is clipped to the room left
    s = cfg(burst_max=3, group_size=4)
    fleet = [full("f1"), full("b1", "burst"), n("b2", "burst", status=NodeStatus.DEAD)]
    out = drive(Scaler(), 0, 30_000, 1000, fleet, {"default": 100}, settings=s)
    assert out == [(30_000, ProvisionGroup("default", "burst", SMALL, 2, "burst"))]
    # pending provisions count toward the cap too (and suppress: see below)
    assert drive(Scaler(), 0, 30_000, 1000, [full("f1"), full("b1", "burst")], {"default": 100},
                 settings=cfg(burst_max=1, group_size=4)) == [(30_000, ProvisionGroup("default", "cloud", BIG, 4, "burst"))]


def test_nodes_the_scaler_provisioned_fill_the_cascade_in_order():
    """The issue's pool: fixed -> elastic(max 2) -> elastic. Each group's node joins busy at once."""
    fleet = [full("f1")]
    sc = Scaler()
    tiers = []
    for ms in range(0, 10 * MINUTE + 1, 1000):
        for a in sc.observe(ms / 1000, fleet, {"default": 100}, {}, S):
            assert isinstance(a, ProvisionGroup)
            tiers.append(a.pool_tier)
            fleet = fleet + [full(f"{a.pool_tier}-{len(fleet)}", a.pool_tier)]
    assert tiers[:3] == ["burst", "cloud", "burst"] and tiers.count("burst") == 2 and set(tiers[3:]) == {"cloud"}


def test_pending_provisions_suppress_provisioning_and_the_open_window_acts_once_they_end():
    sc = Scaler()
    pending = lambda ms: {("default", "cloud"): 1} if ms < HOUR + 7000 else {}
    out = drive(sc, 0, HOUR + 10_000, 1000, BUSY, {"default": 100}, pending)
    assert out == [(HOUR + 7000, ProvisionGroup("default", "burst", SMALL, 1, "burst"))]
    # pending provisions of another pool do not count
    out = drive(Scaler(), 0, 30_000, 1000, BUSY, {"default": 100}, {("edge", "fixed"): 3})
    assert [a.pool_tier for _, a in out] == ["burst"]


def test_a_pool_without_an_elastic_tier_only_waits():
    out = drive(Scaler(), 0, HOUR, 1000, [full("e1", pool="edge")], {"edge": 100})
    assert out == []


# -- high utilisation --------------------------------------------------------------------------------
def test_a_hot_node_is_raised_within_its_limit_after_five_minutes():
    sc = Scaler()
    hot = [n("h1", slots=8, cap=4, running=4), n("f2", slots=8, running=0)]  # pool at 4/12: not hot
    out = drive(sc, 0, 5 * MINUTE, 1000, hot)
    assert out == [(5 * MINUTE, RaiseConcurrency("h1", 8, "high_utilization"))]
    # not applied (still hot): again only after another full window, and never past the limit
    out = drive(sc, 5 * MINUTE + 1000, HOUR, 1000, hot)
    assert [ms for ms, _ in out] == list(range(10 * MINUTE, HOUR + 1, 5 * MINUTE))
    assert {a for _, a in out} == {RaiseConcurrency("h1", 8, "high_utilization")}
    # applied: 4/8 is not hot, nothing more
    assert drive(sc, HOUR + 1000, 2 * HOUR, 1000, [hot[0].evolve(max_concurrent_tasks=8), hot[1]]) == []


def test_utilisation_at_eighty_percent_is_not_over_it_and_a_break_restarts_the_window():
    assert drive(Scaler(), 0, HOUR, 1000, [n("h1", slots=10, cap=5, running=4)]) == []  # 0.8: not over
    sc = Scaler()
    flicker = lambda ms: [n("h1", slots=10, cap=5, running=5 if ms % (5 * MINUTE) else 0)]
    assert drive(sc, 0, HOUR, 1000, flicker) == []


def test_a_hot_pool_without_headroom_scales_out_once_per_window():
    sc = Scaler()
    hot = [full("f1"), full("f2"), n("f3", slots=4, running=3)]  # 11/12, nobody has headroom
    out = drive(sc, 0, 20 * MINUTE, 1000, hot)
    assert out == [(ms, ProvisionGroup("default", "burst", SMALL, 1, "high_utilization"))
                   for ms in (5 * MINUTE, 10 * MINUTE, 15 * MINUTE, 20 * MINUTE)]
    # one hot node in a cool pool: no scale-out (and nothing to raise)
    assert drive(Scaler(), 0, HOUR, 1000, [full("f1"), n("f2", slots=8)]) == []


def test_a_hot_pool_with_headroom_raises_instead_of_scaling_out():
    # the node rule raises h1; the pool rule counts that as its growth: no group in the same call
    hot = [full("f1"), n("h1", slots=8, cap=4, running=4), n("l1", slots=8, cap=1, running=1)]
    out = drive(Scaler(), 0, 5 * MINUTE, 1000, hot)
    assert out == [(5 * MINUTE, RaiseConcurrency("h1", 8, "high_utilization")),
                   (5 * MINUTE, RaiseConcurrency("l1", 8, "high_utilization"))]
    # and raises the pool's other headroom (w1 is not hot itself) with it
    hot = [full("f1"), n("h1", slots=8, cap=4, running=4), n("l1", slots=8, cap=1, running=1),
           n("w1", slots=8, cap=2, running=1)]  # the pool at 10/11
    out = drive(Scaler(), 0, 5 * MINUTE, 1000, hot)
    assert out == [(5 * MINUTE, RaiseConcurrency("h1", 8, "high_utilization")),
                   (5 * MINUTE, RaiseConcurrency("l1", 8, "high_utilization")),
                   (5 * MINUTE, RaiseConcurrency("w1", 8, "high_utilization"))]


# -- low utilisation ---------------------------------------------------------------------------------
def _cool_fleet(ms: int):
    return [n("f1", "fixed"),                                       # fixed: never
            n("b1", "burst"),                                       # idle provisioned: goes
            n("b2", "burst", running=1),                            # busy: stays
            n("b3", "burst", spare=True),                           # a spare: the spare reconciler's
            n("b4", "burst", jobs=frozenset({"j1"})),               # a bound job: stays
            n("b5", "burst", launching=True),                       # still coming up: stays
            n("c1", "cloud", running=1 if ms < 10 * MINUTE else 0),  # idle since 10 min: kept (min 1)
            n("c2", "cloud"),                                       # idle since 0: goes first
            n("e1", pool="edge")]


def test_a_cool_pool_scales_idle_provisioned_nodes_down_to_the_minimum_longest_idle_first():
    sc = Scaler()
    out = drive(sc, 0, 15 * MINUTE, 1000, _cool_fleet, settings=cfg(cloud_min=1))
    assert out == [(15 * MINUTE, ScaleDown("c2", "default", "cloud", "low_utilization")),
                   (15 * MINUTE, ScaleDown("b1", "default", "burst", "low_utilization"))]
    # the window reset: the next scale-down only 15 minutes later, the fixed tier never
    out = drive(sc, 15 * MINUTE + 1000, 30 * MINUTE, 1000, _cool_fleet, settings=cfg(cloud_min=1))
    assert [ms for ms, _ in out] == [30 * MINUTE, 30 * MINUTE]
    assert drive(Scaler(), 0, 2 * HOUR, 1000, [n("f1"), n("f2")], settings=cfg()) == []


def test_scale_down_ties_go_by_node_id_and_min_nodes_counts_busy_and_launching_nodes():
    fleet = [n("b9", "burst"), n("b1", "burst"), n("b5", "burst")]
    out = drive(Scaler(), 0, 15 * MINUTE, 1000, fleet, settings=cfg(burst_max=5, burst_min=1))
    assert [a.node_id for _, a in out] == ["b1", "b5"]
    fleet = [n("b1", "burst"), n("b2", "burst", running=0, launching=True), n("b3", "burst", jobs=frozenset({"j"}))]
    out = drive(Scaler(), 0, 15 * MINUTE, 1000, fleet, settings=cfg(burst_max=5, burst_min=2))
    assert [a.node_id for _, a in out] == ["b1"]
    out = drive(Scaler(), 0, 15 * MINUTE, 1000, fleet, settings=cfg(burst_max=5, burst_min=3))
    assert out == []


def test_no_scale_down_while_work_is_queued_or_provisions_are_in_flight_or_utilisation_is_not_low():
    fleet = [n("f1"), n("b1", "burst")]
    assert drive(Scaler(), 0, HOUR, 1000, fleet, {"default": 1}) == []
    assert drive(Scaler(), 0, HOUR, 1000, fleet, pending={("default", "cloud"): 1}) == []
    # 2 of 16 slots = 12.5%: not under 10%
    assert drive(Scaler(), 0, HOUR, 1000, [n("f1", running=2), n("b1", "burst")]) == []
    # 14 min 59.999 s under it, then a blip: nothing
    blip = lambda ms: [n("f1", running=8 if ms % (15 * MINUTE) == 15 * MINUTE - 1 else 0), n("b1", "burst")]
    assert drive(Scaler(), 0, 15 * MINUTE - 1, 1000, blip) == []
    cool = [n("f1"), n("b1", "burst")]
    assert drive(Scaler(), 0, 15 * MINUTE, 1000, cool) == [(15 * MINUTE, ScaleDown("b1", "default", "burst", "low_utilization"))]


# -- settings, records -------------------------------------------------------------------------------
def test_disabled_scaling_asks_for_nothing_and_forgets_its_windows():
    off = cfg(enabled=False)
    sc = Scaler()
    drive(sc, 0, 20_000, 1000, [full("f1")], {"default": 100})
    assert sc.burst_since
    hot = [full("f1"), n("h1", slots=8, cap=2, running=2), n("b1", "burst")]
    assert drive(sc, 21_000, 2 * HOUR, 1000, hot, {"default": 100}, settings=off) == []
    assert drive(sc, 0, 2 * HOUR, 1000, [n("f1"), n("b1", "burst")], settings=off) == []
    assert not (sc.burst_since or sc.pool_high_since or sc.low_since or sc.node_high_since or sc.idle_since)


def test_records_resolve_pools_and_tiers_and_prospective_or_foreign_ones_are_ignored():
    # no pool, no pool tier: the default pool's fixed tier (a full node there: a burst provisions)
    plain = full("p1", tier=None)
    prospective = n("prospective:7", "burst", slots=8, cap=1)  # headroom, but a placeholder: ignored
    foreign = n("x1", "fixed", slots=8, cap=1, pool="nowhere")
    out = drive(Scaler(), 0, 30_000, 1000, [plain, prospective, foreign], {"default": 100, "nowhere": 100})
    assert out == [(30_000, ProvisionGroup("default", "burst", SMALL, 1, "burst"))]
    # the prospective record does not count toward max_nodes either
    out = drive(Scaler(), 0, 30_000, 1000, [plain, full("b1", "burst"), prospective], {"default": 100},
                settings=cfg(burst_max=2))
    assert [a.pool_tier for _, a in out] == ["burst"]


def test_nodes_and_pools_that_leave_take_their_windows():
    sc = Scaler()
    fleet = BUSY + [n("h1", slots=4, running=4)]  # hot, no headroom; the pool at 8/16
    out = drive(sc, 0, 30_000, 1000, fleet, {"default": 100})
    assert [a.pool_tier for _, a in out] == ["burst"]
    assert "h1" in sc.node_high_since and sc.last_group == {("default", "burst"): 30.0} and "h1" not in sc.idle_since
    sc.observe(31.0, BUSY, {"default": 100}, {}, S)
    assert "h1" not in sc.node_high_since and sc.burst_since == {"default": 30.0}
    sc.observe(32.0, [], {}, {}, FabricSettings(pools=(Pool(name="other"),)))
    assert not (sc.burst_since or sc.last_group or sc.node_high_since or sc.idle_since)


def problems(data):
    with pytest.raises(SettingsError) as exc:
        FabricSettings.load(data)
    return {(p.code, p.path) for p in exc.value.problems}


def test_scaling_settings_validation_names_the_field():
    elastic = {"name": "burst", "provider": "local", "scale_out": "elastic", "candidate_shapes": [{"name": "small"}]}
    assert ("min_above_max", "pools.0.tiers.1.min_nodes") in problems(
        {"pools": [{"name": "default", "tiers": [{"name": "fixed"}, {**elastic, "max_nodes": 1, "min_nodes": 2}]}]})
    assert problems({"scaling": {"low_utilization": 0.8, "high_utilization": 0.5}}) == {("low_above_high", "scaling.low_utilization")}
    got = problems({"scaling": {"group_size": 0, "high_utilization": 1.5, "burst_window_s": 0, "group_interval_s": -1,
                                "burst_queue_depth": -1, "surprise": 1}})
    assert {path for _, path in got} == {"scaling.group_size", "scaling.high_utilization", "scaling.burst_window_s",
                                         "scaling.group_interval_s", "scaling.burst_queue_depth", "scaling.surprise"}
    # every problem at once: a structural one elsewhere does not hide the scaling one
    got = problems({"health": {"heartbeat_interval_s": "x"}, "scaling": {"low_utilization": 0.9}})
    assert ("low_above_high", "scaling.low_utilization") in got and any(p.startswith("health.") for _, p in got)
    ok = FabricSettings.load({"scaling": {"burst_window_s": 0.05, "enabled": False},
                              "pools": [{"name": "default", "tiers": [{"name": "fixed"}, {**elastic, "max_nodes": 2, "min_nodes": 2}]}]})
    assert ok.scaling.burst_window_s == 0.05 and not ok.scaling.enabled and ok.pools[0].tiers[1].min_nodes == 2
    assert FabricSettings().scaling == ScalingSettings() and ScalingSettings().burst_window_s == 30.0


# -- invariants --------------------------------------------------------------------------------------
step = st.tuples(st.integers(0, 30), st.lists(st.integers(0, 8), min_size=8, max_size=8), st.integers(1, 120_000))


@hsettings(max_examples=60, deadline=None)
@given(st.lists(step, min_size=1, max_size=60), st.integers(0, 2), st.integers(1, 3), st.integers(1, 3))
def test_the_scaler_never_breaks_a_cap_a_limit_or_a_minimum(steps, burst_min, burst_max, group_size):
    burst_max = max(burst_max, burst_min)
    s = cfg(burst_max=burst_max, burst_min=burst_min, cloud_min=1, group_size=group_size, burst_window_s=1,
            high_window_s=2, low_window_s=3, group_interval_s=1)
    fleet = {"f1": n("f1", slots=4, cap=2), "b0": n("b0", "burst", slots=6, cap=1), "c0": n("c0", "cloud", slots=4)}
    for i in range(1, burst_min):
        fleet[f"b{i}"] = n(f"b{i}", "burst", slots=4)
    sc, ms, made = Scaler(), 0, 0
    for depth, loads, dt in steps:
        ms += dt
        for k, nid in enumerate(sorted(fleet)):
            rec = fleet[nid]
            fleet[nid] = rec.evolve(running=min(loads[k % len(loads)], rec.slots))
        before = {t: sum(1 for r in fleet.values() if r.pool_tier == t) for t in ("burst", "cloud")}
        for a in sc.observe(ms / 1000, list(fleet.values()), {"default": depth}, {}, s):
            if isinstance(a, RaiseConcurrency):
                assert a.slots <= concurrency_limit(fleet[a.node_id], s) and a.slots > fleet[a.node_id].slots
                fleet[a.node_id] = fleet[a.node_id].evolve(max_concurrent_tasks=a.slots)
            elif isinstance(a, ProvisionGroup):
                assert a.count >= 1
                for _ in range(a.count):
                    made += 1
                    fleet[f"new{made}"] = n(f"new{made}", a.pool_tier, slots=4)
            else:
                assert isinstance(a, ScaleDown) and fleet[a.node_id].running == 0
                del fleet[a.node_id]
        count = {t: sum(1 for r in fleet.values() if r.pool_tier == t) for t in ("burst", "cloud")}
        assert count["burst"] <= burst_max
        assert count["burst"] >= min(burst_min, before["burst"]) and count["cloud"] >= min(1, before["cloud"])
        assert "f1" in fleet

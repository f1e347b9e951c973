"""The pure hot-spare decisions (``fabric.core.spares``; issue 15 § Hot spares).

Fleets are hand-built records; time is a number. Every test checks ``validate_state`` of the
pool's ``SpareState`` after every call (``run``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from fabric.core.errors import SettingsError
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import FleetView
from fabric.core.settings import FabricSettings, HotSpareSettings, NodeShape, Pool, PoolTier
from fabric.core.spares import (BACKOFF_S, PROVISION_LIFECYCLE, Abandon, Prefetch, Provision, ProvisionPhase, Reap,
                                SpareState, SpareTags, Tag, Underflow, diff_hot_spares, parse_hot_spares, reconcile,
                                spare_spec, survey, validate_hot_spares, validate_state, warmth)
from fabric.core.spares.state import REAP_RETRY_S
from placement_helpers import node

T0 = 1_000_000.0
SMALL = NodeShape(name="small", num_cpus=2)
BIG = NodeShape(name="big", num_cpus=8)
ONLY_CLOUD = NodeShape(name="only-cloud", num_cpus=4)


def spare_settings(burst_max: int | None = 2, cloud: bool = True) -> FabricSettings:
    """``default``: fixed -> burst (elastic, capped) -> cloud (elastic); ``edge``: fixed only."""
    tiers = [PoolTier(name="fixed"),
             PoolTier(name="burst", provider="local", scale_out="elastic", max_nodes=burst_max, candidate_shapes=(SMALL, BIG))]
    if cloud:
        tiers.append(PoolTier(name="cloud", provider="local", scale_out="elastic", provision_timeout_s=120,
                              candidate_shapes=(SMALL, ONLY_CLOUD)))
    return FabricSettings(pools=(Pool(name="default", tiers=tuple(tiers)), Pool(name="edge")))


S = spare_settings()


def spec(target: int = 2, **kw) -> HotSpareSettings:
    return HotSpareSettings(pool=kw.pop("pool", "default"), target_count=target, **kw)


def spare(node_id: str, tier: str = "burst", **kw):
    return node(node_id, "cpu", spare=True, pool_tier=tier, **kw)


def run(state: SpareState, sp, records, now: float, settings: FabricSettings = S, templates=None, pool: str | None = None):
    out = reconcile(pool or state.pool, sp, list(records), settings, state, now, templates or {})
    assert validate_state(state) == []
    return out


def kinds(decisions, kind):
    return [d for d in decisions if isinstance(d, kind)]


# -- under target --------------------------------------------------------------------------------------
def test_under_target_provisions_the_shortfall_once_and_not_again_while_in_flight():
    st_ = SpareState("default")
    fixed = node("f1", pool_tier="fixed")
    out = run(st_, spec(2, reserved_for=("enc",), exclusive=True, warm_for=("enc",)), [fixed], T0)
    assert out[0] == Underflow("default", 0, 2)
    provs = kinds(out, Provision)
    assert [(p.pool, p.pool_tier, p.shape.name) for p in provs] == [("default", "burst", "small")] * 2
    assert provs[0].tags == SpareTags(spare=True, reserved_for=("enc",), exclusive=True, warm_for=("enc",))
    assert len({p.provision_id for p in provs}) == 2 and set(st_.in_flight) == {p.provision_id for p in provs}
    # nothing changed: nothing new (the underflow is not repeated within the backoff window)
    assert run(st_, spec(2, reserved_for=("enc",), exclusive=True, warm_for=("enc",)), [fixed], T0 + 1) == []
    # the window passed: the event again, still no provision (both are in flight)
    assert run(st_, spec(2), [fixed], T0 + 61) == [Underflow("default", 0, 2)]


def test_live_spares_and_pending_provisions_count_against_the_target():
    st_ = SpareState("default")
    out = run(st_, spec(3), [spare("s1")], T0)
    assert out[0] == Underflow("default", 1, 3) and len(kinds(out, Provision)) == 2
    st_.provision_started(out[1].provision_id, T0 + 1)
    assert st_.in_flight[out[1].provision_id].phase is ProvisionPhase.STARTED
    assert kinds(run(st_, spec(3), [spare("s1")], T0 + 2), Provision) == []


def test_at_target_nothing_is_asked_and_the_underflow_report_resets():
    st_ = SpareState("default")
    run(st_, spec(1), [], T0)
    assert st_.last_underflow is not None
    pid = next(iter(st_.in_flight))
    st_.provision_done(pid, "s1")
    assert run(st_, spec(1), [spare("s1")], T0 + 5) == []
    assert st_.last_underflow is None and st_.registered == {}


def test_a_failed_provision_backs_off_60_s_then_retries():
    st_ = SpareState("default")
    pid = kinds(run(st_, spec(1), [], T0), Provision)[0].provision_id
    assert st_.provision_failed(pid, T0 + 5)
    assert st_.backoff_until == T0 + 5 + BACKOFF_S == T0 + 65
    assert run(st_, spec(1), [], T0 + 10) == []  # backing off; the event was reported at T0
    out = run(st_, spec(1), [], T0 + 64)
    assert out == [Underflow("default", 0, 1)] and not st_.in_flight  # window passed for the event only
    out = run(st_, spec(1), [], T0 + 65)
    assert len(kinds(out, Provision)) == 1 and kinds(out, Provision)[0].provision_id != pid


def test_the_entrys_backoff_is_used_and_a_late_failure_report_changes_nothing():
    st_ = SpareState("default")
    pid = kinds(run(st_, spec(1, provision_backoff_s=10), [], T0), Provision)[0].provision_id
    st_.provision_failed(pid, T0, backoff_s=10)
    assert kinds(run(st_, spec(1, provision_backoff_s=10), [], T0 + 10), Provision)
    assert st_.provision_failed(pid, T0 + 11) is False and st_.backoff_until == T0 + 10
    assert st_.provision_done("never-asked", "n9") is False and st_.provision_started("never-asked", T0) is False


def test_a_provision_that_does_not_register_in_time_is_abandoned_and_backs_off():
    st_ = SpareState("default")
    pid = kinds(run(st_, spec(1), [], T0), Provision)[0].provision_id
    out = run(st_, spec(1), [], T0 + 600)  # burst's provision_timeout_s is the default 600
    assert out[0] == Abandon(pid, "provision_timeout")
    assert kinds(out, Provision) == [] and st_.backing_off(T0 + 600)
    assert st_.finished[pid] is ProvisionPhase.ABANDONED
    assert len(kinds(run(st_, spec(1), [], T0 + 660), Provision)) == 1


def test_a_pool_without_an_elastic_tier_only_reports():
    st_ = SpareState("edge")
    out = run(st_, spec(2, pool="edge"), [node("e1", pool="edge")], T0)
    assert out == [Underflow("edge", 0, 2)] and not st_.in_flight
    assert run(st_, spec(2, pool="edge"), [node("e1", pool="edge")], T0 + 1) == []
    assert run(st_, spec(2, pool="edge"), [node("e1", pool="edge", spare=True)], T0 + 2) == [Underflow("edge", 1, 2)]


def test_max_nodes_reached_spills_to_the_next_elastic_tier():
    st_ = SpareState("default")
    busy = [node(f"b{i}", pool_tier="burst") for i in range(2)]
    assert [p.pool_tier for p in kinds(run(st_, spec(1), busy, T0), Provision)] == ["cloud"]
    # one place left in burst: the round fills it, then spills
    st2 = SpareState("default")
    assert [p.pool_tier for p in kinds(run(st2, spec(3), busy[:1], T0), Provision)] == ["burst", "cloud", "cloud"]
    # a dead node does not count toward max_nodes; a launching one does
    st3 = SpareState("default")
    fleet = [node("b0", pool_tier="burst", status=NodeStatus.DEAD), node("b1", pool_tier="burst", launching=True)]
    assert [p.pool_tier for p in kinds(run(st3, spec(2), fleet, T0), Provision)] == ["burst", "cloud"]


def test_every_elastic_tier_full_only_reports():
    settings = spare_settings(burst_max=1, cloud=False)
    st_ = SpareState("default")
    out = run(st_, spec(2), [node("b0", pool_tier="burst")], T0, settings)
    assert out == [Underflow("default", 0, 2)] and not st_.in_flight


def test_the_shape_the_entry_names_is_provisioned_from_the_first_tier_that_has_it():
    st_ = SpareState("default")
    assert [(p.pool_tier, p.shape) for p in kinds(run(st_, spec(1, shape="big"), [], T0), Provision)] == [("burst", BIG)]
    st2 = SpareState("default")
    assert [(p.pool_tier, p.shape) for p in kinds(run(st2, spec(1, shape="only-cloud"), [], T0), Provision)] == [
        ("cloud", ONLY_CLOUD)]


# -- registration and tags -----------------------------------------------------------------------------
def test_a_registered_spare_is_tagged_prefetches_once_and_counts_meanwhile():
    templates = {"enc": ["file:///a", "file:///b"], "mux": ["file:///c"]}
    sp = spec(1, warm_for=("enc", "mux"), reserved_for=("enc",), exclusive=True)
    st_ = SpareState("default")
    pid = kinds(run(st_, sp, [], T0, templates=templates), Provision)[0].provision_id
    assert st_.provision_done(pid, "n1")
    # registered but the fleet does not show it yet: pending, no second provision
    assert run(st_, sp, [], T0 + 1, templates=templates) == []
    assert survey("default", sp, [], S, st_, T0 + 1).pending == ("n1",)
    fresh = node("n1", pool_tier="burst", warm=frozenset({"file:///b"}))
    out = run(st_, sp, [fresh], T0 + 2, templates=templates)
    assert out == [Tag("n1", True, ("enc",), True, reason="provisioned"), Prefetch("n1", ("file:///a", "file:///c"))]
    assert run(st_, sp, [fresh], T0 + 3, templates=templates) == [Tag("n1", True, ("enc",), True, reason="provisioned")]
    tagged = fresh.evolve(spare=True, spare_reserved_for=frozenset({"enc"}), spare_exclusive=True)
    assert run(st_, sp, [tagged], T0 + 4, templates=templates) == []
    assert st_.registered == {}


def test_a_spare_whose_entry_changed_is_retagged_and_fetches_the_new_artifacts():
    st_ = SpareState("default")
    s1 = spare("s1", spare_reserved_for=frozenset({"enc"}))
    assert run(st_, spec(1, reserved_for=("enc",)), [s1], T0) == []
    out = run(st_, spec(1, reserved_for=("mux",), exclusive=True, warm_for=("mux",)), [s1], T0 + 1,
              templates={"mux": ["file:///m"]})
    assert out == [Tag("s1", True, ("mux",), True, reason="spec_changed"), Prefetch("s1", ("file:///m",))]


def test_a_spare_that_took_a_job_is_untagged_and_replaced():
    st_ = SpareState("default")
    assert run(st_, spec(2), [spare("s1"), spare("s2")], T0) == []
    took = spare("s2", jobs=frozenset({"job-1"}))
    out = run(st_, spec(2), [spare("s1"), took], T0 + 1)
    assert out[:2] == [Tag("s2", False, reason="consumed"), Underflow("default", 1, 2)]
    assert len(kinds(out, Provision)) == 1
    # a running task consumes it too; an untagged node is no spare at all
    st2 = SpareState("default")
    out = run(st2, spec(1), [spare("s1", running=1), node("x", pool_tier="burst")], T0)
    assert out[0] == Tag("s1", False, reason="consumed") and len(kinds(out, Provision)) == 1


def test_cordoned_offline_and_other_pools_spares_are_not_live():
    st_ = SpareState("default")
    fleet = [spare("c", cordoned=True), spare("o", status=NodeStatus.OFFLINE), spare("d", status=NodeStatus.DEAD),
             node("e", spare=True, pool="edge")]
    out = run(st_, spec(1), fleet, T0)
    assert out[0] == Underflow("default", 0, 1) and len(kinds(out, Provision)) == 1
    assert kinds(out, Reap) == [] and kinds(out, Tag) == []


# -- over target ------------------------------------------------------------------------------------------
def test_over_target_reaps_the_coldest_first_warmth_then_activity():
    templates = {"enc": ["file:///a", "file:///b"]}
    sp = spec(1, warm_for=("enc",))
    fleet = [spare("hot", warm=frozenset({"file:///a", "file:///b"})), spare("warm", warm=frozenset({"file:///a"})),
             spare("cold1"), spare("cold2")]
    st_ = SpareState("default")
    st_.activity("cold1", T0 - 10)
    st_.activity("cold2", T0 - 100)
    out = run(st_, sp, fleet, T0, templates=templates)
    assert kinds(out, Reap) == [Reap("cold2", "over_target"), Reap("cold1", "over_target"), Reap("warm", "over_target")]
    assert warmth(fleet[0], ("enc",), templates) == 2
    # asked once: the reap in progress is neither reaped again nor counted
    assert run(st_, sp, fleet, T0 + 1, templates=templates) == []
    assert survey("default", sp, fleet, S, st_, T0 + 1).live == ("hot",)
    # it never took effect: asked again after REAP_RETRY_S
    assert len(kinds(run(st_, sp, fleet, T0 + REAP_RETRY_S, templates=templates), Reap)) == 3
    # gone: forgotten
    assert run(st_, sp, fleet[:1], T0 + REAP_RETRY_S + 1, templates=templates) == [] and st_.reaping == {}


def test_a_template_without_artifacts_is_warm_by_its_own_name():
    st_ = SpareState("default")
    out = run(st_, spec(1, warm_for=("enc",)), [spare("a"), spare("b", warm=frozenset({"enc"}))], T0)
    assert out == [Reap("a", "over_target")]


def test_an_excess_spare_on_registered_hardware_is_released_not_terminated():
    st_ = SpareState("default")
    fleet = [spare("f1", tier="fixed"), spare("f2", tier="fixed", warm=frozenset({"x"})), spare("b1", warm=frozenset({"x"}))]
    assert run(st_, spec(2, warm_for=("x",)), fleet, T0) == [Tag("f1", False, reason="released")]
    assert run(SpareState("default"), spec(1, warm_for=("x",)), fleet, T0) == [Tag("f1", False, reason="released"),
                                                                               Reap("b1", "over_target")]


def test_a_removed_entry_reaps_every_live_spare_as_an_orphan():
    st_ = SpareState("default")
    out = run(st_, None, [spare("s1"), spare("s2"), spare("busy", jobs=frozenset({"j"}))], T0)
    assert out == [Tag("busy", False, reason="consumed"), Reap("s1", "orphan"), Reap("s2", "orphan")]


def test_a_lower_target_abandons_provisions_it_no_longer_needs_newest_first():
    st_ = SpareState("default")
    run(st_, spec(1), [], T0)
    run(st_, spec(3), [], T0 + 1)
    ids = sorted(st_.in_flight, key=lambda p: st_.in_flight[p].asked_at)
    out = run(st_, spec(1), [], T0 + 2)
    assert out == [Abandon(ids[2], "over_target"), Abandon(ids[1], "over_target"), Underflow("default", 0, 1)]
    assert list(st_.in_flight) == [ids[0]] and st_.backoff_until is None


# -- inputs --------------------------------------------------------------------------------------------------
def test_a_fleet_view_and_a_plain_list_decide_the_same():
    recs = [node("f1"), spare("s1", tier="fixed"), node("s2", spare=True), node("b1", pool_tier="burst")]
    a, b = SpareState("default"), SpareState("default")
    view = FleetView(recs, S)
    assert reconcile("default", spec(2), view, S, a, T0) == reconcile("default", spec(2), recs, S, b, T0)


def test_the_state_belongs_to_one_pool():
    with pytest.raises(ValueError, match="edge"):
        reconcile("edge", spec(1, pool="edge"), [], S, SpareState("default"), T0)


def test_an_actor_can_adopt_a_provision_it_finds_after_a_restart():
    st_ = SpareState("default", id_prefix="spare-default-r2")
    assert st_.provision_started("spare-default-1", T0, pool_tier="cloud", shape=SMALL)
    assert run(st_, spec(1), [], T0 + 1) == [Underflow("default", 0, 1)]
    assert run(st_, spec(1), [], T0 + 120)[0] == Abandon("spare-default-1", "provision_timeout")  # cloud: 120 s


def test_the_provision_lifecycle():
    P = ProvisionPhase
    assert PROVISION_LIFECYCLE.terminal == {P.REGISTERED, P.FAILED, P.ABANDONED}
    assert PROVISION_LIFECYCLE.successors(P.ASKED) == {P.STARTED, P.REGISTERED, P.FAILED, P.ABANDONED}
    assert not PROVISION_LIFECYCLE.allows(P.STARTED, P.ASKED)


def test_validate_state_finds_what_is_inconsistent():
    st_ = SpareState("default")
    run(st_, spec(2), [], T0)
    a, b = list(st_.in_flight)
    st_.provision_done(a, "n1")
    st_.registered["n2"] = st_.registered["n1"]
    st_.last_underflow = (2, 2, T0)
    st_.prefetched["n1"] = frozenset()
    problems = validate_state(st_)
    assert any("registered two nodes" in p for p in problems)
    assert any("was not short" in p for p in problems)
    assert any("empty prefetch" in p for p in problems)


# -- the live list --------------------------------------------------------------------------------------------
def test_validation_reports_every_problem_at_once():
    entries = [
        {"pool": "nowhere", "target_count": 1},
        {"pool": "default", "target_count": 1, "shape": "huge"},
        {"pool": "default", "target_count": 2},
        {"pool": "edge", "target_count": -1, "exclusive": True},
        {"pool": "edge", "exclusive": True, "shape": "small"},
    ]
    with pytest.raises(SettingsError) as err:
        validate_hot_spares(entries, S)
    got = {(p.code, p.path) for p in err.value.problems}
    assert got == {
        ("unknown_pool", "hot_spares.0.pool"),
        ("unknown_shape", "hot_spares.1.shape"),
        ("duplicate_hot_spare_pool", "hot_spares.2.pool"),
        ("greater_than_equal", "hot_spares.3.target_count"),
        ("exclusive_without_reservation", "hot_spares.4.exclusive"),
        ("unknown_shape", "hot_spares.4.shape"),
    }, got
    assert [p.path for p in err.value.problems] == sorted((p.path for p in err.value.problems),
                                                          key=lambda x: int(x.split(".")[1]))


def test_the_settings_refuse_an_unknown_shape_at_start_as_the_live_update_does():
    doc = S.model_dump(mode="json")
    doc["hot_spares"] = [{"pool": "default", "target_count": 1, "shape": "huge"}]
    with pytest.raises(SettingsError) as err:
        FabricSettings.load(doc)
    assert [(p.code, p.path) for p in err.value.problems] == [("unknown_shape", "hot_spares.0.shape")]
    assert "huge" in err.value.problems[0].message and "only-cloud" in err.value.problems[0].message
    doc["hot_spares"] = [{"pool": "default", "target_count": 1, "shape": "only-cloud"}]
    assert FabricSettings.load(doc).hot_spares[0].shape == "only-cloud"


def test_a_valid_list_parses_and_a_non_list_is_refused():
    parsed = parse_hot_spares([spec(1, shape="only-cloud"), {"pool": "edge", "target_count": 2}], S)
    assert parsed == (spec(1, shape="only-cloud"), spec(2, pool="edge"))
    validate_hot_spares([], S)
    with pytest.raises(SettingsError) as err:
        validate_hot_spares({"pool": "default"}, S)
    assert [p.path for p in err.value.problems] == ["hot_spares"]


def test_diff_says_per_pool_what_was_added_removed_or_changed():
    old = [spec(1, warm_for=("enc",)), spec(1, pool="edge")]
    new = [spec(2, warm_for=("enc",), exclusive=True, reserved_for=("enc",)), spec(1, pool="other")]
    d = diff_hot_spares(old, new)
    assert d["default"] == {"change": "changed", "fields": {
        "target_count": {"old": 1, "new": 2}, "reserved_for": {"old": [], "new": ["enc"]},
        "exclusive": {"old": False, "new": True}}}
    assert d["edge"]["change"] == "removed" and d["edge"]["old"]["pool"] == "edge"
    assert d["other"] == {"change": "added", "new": spec(1, pool="other").model_dump(mode="json")}
    assert diff_hot_spares(old, list(old)) == {}
    with pytest.raises(ValueError):
        diff_hot_spares(old + old, [])


def test_spare_spec_reads_a_nodes_tags_and_its_pools_warm_for():
    rec = spare("s1", spare_reserved_for=frozenset({"b", "a"}), spare_exclusive=True, warm=frozenset({"x"}))
    got = spare_spec(rec, [spec(1, warm_for=("enc",))])
    assert (got.spare, got.unconsumed, got.reserved_for, got.exclusive, got.warm_for, got.warm) == (
        True, True, ("a", "b"), True, ("enc",), ("x",))
    assert spare_spec(node("n"), {"default": spec(1, warm_for=("enc",))}).warm_for == ()


# -- the property ---------------------------------------------------------------------------------------------
records_st = st.lists(st.fixed_dictionaries({
    "spare": st.booleans(), "job": st.booleans(), "running": st.sampled_from((0, 0, 1)),
    "status": st.sampled_from((NodeStatus.ACTIVE,) * 4 + (NodeStatus.OFFLINE, NodeStatus.DEAD)),
    "cordoned": st.booleans(), "tier": st.sampled_from(("fixed", "burst", "cloud", None)),
    "pool": st.sampled_from(("default", "default", "edge", None)), "warm": st.sets(st.sampled_from(("enc", "file:///a"))),
}), max_size=12)


@hsettings(max_examples=200, deadline=None)
@given(records_st, st.integers(0, 5), st.integers(0, 3), st.booleans(), st.integers(0, 3))
def test_reconcile_never_over_provisions_nor_reaps_a_busy_or_non_spare_node(raw, target, asks, backoff, burst_max):
    settings = spare_settings(burst_max=burst_max)
    recs = [node(f"n{i}", spare=r["spare"], jobs=frozenset({"j"}) if r["job"] else frozenset(), running=r["running"],
                 status=r["status"], cordoned=r["cordoned"], pool_tier=r["tier"], pool=r["pool"], warm=frozenset(r["warm"]))
            for i, r in enumerate(raw)]
    st_ = SpareState("default")
    for _ in range(asks):
        st_.ask("cloud", SMALL, T0 - 1)
    if backoff:
        st_.backoff_until = T0 + 10
    by_id = {r.node_id: r for r in recs}
    live = [r for r in recs if (r.pool or "default") == "default" and r.unconsumed_spare
            and r.status is NodeStatus.ACTIVE and not r.cordoned]
    sp = spec(target, warm_for=("enc",))
    out = run(st_, sp, recs, T0, settings, templates={"enc": ["file:///a"]})
    provs = kinds(out, Provision)
    assert len(provs) <= max(0, target - len(live) - asks)
    if backoff:
        assert provs == []
    for d in kinds(out, Reap):
        r = by_id[d.node_id]
        assert r.spare and not r.jobs and not r.running and r.pool_tier in ("burst", "cloud")
    for d in kinds(out, Tag):
        assert by_id[d.node_id].spare or d.reason == "provisioned"
    removed = len(kinds(out, Reap)) + len([d for d in kinds(out, Tag) if d.reason == "released"])
    assert removed == max(0, len(live) - target)
    counts = {t: sum(1 for r in recs if (r.pool or "default") == "default" and r.pool_tier == t
                     and r.status is not NodeStatus.DEAD) for t in ("burst",)}
    assert len([p for p in provs if p.pool_tier == "burst"]) <= max(0, burst_max - counts["burst"])
    assert not any(isinstance(d, Underflow) for d in out) or len(live) < target
    # nothing changed: nothing new
    assert kinds(run(st_, sp, recs, T0, settings, templates={"enc": ["file:///a"]}), Provision) == []


@hsettings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(("tick", "fail", "register", "take_job", "target")), st.integers(0, 4)),
                max_size=25))
def test_a_driven_pool_never_holds_more_than_its_target_and_converges(ops):
    """A fake actor carries the decisions out on a fake fleet between random reports: after every
    round live + pending spares are at most the target, and with a provider that works the pool
    ends exactly at target."""
    settings = spare_settings(burst_max=None)
    fleet: dict = {}
    started: list[Provision] = []
    state = SpareState("default")
    clock = {"now": T0, "target": 2, "n": 0}

    def round_():
        sp = spec(clock["target"], reserved_for=("enc",))
        for d in run(state, sp, fleet.values(), clock["now"], settings):
            if isinstance(d, Provision):
                state.provision_started(d.provision_id, clock["now"])
                started.append(d)
            elif isinstance(d, Abandon):
                started[:] = [p for p in started if p.provision_id != d.provision_id]
            elif isinstance(d, Reap):
                assert not fleet[d.node_id].jobs
                del fleet[d.node_id]
            elif isinstance(d, Tag):
                fleet[d.node_id] = fleet[d.node_id].evolve(spare=d.spare, spare_reserved_for=frozenset(d.reserved_for),
                                                           spare_exclusive=d.exclusive)
        seen = survey("default", sp, fleet.values(), settings, state, clock["now"])
        assert len(seen.live) + len(seen.pending) <= clock["target"], seen

    def register(p: Provision, tagged: bool):
        clock["n"] += 1
        nid = f"new{clock['n']}"
        fleet[nid] = node(nid, pool_tier=p.pool_tier, spare=tagged)
        assert state.provision_done(p.provision_id, nid)

    round_()
    for op, arg in ops:
        if op == "tick":
            clock["now"] += 30 * arg
        elif op == "fail" and started:
            state.provision_failed(started.pop(0).provision_id, clock["now"])
        elif op == "register" and started:
            register(started.pop(0), tagged=arg % 2 == 0)
        elif op == "take_job":
            spares = sorted(n for n, r in fleet.items() if r.unconsumed_spare)
            if spares:
                nid = spares[arg % len(spares)]
                fleet[nid] = fleet[nid].evolve(jobs=frozenset({"job"}))
        elif op == "target":
            clock["target"] = arg
        round_()
    for _ in range(4):  # the provider now works: every provision registers
        clock["now"] += 61
        round_()
        while started:
            register(started.pop(0), tagged=False)
    round_()
    live = survey("default", spec(clock["target"]), fleet.values(), settings, state, clock["now"]).live
    assert len(live) == clock["target"]
    assert all(fleet[n].spare and fleet[n].spare_reserved_for == {"enc"} for n in live)

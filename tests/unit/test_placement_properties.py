"""Property tests: the fast engine decides exactly as the reference, and the invariants hold.

Random fleets (mixed tiers, pools, utilisation, cordons, spares, ports, fractional GPUs,
launching nodes, zones) and random requests and contexts come from ``fabric.core.placement.synth``;
hypothesis draws the seeds. Every event is followed by ``FleetView.validate()``.
"""

import random

from hypothesis import given, settings, strategies as st

from fabric.core.placement import FleetView, place, reference, synth
from fabric.core.placement.filters import SLOT_FILTERS, Query, first_failing
from fabric.core.placement.keys import placement_key, resilience_violations
from fabric.core.placement.records import EPS

SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


def _world(seed: int, max_nodes: int = 25):
    rnd = random.Random(seed)
    recs = [synth.random_record(rnd, i) for i in range(rnd.randint(0, max_nodes))]
    fleet = FleetView(recs, synth.mixed_settings())
    fleet.validate()
    return rnd, fleet, [r.node_id for r in recs]


def _steps_before(fleet, req, decided_level, decided_pt):
    """Every (level, pool tier) the walk visits before the deciding step."""
    pool = req.pool or fleet.default_pool
    for level in req.levels:
        for pt in fleet.pool_tiers[pool]:
            if level is decided_level and pt.name == decided_pt:
                return
            yield level, pool, pt


def _check_invariants(fleet, req, ctx, d):
    pool = req.pool or fleet.default_pool
    if d.status == "placed":
        rec = fleet.node(d.node_id)
        pt = next(p for p in fleet.pool_tiers[pool] if p.name == d.pool_tier)
        q = Query(req, ctx, d.tier, pool, pt)
        assert first_failing(rec, q) is None, "a hard filter was violated"
        assert rec.tier >= d.tier
        assert rec.running < rec.slots
        assert rec.reserved_cpus + req.num_cpus <= rec._cpu_total + EPS
        assert rec.reserved_memory_mib + req.memory_mib <= rec._mem_total + EPS
        assert rec.ports.isdisjoint(req.ports)
        for i in d.allocation.gpu_positions:
            assert rec.gpu_reserved[i] + d.allocation.gpu_fraction <= 1 + EPS
        mine = len(d.resilience_violations)
        assert d.resilience_violations == resilience_violations(rec, q)
        # no fallback (and no earlier pool tier) while a node there fits as well
        for level, pool_name, pt2 in _steps_before(fleet, req, d.tier, d.pool_tier):
            q2 = Query(req, ctx, level, pool_name, pt2)
            for other in fleet.records():
                if first_failing(other, q2) is None:
                    assert len(resilience_violations(other, q2)) > mine, (
                        f"{other.node_id} fits at {level}/{pt2.name} but the walk went on to {d.tier}/{d.pool_tier}")
        # resilience is broken only when nothing compliant fits anywhere in the walk
        if mine:
            for level in req.levels:
                for pt2 in fleet.pool_tiers[pool]:
                    q2 = Query(req, ctx, level, pool, pt2)
                    for other in fleet.records():
                        if first_failing(other, q2) is None:
                            assert len(resilience_violations(other, q2)) >= mine
        # the chosen node has the smallest key at its step
        survivors = [placement_key(o, q) for o in fleet.records() if first_failing(o, q) is None]
        assert placement_key(rec, q) == min(survivors)
    elif d.status in ("deferred", "provision"):
        if pool not in fleet.pool_tiers:
            return
        waited = d.reason.startswith("waiting") or (d.status == "provision" and req.when_full == "wait" and d.tier is req.min_tier)
        levels = (req.min_tier,) if waited else req.levels
        for level in levels:
            for pt in fleet.pool_tiers[pool]:
                q = Query(req, ctx, level, pool, pt)
                if d.status == "provision" and req.scale == "provision_first" and level.rank < d.tier.rank:
                    continue
                assert all(first_failing(o, q) is not None for o in fleet.records()), "deferred/provisioned while a node fits"
        if d.reason.startswith("waiting"):
            assert req.when_full == "wait"
            some_full = any(
                first_failing(o, Query(req, ctx, req.min_tier, pool, pt), SLOT_FILTERS) is None
                for pt in fleet.pool_tiers[pool] for o in fleet.records())
            assert some_full


@settings(max_examples=300, deadline=None)
@given(SEEDS)
def test_fast_decides_like_reference_and_invariants_hold(seed):
    rnd, fleet, ids = _world(seed)
    for _ in range(6):
        req = synth.random_requirement(rnd)
        ctx = synth.random_context(rnd, ids)
        fast = place(fleet, req, ctx)
        ref = reference.place(fleet, req, ctx)
        assert fast.same_outcome(ref), f"\nfast: {fast}\nref:  {ref}\n{req!r}\n{ctx!r}"
        assert place(fleet, req, ctx).same_outcome(fast), "not deterministic"
        _check_invariants(fleet, req, ctx, fast)
        fleet.commit(fast)
        fleet.validate()


@settings(max_examples=150, deadline=None)
@given(SEEDS)
def test_bursts_never_double_book_and_agree(seed):
    rnd, fleet, ids = _world(seed)
    reqs = [(synth.random_requirement(rnd), synth.random_context(rnd, ids) if rnd.random() < 0.3 else None) for _ in range(12)]
    fa, fb = fleet.copy(), fleet.copy()
    da = synth_place_many(fa, reqs, fast=True)
    db = synth_place_many(fb, reqs, fast=False)
    for a, b in zip(da, db):
        assert a.same_outcome(b)
    fa.validate()
    for rec in fa.records():
        assert rec.running <= rec.slots
    # releasing everything returns each node's usage to where it started
    for d in da:
        if d.allocation is not None:
            fa.release(d.allocation)
    fa.validate()
    for before, after in zip(fleet.records(), fa.records()):
        assert (before.running, before.ports, before.gpu_reserved, before.jobs) == (after.running, after.ports, after.gpu_reserved, after.jobs)
        assert abs(before.reserved_cpus - after.reserved_cpus) < 1e-6


def synth_place_many(fleet, reqs, fast):
    from fabric.core.placement import place_many

    if fast:
        return place_many(fleet, reqs)
    return reference.place_many(fleet, reqs)


@settings(max_examples=60, deadline=None)
@given(SEEDS)
def test_lazy_trace_equals_reference_trace(seed):
    rnd, fleet, ids = _world(seed, max_nodes=12)
    req = synth.random_requirement(rnd)
    ctx = synth.random_context(rnd, ids)
    fast = place(fleet, req, ctx, trace=True)
    ref = reference.place(fleet, req, ctx, trace=True)
    fleet.commit(fast)  # the lazy trace replays the snapshot taken at decision time
    assert fast.trace == ref.trace
    assert isinstance(fast.explain(verbose=True), str)
    if fast.status == "placed":
        assert fast.trace.verdicts()[fast.node_id] == "survivor"
        assert fast.trace.survivors()[0][1] == fast.node_id


@settings(max_examples=60, deadline=None)
@given(SEEDS)
def test_insertion_order_and_copies_do_not_change_decisions(seed):
    rnd, fleet, ids = _world(seed)
    shuffled = fleet.records()
    rnd.shuffle(shuffled)
    other = FleetView(shuffled, fleet.settings)
    for _ in range(4):
        req = synth.random_requirement(rnd)
        ctx = synth.random_context(rnd, ids)
        assert place(fleet, req, ctx).same_outcome(place(other, req, ctx))
        assert place(fleet.copy(), req, ctx).same_outcome(place(fleet, req, ctx))


def test_realistic_fleet_burst_agrees_with_reference():
    fleet = FleetView(synth.realistic_fleet(300, seed=5), synth.bench_settings())
    reqs = synth.realistic_requests(200, seed=9)
    fast_d = synth_place_many(fleet.copy(), reqs, fast=True)
    ref_d = synth_place_many(fleet.copy(), reqs, fast=False)
    assert all(a.same_outcome(b) for a, b in zip(fast_d, ref_d))
    assert {d.status for d in fast_d} >= {"placed"}


@settings(max_examples=100, deadline=None)
@given(SEEDS)
def test_fast_key_equals_reference_key(seed):
    from fabric.core.placement.fast import _make_key

    rnd, fleet, ids = _world(seed)
    req = synth.random_requirement(rnd)
    ctx = synth.random_context(rnd, ids)
    pool = req.pool or fleet.default_pool
    for pt in fleet.pool_tiers.get(pool, ()):
        q = Query(req, ctx, req.min_tier, pool, pt)
        key_of = _make_key(q)
        for rec in fleet.records():
            assert key_of(rec) == placement_key(rec, q)

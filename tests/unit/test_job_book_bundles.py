"""The job book's bundles (split from test_job_book.py, whose checked book and helpers it uses):
jobs filed under their replica and name, peers, resilience events, a bundle broken by an essential job
past its ceiling or an invalid spec, a non-essential job dropped alone."""

from __future__ import annotations

from fabric.core.jobs.book import JobEvent, ReleaseSlot, StopInstance
from fabric.core.jobs.bundles import Bundle, BundleJob, ResiliencePolicy
from fabric.core.settings import FabricSettings

from test_job_book import Checked, J, WHERE, ctx, of, spec, where3


# -- bundles ---------------------------------------------------------------------------------------
def make_bundle(*, resilience=True, jobs=None, **kw):
    jobs = jobs if jobs is not None else [BundleJob(name="encode"), BundleJob(name="mux", essential=False)]
    return Bundle(bundle_id="b1", resilience=ResiliencePolicy(**kw) if resilience else None, jobs=jobs)


def add_bundle(b: Checked, bundle: Bundle, now=0.0) -> dict[tuple[int, str], str]:
    b.add_bundle(bundle.bundle_id, bundle)
    ids = {}
    for rj in bundle.expand():
        jid = f"{bundle.bundle_id}/{rj.replica}/{rj.name}"
        assert b.add(jid, rj.spec, now, bundle_id=bundle.bundle_id, replica=rj.replica) == []
        ids[(rj.replica, rj.name)] = jid
    return ids


def run_all(b: Checked, ids, nodes, now=0.0):
    """Place every due job of the bundle (replica 0 on ``nodes[0]``, replica 1 on ``nodes[1]``)."""
    out = []
    for p in b.due(now, WHERE):
        rec = b.job(p.job_id)
        key = f"{p.job_id}@{now}"
        out += b.placed(p.job_id, nodes[rec.replica], hash(key) % 10**6, key, now, WHERE)
        out += b.started(p.job_id, key, now)
    return out


def test_bundle_jobs_are_filed_under_replica_and_name_and_placed_primaries_first():
    b = Checked()
    ids = add_bundle(b, make_bundle())
    assert b.bundles["b1"].jobs == {k: v for k, v in ids.items()} and b.bundles["b1"].state == "live"
    assert {b.job(j).bundle_id for j in ids.values()} == {"b1"}
    due = b.due(0.0, WHERE)
    assert [b.job(p.job_id).replica for p in due] == [0, 0, 1, 1]
    assert all(ctx(b, p).replica_index == b.job(p.job_id).replica for p in due)


def test_a_bundle_jobs_context_carries_its_job_id_and_its_spec_policy():
    b = Checked()
    b.add_bundle("b1", make_bundle(resilience=False))
    # the job spec's policy and template (a class's decorator defaults, say) differ from the BundleJob's
    b.add("b1/0/encode", spec(on_runtime_failure="prefer_spare", template="enc"), 0.0, bundle_id="b1", replica=0)
    (p,) = b.due(0.0, WHERE)
    assert ctx(b, p).job_id == "b1/0/encode" and ctx(b, p).template == "enc" and not ctx(b, p).recovering
    b.placed("b1/0/encode", "n1", 1, "k1", 0.0, WHERE)
    b.started("b1/0/encode", "k1", 0.0)
    b.died("b1/0/encode", "k1", 1.0)
    (p,) = b.due(1.0, WHERE)
    assert ctx(b, p).recovering and ctx(b, p).on_runtime_failure == "prefer_spare"
    assert ctx(b, p).exclude_nodes == {"n1"} and ctx(b, p).job_id == "b1/0/encode"


def test_peers_are_the_placed_jobs_of_the_same_replica():
    b = Checked()
    ids = add_bundle(b, make_bundle())
    b.due(0.0, WHERE)
    b.placed(ids[(0, "encode")], "n1", 1, "k-enc0", 0.0, WHERE)
    b.placed(ids[(1, "encode")], "n2", 2, "k-enc1", 0.0, WHERE)
    ctx0 = b.context(b.job(ids[(0, "mux")]), WHERE)
    ctx1 = b.context(b.job(ids[(1, "mux")]), WHERE)
    assert [(p.job, p.node_id, p.zone) for p in ctx0.peers] == [("encode", "n1", "zone-a")]
    assert [(p.job, p.node_id, p.zone) for p in ctx1.peers] == [("encode", "n2", "zone-a")]
    # the backup's copy of a job knows where its primary is, with the policy's flags
    assert ctx1.other_node is None  # the primary mux is not placed yet
    enc1 = b.context(b.job(ids[(1, "encode")]), WHERE)
    assert (enc1.other_node, enc1.other_zone, enc1.other_cloud) == ("n1", "zone-a", "cloud-1")
    assert (enc1.same_node, enc1.same_az, enc1.same_cloud) == ("forbid", "forbid", "allow")
    # a job that is not placed is nobody's peer; a job is never its own
    assert all(p.job != "mux" for p in ctx0.peers)
    b.died(ids[(0, "encode")], "k-enc0", 1.0)
    assert b.context(b.job(ids[(0, "mux")]), WHERE).peers == ()


def test_a_backup_on_its_primarys_node_is_reported_as_degraded():
    b = Checked()
    ids = add_bundle(b, make_bundle(same_node="forbid", same_zone="allow"))
    b.due(0.0, WHERE)
    assert of(b.placed(ids[(0, "encode")], "n1", 1, "k0", 0.0, WHERE), JobEvent, "resilience_degraded") == []
    out = b.placed(ids[(1, "encode")], "n1", 2, "k1", 0.0, WHERE)
    (ev,) = of(out, JobEvent, "resilience_degraded")
    assert ev.data["violated"] == ["same_node"] and ev.data["job"] == "encode" and ev.data["replica"] == 1
    assert ev.data["bundle_id"] == "b1" and ev.data["node_id"] == "n1"
    # another node, even in the same zone, is fine with same_zone allowed
    assert of(b.placed(ids[(1, "mux")], "n2", 3, "k2", 0.0, WHERE), JobEvent, "resilience_degraded") == []


def test_zone_and_cloud_flags_compare_the_nodes_domains():
    b = Checked()
    ids = add_bundle(b, make_bundle(same_node="allow", same_zone="forbid", same_cloud="forbid"))
    b.due(0.0, where3)
    b.placed(ids[(0, "encode")], "n0", 1, "k0", 0.0, where3)
    out = b.placed(ids[(1, "encode")], "n2", 2, "k1", 0.0, where3)  # another zone, another cloud
    assert of(out, JobEvent, "resilience_degraded") == []
    b.placed(ids[(0, "mux")], "n0", 3, "k2", 0.0, where3)
    out = b.placed(ids[(1, "mux")], "n1", 4, "k3", 0.0, where3)  # another node in the same zone and cloud
    (ev,) = of(out, JobEvent, "resilience_degraded")
    assert ev.data["violated"] == ["same_zone", "same_cloud"]


def test_resilience_allowed_flags_report_nothing():
    b = Checked()
    ids = add_bundle(b, make_bundle(same_node="allow", same_zone="allow", same_cloud="allow"))
    b.due(0.0, WHERE)
    b.placed(ids[(0, "encode")], "n1", 1, "k0", 0.0, WHERE)
    assert of(b.placed(ids[(1, "encode")], "n1", 2, "k1", 0.0, WHERE), JobEvent, "resilience_degraded") == []


def test_an_essential_job_past_its_ceiling_breaks_its_bundle():
    b = Checked()
    ids = add_bundle(b, make_bundle(same_node="allow", same_zone="allow"))
    run_all(b, ids, ("n1", "n2"))
    enc = ids[(0, "encode")]
    t, out = 0.0, []
    for i in range(7):
        assert b.bundles["b1"].state == "live"
        key = b.job(enc).binding.instance_key
        out = b.died(enc, key, t + 1)
        if b.job(enc).terminal:
            break
        t += 60
        run_all(b, ids, (f"m{i}", "n2"), t)
    assert i == 6 and b.job(enc).state == J.FAILED
    assert b.bundles["b1"].state == "broken" and b.bundles["b1"].reasons
    (ev,) = of(out, JobEvent, "bundle_broken")
    assert ev.data["bundle_id"] == "b1" and "encode" in ev.data["reason"] and "restart ceiling" in ev.data["reason"]
    others = [ids[k] for k in ((0, "mux"), (1, "encode"), (1, "mux"))]
    stops = of(out, StopInstance)
    assert sorted(s.job_id for s in stops) == sorted(others)
    assert all(s.binding == b.job(s.job_id).binding for s in stops)
    assert all(b.job(j).state == J.STOPPING for j in others)
    assert b.due(10_000.0, WHERE) == []
    for j in others:
        b.stopped(j, b.job(j).binding.instance_key, t + 2)
    assert all(b.job(j).state == J.STOPPED for j in others)
    assert b.due(10_000.0, WHERE) == []
    # a job filed under the broken bundle later (a manual start, say) is not placed either
    b.add("b1/0/extra", spec("extra"), t + 3, bundle_id="b1", replica=0)
    assert b.due(10_000.0, WHERE) == [] and b.job("b1/0/extra").state == J.PENDING


def test_a_broken_bundle_stops_its_waiting_jobs_at_once_and_places_none():
    b = Checked()
    ids = add_bundle(b, make_bundle(resilience=False, jobs=[BundleJob(name="encode", on_runtime_failure="drop"),
                                                            BundleJob(name="mux")]))
    (p0, p1) = b.due(0.0, WHERE)
    b.placed(p0.job_id, "n1", 1, "k0", 0.0, WHERE)
    b.started(p0.job_id, "k0", 0.0)
    out = b.died(ids[(0, "encode")], "k0", 1.0)  # essential, policy drop: broken at once
    assert b.bundles["b1"].state == "broken" and len(of(out, JobEvent, "bundle_broken")) == 1
    assert b.job(ids[(0, "mux")]).state == J.STOPPED and of(out, StopInstance) == []
    # the mux placement the scheduler was already making comes back: its slot is returned
    assert b.placed(ids[(0, "mux")], "n2", 2, "k1", 1.5, WHERE) == [ReleaseSlot(2)]
    assert b.due(100.0, WHERE) == []
    assert b.break_bundle("b1", "again", 2.0) == []  # broken once: no second event


def test_an_invalid_spec_of_an_essential_bundle_job_breaks_the_bundle_on_the_first_rejection():
    b = Checked()
    ids = add_bundle(b, make_bundle(resilience=False))
    run_all(b, ids, ("n1",))
    out = b.died(ids[(0, "encode")], b.job(ids[(0, "encode")]).binding.instance_key, 1.0, invalid_spec="bad channel")
    assert len(of(out, JobEvent, "job_rejected")) == 1
    (ev,) = of(out, JobEvent, "bundle_broken")
    assert "bad channel" in ev.data["reason"]
    assert b.job(ids[(0, "mux")]).state == J.STOPPING


def test_a_non_essential_bundle_job_drops_alone():
    b = Checked()
    ids = add_bundle(b, make_bundle(same_node="allow", same_zone="allow"))
    run_all(b, ids, ("n1", "n2"))
    mux = ids[(0, "mux")]
    t, out = 0.0, []
    for i in range(7):
        out += b.died(mux, b.job(mux).binding.instance_key, t + 1)
        t += 60
        run_all(b, ids, (f"m{i}", "n2"), t)
    assert b.job(mux).state == J.DROPPED and b.bundles["b1"].state == "live"
    assert len(of(out, JobEvent, "job_dropped")) == 1 and of(out, JobEvent, "bundle_broken") == []
    assert of(out, StopInstance) == []
    assert all(b.job(ids[k]).state == J.RUNNING for k in ((0, "encode"), (1, "encode"), (1, "mux")))


def test_losing_a_node_under_a_whole_replica_at_its_ceiling():
    """Both primaries on one node, the essential one at its ceiling: the node's loss breaks the
    bundle; every slot is given back exactly once and nothing is left bound or recovering."""
    b = Checked(FabricSettings.load({"failure": {"max_restarts_per_hour": 0}}).failure)
    ids = add_bundle(b, make_bundle(same_node="allow", same_zone="allow"))
    run_all(b, ids, ("n1", "n2"))
    allocs = {j: b.job(j).binding.allocation_id for j in ids.values()}
    out = b.node_lost("n1", 1.0)
    released = [r.allocation_id for r in of(out, ReleaseSlot)]
    assert sorted(released) == sorted(allocs[ids[(0, k)]] for k in ("encode", "mux"))
    assert b.bundles["b1"].state == "broken"
    assert b.job(ids[(0, "encode")]).state == J.FAILED
    assert b.job(ids[(0, "mux")]).terminal and b.job(ids[(0, "mux")]).binding is None
    assert {b.job(ids[(1, k)]).state for k in ("encode", "mux")} == {J.STOPPING}
    assert b.due(100.0, WHERE) == []

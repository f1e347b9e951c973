"""Bundles on a real local fleet (issue 14): a primary and a backup kept apart while they can be,
intra-replica rules that hold under churn, restart ceilings that break an essential bundle or drop
a non-essential job alone, updates that revive, refusals that store nothing; a backup kept out of
its primary's cloud where nodes say their cloud.

One module-scoped LocalFabric: four raylets. Tests run in file order; each deletes its bundles,
and a test that kills a node adds one back. No wall-clock assertions: waits are bounded polls.
"""

from __future__ import annotations

import os
import sys

import pytest

ray = pytest.importorskip("ray")

from fabric import Bundle, BundleJob, InvalidSpecError, JobState, ResiliencePolicy, adaptive  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

PROFILES = ["gpu-cuda-workstation", "steamdeck-apu"]
CLOUD_BOXES = {"aws-box": ("intel-igpu-nuc", "aws"), "gcp-box": ("cpu-only-box", "gcp")}
"""Two more nodes, each saying its cloud (``fabric join --cloud``): name -> (profile, cloud). The aws
node's tier is the higher one, so a job that prefers the highest tier goes there first whatever the
machine's load (the packing key, which reads the machine's CPU, never decides between them)."""
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0, "reprobe_interval_s": 600.0, "flap_toggles": 50},
            "failure": {"min_recovery_interval_s": 0.5}}


@adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1)
class Worker:
    def __init__(self, label: str = "") -> None:
        self.label = label

    def where(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def crash(self) -> None:
        os._exit(1)

    def get_label(self) -> str:
        return self.label


class Refuses:
    def __init__(self) -> None:
        raise InvalidSpecError("this spec cannot run anywhere")


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(PROFILES, settings=SETTINGS, max_slots=4, timeout_s=120) as fabric_:
        for name, (profile, cloud) in CLOUD_BOXES.items():
            fabric_.add_node(name, profile=profile, cloud=cloud, wait=False)
        fabric_.wait_registered()
        yield fabric_


def job_of(lf, bundle_id: str, replica: int, name: str):
    return lf.handle.job(lf.handle.bundle(bundle_id).jobs[f"{replica}/{name}"])


def wait_running(lf, bundle_id: str) -> dict:
    def all_running():
        st = lf.handle.bundle(bundle_id)
        return all(lf.handle.job(j).state == JobState.RUNNING for j in st.jobs.values()) and st.jobs
    lf.wait_until(all_running, f"every job of {bundle_id} running", timeout_s=120)
    return {k: lf.handle.job(j) for k, j in lf.handle.bundle(bundle_id).jobs.items()}


def delete(lf, bundle_id: str) -> None:
    lf.handle.delete_bundle(bundle_id)
    lf.wait_until(lambda: bundle_id not in {b.bundle_id for b in lf.handle.bundles()}, f"{bundle_id} deleted")


def crash(lf, bundle_id: str, replica: int, name: str) -> None:
    st = job_of(lf, bundle_id, replica, name)
    handle = lf.handle.job_handle(st.job_id)
    key = st.instance_key
    try:
        ray.get(handle.crash.remote(), timeout=30)
    except ray.exceptions.RayActorError:
        pass
    lf.wait_until(lambda: job_of(lf, bundle_id, replica, name).instance_key != key, f"{name} to die")


def test_the_backup_never_shares_the_primarys_node_while_another_fits(lf):
    b = Bundle(bundle_id="apart", resilience=ResiliencePolicy(same_node="forbid", same_zone="allow"),
               jobs=[BundleJob(name="enc", cls=Worker)])
    lf.handle.create_bundle(b)
    jobs = wait_running(lf, "apart")
    assert jobs["0/enc"].node_id != jobs["1/enc"].node_id
    assert not [e for e in lf.handle.job_events(kinds=["resilience_degraded"]) if e["data"]["bundle_id"] == "apart"]
    delete(lf, "apart")


def test_the_backup_shares_the_node_with_an_event_when_no_other_fits(lf):
    only_cuda = {"min_tier": "gpu_cuda", "fallback": False, "num_cpus": 0.1}
    b = Bundle(bundle_id="together", resilience=ResiliencePolicy(same_node="forbid", same_zone="allow"),
               jobs=[BundleJob(name="enc", cls=Worker, requirement=only_cuda)])
    lf.handle.create_bundle(b)
    jobs = wait_running(lf, "together")
    assert jobs["0/enc"].node_id == jobs["1/enc"].node_id  # one CUDA node: placed anyway (best-effort)
    degraded = [e for e in lf.handle.job_events(kinds=["resilience_degraded"]) if e["data"]["bundle_id"] == "together"]
    assert degraded and degraded[-1]["data"]["violated"] == ["same_node"]
    delete(lf, "together")


def test_separate_from_and_co_locate_with_hold_under_churn(lf):
    b = Bundle(bundle_id="rules", jobs=[BundleJob(name="a", cls=Worker), BundleJob(name="b", cls=Worker, co_locate_with=["a"]),
                                        BundleJob(name="c", cls=Worker, separate_from=["a"])])
    lf.handle.create_bundle(b)
    jobs = wait_running(lf, "rules")
    assert jobs["0/b"].node_id == jobs["0/a"].node_id and jobs["0/c"].node_id != jobs["0/a"].node_id
    names = {n.node_id: n for n in lf.history}
    victim = names[jobs["0/a"].node_id]
    lf.kill_node(victim.name)
    lf.wait_until(lambda: all(j.node_id != victim.node_id and j.state == JobState.RUNNING
                              for j in (job_of(lf, "rules", 0, n) for n in "abc")), "the rules' jobs re-placed", timeout_s=120)
    after = {n: job_of(lf, "rules", 0, n) for n in "abc"}
    assert after["b"].node_id == after["a"].node_id and after["c"].node_id != after["a"].node_id
    delete(lf, "rules")
    lf.add_node(victim.name, profile=victim.profile, cloud=CLOUD_BOXES[victim.name][1] if victim.name in CLOUD_BOXES else None)


def test_a_non_essential_job_past_its_ceiling_drops_alone(lf):
    b = Bundle(bundle_id="side", jobs=[BundleJob(name="main", cls=Worker),
                                       BundleJob(name="extra", cls=Worker, essential=False, max_restarts_per_hour=1)])
    lf.handle.create_bundle(b)
    wait_running(lf, "side")
    crash(lf, "side", 0, "extra")  # one restart: allowed
    lf.wait_until(lambda: job_of(lf, "side", 0, "extra").state == JobState.RUNNING, "extra back")
    crash(lf, "side", 0, "extra")  # the second failure within the hour: past the ceiling
    lf.wait_until(lambda: job_of(lf, "side", 0, "extra").state == JobState.DROPPED, "extra dropped")
    assert lf.handle.bundle("side").state == "live" and job_of(lf, "side", 0, "main").state == JobState.RUNNING
    dropped = [e for e in lf.handle.job_events(kinds=["job_dropped"]) if e["data"]["bundle_id"] == "side"]
    assert dropped and "restart ceiling" in dropped[-1]["data"]["reason"]
    delete(lf, "side")


def test_an_essential_job_past_its_ceiling_breaks_the_bundle_and_an_update_revives_it(lf):
    b = Bundle(bundle_id="brittle", jobs=[BundleJob(name="main", cls=Worker, max_restarts_per_hour=1),
                                          BundleJob(name="peer", cls=Worker)])
    lf.handle.create_bundle(b)
    wait_running(lf, "brittle")
    before = lf.handle.metrics()["bundles_broken"]
    crash(lf, "brittle", 0, "main")
    lf.wait_until(lambda: job_of(lf, "brittle", 0, "main").state == JobState.RUNNING, "main back")
    crash(lf, "brittle", 0, "main")
    lf.wait_until(lambda: lf.handle.bundle("brittle").state == "broken", "the bundle to break")
    lf.wait_until(lambda: job_of(lf, "brittle", 0, "peer").state == JobState.STOPPED, "every replica stopped")
    assert job_of(lf, "brittle", 0, "main").state == JobState.FAILED
    m = lf.handle.metrics()
    assert m["bundles_broken"] == before + 1 and "brittle" in m["broken_bundle_ids"]
    broken = [e for e in lf.handle.job_events(kinds=["bundle_broken"]) if e["data"]["bundle_id"] == "brittle"]
    assert broken and "restart ceiling" in broken[-1]["data"]["reason"]
    lf.handle.update_bundle(b)  # revives it: the broken mark and the restart history cleared
    jobs = wait_running(lf, "brittle")
    assert lf.handle.bundle("brittle").state == "live" and jobs["0/main"].restarts_last_hour == 0
    delete(lf, "brittle")


def test_a_job_refusing_its_spec_breaks_an_essential_bundle_on_the_first_try(lf):
    lf.handle.create_bundle(Bundle(bundle_id="refused", jobs=[BundleJob(name="bad", cls=Refuses, requirement={"min_tier": "cpu_ffmpeg", "num_cpus": 0.1})]))
    lf.wait_until(lambda: lf.handle.bundle("refused").state == "broken", "the bundle to break")
    st = job_of(lf, "refused", 0, "bad")
    assert st.state == JobState.FAILED and st.restarts_last_hour == 0 and "cannot run anywhere" in st.reason
    delete(lf, "refused")


def test_bad_bundles_are_refused_naming_every_error_and_nothing_is_stored(lf):
    before = lf.handle.bundles()
    bad = Bundle(bundle_id="bad", pool="nowhere", jobs=[
        BundleJob(name="x", cls=Worker), BundleJob(name="x", cls=Worker),
        BundleJob(name="y", cls=Worker, co_locate_with=["ghost"])])
    report = lf.handle.validate_bundle(bad)
    assert {"unknown_pool", "duplicate_job_name", "unknown_job"} <= report.codes()
    with pytest.raises(InvalidSpecError) as err:
        lf.handle.create_bundle(bad)
    text = str(err.value)
    assert "nowhere" in text and "ghost" in text and "'x'" in text
    assert lf.handle.bundles() == before
    assert lf.handle.validate_bundle_admission(bad).kind == "validation_errors"


def test_a_manual_job_waits_for_its_start_and_a_dry_run_acts_on_nothing(lf):
    b = Bundle(bundle_id="manual", jobs=[BundleJob(name="m", cls=Worker, start_mode="manual")])
    d = lf.handle.place_dry_run(b, 0, "m")
    assert d.status == "placed" and d.trace is not None
    assert lf.handle.validate_bundle_admission(b).kind == "ok"
    lf.handle.create_bundle(b)
    assert job_of(lf, "manual", 0, "m").state == JobState.PENDING
    lf.handle.start_bundle_job("manual", 0, "m")
    wait_running(lf, "manual")
    delete(lf, "manual")
    assert "manual" not in {x.bundle_id for x in lf.handle.bundles()}


def test_fabric_bundles_lists_a_bundle_and_its_jobs(lf, capsys):
    import json

    from fabric.cli import main

    b = Bundle(bundle_id="listed", resilience=ResiliencePolicy(same_node="forbid", same_zone="allow"),
               jobs=[BundleJob(name="enc", cls=Worker)])
    lf.handle.create_bundle(b)
    wait_running(lf, "listed")
    capsys.readouterr()
    assert main(["bundles", "--json"]) == 0  # in-process: this driver's connection
    rows = {r["bundle_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["listed"]["state"] == "live" and rows["listed"]["replicas"] == 2
    assert sorted((j["replica"], j["state"]) for j in rows["listed"]["jobs"]) == [("backup", "running"), ("primary", "running")]
    assert main(["bundles", "listed"]) == 0
    assert "bundle    listed" in capsys.readouterr().out
    assert main(["bundles", "nope"]) == 2
    assert "no bundle 'nope'" in capsys.readouterr().err
    delete(lf, "listed")


def test_same_cloud_forbid_keeps_the_backup_out_of_the_primarys_cloud(lf):
    h = lf.handle
    live = [n for n in lf.nodes if n.alive]
    by_cloud = {n.node_id: CLOUD_BOXES[n.name][1] for n in live if n.name in CLOUD_BOXES}
    others = [n for n in live if n.node_id not in by_cloud]
    assert sorted(by_cloud.values()) == ["aws", "gcp"]
    assert all(any(r.node_id == nid and r.cloud == c for r in h.nodes()) for nid, c in by_cloud.items())
    try:
        for n in others:  # only the two nodes that say their cloud take work
            h.cordon(n.node_id)
        # the aws node is the higher tier, so both replicas go there while nothing keeps them apart
        packed = Bundle(bundle_id="one-cloud", resilience=ResiliencePolicy(same_node="allow", same_zone="allow"),
                        jobs=[BundleJob(name="enc", cls=Worker)])  # the control
        h.create_bundle(packed)
        jobs = wait_running(lf, "one-cloud")
        assert by_cloud[jobs["0/enc"].node_id] == by_cloud[jobs["1/enc"].node_id] == "aws"
        delete(lf, "one-cloud")
        b = Bundle(bundle_id="clouds", resilience=ResiliencePolicy(same_node="allow", same_zone="allow", same_cloud="forbid"),
                   jobs=[BundleJob(name="enc", cls=Worker)])
        h.create_bundle(b)
        jobs = wait_running(lf, "clouds")
        assert (by_cloud[jobs["0/enc"].node_id], by_cloud[jobs["1/enc"].node_id]) == ("aws", "gcp")
        assert not [e for e in h.job_events(kinds=["resilience_degraded"]) if e["data"]["bundle_id"] == "clouds"]
        delete(lf, "clouds")
    finally:
        for n in others:
            h.uncordon(n.node_id)

"""Hot spares on a real local fabric (issue 15): one ``SpareReconcilerActor`` for the pool, started
by ``fabric.up``; target 2 -> two spare nodes appear (real ``ray start`` children of the
scheduler), each fetches its ``warm_for`` template's artifact (an ``images_prefetched`` event);
a ``prefer_spare`` job whose node dies recovers onto a spare, which stops being one, and a
replacement spare appears; lowering the target reaps one; a bad live list is refused whole; a
single-use job stopped on a node the provider made ends that node; terminating a node on request
ends a provider's node (its job stopped first) and refuses a node joined by hand untouched.

Five raylets at most: head, one fixed node, two spares and the replacement. Tests run in order.
"""

from __future__ import annotations

import sys

import pytest

ray = pytest.importorskip("ray")

from fabric import adaptive  # noqa: E402
from fabric.core.errors import SettingsError, TransitionError  # noqa: E402
from fabric.core.names import PROVIDER_LABEL  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

IP = "127.0.0.2"
SHAPE = {"name": "cpu-box", "profile": "cpu-only-box", "tier": "cpu_ffmpeg", "num_cpus": 2}


def settings_for(artifact: str) -> dict:
    return {
        "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "drain_grace_s": 30.0, "monitor_interval_s": 0.25,
                   "join_timeout_s": 90.0, "flap_toggles": 50},
        "failure": {"min_recovery_interval_s": 0.5},
        "scaling": {"enabled": False},
        "templates": {"encoder": {"artifacts": [artifact]}},
        "pools": [{"name": "default", "tiers": [
            {"name": "onprem"},
            {"name": "spares", "scale_out": "elastic", "provider": "local", "max_nodes": 3, "provision_timeout_s": 180,
             "candidate_shapes": [SHAPE]},
        ]}],
        "hot_spares": [{"pool": "default", "target_count": 2, "warm_for": ["encoder"], "provision_backoff_s": 5}],
    }


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    path = tmp_path_factory.mktemp("artifacts") / "encoder-model.bin"
    path.write_bytes(b"weights" * 1000)
    return f"file://{path}"


@pytest.fixture(scope="module")
def lf(artifact):
    with LocalFabric(["cpu-only-box"], settings=settings_for(artifact), max_slots=2, timeout_s=90,
                     node_ip_address=IP) as fabric_:
        yield fabric_


@adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60,
                 on_runtime_failure="prefer_spare", template="encoder")
class Encoder:
    def where(self) -> str:
        return ray.get_runtime_context().get_node_id()


def pool_spares(lf) -> dict:
    (pool,) = lf.handle.spares()
    return pool


def test_two_spares_appear_and_fetch_their_templates_artifacts(lf, artifact):
    pool = lf.wait_until(lambda: (p := pool_spares(lf)) and len(p["live"]) == 2 and p, "two live spares", timeout_s=180)
    assert pool["target"] == 2 and pool["warm_for"] == ["encoder"]
    for node in pool["live"]:
        spec = lf.wait_until(lambda: (s := lf.handle.spare_spec(node)) and artifact in s.warm and s,
                             f"spare {node[:12]} warm", timeout_s=60)
        assert spec.spare and spec.unconsumed and spec.warm_for == ("encoder",)
    fetched = [e["data"] for e in lf.handle.job_events(kinds=["images_prefetched"])]
    # every live spare fetched (a spare whose raylet died at its start was replaced, and fetched too)
    assert set(pool["live"]) <= {d["node_id"] for d in fetched}
    assert all(r["ok"] and r["uri"] == artifact for d in fetched for r in d["results"])
    assert [e["data"]["target"] for e in lf.handle.job_events(kinds=["spare_underflow"])][:1] == [2]


def test_a_prefer_spare_job_recovers_onto_a_spare_and_a_replacement_appears(lf):
    h = lf.handle
    spares = set(pool_spares(lf)["live"])
    job = Encoder.remote()
    first = job.result(job.wait_running(90).where.remote(), timeout_s=60)
    assert first not in spares  # at launch a job avoids spares (on_launch: avoid_spare)
    victim = next(n for n in lf.nodes if n.node_id == first)
    lf.kill_node(victim.name)
    lf.wait_until(lambda: (st := h.job(job.job_id)).binding is not None and st.binding.node_id in spares
                  and st.state.value == "running", "the job recovered onto a spare", timeout_s=120)
    second = job.result(job.wait_running(90).where.remote(), timeout_s=60)
    assert second in spares
    assert not h.spare_spec(second).spare  # a spare that took a job is an ordinary node from then on
    seen = next(n for n in h.nodes() if n.node_id == second)  # the handle's node view says the same
    assert not seen.spare and job.job_id in seen.jobs, (seen.spare, seen.jobs)
    assert all(n.spare for n in h.nodes() if n.node_id in spares - {second} and n.status.value == "active")

    def replaced():
        live = set(pool_spares(lf)["live"])
        return live if len(live) == 2 and second not in live and live - spares else None

    live = lf.wait_until(replaced, "a replacement spare", timeout_s=180)
    assert len(live - spares) == 1
    tags = [e["data"] for e in h.job_events(kinds=["spare_tagged"]) if e["data"]["node_id"] == second]
    assert [t["reason"] for t in tags] == ["consumed"]
    job.stop()


def test_lowering_the_target_reaps_one_and_returns_the_diff(lf):
    h = lf.handle
    before = {i["instance_id"] for i in h.provisions()["instances"]}
    diff = h.update_hot_spares([{"pool": "default", "target_count": 1, "warm_for": ["encoder"], "provision_backoff_s": 5}])
    assert diff == {"default": {"change": "changed", "fields": {"target_count": {"old": 2, "new": 1}}}}
    lf.wait_until(lambda: len(pool_spares(lf)["live"]) == 1, "one live spare", timeout_s=60)
    reaped = lf.wait_until(lambda: h.job_events(kinds=["spare_reaped"]), "a spare_reaped event", timeout_s=60)
    assert reaped[-1]["data"]["reason"] == "over_target"
    lf.wait_until(lambda: len({i["instance_id"] for i in h.provisions()["instances"]}) == len(before) - 1,
                  "the reaped node terminated", timeout_s=90)
    assert h.hot_spares()[0]["target_count"] == 1


def test_a_bad_live_list_is_refused_whole_and_changes_nothing(lf):
    h = lf.handle
    before = h.hot_spares()
    bad = [{"pool": "nowhere", "target_count": 1}, {"pool": "default", "target_count": 1},
           {"pool": "default", "target_count": 2, "shape": "no-such-shape"}]
    with pytest.raises(SettingsError) as err:
        h.update_hot_spares(bad)
    paths = {p.path for p in err.value.problems}
    assert {"hot_spares.0.pool", "hot_spares.2.shape"} <= paths and any(p.code.startswith("duplicate") for p in err.value.problems)
    assert h.hot_spares() == before


def test_fabric_status_and_pools_show_pool_tiers_spares_and_prospective_nodes(lf):
    import json
    import os
    import subprocess

    env = {**os.environ, "RAY_ADDRESS": lf.address}
    out = subprocess.run([sys.executable, "-m", "fabric", "pools", "--address", lf.address, "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    (pool,) = view["pools"]
    tiers = {t["pool_tier"]: t for t in pool["tiers"]}
    assert tiers["spares"]["provider"] == "local" and tiers["spares"]["max_nodes"] == 3 and tiers["spares"]["spares"] == 1
    assert pool["spares"]["target"] == 1 and pool["spares"]["live"] == 1 and pool["spares"]["warm_for"] == ["encoder"]
    text = subprocess.run([sys.executable, "-m", "fabric", "status", "--address", lf.address], env=env,
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "pool default" in text.stdout and "hot spares: 1/1 live" in text.stdout and "warm for encoder" in text.stdout
    assert max(len(line) for line in text.stdout.splitlines()) <= 100


@adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60, exclusive=True,
                 single_use=True, label_selector={PROVIDER_LABEL: "local"})
class OneShot:
    def where(self) -> str:
        return ray.get_runtime_context().get_node_id()


def test_a_stopped_single_use_job_ends_the_provider_node_it_ran_on(lf):
    h = lf.handle
    job = OneShot.remote()  # only a node the provider made has its label: the consumed spare, or the live one
    node = job.result(job.wait_running(120).where.remote(), timeout_s=60)
    seen = next(n for n in h.nodes() if n.node_id == node)
    assert seen.provider == "local" and seen.instance_id, (seen.provider, seen.instance_id)
    assert job.stop().value == "stopped"
    ended = lf.wait_until(lambda: [e["data"] for e in h.job_events(kinds=["single_use_ended"])
                                   if e["data"]["job_id"] == job.job_id], "a single_use_ended event", timeout_s=60)
    assert ended == [{"job_id": job.job_id, "node_id": node, "node_terminated": True}]
    lf.wait_until(lambda: seen.instance_id not in {i["instance_id"] for i in h.provisions()["instances"]},
                  "the node's instance terminated", timeout_s=90)
    lf.wait_until(lambda: not any(n["NodeID"] == node and n["Alive"] for n in ray.nodes())
                  and all(n.status.value != "active" for n in h.nodes() if n.node_id == node),
                  "the node gone from the fleet", timeout_s=90)


@adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60,
                 label_selector={PROVIDER_LABEL: "local"})
class OnProvided:
    def where(self) -> str:
        return ray.get_runtime_context().get_node_id()


def test_terminate_ends_a_provider_node_after_its_jobs_and_refuses_a_hand_joined_one(lf):
    h = lf.handle
    by_hand = lf.add_node("cpu-only-box")  # joined by hand again (it was killed above): no provider made it
    lf.wait_until(lambda: any(n.node_id == by_hand.node_id and n.status.value == "active" for n in h.nodes()),
                  "the hand-joined node active", timeout_s=90)
    terminated_before = len(h.job_events(kinds=["node_terminated"]))
    with pytest.raises(TransitionError) as refused:
        h.terminate_node(by_hand.node_id)
    assert refused.value.from_state == "joined by hand"
    assert by_hand.alive and any(n["NodeID"] == by_hand.node_id and n["Alive"] for n in ray.nodes())
    assert len(h.job_events(kinds=["node_terminated"])) == terminated_before  # nothing was asked to end
    assert not next(n for n in h.nodes() if n.node_id == by_hand.node_id).cordoned  # nor evicted

    job = OnProvided.remote()  # only a node the provider made has its label
    node = job.result(job.wait_running(120).where.remote(), timeout_s=60)
    seen = next(n for n in h.nodes() if n.node_id == node)
    ended = h.terminate_node(node)
    assert ended == {"node_id": node, "provider": "local", "instance_id": seen.instance_id, "jobs_stopped": [job.job_id]}
    noted = [e["data"] for e in h.job_events(kinds=["node_terminated"]) if e["data"]["instance_id"] == seen.instance_id]
    assert [d["reason"] for d in noted] == ["terminated on request"]
    lf.wait_until(lambda: seen.instance_id not in {i["instance_id"] for i in h.provisions()["instances"]},
                  "the node's instance terminated", timeout_s=90)
    lf.wait_until(lambda: not any(n["NodeID"] == node and n["Alive"] for n in ray.nodes()), "the node gone", timeout_s=90)
    st = h.job(job.job_id)
    assert st.binding is None or st.binding.node_id != node  # stopped there first: it recovers elsewhere by its policy
    assert st.state.value in ("pending", "recovering", "starting", "running")
    job.stop()

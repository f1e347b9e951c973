"""The fleet on a real local Ray cluster (issue 4): five profiles join, the registry and Ray agree,
nodes are lost, held, rejoined and collected by the health rules, the registry survives SIGKILL, and
spoofed or malformed registrations change nothing.

One module-scoped LocalFabric serves every test here (this machine has 2 cores). Tests run in file
order and each uses its own node, so one test's kills do not disturb another's assertions. No test
asserts a wall-clock duration: waits are bounded polls that fail saying what they waited for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray")

from fabric.core.errors import RegistrationError  # noqa: E402
from fabric.core.events import NodeCollected, NodeFlapHeld, NodeLost  # noqa: E402
from fabric.core.lifecycle import NodeStatus  # noqa: E402
from fabric.testing import FAST_FENCE, LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration

PROFILES = ["gpu-cuda-workstation", "steamdeck-apu", "cpu-only-box", "arm64-board", "edge-relay"]
EXPECT_TIER = {"gpu-cuda-workstation": "gpu_cuda", "steamdeck-apu": "gpu_apu", "cpu-only-box": "cpu_ffmpeg",
               "arm64-board": "cpu_ffmpeg", "edge-relay": "relay"}
GRACE_S = 12.0  # long enough that a rejoin registers before the old record is collected
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": GRACE_S,
                       "monitor_interval_s": 0.25, "join_timeout_s": 30.0, "reprobe_interval_s": 300.0}, "fence": FAST_FENCE}


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(PROFILES, settings=SETTINGS, scheduler=False, max_slots=2, timeout_s=90) as fabric_:
        yield fabric_


def records_by_id(lf):
    return {r.node_id: r for r in lf.handle.records()}


def events_of(lf, kind, node_id):
    return [e for e in lf.handle.fleet_events(0)[1] if isinstance(e, kind) and e.node_id == node_id]


def test_five_profiles_join_with_their_tiers_and_labels(lf):
    recs = {r.name: r for r in lf.handle.nodes()}
    assert set(recs) == set(PROFILES)
    for name in PROFILES:
        rec, node = recs[name], lf.node(name)
        assert rec.node_id == node.node_id and rec.status is NodeStatus.ACTIVE
        assert rec.tier.value == EXPECT_TIER[name] and rec.capabilities.name == name
        assert rec.last_seen is not None and not rec.cordoned and not rec.flap_held
    raw = {r.name: r for r in lf.handle.records()}
    assert raw["gpu-cuda-workstation"].labels["fabric.io/gpu"] == "GeForce-RTX-4070"
    assert raw["edge-relay"].labels["fabric.io/role"] == "relay"
    assert all(r.profile == r.name for r in raw.values())  # each probe read its node's recording


def test_ray_node_table_shows_fabric_labels_and_resources(lf):
    table = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
    for name in PROFILES:
        node = lf.node(name)
        row = table[node.node_id]
        assert row["Labels"]["fabric.io/tier"] == EXPECT_TIER[name]
        assert row["Labels"]["fabric.io/profile"] == name and row["Labels"]["fabric.io/name"] == name
        assert row["Resources"]["fabric.slots"] == node.resources["fabric.slots"]
        assert row["Resources"][f"fabric.tier.{EXPECT_TIER[name]}"] == 1.0


def test_probe_actors_run_on_their_own_nodes_and_heartbeat(lf):
    for name in PROFILES:
        node = lf.node(name)
        probe = ray.get_actor(f"fabric.probe.{node.node_id}", namespace="fabric")
        info = ray.get(probe.info.remote(), timeout=30)
        assert info["node_id"] == node.node_id and info["source"] == name and info["registered"]
        assert info["tier"] == EXPECT_TIER[name]
    before = {r.node_id: r.last_seen for r in lf.handle.records()}
    lf.wait_until(lambda: all(r.last_seen > before[r.node_id] for r in lf.handle.records()), "a fresh heartbeat from every node")


def test_fabric_actors_live_on_the_head_and_a_second_driver_finds_the_same_fabric(lf):
    head = lf.cluster.head_node.node_id
    assert ray.get(ray.get_actor("fabric.registry", namespace="fabric").ping.remote())["node_id"] == head
    assert lf.handle.health()["node_id"] == head
    code = ("import ray, fabric; ray.init(address=%r, log_to_driver=False); h = fabric.up(scheduler=False); "
            "print(sorted(r.name for r in h.nodes()))") % lf.address
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == str(sorted(PROFILES))
    # ... and up() from this driver again is idempotent: the same actors, nothing re-registered.
    pid = ray.get(ray.get_actor("fabric.registry", namespace="fabric").ping.remote())["pid"]
    import fabric

    fabric.up(SETTINGS, scheduler=False)
    assert ray.get(ray.get_actor("fabric.registry", namespace="fabric").ping.remote())["pid"] == pid
    assert len(lf.handle.records()) == len(PROFILES)


def test_spoofed_and_malformed_registrations_are_refused_and_change_nothing(lf):
    registry = ray.get_actor("fabric.registry", namespace="fabric")
    before = records_by_id(lf)
    good = before[lf.node("cpu-only-box").node_id]
    with pytest.raises(RegistrationError) as err:
        ray.get(registry.register.remote("f" * 56, good.capabilities.model_dump(mode="json")))
    assert err.value.node_id == "f" * 56 and err.value.field == "node_id"
    with pytest.raises(RegistrationError) as err:  # another node's id under a different name
        ray.get(registry.register.remote(good.node_id, {**good.capabilities.model_dump(mode="json"), "name": "impostor"}))
    assert err.value.field == "capabilities.name"
    with pytest.raises(RegistrationError) as err:
        ray.get(registry.register.remote(good.node_id, {"name": "cpu-only-box", "cpu_logical": "many"}))
    assert err.value.field == "capabilities.cpu_logical"
    with pytest.raises(RegistrationError):
        ray.get(registry.heartbeat.remote(good.node_id, {"cpu_percent": -1}))
    after = records_by_id(lf)
    assert set(after) == set(before)
    assert {k: (r.capabilities, r.status, r.name) for k, r in after.items()} == {k: (r.capabilities, r.status, r.name) for k, r in before.items()}


def test_registry_survives_sigkill_of_its_process(lf):
    registry = ray.get_actor("fabric.registry", namespace="fabric")
    info = ray.get(registry.ping.remote())
    before = {r.node_id: (r.name, r.capabilities, r.registered_at) for r in lf.handle.records()}
    os.kill(info["pid"], signal.SIGKILL)
    after_info = lf.wait_until(lambda: (i := ray.get(registry.ping.remote(), timeout=5)) and i["pid"] != info["pid"] and i,
                               "the registry actor to restart in a new process")
    assert after_info["store"] == info["store"]
    after = {r.node_id: (r.name, r.capabilities, r.registered_at) for r in lf.handle.records()}
    assert after == before
    # and it keeps taking heartbeats after the restart
    t = time.time()
    lf.wait_until(lambda: all(r.last_seen > t for r in lf.handle.records() if r.status is NodeStatus.ACTIVE), "heartbeats after the restart")


def test_killed_node_goes_offline_and_is_not_dead_before_the_drain_grace(lf):
    node = lf.kill_node("edge-relay")
    rec = lf.wait_until(lambda: (r := records_by_id(lf).get(node.node_id)) and r.status is NodeStatus.OFFLINE and r,
                        "edge-relay to go offline")
    lost = lf.wait_until(lambda: events_of(lf, NodeLost, node.node_id), "the NodeLost event")
    assert lost[0].ray_dead and lost[0].reason == "ray: node dead"
    # Inside the grace: offline, still a record, not collected.
    while time.time() < rec.status_since + GRACE_S * 0.5:
        r = records_by_id(lf).get(node.node_id)
        assert r is not None and r.status is NodeStatus.OFFLINE, f"edge-relay left offline inside the drain grace: {r}"
        assert node.node_id not in {c.node_id for c in lf.handle.collected()}
        time.sleep(0.25)
    lf.wait_until(lambda: node.node_id in {c.node_id for c in lf.handle.collected()}, "edge-relay to be collected after the grace",
                  timeout_s=GRACE_S + 30)
    collected = lf.wait_until(lambda: events_of(lf, NodeCollected, node.node_id), "the NodeCollected event")
    assert collected[0].lost_for_s >= GRACE_S and collected[0].status is NodeStatus.DEAD
    assert node.node_id not in records_by_id(lf)


def test_rejoin_before_the_old_node_drains_is_a_new_record_and_the_old_is_collected(lf):
    old = lf.kill_node("cpu-only-box")
    lf.wait_until(lambda: (r := records_by_id(lf).get(old.node_id)) and r.status is NodeStatus.OFFLINE, "cpu-only-box offline")
    new = lf.add_node("cpu-only-box")  # waits until registered
    assert new.node_id != old.node_id
    recs = records_by_id(lf)
    # the race: the new node appears before the old one drains, so both records exist
    assert old.node_id in recs, "the old record was collected before the rejoin registered (grace too short?)"
    assert recs[old.node_id].status is NodeStatus.OFFLINE
    assert recs[new.node_id].status is NodeStatus.ACTIVE and recs[new.node_id].name == "cpu-only-box"
    assert lf.handle.node("cpu-only-box").node_id == new.node_id  # by name: the newest
    lf.wait_until(lambda: old.node_id in {c.node_id for c in lf.handle.collected()}, "the old cpu-only-box record to be collected",
                  timeout_s=GRACE_S + 30)
    assert records_by_id(lf)[new.node_id].status is NodeStatus.ACTIVE


def test_a_node_that_flaps_three_times_is_held_off(lf):
    first = lf.kill_node("arm64-board")  # toggle 1
    lf.wait_until(lambda: (r := records_by_id(lf).get(first.node_id)) and r.status is NodeStatus.OFFLINE, "arm64-board offline")
    second = lf.add_node("arm64-board")  # toggle 2
    lf.kill_node("arm64-board")  # toggle 3: held
    lf.wait_until(lambda: events_of(lf, NodeFlapHeld, second.node_id), "a flap hold on arm64-board")
    held = lf.wait_until(lambda: (r := records_by_id(lf).get(second.node_id)) and r.held_until and r, "the hold in the registry")
    assert held.held_until > time.time() + 500  # held for 600 s by default
    third = lf.add_node("arm64-board")  # a rejoin during the hold is held too
    rec = lf.wait_until(lambda: (r := lf.handle.node(third.node_id)) and r.flap_held and r, "the rejoined arm64-board to be held")
    assert rec.status is NodeStatus.ACTIVE and rec.node_id == third.node_id


def test_partition_missed_heartbeats_go_offline_not_dead_and_recover(lf):
    # Ray still has the node; only its heartbeats stop (a network partition).
    node = lf.node("steamdeck-apu")
    probe = ray.get_actor(f"fabric.probe.{node.node_id}", namespace="fabric")
    ray.get(probe.pause.remote(SETTINGS["health"]["offline_after_s"] + 3))
    lf.wait_until(lambda: records_by_id(lf)[node.node_id].status is NodeStatus.OFFLINE, "steamdeck-apu offline by missed heartbeats")
    lost = lf.wait_until(lambda: events_of(lf, NodeLost, node.node_id), "the NodeLost event")
    assert not lost[-1].ray_dead and "missed heartbeats" in lost[-1].reason
    rec = lf.wait_until(lambda: (r := records_by_id(lf)[node.node_id]).status is NodeStatus.ACTIVE and r, "steamdeck-apu back when beats resume")
    assert node.node_id not in {c.node_id for c in lf.handle.collected()}
    assert rec.node_id == node.node_id  # the same record: a partition is not a rejoin


def test_health_monitor_survives_sigkill_and_reconciles_with_ray(lf):
    health = ray.get_actor("fabric.health", namespace="fabric")
    before = ray.get(health.status.remote())
    held_before = before["flaps"].get("arm64-board", {}).get("held_until")
    os.kill(before["pid"], signal.SIGKILL)
    victim = lf.kill_node("gpu-cuda-workstation")  # lost while the monitor is down
    after = lf.wait_until(lambda: (s := ray.get(health.status.remote(), timeout=5)) and s["pid"] != before["pid"] and s,
                          "the health monitor to restart in a new process")
    assert after["flaps"].get("arm64-board", {}).get("held_until") == held_before  # flap holds survive
    lf.wait_until(lambda: records_by_id(lf)[victim.node_id].status is NodeStatus.OFFLINE,
                  "the restarted monitor to notice the node Ray lost meanwhile")
    t = time.time()
    lf.wait_until(lambda: all(r.last_seen > t for r in lf.handle.records() if r.status is NodeStatus.ACTIVE), "heartbeats still flowing")

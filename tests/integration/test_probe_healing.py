"""Self-healing probes on a real local Ray cluster (issue 12): a node's ProbeActor killed more
often than its Ray restart budget (``max_restarts=3``) comes back every time, started again by
the health monitor; its heartbeats resume and the node is active and placeable again.

One module-scoped LocalFabric (2 nodes, 2 slots each: this machine has 2 cores). Flap damping is
set out of reach here: a probe killed five times in a minute may toggle its node offline and back
five times, and holding it off placement would then be the policy working, not the healing
failing. No test asserts a wall-clock duration: waits are bounded polls saying what they wait for.
"""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from fabric.core.lifecycle import NodeStatus  # noqa: E402
from fabric.core.placement import Requirement  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration

PROFILES = ["cpu-only-box", "edge-relay"]
KILLS = 5  # more than the probe's max_restarts=3: Ray alone would leave it dead after the fourth death
SETTINGS = {"health": {"heartbeat_interval_s": 0.25, "offline_after_s": 2.0, "drain_grace_s": 600.0,
                       "monitor_interval_s": 0.25, "join_timeout_s": 30.0, "reprobe_interval_s": 300.0,
                       "flap_toggles": 1000}}
NEEDS_CPU_FFMPEG = Requirement(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg")  # hard: only cpu-only-box serves it (edge-relay is relay)


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(PROFILES, settings=SETTINGS, scheduler=True, max_slots=2, timeout_s=120) as fabric_:
        yield fabric_


def probe_of(node_id):
    try:
        return ray.get_actor(f"fabric.probe.{node_id}", namespace="fabric")
    except ValueError:
        return None


def test_a_probe_killed_past_its_restart_budget_comes_back_every_time(lf):
    node = lf.node("cpu-only-box")
    assert lf.handle.select_worker(NEEDS_CPU_FFMPEG).node_name == "cpu-only-box"
    seen_actor_ids = set()
    for kill in range(1, KILLS + 1):
        handle = lf.wait_until(lambda: probe_of(node.node_id), f"a probe actor on cpu-only-box before kill {kill}", timeout_s=60)
        old_id = handle._actor_id.hex()
        seen_actor_ids.add(old_id)
        killed_at = time.time()
        ray.kill(handle, no_restart=True)  # dead for good as far as Ray is concerned

        def back():
            p = probe_of(node.node_id)
            if p is None or p._actor_id.hex() in seen_actor_ids:
                return None
            info = ray.get(p.info.remote(), timeout=10)
            return info if info["registered"] and info["beats"] >= 2 else None

        info = lf.wait_until(back, f"a new probe on cpu-only-box, registered and beating, after kill {kill}", timeout_s=90)
        assert info["node_id"] == node.node_id and info["last_error"] is None
        rec = lf.wait_until(lambda: next((r for r in lf.handle.records() if r.node_id == node.node_id
                                          and r.last_seen > killed_at and r.status is NodeStatus.ACTIVE), None),
                            f"cpu-only-box active with heartbeats newer than kill {kill}", timeout_s=60)
        assert not rec.flap_held(time.time())
        assignment = lf.wait_until(lambda: (a := lf.handle.select_worker(NEEDS_CPU_FFMPEG)).status == "assigned" and a,
                                   f"cpu-only-box placeable again after kill {kill}", timeout_s=60)
        assert assignment.node_id == node.node_id
    health = lf.handle.health()
    restarts = health["probe_restarts"]["nodes"][node.node_id]["restarts"]
    assert restarts >= KILLS and health["probe_restarts"]["total"] >= KILLS
    assert health["nodes"][node.node_id]["status"] == "active"


def test_the_other_node_was_left_alone(lf):
    other = lf.node("edge-relay")
    health = lf.handle.health()
    assert health["probe_restarts"]["nodes"].get(other.node_id, {}).get("restarts", 0) == 0  # its probe never went missing
    lf.wait_until(lambda: lf.handle.health()["nodes"][other.node_id]["status"] == "active", "edge-relay active", timeout_s=30)

"""Durable across heads, and auth on by default (issue 11).

- A head stopped and a new one started on the same store: the registry still holds every record,
  and the old cluster's nodes (which the new Ray does not know) are offline, never active.
- ``LocalFabric`` runs with Ray's token auth on when ``RAY_AUTH_MODE`` is unset, as ``ray.init()``
  does for a new local cluster.

Clusters here run one after another (2-core machine), each with one or two small raylets.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ray = pytest.importorskip("ray")

from fabric.core.lifecycle import NodeStatus  # noqa: E402
from fabric.store import FabricStore  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration

HEALTH = {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 600.0, "monitor_interval_s": 0.25,
          "join_timeout_s": 60.0}


def test_a_new_head_on_the_same_store_keeps_every_record(tmp_path):
    settings = {"store": {"path": str(tmp_path / "fabric.db")}, "health": HEALTH}
    with LocalFabric(["cpu-only-box", "edge-relay"], settings=settings, scheduler=False, max_slots=1) as first:
        before = {r.node_id: r for r in first.handle.records()}
        store = ray.get(ray.get_actor("fabric.registry", namespace="fabric").ping.remote(), timeout=30)["store"]
    assert len(before) == 2 and store == str(tmp_path / "fabric.db")
    # What the store holds as the new head starts: a node the old monitor saw leave while its head
    # was still shutting down is already offline; every record still active/draining must not stay so.
    on_disk = FabricStore(tmp_path / "fabric.db")
    still_up = {r.node_id for r in on_disk.list([NodeStatus.ACTIVE, NodeStatus.DRAINING])}
    assert set(before) == {r.node_id for r in on_disk.list()}
    on_disk.close()
    with LocalFabric(["cpu-only-box"], settings=settings, scheduler=False, max_slots=1) as second:
        reconciled = ray.get(ray.get_actor("fabric.registry", namespace="fabric").ping.remote(), timeout=30)["reconciled_offline"]
        after = {r.node_id: r for r in second.handle.records()}
        new = second.node("cpu-only-box").node_id
    assert sorted(reconciled) == sorted(still_up)  # the registry set them offline as it started
    for node_id, old in before.items():
        assert node_id in after, f"record of {old.name} lost with the head"
        assert after[node_id].status is NodeStatus.OFFLINE  # Ray no longer knows it: never active
        assert after[node_id].capabilities == old.capabilities
    assert after[new].status is NodeStatus.ACTIVE and new not in before


def test_local_fabric_runs_with_token_auth_when_the_mode_is_unset():
    script = textwrap.dedent("""
        import os
        os.environ.pop("RAY_AUTH_MODE", None)
        from fabric.cli.connect import RaySeam
        from fabric.testing import LocalFabric
        with LocalFabric([], fabric=False) as lf:
            print("mode", os.environ.get("RAY_AUTH_MODE"))
            print("without a token", RaySeam().ask_gcs(lf.address, None))
    """)
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "mode token" in out.stdout
    assert "without a token unauthenticated" in out.stdout  # the cluster refuses a client without the token

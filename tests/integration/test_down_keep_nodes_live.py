"""``fabric down --keep-nodes`` on a real local fabric: a node the ``local`` provider started (a real
``ray start --block`` in a session of its own) outlives ``fabric down --keep-nodes``, the next
``fabric up`` adopts it, and a plain ``fabric down`` then terminates it.

The head listens on 127.0.0.8 (the local provider's children join a loopback head that is not
127.0.0.1; see test_restart_providers.py). No scaling runs meanwhile (windows of an hour), so the
node ends only when a ``down`` ends it; the harness's own sweep of pid files stops it if a test fails.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")

from fabric.core.names import NAMESPACE, SCHEDULER  # noqa: E402
from fabric.testing import FAST_FENCE, LocalFabric  # noqa: E402
from fabric.testing.netns_net import pid_alive  # noqa: E402

pytestmark = pytest.mark.integration

IP = "127.0.0.8"
SHAPE = {"name": "cpu-box", "profile": "cpu-only-box", "tier": "cpu_ffmpeg", "num_cpus": 1}
SETTINGS = {
    "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 30.0, "monitor_interval_s": 0.25,
               "join_timeout_s": 90.0},
    "scaling": {"burst_queue_depth": 1000, "low_window_s": 3600.0, "high_window_s": 3600.0},
    "pools": [{"name": "default", "tiers": [
        {"name": "burst", "scale_out": "elastic", "provider": "local", "max_nodes": 1, "provision_timeout_s": 180,
         "candidate_shapes": [SHAPE]},
    ]}],
    "fence": FAST_FENCE,
}


@pytest.fixture(scope="module")
def lf():
    with LocalFabric([], settings=SETTINGS, timeout_s=90, node_ip_address=IP) as fabric_:
        yield fabric_


def pids_of(lf) -> dict[str, int]:
    """Instance id -> the pid of its ``ray start``, from the provider's pid files."""
    folder = next(lf.store_root().glob("**/providers/local"))
    return {p.name[:-len(".pid")]: int(p.read_text()) for p in folder.glob("*.pid")}


def fabric_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabric", *args], capture_output=True, text=True, timeout=180,
                          env=dict(os.environ))


def test_keep_nodes_leaves_the_provider_node_running_for_the_next_up_and_down_terminates_it(lf):
    import fabric

    sched = ray.get_actor(SCHEDULER, namespace=NAMESPACE)
    made = ray.get(sched.provision_node.remote("local", SHAPE, "default", "burst", False), timeout=180)
    instance = made["instance_id"]
    lf.wait_until(lambda: instance in {n.instance_id for n in lf.handle.nodes(["active"])}, "the provisioned node registered",
                  timeout_s=180)
    pid = pids_of(lf)[instance]
    assert pid_alive(pid)
    parent = ray.get(sched.pid.remote(), timeout=30)  # the scheduler's process: the node's ray start is its child

    out = fabric_cli("down", "--address", lf.address, "--keep-nodes")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fabric.scheduler" in out.stdout and "keep running (--keep-nodes)" in out.stdout
    with pytest.raises(ValueError):
        ray.get_actor(SCHEDULER, namespace=NAMESPACE)  # the actors stopped
    lf.wait_until(lambda: not pid_alive(parent), "the scheduler's process to end", timeout_s=60)
    assert pid_alive(pid), "the provisioned node did not outlive fabric down --keep-nodes"

    handle = fabric.up(SETTINGS, timeout_s=90)  # the new scheduler adopts it from the store
    view = handle.provisions()
    assert instance in {i["instance_id"] for i in view["instances"]}, view["instances"]
    assert [e for e in view["log"] if e["kind"] == "instance_adopted" and e["instance_id"] == instance]

    out = fabric_cli("down", "--address", lf.address)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "terminated the nodes the fabric's providers started" in out.stdout
    assert not pid_alive(pid), "the provisioned node outlived fabric down"
    fabric.up(SETTINGS, timeout_s=90)  # up again for the harness's own teardown

"""A SIGKILLed scheduler knows every node its providers started (issue 21), on a real local fabric:
two nodes of an elastic pool tier are provisioned by the ``local`` provider (real ``ray start
--block`` children of the scheduler's process, in sessions of their own, so they outlive it); the
scheduler is SIGKILLed and comes back; it adopts both from the job store, and once the pool is idle
the scaling path terminates both (their processes gone, their rows too). A third node provisioned
after a second kill is terminated by ``fabric.down()``: no child process of the provider is left
behind (checked before the test harness's own sweep of pid files could hide one).

The head listens on 127.0.0.6 (the local provider's children join a loopback head that is not
127.0.0.1; no other module uses that address). A held call keeps the pool busy until the restart,
so nothing is scaled down by the scheduler that made the nodes.
"""

from __future__ import annotations

import os
import sys
import time

import pytest

ray = pytest.importorskip("ray")

import fabric  # noqa: E402
from fabric import adaptive  # noqa: E402
from fabric.core.names import NAMESPACE, SCHEDULER  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.netns_net import pid_alive  # noqa: E402

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

IP = "127.0.0.6"
SHAPE = {"name": "cpu-box", "profile": "cpu-only-box", "tier": "cpu_ffmpeg", "num_cpus": 2}
SETTINGS = {
    "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 30.0, "monitor_interval_s": 0.25,
               "join_timeout_s": 90.0},
    "scaling": {"burst_queue_depth": 1000, "low_window_s": 3.0, "high_window_s": 3600.0},
    "pools": [{"name": "default", "tiers": [
        {"name": "onprem"},
        {"name": "burst", "scale_out": "elastic", "provider": "local", "max_nodes": 3, "provision_timeout_s": 180,
         "candidate_shapes": [SHAPE]},
    ]}],
}


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(["cpu-only-box"], settings=SETTINGS, max_slots=2, timeout_s=90, node_ip_address=IP) as fabric_:
        yield fabric_


def held(gate: str) -> str:
    """Holds its slot until the gate file exists (the pool stays busy: nothing is scaled down)."""
    while not os.path.exists(gate):
        time.sleep(0.05)
    return "done"


def scheduler():
    return ray.get_actor(SCHEDULER, namespace=NAMESPACE)


def kill_scheduler(lf) -> None:
    lf.kill_scheduler()


def provision(n: int) -> list[dict]:
    sched = scheduler()
    return [ray.get(sched.provision_node.remote("local", SHAPE, "default", "burst", False), timeout=180) for _ in range(n)]


def pids_of(lf) -> dict[str, int]:
    """Instance id -> the pid of its ``ray start``, from the provider's pid files."""
    folder = next(lf.store_root().glob("**/providers/local"))
    return {p.name[:-len(".pid")]: int(p.read_text()) for p in folder.glob("*.pid")}


def what_became_of(lf, ids: set[str]) -> str:
    """The provisioned nodes' ``ray start`` logs (their tails), Ray's nodes and the registry's records."""
    folder = next(lf.store_root().glob("**/providers/local"), None)
    lines = [f"pid files: {pids_of(lf) if folder else 'no provider folder'}"]
    for instance_id in sorted(ids):
        log = folder / f"{instance_id}.log" if folder else None
        tail = log.read_text(errors="replace").splitlines()[-15:] if log and log.exists() else ["(no log)"]
        lines += [f"-- {instance_id} ray start log:", *tail]
    lines.append(f"ray nodes: {[(n['NodeID'][:12], n['Alive'], n.get('Labels', {})) for n in ray.nodes()]}")
    lines.append(f"registry: {[(n.name, n.status.value, n.instance_id, n.running) for n in lf.handle.nodes()]}")
    lines.append(f"scale-downs: {[e['data'] for e in lf.handle.job_events(kinds=['scale_down'])]}")
    return "\n".join(lines)


def test_scale_down_after_a_restart_terminates_the_two_nodes_the_old_scheduler_provisioned(lf, tmp_path):
    gate = str(tmp_path / "gate")
    call = adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=1)(held)
    busy = call.remote(gate)  # the pool is in use: nothing is idle to scale down yet
    lf.wait_until(lambda: sum(n.running for n in lf.handle.nodes(["active"])) == 1 or ray.wait([busy], timeout=0)[0],
                  "the held call running", timeout_s=60)
    assert not ray.wait([busy], timeout=0)[0], ray.get(busy)  # it holds its slot (an early end raises here)
    made = provision(2)
    ids = {n["instance_id"] for n in made}
    try:
        lf.wait_until(lambda: {n.instance_id for n in lf.handle.nodes(["active"])} >= ids, "both nodes registered",
                      timeout_s=180)
    except TimeoutError as exc:  # say what became of them: each node's ray start log, Ray's view, the registry's
        raise AssertionError(f"{exc}\n{what_became_of(lf, ids)}") from None
    pids = pids_of(lf)
    assert set(pids) == ids and all(pid_alive(p) for p in pids.values())
    kill_scheduler(lf)
    view = lf.handle.provisions()
    assert {i["instance_id"] for i in view["instances"]} == ids, view["instances"]  # adopted, both
    assert [e for e in view["log"] if e["kind"] == "instance_adopted"]
    assert all(pid_alive(p) for p in pids.values())  # nothing was terminated by the restart itself
    open(gate, "w").close()  # idle now: the scaling window runs on the new scheduler
    assert ray.get(busy, timeout=60) == "done"
    lf.wait_until(lambda: not any(pid_alive(p) for p in pids.values()), "both provisioned nodes terminated", timeout_s=120)
    view = lf.handle.provisions()
    assert not view["instances"] and {e["instance_id"] for e in view["log"] if e["kind"] == "node_terminated"} >= ids
    assert [e for e in lf.handle.job_events(kinds=["scale_down"]) if e["data"]["instance_id"] in ids]
    assert not pids_of(lf)  # no pid file left: none of them is still the provider's


def test_fabric_down_after_a_restart_leaves_no_child_of_the_provider_behind(lf, tmp_path):
    gate = str(tmp_path / "gate")
    busy = adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=1)(held).remote(gate)
    (made,) = provision(1)
    pid = pids_of(lf)[made["instance_id"]]
    kill_scheduler(lf)
    assert [i["instance_id"] for i in lf.handle.provisions()["instances"]] == [made["instance_id"]]
    open(gate, "w").close()
    ray.get(busy, timeout=60)
    fabric.down()  # the fabric's own down, before the harness's sweep of pid files
    assert not pid_alive(pid), "the provisioned node outlived fabric down"
    assert not pids_of(lf)

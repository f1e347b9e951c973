"""The cascade acts on a real local fabric (issue 15): a pool ``fixed -> elastic(local, max_nodes
2) -> elastic(local)``; a burst fills the fixed tier, provisions two nodes in the second pool tier
(real ``ray start --block`` children of the scheduler), then spills to the third; each provisioned
node registers in its pool tier and serves the calls that waited for it (2 slots a node: 8 calls);
once the pool is idle for the scaling window, the provisioned nodes are scaled down and the fleet
is the fixed pool tier again. A job whose instance died recovers away from its node onto one the
cascade provisions for it: once that node registers, the job's restart history is cleared.

A second pool ``ci`` has one pool tier whose provider is ``command``: its script starts a real local
node that runs the ``fabric join --instance ID`` line the provision handed it; a call for that pool
gets the node, matched to its provision by the instance id, and idle, the node is terminated
through the script.

The head listens on 127.0.0.2 (the local provider's children join a loopback head: see
``LocalFabric``). Five raylets at most: head, one fixed node, three provisioned. Calls hold their
slots until the test opens a gate file, so the burst's shape does not depend on timing.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from fabric import adaptive  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.netns_net import pid_alive  # noqa: E402

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

IP = "127.0.0.2"
SHAPE = {"name": "cpu-box", "profile": "cpu-only-box", "tier": "cpu_ffmpeg", "num_cpus": 2}
SETTINGS = {
    "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 30.0, "monitor_interval_s": 0.25,
               "join_timeout_s": 90.0},
    "queue_timeout_s": 240.0,
    "failure": {"min_recovery_interval_s": 0.5},  # the job test's recovery is not held back 5 s
    # the burst rule stays out of it (the cascade provisions on demand); idle scale-down after 3 s
    "scaling": {"burst_queue_depth": 1000, "low_window_s": 3.0, "high_window_s": 3600.0},
    "pools": [{"name": "default", "tiers": [
        {"name": "onprem"},
        {"name": "burst", "scale_out": "elastic", "provider": "local", "max_nodes": 2, "provision_timeout_s": 180,
         "candidate_shapes": [SHAPE]},
        {"name": "overflow", "scale_out": "elastic", "provider": "local", "provision_timeout_s": 180,
         "candidate_shapes": [SHAPE]},
    ]}],
}


MACHINES = Path(__file__).resolve().parents[1] / "fixtures" / "command_provider" / "machines.py"


def command_pool(folder: Path) -> dict:
    """A pool ``ci`` whose one pool tier's machines come from a ``command`` provider's script
    (``tests/fixtures/command_provider/machines.py``: its machines are local nodes that run the
    ``fabric join`` line they are handed), its state in ``folder``."""
    wrapper = folder / "machines"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {MACHINES} \"$@\"\n")
    wrapper.chmod(0o755)
    (folder / "token").write_text("not-a-real-token\n")
    return {"name": "ci", "tiers": [
        {"name": "runners", "scale_out": "elastic", "provider": "command", "max_nodes": 1, "provision_timeout_s": 120,
         "candidate_shapes": [{**SHAPE, "name": "ci-box"}],
         "command": {"provision": str(wrapper), "terminate": str(wrapper), "list": str(wrapper), "timeout_s": 60,
                     "env": {"MACHINES_DIR": str(folder), "MACHINES_NODE_IP": IP},
                     "secret_files": {"MACHINES_TOKEN": str(folder / "token")}}}]}


@pytest.fixture(scope="module")
def machines(tmp_path_factory):
    folder = tmp_path_factory.mktemp("machines")
    yield folder
    for record in folder.glob("*.json"):  # a node a failed test left: its session, by the pid the script recorded
        try:
            os.killpg(json.loads(record.read_text())["pid"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.fixture(scope="module")
def lf(machines):
    settings = {**SETTINGS, "pools": [*SETTINGS["pools"], command_pool(machines)]}
    with LocalFabric(["cpu-only-box"], settings=settings, max_slots=2, timeout_s=90, node_ip_address=IP) as fabric_:
        yield fabric_


def held(gate: str, i: int) -> str:
    """One call: holds its slot until the gate file exists; answers the node it ran on."""
    while not os.path.exists(gate):
        time.sleep(0.05)
    return ray.get_runtime_context().get_node_id()


def test_a_burst_fills_the_fixed_tier_then_provisions_up_to_max_nodes_then_spills_on(lf, tmp_path):
    gate = str(tmp_path / "gate")
    call = adaptive.remote(min_tier="cpu_ffmpeg", fallback=False, num_cpus=1)(held)
    refs = [call.remote(gate, i) for i in range(8)]
    h = lf.handle

    def provisioned():
        rows = [n for n in h.nodes(["active"]) if n.pool_tier in ("burst", "overflow")]
        return rows if len(rows) == 3 else None

    rows = lf.wait_until(provisioned, "three provisioned nodes registered", timeout_s=240)
    by_tier = collections.Counter(n.pool_tier for n in rows)
    assert by_tier == {"burst": 2, "overflow": 1}, [e.get("error") for e in h.provisions()["log"] if "fail" in e["kind"]]  # max_nodes 2 in the second pool tier, the rest spilled on
    assert all(n.instance_id and n.provider == "local" and n.capabilities.tier.value == "cpu_ffmpeg" for n in rows)
    view = lf.wait_until(lambda: (v := h.provisions()) and len(v["serving_s"]) == 3 and not v["pending"] and v,
                         "the scheduler's view of the three registrations", timeout_s=60)
    assert [i["pool_tier"] for i in view["instances"]].count("burst") == 2
    assert all(s > 0 for s in view["serving_s"].values()), [e.get("error") for e in view["log"] if "fail" in e["kind"]]
    from fabric.runtime.control import running_calls

    lf.wait_until(lambda: sum(running_calls().values()) == 8, "all eight calls running", timeout_s=60)
    open(gate, "w").close()
    ran = ray.get(refs, timeout=120)
    tiers = {n.node_id: n.pool_tier or "onprem" for n in h.nodes()}  # no label: the pool's fixed tier
    assert collections.Counter(tiers.get(node) for node in ran) == {"onprem": 2, "burst": 4, "overflow": 2}
    events = [e["kind"] for e in h.job_events(kinds=["provision_requested", "node_provisioned"])]
    assert events.count("provision_requested") == 3 and events.count("node_provisioned") == 3
    m = h.metrics()
    assert m["provisions_requested"] == 3 and m["provisions_registered"] == 3 and m["provisions_failed"] == 0


def test_an_idle_pool_scales_back_to_its_fixed_tier(lf):
    h = lf.handle

    def back_to_fixed():
        active = [n for n in h.nodes(["active"])]
        return active if {n.pool_tier or "onprem" for n in active} == {"onprem"} and not h.provisions()["instances"] else None

    lf.wait_until(back_to_fixed, "the provisioned nodes scaled down", timeout_s=120)
    downs = [e["data"] for e in h.job_events(kinds=["scale_down"])]
    assert sorted(d["pool_tier"] for d in downs) == ["burst", "burst", "overflow"]
    assert all(d["reason"] == "low_utilization" for d in downs)


@adaptive.remote(min_tier="cpu_ffmpeg", fallback=False, num_cpus=1, max_restarts_per_hour=50, call_timeout_s=240)
class Worker:
    def pid(self) -> int:
        return os.getpid()


def test_a_node_provisioned_for_a_recovering_job_clears_its_restart_history(lf):
    h = lf.handle
    job = Worker.remote()
    pid = ray.get(job.pid.remote(), timeout=120)
    first = h.job(job.job_id).node_id
    assert {n.node_id: n.pool_tier or "onprem" for n in h.nodes()}[first] == "onprem"
    os.kill(pid, signal.SIGKILL)  # a counted restart; its recovery keeps away from the only fixed node
    cleared = lf.wait_until(lambda: [e["data"] for e in h.job_events(kinds=["restarts_cleared"])
                                     if e["data"]["job_id"] == job.job_id], "the provisioned node clears it", timeout_s=240)
    ray.get(job.wait_running(240).pid.remote(), timeout=60)
    status = h.job(job.job_id)
    tiers = {n.node_id: n.pool_tier for n in h.nodes()}
    assert cleared[0]["cleared"] == 1 and tiers[cleared[0]["node_id"]] == "burst"
    assert status.node_id == cleared[0]["node_id"] and status.restarts_last_hour == 0
    assert "recovering" in [s for _, s, _ in status.history]
    job.stop()


def node_here() -> str:
    return ray.get_runtime_context().get_node_id()


def test_a_command_pool_tier_provisions_through_its_script_and_the_machine_joins_with_its_instance_id(lf, machines):
    h = lf.handle
    call = adaptive.remote(min_tier="cpu_ffmpeg", fallback=False, num_cpus=1, pool="ci")(node_here)
    ran = ray.get(call.remote(), timeout=180)
    rec = next(n for n in h.nodes() if n.node_id == ran)
    assert (rec.pool, rec.pool_tier, rec.provider) == ("ci", "runners", "command") and rec.instance_id.startswith("cmd-")
    calls = [json.loads(line) for line in (machines / "calls.jsonl").read_text().splitlines()]
    actions = [c["action"] for c in calls]
    assert actions[0] == "list" and actions.count("provision") == 1  # the scheduler's start asked list first
    join = next(c for c in calls if c["action"] == "provision")["join"]["argv"]
    assert join[join.index("--instance") + 1] == rec.instance_id and join[join.index("--address") + 1] == lf.address
    assert "not-a-real-token" not in json.dumps(calls)  # the secret reached the script by its environment only
    view = h.provisions()
    assert [(i["provider"], i["instance_id"]) for i in view["instances"] if i["pool"] == "ci"] == [("command", rec.instance_id)]
    assert view["serving_s"].get(rec.instance_id, 0) > 0
    pid = json.loads((machines / f"{rec.instance_id}.json").read_text())["pid"]
    # idle for the scaling window: the scheduler terminates it through the script, which stops the node
    lf.wait_until(lambda: not (machines / f"{rec.instance_id}.json").exists(), "the idle command node terminated", timeout_s=120)
    assert [c["action"] for c in map(json.loads, (machines / "calls.jsonl").read_text().splitlines())][-1] == "terminate"
    lf.wait_until(lambda: not pid_alive(pid), "its node's process gone", timeout_s=60)
    lf.wait_until(lambda: not any(i["provider"] == "command" for i in h.provisions()["instances"]),
                  "the instance no longer listed once its terminate script answered", timeout_s=30)
    downs = [e["data"] for e in h.job_events(kinds=["scale_down"]) if e["data"].get("pool_tier") == "runners"]
    assert len(downs) == 1

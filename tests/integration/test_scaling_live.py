"""The scaler acts on a real local fabric: vertical scaling (opt-in) and the burst rule, with their
windows made small. The pool: ``onprem`` (one node of 2 slots) -> ``burst`` (elastic, ``local``
provider, at most 3 nodes of 2 slots).

- Vertical (``vertical_start_share: 0.5``, ``vertical_step: 1``): the fixed node joins with a cap of
  1 slot; one call held there keeps it over ``high_utilization`` for ``high_window_s``, and it is
  raised to its ceiling of 2 (``concurrency_raised``).
- Burst (``burst_queue_depth: 2``, ``burst_window_s: 1``, ``group_interval_s: 300``): calls that only
  a ``burst`` node may run (a label selector on the pool tier, which the cascade cannot provision
  for: a new node's labels are unknown but its tier) queue in the scheduler. The burst provisions
  one worker group from the pool's first elastic pool tier; its node registers there, joins at its
  start cap, is raised, and runs the calls. The queue stays deeper than the threshold well past
  the next burst window, with nothing in flight and room under ``max_nodes``: the pool tier's rate
  limit is all that keeps a second group away, and none comes.

The head listens on 127.0.0.2 (the local provider's children join a loopback head: see
``LocalFabric``). Calls hold their slots until the test opens a gate file, so the load does not
depend on timing; every wait has a deadline.
"""

from __future__ import annotations

import os
import sys
import time

import pytest

ray = pytest.importorskip("ray")

from fabric import adaptive  # noqa: E402
from fabric.core.names import POOL_TIER_LABEL  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

from test_cascade_live import held  # noqa: E402 - one call that holds its slot until a gate file exists

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

IP = "127.0.0.2"
SHAPE = {"name": "cpu-box", "profile": "cpu-only-box", "tier": "cpu_ffmpeg", "num_cpus": 2}
BURST_DEPTH, BURST_WINDOW_S = 2, 1.0
SETTINGS = {
    "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 30.0, "monitor_interval_s": 0.25,
               "join_timeout_s": 90.0},
    "queue_timeout_s": 180.0,
    "scaling": {"burst_queue_depth": BURST_DEPTH, "burst_window_s": BURST_WINDOW_S, "group_interval_s": 300.0,
                "high_window_s": 1.0, "low_window_s": 3600.0, "vertical_start_share": 0.5, "vertical_step": 1},
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




def raises_of(h, node_id: str) -> list[dict]:
    return [e["data"] for e in h.job_events(kinds=["concurrency_raised"]) if e["data"]["node_id"] == node_id]


def test_a_node_joins_at_its_start_cap_and_sustained_load_raises_it_to_its_ceiling(lf, tmp_path):
    h = lf.handle

    def fixed_in_the_schedulers_view():
        rows = [n for n in h.nodes(["active"]) if n.pool_tier is None]
        return rows[0] if len(rows) == 1 and rows[0].max_concurrent_tasks is not None else None

    fixed = lf.wait_until(fixed_in_the_schedulers_view, "the fixed node in the scheduler's view", timeout_s=30)
    assert fixed.capabilities.limitations.max_concurrent_tasks == 2  # its probed limit, Ray's fabric.slots
    assert (fixed.max_concurrent_tasks, fixed.slots) == (1, 1)  # ceil(2 × 0.5): what placement uses
    assert raises_of(h, fixed.node_id) == []  # idle: nothing raised it

    gate = str(tmp_path / "gate")
    ref = adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.5)(held).remote(gate, 0)
    raised = lf.wait_until(lambda: raises_of(h, fixed.node_id) or None, "the busy node raised", timeout_s=60)
    assert raised == [{"node_id": fixed.node_id, "slots": 2, "reason": "high_utilization"}]
    now = next(n for n in h.nodes(["active"]) if n.node_id == fixed.node_id)
    assert (now.max_concurrent_tasks, now.slots) == (2, 2)  # its ceiling: never past it
    open(gate, "w").close()
    assert ray.get(ref, timeout=60) == fixed.node_id
    assert h.job_events(kinds=["scale_out"]) == []  # the raise was the pool's growth: no group


def test_a_burst_provisions_one_group_and_the_rate_limit_holds_a_second_one_off(lf, tmp_path):
    h = lf.handle
    gate = str(tmp_path / "gate")
    call = adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.5, label_selector={POOL_TIER_LABEL: "burst"})(held)
    refs = [call.remote(gate, i) for i in range(6)]

    outs = lf.wait_until(lambda: h.job_events(kinds=["scale_out"]) or None, "the burst's worker group", timeout_s=60)
    assert [(e["data"]["pool_tier"], e["data"]["count"], e["data"]["reason"]) for e in outs] == [("burst", 1, "burst")]
    node = lf.wait_until(lambda: next((n for n in h.nodes(["active"]) if n.pool_tier == "burst"), None),
                         "the group's node registered in the burst pool tier", timeout_s=180)
    assert node.provider == "local" and node.instance_id and node.capabilities.limitations.max_concurrent_tasks == 2
    # it joined at its start cap (1 of 2) and the burst or its own load raised it, one step, to its ceiling
    raised = lf.wait_until(lambda: raises_of(h, node.node_id) or None, "the group's node raised", timeout_s=60)
    assert [(d["slots"], d["reason"] in ("burst", "high_utilization")) for d in raised] == [(2, True)]
    lf.wait_until(lambda: h.metrics()["queue_depth"] == 4, "two calls running there, four queued", timeout_s=60)

    # a still-deep queue, nothing in flight, room under max_nodes, the node at its ceiling since the raise
    # (which reset the burst window): the next window runs out inside this, and no second group comes
    until = time.monotonic() + 2 * BURST_WINDOW_S
    while time.monotonic() < until:
        assert h.metrics()["queue_depth"] > BURST_DEPTH
        time.sleep(0.25)
    view = h.provisions()
    assert not view["pending"] and [i["pool_tier"] for i in view["instances"]] == ["burst"]
    assert len(h.job_events(kinds=["scale_out"])) == 1 and len(raises_of(h, node.node_id)) == 1

    open(gate, "w").close()
    assert ray.get(refs, timeout=120) == [node.node_id] * 6  # the queued work ran on the group's node
    assert len(h.job_events(kinds=["scale_out"])) == 1

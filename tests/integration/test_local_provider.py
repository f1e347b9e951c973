"""The ``local`` provider against a real local fabric: a provisioned node joins Ray with its
labels, registers with the fabric in its pool tier, and leaves when terminated; refusals leave
no process behind.

The head listens on 127.0.0.2 (see ``LocalFabric``: Ray 2.60 rewrites ``127.0.0.1`` in a join
address to the machine's routable address, and a real ``ray start --address`` refuses to run
with the loopback switch on, which the provider drops from its children's environment). Every
node is a ``ray start --block`` child of this test process, stopped through the provider by the
pid it holds; ``finally`` closes the provider (terminating what is left) and the fabric.
"""

from __future__ import annotations

import os
import time

import pytest

ray = pytest.importorskip("ray")

from fabric.core.lifecycle import NodeStatus  # noqa: E402
from fabric.core.names import POOL_LABEL, POOL_TIER_LABEL, PROFILE_LABEL  # noqa: E402
from fabric.core.settings import NodeShape  # noqa: E402
from fabric.providers import INSTANCE_LABEL, SPARE_LABEL, LocalProvider, ProviderError, providers_for  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration

IP = "127.0.0.2"
SHAPE = {"name": "cpu-box", "profile": "cpu-only-box"}
SETTINGS = {
    "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 30.0, "monitor_interval_s": 0.25,
               "join_timeout_s": 60.0},
    "pools": [{"name": "default", "tiers": [
        {"name": "fixed"},
        {"name": "burst", "scale_out": "elastic", "provider": "local", "max_nodes": 2, "candidate_shapes": [SHAPE]},
    ]}],
}


@pytest.fixture(scope="module")
def lf():
    with LocalFabric([], settings=SETTINGS, scheduler=False, timeout_s=90, node_ip_address=IP) as fabric_:
        yield fabric_


def session_members(sid: int) -> list[int]:
    """Live processes still in the session a node's ray start led (none once it is terminated)."""
    import psutil

    out = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) == sid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except (OSError, psutil.Error):
            pass
    return out


def ray_row(instance_id: str) -> dict | None:
    return next((n for n in ray.nodes() if n["Labels"].get(INSTANCE_LABEL) == instance_id), None)


def test_provisioned_spare_joins_labelled_registers_in_its_pool_tier_and_leaves_on_terminate(lf, tmp_path):
    provider = providers_for(lf.settings, address=lf.address, log_dir=tmp_path / "logs")["local"]
    assert isinstance(provider, LocalProvider) and provider.node_ip_address == IP  # the head's loopback address
    shape = lf.settings.pools[0].tiers[1].candidate_shapes[0]
    try:
        t0 = time.monotonic()
        node = provider.provision(shape, pool="default", pool_tier="burst", spare=True)
        provisioned_s = time.monotonic() - t0
        assert node.spare and node.pool_tier == "burst" and node.profile == "cpu-only-box" and node.pid
        assert [n.instance_id for n in provider.list()] == [node.instance_id]

        row = lf.wait_until(lambda: (r := ray_row(node.instance_id)) and r["Alive"] and r, "the node in ray.nodes()", timeout_s=60)
        labels = row["Labels"]
        assert labels[POOL_LABEL] == "default" and labels[POOL_TIER_LABEL] == "burst" and labels[SPARE_LABEL] == "true"
        assert labels[PROFILE_LABEL] == "cpu-only-box" and labels["fabric.io/name"] == node.instance_id
        assert row["Resources"]["fabric.slots"] == 2 and row["NodeManagerAddress"] == IP

        rec = lf.wait_until(lambda: next((r for r in lf.handle.records(["active"]) if r.node_id == row["NodeID"]), None),
                            "the node's registration", timeout_s=90)
        registered_s = time.monotonic() - t0
        assert rec.name == node.instance_id and rec.labels[INSTANCE_LABEL] == node.instance_id
        assert rec.profile == "cpu-only-box" and rec.capabilities.tier.value == "cpu_ffmpeg"  # the probe replayed the profile
        view = next(n for n in lf.handle.nodes() if n.node_id == row["NodeID"])
        assert view.pool == "default" and view.pool_tier == "burst"
        print(f"\nlocal provider: provision returned after {provisioned_s:.2f} s, node registered {registered_s:.2f} s after provision")

        t1 = time.monotonic()
        provider.terminate(node.instance_id)
        terminated_s = time.monotonic() - t1
        assert provider.list() == [] and session_members(node.pid) == []  # its whole session is gone
        lf.wait_until(lambda: not ray_row(node.instance_id)["Alive"], "Ray to mark the node dead", timeout_s=60)
        dead_s = time.monotonic() - t1
        print(f"local provider: terminate took {terminated_s:.2f} s, Ray marked the node dead {dead_s:.2f} s after it")
        provider.terminate(node.instance_id)  # already ended: nothing to do
        lf.wait_until(lambda: all(r.status is not NodeStatus.ACTIVE for r in lf.handle.records() if r.node_id == row["NodeID"]),
                      "the fabric to see the node go", timeout_s=60)
    finally:
        provider.close()


def test_refusals_and_failed_starts_leave_no_process_behind(lf, tmp_path):
    provider = LocalProvider(lf.address, node_ip_address=IP, log_dir=tmp_path / "logs")
    before = {n["NodeID"] for n in ray.nodes()}
    try:
        with pytest.raises(ProviderError, match="no instance 'local-nope'") as info:
            provider.terminate("local-nope")
        assert info.value.reason == "unknown_instance"

        with pytest.raises(ProviderError) as info:
            provider.provision(NodeShape(name="big-box", profile="no-such-box"), pool="default", pool_tier="burst")
        assert info.value.reason == "unknown_profile" and "no-such-box" in str(info.value) and "big-box" in str(info.value)
        assert provider.list() == [] and not (tmp_path / "logs").exists()  # refused before any process

        # A ray start that exits at once (here: the loopback switch put back, which ray start --address refuses).
        failing = LocalProvider(lf.address, node_ip_address=IP, log_dir=tmp_path / "failing",
                                env={"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
        try:
            with pytest.raises(ProviderError) as info:
                failing.provision(NodeShape(**SHAPE), pool="default", pool_tier="burst")
            err = info.value
            assert err.reason == "start_failed" and err.instance_id and "Multi-node Ray clusters" in err.log_tail
            assert failing.list() == [] and failing.exit_code(err.instance_id) not in (None, 0)
            pid_log = tmp_path / "failing" / f"{err.instance_id}.log"
            assert pid_log.is_file()
        finally:
            failing.close()
        assert {n["NodeID"] for n in ray.nodes()} == before  # no node joined
    finally:
        provider.close()

"""Reclaiming a node on purpose (issue 16), without Ray: ``LocalProvider.reclaim`` notifies first
(the node, the kind, an absolute deadline from the provider's clock) and SIGKILLs the node's whole
session at the deadline; a bad deadline or an instance it did not start is refused before any
notice. ``RayAdapter.drain_node`` refuses a reason it does not map (Ray's raylet died on
``UNSPECIFIED`` when tried) before asking Ray anything. The child here is a ``sleep`` in a session
of its own, standing in for ``ray start --block``."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from fabric.core.errors import RequirementError
from fabric.core.settings import NodeShape
from fabric.providers import LocalProvider, ProviderError, ProvisionedNode
from fabric.providers.local import _Child


def _wait(predicate, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.02)


@pytest.fixture
def provider(tmp_path):
    p = LocalProvider("127.0.0.2:6379", log_dir=tmp_path / "logs", ray=str(tmp_path / "no-ray"), clock=lambda: 5000.0,
                      stop_grace_s=0.5)
    yield p
    p.close()


def _adopt(provider: LocalProvider, instance_id: str) -> _Child:
    """A long-running child in its own session, as ``provision`` would have started it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    node = ProvisionedNode(instance_id=instance_id, provider="local", pool="default", pool_tier="spot",
                           shape=NodeShape(name="cpu-box"), spare=False, started_at=1.0, name=instance_id, pid=proc.pid)
    child = _Child(node, proc)
    provider._children[instance_id] = child
    return child


def test_reclaim_notifies_then_kills_the_session_at_the_deadline(provider):
    child = _adopt(provider, "local-spot1")
    notices = []

    def notify(node, kind, deadline):
        assert child.proc.poll() is None  # told while the node still runs
        notices.append((node.instance_id, kind, deadline))
        return "interruption-state"

    assert provider.reclaim("local-spot1", 0.3, notify) == "interruption-state"
    assert notices == [("local-spot1", "spot-interruption", 5000.3)]
    _wait(lambda: provider.exit_code("local-spot1") is not None)
    assert provider.exit_code("local-spot1") == -9  # SIGKILL, not a graceful stop
    assert provider.list() == []


def test_reclaim_passes_the_kind_and_a_zero_deadline_kills_at_once(provider):
    _adopt(provider, "local-spot2")
    seen = []
    provider.reclaim("local-spot2", 0, lambda node, kind, deadline: seen.append((kind, deadline)), kind="rebalance")
    assert seen == [("rebalance", 5000.0)]
    _wait(lambda: provider.exit_code("local-spot2") is not None)
    assert provider.exit_code("local-spot2") == -9


def test_reclaim_refusals_come_before_any_notice(provider):
    calls = []
    with pytest.raises(ProviderError) as info:
        provider.reclaim("local-nope", 10, lambda *a: calls.append(a))
    assert info.value.reason == "unknown_instance"
    _adopt(provider, "local-spot3")
    for bad in (-1, float("nan"), "10", True):
        with pytest.raises(ProviderError) as info:
            provider.reclaim("local-spot3", bad, lambda *a: calls.append(a))
        assert info.value.reason == "bad_deadline"
    assert calls == []


def test_ray_drain_refuses_an_unmapped_reason_and_bad_deadlines_before_asking_ray():
    from fabric.rayio.adapter import DRAIN_REASONS, RayAdapter

    assert DRAIN_REASONS == ("IDLE_TERMINATION", "PREEMPTION")
    adapter = RayAdapter()
    for kwargs, field in (({"reason": "UNSPECIFIED"}, "reason"), ({"reason": "DRAIN_NODE_REASON_PREEMPTION"}, "reason"),
                          ({"reason": "PREEMPTION", "deadline_s": -1}, "deadline_s"),
                          ({"reason": "PREEMPTION", "message": None}, "message")):
        with pytest.raises(RequirementError) as info:
            adapter.drain_node("ab" * 28, **kwargs)
        assert info.value.field == field

"""A provider that fails (issue 15): the pool's spare reconciler backs off ``provision_backoff_s``
after each failed provision, reports ``spare_underflow`` again, and leaves no phantom node.

The local provider here runs ``/bin/false`` as its ``ray`` (``FABRIC_RAY_EXECUTABLE`` in the head's
environment), so every ``ray start`` exits 1 before its node starts. Only the head runs.
"""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration

IP = "127.0.0.2"
BACKOFF_S = 2.0
SETTINGS = {
    "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "monitor_interval_s": 0.25, "join_timeout_s": 60.0},
    "scaling": {"enabled": False},
    "pools": [{"name": "default", "tiers": [
        {"name": "onprem"},
        {"name": "spares", "scale_out": "elastic", "provider": "local", "max_nodes": 2,
         "candidate_shapes": [{"name": "cpu-box", "profile": "cpu-only-box"}]},
    ]}],
    "hot_spares": [{"pool": "default", "target_count": 1, "provision_backoff_s": BACKOFF_S}],
}


@pytest.fixture(scope="module")
def lf():
    with LocalFabric([], settings=SETTINGS, timeout_s=90, node_ip_address=IP,
                     head_env={"FABRIC_RAY_EXECUTABLE": "/bin/false"}) as fabric_:
        yield fabric_


def test_a_failing_provider_backs_off_reports_underflow_and_leaves_no_phantom(lf):
    h = lf.handle
    failed = lf.wait_until(lambda: (f := h.job_events(kinds=["spare_provision_failed"])) and len(f) >= 3 and f,
                           "three failed spare provisions", timeout_s=60)
    assert all(e["data"]["reason"] == "start_failed" and "exited with status 1" in e["data"]["error"] for e in failed), failed
    gaps = [b["at"] - a["at"] for a, b in zip(failed, failed[1:])]
    assert min(gaps) >= BACKOFF_S * 0.95  # never retried inside the backoff
    under = h.job_events(kinds=["spare_underflow"])
    assert len(under) >= 2 and all(e["data"] == {"pool": "default", "current": 0, "target": 1} for e in under)
    (pool,) = h.spares()
    assert pool["live"] == [] and pool["pending"] == []
    assert h.provisions()["instances"] == []  # nothing left running
    assert [n for n in h.nodes() if n.pool_tier == "spares"] == []  # no phantom node

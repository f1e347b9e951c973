"""How a client's lease routes calls (``fabric.dispatch._Lease``), without a cluster: leased nodes
with room first, then Ray's queue for the floor set, and behind queued spilled calls while any wait."""

from __future__ import annotations

import pytest

from fabric import dispatch
from fabric.dispatch import SPILL, _Lease
from fabric.placement import Requirement
from fabric.scheduling import LeaseGrant, LeaseSlot

REQ = Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", num_cpus=1)
A, B = "aa" * 28, "bb" * 28  # node ids are hex (Ray checks them)
SELECTOR = {"fabric.io/tier": "in(gpu_cuda,gpu_vaapi,gpu_apu,cpu_ffmpeg)"}


class FakeRemote:
    def options(self, **kwargs):
        return self


class FakeRef:
    def __init__(self) -> None:
        self.callbacks = []
        self.done = False

    def _on_completed(self, callback) -> None:
        self.callbacks.append(callback)

    def finish(self) -> None:
        self.done = True
        for cb in self.callbacks:
            cb(None)


@pytest.fixture
def lease(monkeypatch) -> _Lease:
    monkeypatch.setattr(dispatch, "_finished", lambda ref: ref.done)
    lease = _Lease("client:0")
    grant = LeaseGrant("client:0", (LeaseSlot(A, 1), LeaseSlot(B, 1)), SELECTOR, 1.0)
    lease.install(grant, FakeRemote(), FakeRemote(), REQ, 3, "tiny")
    return lease


def start(lease: _Lease, node: str) -> FakeRef:
    ref = FakeRef()
    lease.started(node, ref)
    return ref


def test_leased_nodes_first_in_the_engines_order_then_the_spill_queue(lease):
    assert lease.route(0.0, may_spill=True) == A
    start(lease, A)
    assert lease.route(0.0, may_spill=True) == B
    start(lease, B)
    assert lease.route(0.0, may_spill=True) == SPILL
    assert lease.route(0.0, may_spill=False) is None  # on_no_capacity="raise": the per-call path


def test_a_finished_call_frees_its_leased_slot(lease):
    ref = start(lease, A)
    start(lease, B)
    ref.finish()
    assert lease.route(0.0, may_spill=True) == A


def test_new_calls_queue_behind_spilled_calls_until_the_newest_has_finished(lease):
    a, b = start(lease, A), start(lease, B)
    spilled = FakeRef()
    lease.last_spill = spilled
    a.finish()
    b.finish()
    # leased slots look free to this client, but its spilled calls still hold the floor set's slots
    assert lease.route(0.0, may_spill=True) == SPILL
    spilled.finish()
    assert lease.route(0.005, may_spill=True) == SPILL  # looked again only after SPILL_CHECK_S
    assert lease.route(0.0 + _Lease.SPILL_CHECK_S, may_spill=True) == A
    assert lease.last_spill is None


def test_calls_that_may_not_spill_still_take_a_free_leased_slot(lease):
    lease.last_spill = FakeRef()
    assert lease.route(0.0, may_spill=False) == A


def test_without_a_spill_selector_a_free_leased_slot_is_used(monkeypatch):
    monkeypatch.setattr(dispatch, "_finished", lambda ref: ref.done)
    lease = _Lease("client:1")
    lease.install(LeaseGrant("client:1", (LeaseSlot(A, 1),), None, 1.0), FakeRemote(), FakeRemote(), REQ, 3, "tiny")
    lease.last_spill = FakeRef()  # left from an earlier grant that had a selector
    assert lease.route(0.0, may_spill=True) == A
    start(lease, A)
    assert lease.route(0.0, may_spill=True) is None

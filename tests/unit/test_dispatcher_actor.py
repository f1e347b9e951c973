"""DispatcherActor's logic (``actors.dispatcher.Dispatcher``) over a fake Ray seam: the scheduler is
found through the adapter, looked up again when it died or restarted mid-wait, and its
``CapacityError`` comes out as itself; no Ray started."""

from __future__ import annotations

import asyncio
import pickle

import pytest

import actors.dispatcher as dispatcher_module
from actors.dispatcher import Dispatcher
from fabric.core.errors import CapacityError
from fabric.core.names import SCHEDULER
from fabric.testing.fake_ray import ActorGone, FakeHandle, FakeRayAdapter, RemoteError


class FakeScheduler:
    def wait_for_placement(self, request_id, req, priority, timeout_s):
        return ("assignment", request_id, priority)


def placement(d: Dispatcher):
    return asyncio.run(d.placement("r1", "req", 5, 30.0))


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch):
    monkeypatch.setattr(dispatcher_module, "SCHEDULER_RETRY_S", 0.0)


def test_the_scheduler_is_found_through_the_seam():
    adapter = FakeRayAdapter(actors={SCHEDULER: FakeHandle(FakeScheduler())})
    assert placement(Dispatcher(adapter)) == ("assignment", "r1", 5)


def test_a_scheduler_gone_mid_wait_is_looked_up_again_and_the_call_queued_again():
    old = FakeHandle(FakeScheduler(), name="old")
    old.fail_next("wait_for_placement", ActorGone("restarting"))
    adapter = FakeRayAdapter(actors={SCHEDULER: old})
    d = Dispatcher(adapter)

    new = FakeHandle(FakeScheduler(), name="new")
    real_get = adapter.get_actor
    adapter.get_actor = lambda name: new if old.calls else real_get(name)  # the restarted scheduler
    assert placement(d) == ("assignment", "r1", 5)
    assert len(old.called("wait_for_placement")) == 1 and new.called("wait_for_placement") == [("r1", "req", 5, 30.0)]


def test_the_queue_timing_out_raises_the_capacity_error_itself():
    sched = FakeHandle(FakeScheduler())
    err = CapacityError("no node within 30 s", reason="queue timeout", waited_s=30.0)
    sched.fail_next("wait_for_placement", RemoteError(err))
    with pytest.raises(CapacityError) as caught:
        placement(Dispatcher(FakeRayAdapter(actors={SCHEDULER: sched})))
    assert caught.value is err and caught.value.waited_s == 30.0


def test_any_other_error_propagates_untouched():
    sched = FakeHandle(FakeScheduler())
    boom = RemoteError(KeyError("bug"))
    sched.fail_next("wait_for_placement", boom)
    with pytest.raises(RemoteError) as caught:
        placement(Dispatcher(FakeRayAdapter(actors={SCHEDULER: sched})))
    assert caught.value is boom
    sched.fail_next("wait_for_placement", RuntimeError("local"))
    with pytest.raises(RuntimeError):
        placement(Dispatcher(FakeRayAdapter(actors={SCHEDULER: sched})))


def test_no_scheduler_is_a_value_error_as_before():
    with pytest.raises(ValueError, match="fabric.scheduler"):
        placement(Dispatcher(FakeRayAdapter()))


def test_a_shipped_function_is_unpickled_once_per_digest():
    d = Dispatcher(FakeRayAdapter())
    fn, cache = d.function("abc", pickle.dumps(len))
    assert fn is len and d.function("abc", b"not even a pickle") == (fn, cache)

"""``FabricHandle``'s drain / evict / interruption / migration methods (issue 16) over a fake
scheduler, no Ray: each checks its arguments before anything is sent (``RequirementError`` naming
the field), sends the contract's actor call, answers what the scheduler answered, and raises the
scheduler's fabric error as itself (unwrapped from Ray's ``RayTaskError``)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from fabric.core.errors import JobNotFoundError, NodeNotFoundError, RequirementError
from fabric.runtime.control import FabricHandle
from fabric.runtime.moves import MovesSurface, epoch_deadline, strategies


class Method:
    def __init__(self, sched: "FakeScheduler", name: str) -> None:
        self.sched, self.name = sched, name

    def remote(self, *args, **kwargs):
        self.sched.calls.append((self.name, args, kwargs))
        answer = self.sched.answers.get(self.name)
        return answer(*args, **kwargs) if callable(answer) else answer


class FakeScheduler:
    """``getattr(sched, m).remote(...)`` records the call; its "ref" is the answer itself."""

    def __init__(self, **answers) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.answers = answers

    def __getattr__(self, name: str) -> Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return Method(self, name)


class Handle(FabricHandle):
    def __init__(self, sched: FakeScheduler | None, timeout_s: float = 30.0) -> None:
        super().__init__(timeout_s=timeout_s)
        self.sched = sched
        self.waits: list[float] = []

    def _scheduler(self):
        return self.sched

    def _get(self, ref):
        if isinstance(ref, BaseException):
            raise ref
        return ref

    def _wait(self, ref, timeout_s):
        self.waits.append(timeout_s)
        return self._get(ref)


class WrappedRayError(Exception):
    """What Ray raises around an actor method's own error: the error is its ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"ray wrapper: {cause}")
        self.cause = cause


def test_the_handle_carries_the_surface_and_the_old_grace_drain_is_gone():
    assert issubclass(FabricHandle, MovesSurface)
    assert FabricHandle.drain is MovesSurface.drain  # not control.py's old drain(node) -> node id


def test_drain_sends_drain_jobs_with_the_settings_defaults_left_to_the_scheduler():
    state = object()
    sched = FakeScheduler(drain_jobs=state)
    h = Handle(sched)
    assert h.drain("cpu-only-box") is state
    assert sched.calls == [("drain_jobs", ("cpu-only-box", None, False, None), {})]
    h.drain("cpu-only-box", timeout_s=5, force=True, strategy="handover")
    assert sched.calls[-1] == ("drain_jobs", ("cpu-only-box", 5.0, True, "handover"), {})
    h.drain("cpu-only-box", timeout_s=0, force=True)  # as the scheduler takes it: stop what is there now
    assert sched.calls[-1] == ("drain_jobs", ("cpu-only-box", 0.0, True, None), {})


def test_a_drain_is_waited_on_for_its_timeout_and_a_margin_when_that_is_past_the_handles_timeout():
    h = Handle(FakeScheduler(drain_jobs="state"), timeout_s=30)
    h.drain("n")  # the settings' timeout: the handle's own wait
    h.drain("n", timeout_s=300)
    assert h.waits == [330.0]
    roomy = Handle(FakeScheduler(drain_jobs="state"), timeout_s=60)
    roomy.drain("n", timeout_s=5)  # 35 s < 60 s: the handle's own wait
    assert roomy.waits == []


@pytest.mark.parametrize("kwargs, field", [
    ({"node": ""}, "node"), ({"node": 3}, "node"), ({"timeout_s": -1}, "timeout_s"),
    ({"timeout_s": float("nan")}, "timeout_s"), ({"timeout_s": True}, "timeout_s"), ({"timeout_s": "10"}, "timeout_s"),
    ({"force": "yes"}, "force"), ({"strategy": "teleport"}, "strategy"),
])
def test_bad_drain_arguments_name_their_field_and_send_nothing(kwargs, field):
    sched = FakeScheduler()
    args = {"node": "n", **kwargs}
    with pytest.raises(RequirementError) as info:
        Handle(sched).drain(args.pop("node"), **args)
    assert info.value.field == field
    assert sched.calls == []


def test_drain_status_evict_and_abort_pass_through():
    sched = FakeScheduler(drain_status=None, evict=("j1", "j2"), abort_migration="aborted-state", migration="st",
                          migrations=("a", "b"))
    h = Handle(sched)
    assert h.drain_status("n") is None
    assert h.evict("n") == ["j1", "j2"]
    assert h.abort_migration("m1", reason="operator") == "aborted-state"
    assert h.migration("m1") == "st" and h.migrations() == ["a", "b"]
    assert [c[0] for c in sched.calls] == ["drain_status", "evict", "abort_migration", "migration", "migrations"]
    assert sched.calls[2] == ("abort_migration", ("m1", "operator"), {})
    with pytest.raises(RequirementError) as info:
        h.abort_migration("m1", reason=7)
    assert info.value.field == "reason"
    with pytest.raises(RequirementError) as info:
        h.migration("")
    assert info.value.field == "migration_id"


def test_migrate_job_omits_a_missing_strategy_so_the_scheduler_default_applies():
    sched = FakeScheduler(migrate_job="m-1")
    h = Handle(sched)
    assert h.migrate_job("job-1") == "m-1"
    assert sched.calls[-1] == ("migrate_job", ("job-1",), {"target_node": None, "override_reservation": False})
    h.migrate_job("job-1", strategy="overlap", target_node="gpu", override_reservation=True)
    assert sched.calls[-1] == ("migrate_job", ("job-1",), {"strategy": "overlap", "target_node": "gpu",
                                                          "override_reservation": True})
    for kwargs, field in (({"strategy": "x"}, "strategy"), ({"target_node": ""}, "target_node"),
                          ({"override_reservation": 1}, "override_reservation")):
        with pytest.raises(RequirementError) as info:
            h.migrate_job("job-1", **kwargs)
        assert info.value.field == field
    with pytest.raises(RequirementError):
        h.migrate_job(None)
    assert len(sched.calls) == 2


def test_interruption_deadline_is_sent_as_epoch_seconds_from_a_datetime_or_a_float():
    sched = FakeScheduler(handle_node_interruption="notice")
    h = Handle(sched, timeout_s=1e9)  # no long wait in this test: every answer is at hand
    when = datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert h.handle_node_interruption("n", deadline=when) == "notice"
    assert sched.calls[-1] == ("handle_node_interruption", ("n", "spot-interruption", when.timestamp()), {})
    h.handle_node_interruption("n", kind="rebalance", deadline=1_900_000_000)
    assert sched.calls[-1] == ("handle_node_interruption", ("n", "rebalance", 1_900_000_000.0), {})
    h.handle_node_interruption("n")
    assert sched.calls[-1] == ("handle_node_interruption", ("n", "spot-interruption", None), {})
    for kwargs, field in (({"kind": "hurricane"}, "kind"), ({"deadline": "soon"}, "deadline"), ({"deadline": -5}, "deadline"),
                          ({"deadline": float("inf")}, "deadline")):
        with pytest.raises(RequirementError) as info:
            h.handle_node_interruption("n", **kwargs)
        assert info.value.field == field
    assert len(sched.calls) == 3
    assert epoch_deadline(None) is None


def test_the_schedulers_fabric_error_is_raised_as_itself_not_rays_wrapper():
    h = Handle(FakeScheduler(evict=WrappedRayError(NodeNotFoundError("ghost")),
                             migrate_job=WrappedRayError(JobNotFoundError("no job 'j'", job_id="j")),
                             migrations=WrappedRayError(OSError("not a fabric error"))))
    with pytest.raises(NodeNotFoundError) as info:
        h.evict("ghost")
    assert info.value.node == "ghost"
    with pytest.raises(JobNotFoundError):
        h.migrate_job("j")
    with pytest.raises(WrappedRayError):  # anything else is left as Ray raised it
        h.migrations()


def test_without_a_scheduler_the_call_says_the_fabric_is_not_up():
    with pytest.raises(RuntimeError, match="scheduler is not up"):
        Handle(None).evict("n")


def test_strategies_are_the_cores():
    assert set(strategies()) == {"stop_then_start", "overlap", "handover"}

"""The scheduler's typed remote surface (issue 21, item 3), held to the actor it describes:

- ``SchedulerApi`` names every public method of ``actors.scheduler.Scheduler`` (bar the in-process
  ones), each with the actor's parameter names, order, kinds and defaults, and no ``Any``;
- ``AsyncSchedulerApi`` is the same surface, every method awaited, with the same annotations;
- each typed client method calls the actor method of its own name with its arguments
  (``handle.<name>.remote(...)``), and the blocking client waits longer only where a call may
  legitimately take long (a drain, a queued placement, an interruption's deadline).
"""

from __future__ import annotations

import asyncio
import inspect
import re
from typing import Any

import pytest

from actors.scheduler import Scheduler
from fabric.core.scheduler_api import IN_PROCESS_ONLY, AsyncSchedulerApi, SchedulerApi
from fabric.rayio.scheduler_client import ANSWER_MARGIN_S, AsyncSchedulerClient, SchedulerClient


def _methods(cls: type) -> dict[str, Any]:
    """The public methods ``cls`` defines (a Protocol: its own members; a class: with its mixins')."""
    return {name: fn for name, fn in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")}


API = _methods(SchedulerApi)
ACTOR = {name: fn for name, fn in _methods(Scheduler).items() if name not in IN_PROCESS_ONLY}


def _shape(fn: Any) -> list[tuple[str, Any, Any]]:
    # ``@ray.remote`` on SchedulerActor gives the inherited methods Ray's tracing keyword: not the actor's own.
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "_ray_trace_ctx"]


def test_the_protocol_names_every_remote_method_of_the_actor_and_nothing_else():
    missing = sorted(set(ACTOR) - set(API))
    assert missing == [], f"public methods of the actor in neither SchedulerApi nor IN_PROCESS_ONLY: {missing}"
    assert sorted(set(API) - set(ACTOR)) == []
    assert not IN_PROCESS_ONLY & set(API)


@pytest.mark.parametrize("name", sorted(API))
def test_each_method_has_the_actors_parameters_in_its_order_with_its_defaults(name):
    assert _shape(API[name]) == _shape(ACTOR[name]), name


@pytest.mark.parametrize("name", sorted(API))
def test_no_signature_of_the_protocols_says_any(name):
    for proto in (SchedulerApi, AsyncSchedulerApi):
        annotations = inspect.get_annotations(getattr(proto, name))
        assert set(annotations) == {p for p, *_ in _shape(API[name]) if p != "self"} | {"return"}, (proto, name)
        for what, text in annotations.items():
            assert not re.search(r"\bAny\b", str(text)), f"{proto.__name__}.{name}: {what}: {text}"


def test_the_awaited_protocol_is_the_same_surface_every_method_awaited():
    awaited = _methods(AsyncSchedulerApi)
    assert sorted(awaited) == sorted(API)
    for name, fn in awaited.items():
        assert inspect.iscoroutinefunction(fn) and not inspect.iscoroutinefunction(API[name]), name
        assert _shape(fn) == _shape(API[name]), name
        assert inspect.get_annotations(fn) == inspect.get_annotations(API[name]), name


def test_each_client_implements_every_method_with_the_protocols_signature():
    for client, proto in ((SchedulerClient, SchedulerApi), (AsyncSchedulerClient, AsyncSchedulerApi)):
        mine = _methods(client)
        assert sorted(mine) == sorted(API), client
        for name, fn in mine.items():
            assert _shape(fn) == _shape(getattr(proto, name)), (client, name)
            assert inspect.get_annotations(fn) == inspect.get_annotations(getattr(proto, name)), (client, name)


# -- the clients carry each call to the actor method of its name ----------------------------------------------
class Recorded:
    """A fake actor handle: ``handle.<name>.remote(*args, **kwargs)`` records the call and answers
    ``ref(call)`` (default: the call itself)."""

    def __init__(self, ref: Any = lambda call: call) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.ref = ref

    def __getattr__(self, name: str) -> Any:
        handle = self

        class Method:
            def remote(self, *args: Any, **kwargs: Any) -> Any:
                call = (name, args, kwargs)
                handle.calls.append(call)
                return handle.ref(call)

        return Method()


async def _resolved(value: Any) -> Any:
    return value


def _stand_ins(name: str) -> tuple:
    """One stand-in per parameter, each its own object; None for the calls whose wait reads a number."""
    params = [p for p, *_ in _shape(API[name]) if p != "self"]
    if name in ("drain_jobs", "wait_for_placement", "handle_node_interruption", "close_migrations"):
        return tuple(None for _ in params)
    return tuple(object() for _ in params)


def _sent(call: tuple[str, tuple, dict], name: str) -> tuple:
    """What reached the actor, in the actor's parameter order (keywords placed where they belong)."""
    sent_name, args, kwargs = call
    assert sent_name == name
    order = [p for p, *_ in _shape(ACTOR[name]) if p != "self"]
    bound = dict(zip(order, args)) | kwargs
    assert set(bound) <= set(order), (name, kwargs)
    return tuple(bound[p] for p in order if p in bound)


@pytest.mark.parametrize("name", sorted(API))
def test_the_blocking_client_calls_the_method_of_its_name_with_every_argument(name):
    handle, answered = Recorded(), []
    client = SchedulerClient(handle, lambda ref, least: answered.append(ref) or ref, clock=lambda: 0.0)
    args = _stand_ins(name)
    answer = getattr(client, name)(*args)
    (call,) = handle.calls
    assert _sent(call, name) == args and answered == [call]
    assert answer is None or answer is call  # what the waiter answered (None for the calls that answer nothing)


@pytest.mark.parametrize("name", sorted(API))
def test_the_awaited_client_calls_the_method_of_its_name_with_every_argument(name):
    handle = Recorded(ref=_resolved)
    looked_up = []
    client = AsyncSchedulerClient(lambda: looked_up.append(1) or handle)
    args = _stand_ins(name)
    answer = asyncio.run(getattr(client, name)(*args))
    (call,) = handle.calls
    assert _sent(call, name) == args and looked_up == [1]
    assert answer is None or answer is call


def test_no_strategy_is_left_out_so_the_actors_default_applies():
    handle = Recorded()
    client = SchedulerClient(handle, lambda ref, least: ref)
    client.migrate_job("j1")
    client.migrate_job("j1", "overlap", "n2", True)
    assert handle.calls == [("migrate_job", ("j1",), {"target_node": None, "override_reservation": False}),
                            ("migrate_job", ("j1",), {"strategy": "overlap", "target_node": "n2",
                                                      "override_reservation": True})]


def test_the_blocking_client_asks_a_longer_wait_only_of_calls_that_may_take_long():
    waits: list[tuple[str, float | None]] = []
    client = SchedulerClient(Recorded(), lambda ref, least: waits.append((ref[0], least)), clock=lambda: 1000.0)
    client.drain_jobs("n")  # the settings' timeout: the caller's own wait
    client.drain_jobs("n", 300.0)
    client.handle_node_interruption("n", "rebalance", 1100.0)
    client.handle_node_interruption("n", "rebalance", 900.0)  # past already: the margin only
    client.handle_node_interruption("n")
    client.wait_for_placement("r", object(), 0, 5.0)
    client.close_migrations(5.0)
    client.evict("n")
    assert waits == [("drain_jobs", None), ("drain_jobs", 300.0 + ANSWER_MARGIN_S),
                     ("handle_node_interruption", 100.0 + ANSWER_MARGIN_S), ("handle_node_interruption", ANSWER_MARGIN_S),
                     ("handle_node_interruption", None), ("wait_for_placement", 5.0 + ANSWER_MARGIN_S),
                     ("close_migrations", 5.0 + ANSWER_MARGIN_S), ("evict", None)]

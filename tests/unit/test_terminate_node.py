"""Terminating a node on request, no Ray: the scheduler's ``MoveRequests.terminate_node`` evicts the
node first and then has the provider that made it end its instance; a node joined by hand is
refused untouched (``TransitionError``: nothing stopped, nothing ended); the handle sends the actor
call and waits long enough for a provider; ``fabric terminate`` and ``fabric evict --terminate``
print what was ended (or exit 2 on a refusal)."""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import dataclass, field

import pytest

from actors.moves import MoveRequests
from fabric.cli import build_parser
from fabric.cli.moves_cmd import evict_with, terminate_with
from fabric.core.errors import MessageError, NodeNotFoundError, TransitionError
from fabric.core.scheduler_api import TERMINATE_WAIT_S

SPARE = "a" * 56
BY_HAND = "b" * 56


@dataclass(frozen=True)
class Rec:
    node_id: str
    name: str
    provider: str | None = None
    instance_id: str | None = None


class Fleet(dict):
    def get(self, node_id, default=None):  # type: ignore[override]
        return super().get(node_id, default)


class Core:
    """What ``MoveRequests`` reads of the scheduler's core: node names resolved, the fleet's records."""

    def __init__(self, *recs: Rec) -> None:
        self.fleet = Fleet({r.node_id: r for r in recs})

    def resolve_node(self, node: str) -> str:
        if node in self.fleet:
            return node
        named = [r.node_id for r in self.fleet.values() if r.name == node]
        if len(named) != 1:
            raise NodeNotFoundError(node)
        return named[0]


@dataclass
class World:
    """The job runner's drains and the provider's terminate, one log of what happened in order."""

    log: list = field(default_factory=list)
    runs_jobs: bool = True

    def runner(self):
        if not self.runs_jobs:
            raise MessageError("jobs", "this scheduler runs no jobs", None)
        return self

    @property
    def drains(self):
        return self

    def evict(self, node_id: str) -> list[str]:
        self.log.append(("evict", node_id))
        return ["enc-1", "relay-2"]

    async def terminate(self, provider: str, instance_id: str, reason: str, node_id: str) -> None:
        self.log.append(("terminate", provider, instance_id, reason, node_id))


def moves(world: World) -> MoveRequests:
    core = Core(Rec(SPARE, "spare-1", "local", "local-7f3a"), Rec(BY_HAND, "cpu-only-box"))
    return MoveRequests(core, world.runner, world.terminate)  # type: ignore[arg-type]


def test_a_provisioned_node_is_evicted_then_its_instance_ended():
    world = World()
    ended = asyncio.run(moves(world).terminate_node("spare-1"))
    assert world.log == [("evict", SPARE), ("terminate", "local", "local-7f3a", "terminated on request", SPARE)]
    assert ended == {"node_id": SPARE, "provider": "local", "instance_id": "local-7f3a",
                     "jobs_stopped": ["enc-1", "relay-2"]}


def test_a_node_joined_by_hand_is_refused_and_nothing_is_stopped_or_ended():
    world = World()
    with pytest.raises(TransitionError) as info:
        asyncio.run(moves(world).terminate_node("cpu-only-box"))
    assert world.log == []
    assert info.value.from_state == "joined by hand" and info.value.to_state == "terminated"
    assert "evict" in info.value.why  # says what can be done instead


def test_an_unknown_node_is_not_found_and_a_scheduler_without_jobs_still_ends_the_node():
    world = World()
    with pytest.raises(NodeNotFoundError):
        asyncio.run(moves(world).terminate_node("ghost"))
    assert world.log == []
    world.runs_jobs = False
    ended = asyncio.run(moves(world).terminate_node(SPARE))
    assert ended["jobs_stopped"] == [] and world.log == [("terminate", "local", "local-7f3a", "terminated on request", SPARE)]


def test_without_a_terminate_seam_every_node_is_refused():
    world = World()
    core = Core(Rec(SPARE, "spare-1", "local", "local-7f3a"))
    with pytest.raises(TransitionError):
        asyncio.run(MoveRequests(core, world.runner).terminate_node(SPARE))  # type: ignore[arg-type]
    assert world.log == []


class Method:
    def __init__(self, sched: "Sched", name: str) -> None:
        self.sched, self.name = sched, name

    def remote(self, *args):
        self.sched.calls.append((self.name, args))
        return self.sched.answer


class Sched:
    def __init__(self, answer) -> None:
        self.answer, self.calls = answer, []

    def __getattr__(self, name: str) -> Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return Method(self, name)


def test_the_handle_sends_the_call_and_waits_long_enough_for_a_provider():
    from fabric.runtime.control import FabricHandle

    answer = {"node_id": SPARE, "provider": "local", "instance_id": "local-7f3a", "jobs_stopped": []}
    sched = Sched(answer)

    class Handle(FabricHandle):
        waits: list = []

        def _scheduler(self):
            return sched

        def _get(self, ref):
            return ref

        def _wait(self, ref, timeout_s):
            self.waits.append(timeout_s)
            return ref

    h = Handle(timeout_s=30.0)
    assert h.terminate_node("spare-1") == answer
    assert sched.calls == [("terminate_node", ("spare-1",))]
    assert h.waits and h.waits[-1] >= TERMINATE_WAIT_S
    with pytest.raises(MessageError) as info:
        h.terminate_node("")
    assert info.value.field == "node" and len(sched.calls) == 1


class CliHandle:
    def __init__(self, answer) -> None:
        self.answer, self.calls = answer, []

    def terminate_node(self, node):
        self.calls.append(("terminate_node", node))
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def evict(self, node):
        self.calls.append(("evict", node))
        return ["enc-1"]


def run(fn, handle, *argv):
    out, err = io.StringIO(), io.StringIO()
    code = fn(handle, build_parser().parse_args(list(argv)), out, err)
    return code, out.getvalue(), err.getvalue()


ENDED = {"node_id": SPARE, "provider": "local", "instance_id": "local-7f3a", "jobs_stopped": ["enc-1", "relay-2"]}


def test_fabric_terminate_prints_what_was_ended_or_its_json():
    code, out, _ = run(terminate_with, CliHandle(ENDED), "terminate", "spare-1")
    assert code == 0
    assert out.strip() == "terminate spare-1: 2 jobs stopped (enc-1, relay-2); local instance local-7f3a terminated"
    code, out, _ = run(terminate_with, CliHandle(ENDED), "terminate", "spare-1", "--json")
    assert code == 0 and json.loads(out) == ENDED


def test_a_refusal_exits_2_with_the_fabrics_words_and_evict_terminate_takes_the_same_path():
    refused = TransitionError("node cpu-only-box", "joined by hand", "terminated", "no provider made it")
    code, out, err = run(terminate_with, CliHandle(refused), "terminate", "cpu-only-box")
    assert code == 2 and out == "" and "joined by hand" in err and err.startswith("fabric terminate:")
    handle = CliHandle(ENDED)
    code, out, _ = run(evict_with, handle, "evict", "spare-1", "--terminate")
    assert code == 0 and handle.calls == [("terminate_node", "spare-1")] and out.startswith("evict spare-1: 2 jobs")
    plain = CliHandle(ENDED)
    code, out, _ = run(evict_with, plain, "evict", "spare-1")
    assert code == 0 and plain.calls == [("evict", "spare-1")]

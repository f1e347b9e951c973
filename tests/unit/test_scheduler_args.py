"""Each argument of the scheduler's remote surface is read by one reader, defined once (issue 21, item 3).

The scheduler actor reads every argument on arrival (``fabric.core.scheduling.messages``,
``fabric.core.scheduler_args``): it has to, a ``ray job`` script may call it raw. An edge (a
``FabricHandle`` method, the gRPC servicer, the CLI, a task's decorator options) that reads an
argument before sending it calls the same reader, so no rule is written twice in different words and
every path a bad argument can take ends in the same ``MessageError`` naming the same field:

- ``test_the_same_bad_argument_gets_the_same_error_on_every_path``: one bad value per row, sent raw
  to the actor (``Scheduler``), through ``FabricHandle`` over that actor, through the gRPC servicer
  over that actor, and through the CLI over that handle, wherever the path can carry the value;
- ``test_the_edges_write_no_rule_of_their_own``: an AST scan of ``fabric/runtime``, ``fabric/api`` and
  ``fabric/cli`` finds each ``MessageError(...)`` / ``RequirementError(...)`` an edge builds itself, and
  each ``--flag must ...`` refusal the CLI prints, whose field is named like a parameter of
  ``SchedulerApi`` or computed at run time (the mark of a reader of its own, ``_name(field, value)``).
  What is left is listed with why: none of it is a rule the scheduler applies. The list must match
  the scan exactly, so a new rule at an edge fails, and so does a removed one left listed.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import grpc
import pytest

from actors.scheduler import Scheduler
from fabric.api import operator_pb2 as pb
from fabric.api.server import OperatorServicer
from fabric.cli import build_parser
from fabric.cli import moves_cmd
from fabric.cli.events_cmd import events_with
from fabric.core.errors import MessageError
from fabric.core.jobs.drains import INTERRUPTION_KINDS
from fabric.core.jobs.migration import MigrationStrategy
from fabric.core.placement import Requirement
from fabric.core.scheduler_api import SchedulerApi
from fabric.rayio.metrics import RecordingMetrics
from fabric.runtime.client import adaptive
from fabric.runtime.control import FabricHandle

ROOT = Path(__file__).resolve().parents[2]
EDGES = ("fabric/runtime", "fabric/api", "fabric/cli")
ERRORS = ("MessageError", "RequirementError")
SCHEDULER_ARGS = frozenset(
    p for n, fn in inspect.getmembers(SchedulerApi, inspect.isfunction) if not n.startswith("_")
    for p in inspect.signature(fn).parameters if p != "self")

# (module, field) -> why it is the edge's own and not a rule of the scheduler's. A field in <...> is
# computed where the error is raised (ast.unparse of the expression).
ALLOWED = {
    ("fabric/runtime/events.py", "kind"):
        "Subscription's own kind: one event kind or '*' (the scheduler's kinds are a list, read by read_kinds)",
    ("fabric/runtime/events.py", "limit"):
        "Subscription's page size, reading forward: at least 1 (the scheduler's limit may be negative: the newest)",
    ("fabric/cli/events_cmd.py", "--limit"):
        "how many of the newest events the command shows: at least 1 (it asks the scheduler for -limit)",
    ("fabric/api/http_view.py", "timeout_s"):
        "the JSON view's own wait on the scheduler's nodes(), not an argument sent to it",
    ("fabric/api/wire.py", "<field>"):
        "a protobuf's JSON text turned into a Requirement: only the gRPC edge has JSON to read",
    ("fabric/api/wire.py", "<f'{field}.{key}'>"): "the same: a JSON key that is no Requirement field",
    ("fabric/api/wire.py", "<f'{field}.{exc.field}'>"): "the same: Requirement's own error, its path prefixed",
    ("fabric/runtime/client.py", "<job_only[0]>"): "a decorator argument only a job class takes, given to a function",
    ("fabric/runtime/jobs.py", "<k>"): "a decorator argument only a function takes, given to a job class",
    ("fabric/runtime/options.py", "<unknown[0][:MAX_NAME]>"): "a decorator argument that does not exist",
}


# -- the AST scan ------------------------------------------------------------------------------------
_FLAG_REFUSAL = re.compile(r"--([a-z][a-z0-9-]*):? must\b")


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def edge_rules(source: str, cli: bool) -> set[str]:
    """The fields ``source`` refuses itself: a field of the scheduler's, or one computed at run time."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _callee(node) in ERRORS:
            first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "field"), None)
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                if first.value in SCHEDULER_ARGS:
                    found.add(first.value)
            elif first is not None:
                found.add(f"<{ast.unparse(first)}>")
        elif cli and isinstance(node, ast.Constant) and isinstance(node.value, str):
            for flag in _FLAG_REFUSAL.findall(node.value):
                name = flag.replace("-", "_")
                if name in SCHEDULER_ARGS or f"{name}_s" in SCHEDULER_ARGS:
                    found.add(f"--{flag}")
    return found


def scan() -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for top in EDGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            rel = path.relative_to(ROOT).as_posix()
            out |= {(rel, field) for field in edge_rules(path.read_text(), cli=rel.startswith("fabric/cli/"))}
    return out


def test_the_edges_write_no_rule_of_their_own():
    found = scan()
    assert sorted(found - set(ALLOWED)) == [], "an edge checks a scheduler argument itself: call the scheduler's reader"
    assert sorted(set(ALLOWED) - found) == [], "listed but gone: take it off ALLOWED"


def test_the_scan_bites():
    old_edge = '''
def _name(field, value):
    if not isinstance(value, str) or not value.strip():
        raise RequirementError(field, "must be a non-empty string", value)
    return value

def abort(reason):
    if not isinstance(reason, str):
        raise RequirementError("reason", "must be a string", reason)
    raise MessageError(field="since", reason="x")
'''
    assert edge_rules(old_edge, cli=False) == {"<field>", "reason", "since"}
    assert edge_rules('print(f"fabric events: --since must be a whole number >= 0")', cli=True) == {"--since"}
    assert edge_rules('print(f"fabric interrupt: --deadline must be 0 or more seconds")', cli=True) == {"--deadline"}
    assert edge_rules('raise MessageError("interval_s", "x")\nprint("--interval must be positive")', cli=True) == set()


def test_the_clis_choices_are_the_schedulers_names():
    assert moves_cmd.STRATEGY_CHOICES == tuple(s.value for s in MigrationStrategy)
    assert moves_cmd.KIND_CHOICES == tuple(INTERRUPTION_KINDS)


# -- one bad argument, every path ---------------------------------------------------------------------
class FakeFeed:
    outsiders: dict = {}

    async def poll(self) -> list:
        return []


class Unreached:
    """The scheduler's job runner, which a bad argument must never reach: any attribute is another
    ``Unreached``; calling one fails the test."""

    def __getattr__(self, name: str) -> "Unreached":
        if name.startswith("__"):
            raise AttributeError(name)
        return Unreached()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a bad argument reached the job runner: {args} {kwargs}")


def scheduler() -> Scheduler:
    return Scheduler(feed=FakeFeed(), metrics=RecordingMetrics(), run_loop=False, jobs=lambda _s: Unreached())


def _settle(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(...)``'s answer (a coroutine run to its end), or the error it raised."""
    try:
        out = fn(*args, **kwargs)
        return asyncio.run(out) if inspect.iscoroutine(out) else out
    except Exception as exc:
        return exc


class _Remote:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return _settle(self.fn, *args, **kwargs)


class ActorHandle:
    """A Ray actor handle over the plain ``Scheduler``: ``h.<method>.remote(...)`` runs the method; its
    "ref" is the answer or the error."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched

    def __getattr__(self, name: str) -> _Remote:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Remote(getattr(self.sched, name))


class Handle(FabricHandle):
    """``FabricHandle`` over ``ActorHandle``: its own code, the actor's answers."""

    def __init__(self, sched: Scheduler) -> None:
        super().__init__(timeout_s=30.0)
        self.actor = ActorHandle(sched)

    def _scheduler(self) -> Any:
        return self.actor

    def _get(self, ref: Any) -> Any:
        if isinstance(ref, BaseException):
            raise ref
        return ref

    def _wait(self, ref: Any, timeout_s: float) -> Any:
        return self._get(ref)


class AwaitedActor:
    """``AsyncSchedulerApi`` over the plain ``Scheduler`` (what the operator actor's client is over Ray)."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self.sched, name)

        async def method(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            return await out if inspect.isawaitable(out) else out

        return method


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class Context:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


def rpc(sched: Scheduler, method: str, request: Any) -> Aborted | None:
    servicer = OperatorServicer(AwaitedActor(sched))  # type: ignore[arg-type]

    async def go() -> None:
        call = getattr(servicer, method)(request, Context())
        if inspect.isasyncgen(call):  # WatchEvents streams
            async for _ in call:
                pass
        else:
            await call

    try:
        asyncio.run(go())
    except Aborted as exc:
        return exc
    return None


def cli(handle: Handle, argv: list[str]) -> tuple[int, str]:
    body = {"drain": moves_cmd.drain_with, "evict": moves_cmd.evict_with, "migrate": moves_cmd.migrate_with,
            "interrupt": moves_cmd.interrupt_with, "events": events_with}[argv[0]]
    err = io.StringIO()
    code = body(handle, build_parser().parse_args(argv), out=io.StringIO(), err=err)
    return code, err.getvalue()


@dataclass(frozen=True)
class Row:
    field: str
    actor: Callable[[Scheduler], Any]
    """The raw call, as a ``ray job`` script makes it."""
    edge: Callable[[Handle], Any]
    """The driver's call: a ``FabricHandle`` method (or a task's decorator)."""
    rpc: tuple[str, Any] | None = None
    """The gRPC method and request carrying the same value, where one can."""
    cli: list[str] | None = None
    """The command line carrying it, where one can."""


LONG = "n" * 129
HUGE = 2**64 - 1  # the largest a WatchEventsRequest's since can carry
REQ = Requirement(min_tier="relay")
NI = pb.NotifyInterruptionRequest
ROWS = {
    "drain-node-empty": Row(
        "node", lambda s: s.drain_jobs(""), lambda h: h.drain(""), ("Drain", pb.DrainRequest(node="")), ["drain", ""]),
    "evict-node-too-long": Row(
        "node", lambda s: s.evict(LONG), lambda h: h.evict(LONG),
        ("Evict", pb.NodeRequest(node=LONG)), ["evict", LONG]),
    "drain-status-node-not-text": Row("node", lambda s: s.drain_status(3), lambda h: h.drain_status(3)),
    "cordon-node-empty": Row(
        "node", lambda s: s.cordon(""), lambda h: h.cordon(""), ("Cordon", pb.NodeRequest(node=""))),
    "drain-timeout-negative": Row(
        "timeout_s", lambda s: s.drain_jobs("n1", -1.0), lambda h: h.drain("n1", timeout_s=-1.0),
        ("Drain", pb.DrainRequest(node="n1", timeout_s=-1.0)), ["drain", "n1", "--timeout", "-1"]),
    "drain-timeout-nan": Row(
        "timeout_s", lambda s: s.drain_jobs("n1", math.nan), lambda h: h.drain("n1", timeout_s=math.nan),
        ("Drain", pb.DrainRequest(node="n1", timeout_s=math.nan)), ["drain", "n1", "--timeout", "nan"]),
    "drain-force-text": Row("force", lambda s: s.drain_jobs("n1", None, "yes"), lambda h: h.drain("n1", force="yes")),
    "drain-strategy-unknown": Row(
        "strategy", lambda s: s.drain_jobs("n1", None, False, "teleport"), lambda h: h.drain("n1", strategy="teleport"),
        ("Drain", pb.DrainRequest(node="n1", strategy="teleport"))),
    "interrupt-kind-unknown": Row(
        "kind", lambda s: s.handle_node_interruption("n1", "hurricane"),
        lambda h: h.handle_node_interruption("n1", "hurricane"),
        ("NotifyInterruption", NI(node="n1", kind="hurricane"))),
    "interrupt-deadline-inf": Row(
        "deadline", lambda s: s.handle_node_interruption("n1", "rebalance", math.inf),
        lambda h: h.handle_node_interruption("n1", "rebalance", math.inf),
        ("NotifyInterruption", NI(node="n1", deadline_epoch=math.inf))),
    "interrupt-deadline-negative": Row(
        "deadline", lambda s: s.handle_node_interruption("n1", "rebalance", -5.0),
        lambda h: h.handle_node_interruption("n1", "rebalance", -5.0),
        ("NotifyInterruption", NI(node="n1", deadline_epoch=-5.0))),
    "migrate-job-empty": Row(
        "job_id", lambda s: s.migrate_job(""), lambda h: h.migrate_job(""),
        ("Migrate", pb.MigrateRequest(job_id="")), ["migrate", ""]),
    "migrate-strategy-unknown": Row(
        "strategy", lambda s: s.migrate_job("j1", "x"), lambda h: h.migrate_job("j1", "x"),
        ("Migrate", pb.MigrateRequest(job_id="j1", strategy="x"))),
    "migrate-target-empty": Row(  # the request's "" is no target: nothing bad to carry
        "target_node", lambda s: s.migrate_job("j1", None, ""), lambda h: h.migrate_job("j1", target_node=""),
        None, ["migrate", "j1", "--to", ""]),
    "migrate-override-int": Row(
        "override_reservation", lambda s: s.migrate_job("j1", None, None, 1),
        lambda h: h.migrate_job("j1", override_reservation=1)),
    "migration-id-empty": Row(
        "migration_id", lambda s: s.migration(""), lambda h: h.migration(""),
        ("AbortMigration", pb.AbortMigrationRequest(migration_id=""))),
    "abort-reason-not-text": Row("reason", lambda s: s.abort_migration("m1", 7), lambda h: h.abort_migration("m1", 7)),
    "abort-reason-too-long": Row(
        "reason", lambda s: s.abort_migration("m1", "x" * 1001), lambda h: h.abort_migration("m1", "x" * 1001),
        ("AbortMigration", pb.AbortMigrationRequest(migration_id="m1", reason="x" * 1001))),
    "events-since-past-64-bits": Row(
        "since", lambda s: s.events(HUGE), lambda h: h.events(HUGE),
        ("WatchEvents", pb.WatchEventsRequest(since=HUGE)), ["events", "--since", str(HUGE)]),
    "events-kind-empty": Row(
        "kinds", lambda s: s.events(0, [""]), lambda h: h.events(0, [""]),
        ("WatchEvents", pb.WatchEventsRequest(kinds=[""])), ["events", "--kind", ""]),
    "events-limit-zero": Row("limit", lambda s: s.events(0, None, 0), lambda h: h.events(0, None, 0)),
    "job-events-since-negative": Row("since", lambda s: s.job_events(-1), lambda h: h.job_events(-1)),
    "job-id-empty": Row("job_id", lambda s: s.job_status(""), lambda h: h.job("")),
    "bundle-id-empty": Row(
        "bundle_id", lambda s: s.bundle_status(""), lambda h: h.bundle(""),
        ("GetBundle", pb.BundleIdRequest(bundle_id=""))),
    "task-priority-past-the-queues": Row(  # the decorator reads it when decorating, as wait_for_placement does
        "priority", lambda s: s.wait_for_placement("r1", REQ, 2**40),
        lambda h: adaptive.remote(min_tier="relay", priority=2**40)),
}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_the_same_bad_argument_gets_the_same_error_on_every_path(name):
    row = ROWS[name]
    raw = _settle(row.actor, scheduler())
    assert type(raw) is MessageError and raw.field == row.field, ("raw actor call", raw)
    with pytest.raises(MessageError) as driver:
        row.edge(Handle(scheduler()))
    assert type(driver.value) is MessageError and driver.value.field == row.field, "FabricHandle"
    assert driver.value.reason == raw.reason  # one rule, in the same words
    if row.rpc is not None:
        aborted = rpc(scheduler(), *row.rpc)
        assert aborted is not None and aborted.code == grpc.StatusCode.INVALID_ARGUMENT, ("gRPC", aborted)
        assert aborted.details.startswith(f"{row.field}: {raw.reason}"), ("gRPC", aborted.details)
    if row.cli is not None:
        code, err = cli(Handle(scheduler()), row.cli)
        assert code == 2 and f"{row.field}: {raw.reason}" in err, ("CLI", err)

"""Operator commands against a running fabric: ``cordon``, ``uncordon``, ``explain`` (``drain`` and
the other moves of work are ``fabric.cli.moves_cmd``'s).

``explain`` is a dry-run placement against the live fleet: the decision and its trace (every
node's first failing filter, every survivor's ranking key), for a person (its long lines wrapped
to 80 columns, or the terminal's; ``--wide`` keeps them whole) or as ``--json``. ``explain --event
SEQ`` explains a decision on the record instead (docs/explain.md), with the fleet as it was;
``--replay`` runs the engine again on its recorded inputs, ``--settings-now`` with today's settings.

Each reaches the scheduler through Ray (``--address``) or through the operator API (``--api
HOST:PORT``, no Ray): the same ``SchedulerApi`` calls either way. Exit 1 when the fabric cannot be
reached or is not up, 2 when it refused the request (an unknown node, a bad requirement).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Protocol

from fabric.cli.common import (
    EXIT_FAILED, EXIT_OK, EXIT_USAGE, api_address, bad_address, remote_parents, run_over_api,
)
from fabric.cli.connect import connect
from fabric.cli.tables import add_width_flag, fit_lines, output_width
from fabric.core import names
from fabric.core.errors import FabricError
from fabric.core.placement import PlacementContext, Requirement
from fabric.core.scheduler_api import ExplainAnswer, SchedulerApi
from fabric.rayio.scheduler_client import SchedulerClient

class SchedulerOps(Protocol):
    """The part of ``SchedulerApi`` these commands call: the scheduler's client through Ray
    (``SchedulerClient``) and the operator API's (``fabric.api.client.ApiClient``) both are one."""

    def cordon(self, node: str) -> str: ...
    def uncordon(self, node: str) -> str: ...
    def explain(self, req: Requirement, ctx: PlacementContext | None = None, verbose: bool = False) -> ExplainAnswer: ...
    def explain_event(self, seq: int, replay: bool = False, settings_now: bool = False,
                      verbose: bool = False) -> dict[str, object]: ...


CALL_TIMEOUT_S = 60.0
"""How long a command waits for the scheduler's answer."""
NODE_OPS: dict[str, Callable[[SchedulerOps, str], str]] = {
    "cordon": lambda api, node: api.cordon(node),
    "uncordon": lambda api, node: api.uncordon(node),
}
"""Each node command and the scheduler call it makes (answers the node's id)."""


def add_parser(subparsers: Any) -> None:
    for command, helptext in (("cordon", "keep new work off a node (running work is left alone)"),
                              ("uncordon", "let a cordoned or drained node take work again")):
        p = subparsers.add_parser(command, help=helptext, description=helptext, parents=remote_parents())
        p.add_argument("node", help="node name or Ray node id")
        p.set_defaults(func=run_node_op, op=command)  # the call it makes: NODE_OPS[command]
    e = subparsers.add_parser("explain", help="dry-run a placement against the live fleet and show why",
                              description="dry-run a placement against the live fleet and show why",
                              parents=remote_parents("machine-readable output"))
    e.add_argument("--min-tier", help="best tier the work asks for")
    e.add_argument("--floor", help="lowest tier it may degrade to")
    e.add_argument("--hard", action="store_true", help="never degrade (fallback=False)")
    e.add_argument("--operation", help="a named operation preset instead of --min-tier")
    e.add_argument("--num-cpus", type=float, help="CPUs the work reserves")
    e.add_argument("--memory-mib", type=float, help="memory the work reserves")
    e.add_argument("--num-gpus", type=float, help="GPU capacity the work needs")
    e.add_argument("--capability", action="append", default=[], metavar="TAG", help="required capability tag (repeatable)")
    e.add_argument("--pool", help="pool to place into")
    e.add_argument("--verbose", action="store_true", help="every node's verdict, not only the top survivors")
    e.add_argument("--event", type=int, metavar="SEQ", help="explain the decision on the record under this event")
    e.add_argument("--replay", action="store_true", help="with --event: decide again on the recorded inputs")
    e.add_argument("--settings-now", action="store_true", help="with --event: decide again with today's settings")
    add_width_flag(e)
    e.set_defaults(func=run_explain)


def _scheduler(ray: Any, command: str) -> SchedulerApi | None:
    """The scheduler's methods (each answer waited for ``CALL_TIMEOUT_S``), or None (said on stderr)
    when the fabric is not up."""
    try:
        handle = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
    except ValueError:
        print(f"fabric {command}: the fabric is not up on this cluster (no fabric.scheduler actor); run fabric.up()", file=sys.stderr)
        return None
    return SchedulerClient(handle, lambda ref, _least: ray.get(ref, timeout=CALL_TIMEOUT_S))


def _unwrap(exc: Exception) -> Exception:
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, Exception) else exc


def with_scheduler(args: Any, command: str, body: Callable[[SchedulerOps], int]) -> int:
    """``body`` with the scheduler's methods: over the operator API with ``--api``, else through Ray."""
    if api_address(args):
        return run_over_api(args, command, body)
    if bad_address(args.address, command):
        return EXIT_USAGE
    ray = connect(args.address, command)
    if ray is None:
        return EXIT_FAILED
    sched = _scheduler(ray, command)
    if sched is None:
        return EXIT_FAILED
    return body(sched)


def node_op_with(sched: SchedulerOps, args: Any) -> int:
    """Cordon or uncordon ``args.node`` (``args.op``) and say so."""
    try:
        node_id = NODE_OPS[args.op](sched, args.node)
    except Exception as exc:
        err = _unwrap(exc)
        print(f"fabric {args.op}: {err}", file=sys.stderr)
        return EXIT_USAGE if isinstance(err, (FabricError, KeyError)) else EXIT_FAILED
    print(f"{args.op} {args.node} ({node_id[:12]})")
    return EXIT_OK


def run_node_op(args: Any) -> int:
    return with_scheduler(args, args.op, lambda sched: node_op_with(sched, args))


def explain_with(sched: SchedulerOps, req: Requirement, args: Any) -> int:
    """Print the dry run of ``req`` (text to fit, or ``--json``)."""
    try:
        out = sched.explain(req, None, args.verbose)
    except FabricError as exc:
        print(f"fabric explain: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps({"requirement": repr(req), **out}, indent=2, default=str))
    else:
        print(fit_lines(out["text"], output_width(args)))  # long lines (a requirement, node ids) wrap to fit
    return EXIT_OK


def explain_event_with(sched: SchedulerOps, args: Any) -> int:
    """Print why the decision of event ``args.event`` was made (and, replayed, whether it still would be)."""
    try:
        out = sched.explain_event(args.event, args.replay, args.settings_now, args.verbose)
    except Exception as exc:
        err = _unwrap(exc)
        print(f"fabric explain: {err}", file=sys.stderr)
        return EXIT_USAGE if isinstance(err, FabricError) else EXIT_FAILED
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        print(fit_lines(str(out["text"]), output_width(args)))
    return EXIT_OK


def run_explain(args: Any) -> int:
    from fabric.runtime.client import build_requirement

    if args.event is not None:
        if args.event < 1:
            print("fabric explain: --event must be an event number (1 or more)", file=sys.stderr)
            return EXIT_USAGE
        return with_scheduler(args, "explain", lambda sched: explain_event_with(sched, args))
    if args.replay or args.settings_now:
        print("fabric explain: --replay and --settings-now go with --event SEQ", file=sys.stderr)
        return EXIT_USAGE

    opts: dict[str, Any] = {}
    for flag, key in (("min_tier", "min_tier"), ("floor", "floor"), ("operation", "operation"), ("num_cpus", "num_cpus"),
                      ("memory_mib", "memory_mib"), ("num_gpus", "num_gpus"), ("pool", "pool")):
        v = getattr(args, flag)
        if v is not None:
            opts[key] = v
    if args.hard:
        opts["fallback"] = False
    if args.capability:
        opts["capabilities"] = tuple(args.capability)
    try:
        req = build_requirement(opts)
    except FabricError as exc:
        print(f"fabric explain: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return with_scheduler(args, "explain", lambda sched: explain_with(sched, req, args))

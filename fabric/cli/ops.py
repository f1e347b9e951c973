"""Operator commands against a running fabric: ``cordon``, ``uncordon``, ``explain`` (``drain`` and
the other moves of work are ``fabric.cli.moves_cmd``'s).

``explain`` is a dry-run placement against the live fleet: the decision and its trace (every
node's first failing filter, every survivor's ranking key), for a person (its long lines wrapped
to 80 columns, or the terminal's; ``--wide`` keeps them whole) or as ``--json``.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

from fabric.cli.connect import connect
from fabric.cli.node import add_width_flag, fit_lines, output_width
from fabric.core import names
from fabric.core.errors import FabricError
from fabric.core.scheduler_api import SchedulerApi
from fabric.rayio.scheduler_client import SchedulerClient

CALL_TIMEOUT_S = 60.0
"""How long a command waits for the scheduler's answer."""
NODE_OPS: dict[str, Callable[[SchedulerApi, str], str]] = {
    "cordon": lambda api, node: api.cordon(node),
    "uncordon": lambda api, node: api.uncordon(node),
}
"""Each node command and the scheduler call it makes (answers the node's id)."""


def add_parser(subparsers: Any) -> None:
    for command, helptext in (("cordon", "keep new work off a node (running work is left alone)"),
                              ("uncordon", "let a cordoned or drained node take work again")):
        p = subparsers.add_parser(command, help=helptext, description=helptext)
        p.add_argument("node", help="node name or Ray node id")
        p.add_argument("--address", default="auto", metavar="HOST:PORT", help="Ray cluster address (default: auto)")
        p.set_defaults(func=run_node_op, op=command)  # the call it makes: NODE_OPS[command]
    e = subparsers.add_parser("explain", help="dry-run a placement against the live fleet and show why",
                              description="dry-run a placement against the live fleet and show why")
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
    e.add_argument("--json", action="store_true", help="machine-readable output")
    e.add_argument("--address", default="auto", metavar="HOST:PORT", help="Ray cluster address (default: auto)")
    add_width_flag(e)
    e.set_defaults(func=run_explain)


def _scheduler(ray, command: str) -> SchedulerApi | None:
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


def run_node_op(args) -> int:
    ray = connect(args.address, args.op)
    if ray is None:
        return 2
    sched = _scheduler(ray, args.op)
    if sched is None:
        return 2
    try:
        node_id = NODE_OPS[args.op](sched, args.node)
    except Exception as exc:
        err = _unwrap(exc)
        print(f"fabric {args.op}: {err}", file=sys.stderr)
        return 2 if isinstance(err, (FabricError, KeyError)) else 1
    print(f"{args.op} {args.node} ({node_id[:12]})")
    return 0


def run_explain(args) -> int:
    from fabric.runtime.client import build_requirement

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
        return 2
    ray = connect(args.address, "explain")
    if ray is None:
        return 2
    sched = _scheduler(ray, "explain")
    if sched is None:
        return 2
    out = sched.explain(req, None, args.verbose)
    if args.json:
        print(json.dumps({"requirement": repr(req), **out}, indent=2, default=str))
    else:
        print(fit_lines(out["text"], output_width(args)))  # long lines (a requirement, node ids) wrap to fit
    return 0

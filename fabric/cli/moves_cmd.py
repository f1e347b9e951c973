"""Moving work on purpose from the command line: ``fabric drain``, ``fabric evict``, ``fabric terminate``,
``fabric migrate``, ``fabric migrations``, ``fabric interrupt``.

- ``fabric drain NODE [--timeout S] [--force] [--strategy X] [--json]``: cordon the node, migrate
  its jobs, then ask Ray to drain it; prints the drain (phase, what Ray answered, each job's
  status). ``--grace`` is the old name of ``--timeout``. ``--status`` shows the node's drain
  without starting one; ``--wait`` follows it, a line per phase, until it ends (exit 0 when done).
- ``fabric evict NODE [--terminate]``: stop the node's jobs now (each recovers by its policy); with
  ``--terminate``, then have the provider that made the node end it (``fabric terminate NODE``).
- ``fabric migrate JOB [--strategy X] [--to NODE] [--wait]``: start a migration; with ``--wait``,
  print each phase until it ends (exit 0 when done, 1 when aborted or lost).
- ``fabric migrations [--json]``: id, job, strategy, phase, source -> target, age, in 80 columns.
- ``fabric interrupt NODE [--deadline S] [--kind spot-interruption|rebalance]``: deliver a
  provider's notice that the node goes in S seconds (a forced drain sized to it).

Each goes through Ray (``--address``) or through the operator API (``--api HOST:PORT``, no Ray).
Exit codes as the other operator commands: 2 when the fabric refused the request (a bad argument,
an unknown node or job, a refused abort), 1 when the cluster cannot be reached or the fabric is not
up there, or the outcome is a failure (Ray refused the drain; a migration aborted or lost).
Rendering is pure (``drain_lines``, ``migration_rows``, ``format_migrations``...); the ``*_with``
functions take the handle, so tests drive them with a fake one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any, Callable, Sequence, TextIO

from fabric.cli.common import EXIT_FAILED, EXIT_USAGE, api_address, bad_address, remote_parents, run_over_api
from fabric.cli.tables import NARROW, render_table
from fabric.core.errors import FabricError
from fabric.core.scheduler_args import INTERRUPTION_KINDS, STRATEGY_NAMES
from fabric.core.scheduling.messages import read_seconds

__all__ = ["add_parser", "as_plain", "drain_lines", "drain_with", "evict_with", "format_migrations", "interrupt_with",
           "migrate_with", "migration_rows", "migrations_with", "terminate_with"]

STRATEGY_CHOICES = STRATEGY_NAMES
"""``--strategy``: the scheduler's migration strategies (the names ``read_strategy`` takes)."""
KIND_CHOICES = tuple(INTERRUPTION_KINDS)
"""``interrupt --kind``: the notice kinds the scheduler takes."""
TERMINAL_PHASES = ("done", "aborted", "lost")
MIGRATIONS_HEADER = ("ID", "JOB", "STRATEGY", "PHASE", "SOURCE -> TARGET", "AGE")
_WIDTHS = (8, 10, 15, 15, 21, 5)  # 79 columns with the single spaces between them


def add_parser(subparsers: Any) -> None:
    d = subparsers.add_parser("drain", parents=remote_parents("the drain as one JSON object"),
                              help="move a node's jobs off it, then tell Ray it is draining",
                              description="cordon a node, migrate each of its jobs by the strategy, then ask Ray to drain "
                                          "it; with --force, what has not moved by the timeout is stopped and recovered")
    d.add_argument("node", help="node name or Ray node id")
    d.add_argument("--timeout", "--grace", dest="timeout", type=float, metavar="SECONDS",
                   help="how long the jobs have to move (default: the settings' drain.timeout_s); --grace is its old name")
    d.add_argument("--force", action="store_true", help="at the timeout, stop what has not moved (it recovers by its policy)")
    d.add_argument("--strategy", choices=STRATEGY_CHOICES, help="how each job moves (default: each job's drain_strategy, else the settings')")
    d.add_argument("--status", action="store_true", help="show the node's drain; start none")
    d.add_argument("--wait", action="store_true", help="follow the drain until it ends, printing each change of phase "
                                                       "(exit 0 when done, 1 otherwise)")
    d.add_argument("--wait-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="how long --wait follows it (default: 600); the drain goes on after")
    d.set_defaults(func=_runner("drain", drain_with))

    e = subparsers.add_parser("evict", parents=remote_parents("the job ids stopped, as a JSON list"),
                              help="stop a node's jobs now; each recovers by its policy",
                              description="stop a node's jobs now; each recovers by its policy (a frame drop)")
    e.add_argument("node", help="node name or Ray node id")
    e.add_argument("--terminate", action="store_true",
                   help="then have the provider that made the node end it (as `fabric terminate`)")
    e.set_defaults(func=_runner("evict", evict_with))

    t = subparsers.add_parser("terminate", parents=remote_parents("what was ended, as one JSON object"),
                              help="stop a node's jobs, then have its provider end the node",
                              description="evict a node (each job recovers elsewhere by its policy), then have the provider "
                                          "that made it end it; a node joined by hand is refused untouched (exit 2)")
    t.add_argument("node", help="node name or Ray node id")
    t.set_defaults(func=_runner("terminate", terminate_with))

    m = subparsers.add_parser("migrate", parents=remote_parents(),
                              help="move a job to another node", description="move a long-running job to another node")
    m.add_argument("job", help="job id")
    m.add_argument("--strategy", choices=STRATEGY_CHOICES, help="stop_then_start, overlap or handover (default: the settings')")
    m.add_argument("--to", dest="to", metavar="NODE", help="the target node (default: where placement puts it)")
    m.add_argument("--override-reservation", action="store_true", help="the target may be a node reserved for other work")
    m.add_argument("--wait", action="store_true", help="print each phase until the migration ends")
    m.add_argument("--wait-timeout", type=float, default=900.0, metavar="SECONDS", help="give up waiting after this long (default 900)")
    m.set_defaults(func=_runner("migrate", migrate_with))

    ms = subparsers.add_parser("migrations", parents=remote_parents("one JSON object per migration, in a list"),
                              help="the migrations in flight and recent ones",
                               description="migrations in flight and recent: id, job, strategy, phase, source -> target, age")
    ms.set_defaults(func=_runner("migrations", migrations_with))

    i = subparsers.add_parser("interrupt", parents=remote_parents("the interruption as one JSON object"),
                              help="deliver a spot-interruption (or rebalance) notice for a node",
                              description="a provider's notice that a node goes: a forced drain sized to the deadline")
    i.add_argument("node", help="node name or Ray node id")
    i.add_argument("--deadline", type=float, metavar="SECONDS", help="the node goes this many seconds from now (default: none)")
    i.add_argument("--kind", choices=KIND_CHOICES, default="spot-interruption", help="the notice's kind (default: spot-interruption)")
    i.set_defaults(func=_runner("interrupt", interrupt_with))


# -- rendering (pure) ----------------------------------------------------------------------------------
def _value(x: Any) -> Any:
    return getattr(x, "value", x)


def as_plain(obj: Any) -> Any:
    """A state object as JSON-ready data: its ``as_dict()`` when it has one, a dataclass's fields,
    enums as their values, tuples as lists."""
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    if isinstance(obj, str):
        return str(_value(obj))
    as_dict = getattr(obj, "as_dict", None)
    if callable(as_dict):
        return as_plain(as_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: as_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(_value(k)): as_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [as_plain(v) for v in obj]
    return str(_value(obj))


def _secs(s: float | None) -> str:
    if s is None:
        return "-"
    s = max(0.0, float(s))
    return f"{s:.0f}s" if s < 600 else (f"{s / 60:.0f}m" if s < 36000 else f"{s / 3600:.0f}h")  # at most 5 characters


def _cut(text: Any, width: int) -> str:
    text = "-" if text in (None, "") else str(text)
    return text if len(text) <= width else text[:width]


def drain_lines(state: Any, now: float, shown: str | None = None) -> list[str]:
    """A ``DrainState`` (or its ``as_dict()``) as lines for a person."""
    d = as_plain(state)
    node = d.get("node_id") or ""
    label = f"{shown} ({node[:12]})" if shown and shown != node else node[:12]
    deadline = d.get("deadline")
    if deadline is None and d.get("started") is not None and d.get("timeout_s") is not None:
        deadline = d["started"] + d["timeout_s"]
    bits = []
    if d.get("interruption"):
        bits.append(str(d["interruption"]))
    if deadline is not None:
        bits.append(f"deadline in {_secs(deadline - now)}" if deadline > now else "past its deadline")
    bits.append("force" if d.get("force") else "no force")
    if d.get("strategy"):
        bits.append(f"strategy {d['strategy']}")
    lines = [f"drain {_cut(label, 60)}: {d.get('phase', '?')}", f"  {', '.join(bits)}"]
    ray = d.get("ray_drain")
    waiting = " (the jobs are off; running tasks are finishing)" if d.get("tasks_finishing") else ""
    lines.append(f"  ray: {'not asked yet' if ray is None else ray}{waiting}")
    if d.get("reason"):
        lines.append(f"  reason: {d['reason']}")
    jobs = d.get("jobs") or {}
    if not jobs:
        lines.append("  no jobs on the node")
        return lines
    body = []
    for job_id, job in sorted(jobs.items()):
        job = job if isinstance(job, dict) else {"status": job}
        body.append([job_id, job.get("status") or "-", job.get("migration_id") or "-", job.get("reason") or ""])
    table, _ = render_table(("JOB", "STATUS", "MIGRATION", "REASON"), body, NARROW - 2,
                            shrink={"REASON": 12, "JOB": 12, "MIGRATION": 10})
    return lines + [f"  {line}" for line in table]


def migration_rows(states: Sequence[Any], now: float, node_names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One plain dict per migration (the ``--json`` form), with ``age_s`` and node names."""
    names = node_names or {}
    rows = []
    for st in states:
        d = as_plain(st)
        d["age_s"] = None if d.get("started_at") is None else round(max(0.0, now - d["started_at"]), 1)
        d["source_name"] = names.get(d.get("source_node") or "", d.get("source_node"))
        d["target_name"] = names.get(d.get("target_node") or "", d.get("target_node"))
        rows.append(d)
    return rows


def format_migrations(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a table that fits 80 columns."""
    if not rows:
        return "no migrations"

    half = (_WIDTHS[4] - 4) // 2  # " -> " between two halves
    body = [[r.get("migration_id") or "-", r.get("job_id") or "-", r.get("strategy") or "-", r.get("phase") or "-",
             f"{_cut(r.get('source_name'), half)} -> {_cut(r.get('target_name'), half)}", _secs(r.get("age_s"))]
            for r in rows]
    lines, _ = render_table(MIGRATIONS_HEADER, body, NARROW, right=("AGE",),
                            shrink={"ID": _WIDTHS[0], "JOB": _WIDTHS[1], "SOURCE -> TARGET": _WIDTHS[4],
                                    "STRATEGY": 8, "PHASE": 8})
    return "\n".join(lines)


def _history_line(entry: Any, started: float | None) -> str:
    phase, at, reason = (list(entry) + [None, None, ""])[:3]
    when = "" if at is None or started is None else f" +{max(0.0, at - started):.1f}s"
    return f"  {_value(phase)}{when}{': ' + str(reason) if reason else ''}"


# -- the commands over a handle --------------------------------------------------------------------------
def _fail(command: str, exc: BaseException, err: TextIO) -> int:
    cause = getattr(exc, "cause", None)
    exc = cause if isinstance(cause, Exception) else exc
    print(f"fabric {command}: {exc}", file=err)
    if isinstance(exc, (FabricError, KeyError, ValueError)):
        return 2
    return 1


def drain_with(handle: Any, args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
               now: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> int:
    try:
        if args.status:
            state = handle.drain_status(args.node)
            if state is None:
                print(f"fabric drain: {args.node} has no drain", file=err)
                return 1
        else:
            state = handle.drain(args.node, timeout_s=args.timeout, force=args.force, strategy=args.strategy)
    except Exception as exc:
        return _fail("drain", exc, err)
    if getattr(args, "wait", False):
        return _follow_drain(handle, args, state, out, err, now, sleep)
    if args.json:
        print(json.dumps(as_plain(state), indent=2), file=out)
    else:
        print("\n".join(drain_lines(state, now(), args.node)), file=out)
    return 1 if str(as_plain(state).get("phase")) == "failed" else 0


def _follow_drain(handle: Any, args: argparse.Namespace, state: Any, out: TextIO, err: TextIO,
                  now: Callable[[], float], sleep: Callable[[float], None] = time.sleep, interval_s: float = 0.5) -> int:
    """``drain --wait``: a line per change of phase until the drain ends (0 when ``done``), or
    ``--wait-timeout`` passes (1, the drain goes on)."""
    give_up = time.monotonic() + max(0.0, float(args.wait_timeout))
    shown = None
    while True:
        plain = as_plain(state)
        phase = str(plain.get("phase"))
        if phase != shown and not args.json:
            print("\n".join(drain_lines(state, now(), args.node)), file=out, flush=True)
            shown = phase
        if plain.get("terminal"):
            if args.json:
                print(json.dumps(plain, indent=2), file=out)
            return 0 if phase == "done" else 1
        if time.monotonic() >= give_up:
            print(f"fabric drain: {args.node} still {phase} after {args.wait_timeout:g}s (the drain goes on)", file=err)
            return 1
        sleep(interval_s)
        try:
            state = handle.drain_status(args.node) or state
        except Exception as exc:
            return _fail("drain", exc, err)


def evict_with(handle: Any, args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    if getattr(args, "terminate", False):
        return terminate_with(handle, args, out, err, command="evict")
    try:
        stopped = list(handle.evict(args.node))
    except Exception as exc:
        return _fail("evict", exc, err)
    if args.json:
        print(json.dumps(stopped), file=out)
    else:
        jobs = f": {', '.join(stopped)}" if stopped else ""
        print(f"evict {args.node}: {len(stopped)} job{'s' if len(stopped) != 1 else ''} stopped{jobs}", file=out)
    return 0


def terminate_with(handle: Any, args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
                   command: str = "terminate") -> int:
    try:
        ended = handle.terminate_node(args.node)
    except Exception as exc:
        return _fail(command, exc, err)
    stopped = list(ended.get("jobs_stopped") or [])
    if args.json:
        print(json.dumps({**ended, "jobs_stopped": stopped}), file=out)
    else:
        jobs = f" ({', '.join(stopped)})" if stopped else ""
        print(f"{command} {args.node}: {len(stopped)} job{'s' if len(stopped) != 1 else ''} stopped{jobs}; "
              f"{ended.get('provider')} instance {ended.get('instance_id')} terminated", file=out)
    return 0


def migrate_with(handle: Any, args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
                 now: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 interval_s: float = 0.2) -> int:
    try:
        mid = handle.migrate_job(args.job, strategy=args.strategy, target_node=args.to,
                                 override_reservation=args.override_reservation)
    except Exception as exc:
        return _fail("migrate", exc, err)
    print(f"migration {mid}: {args.job}{' -> ' + args.to if args.to else ''}", file=out)
    if not args.wait:
        return 0
    printed = 0
    give_up = now() + args.wait_timeout
    while True:
        try:
            st = as_plain(handle.migration(mid))
        except Exception as exc:
            return _fail("migrate", exc, err)
        history = st.get("history") or []
        for entry in history[printed:]:
            print(_history_line(entry, st.get("started_at")), file=out)
        printed = max(printed, len(history))
        phase = str(st.get("phase"))
        if st.get("terminal") or phase in TERMINAL_PHASES:
            print(f"migration {mid}: {phase}{' (' + st['reason'] + ')' if st.get('reason') else ''}", file=out)
            return 0 if phase == "done" else 1
        if now() >= give_up:
            print(f"fabric migrate: migration {mid} still {phase} after {args.wait_timeout:.0f}s (it goes on)", file=err)
            return 1
        sleep(interval_s)


def _node_names(handle: Any) -> dict[str, str]:
    try:
        return {r.node_id: r.name for r in handle.records()}
    except Exception:  # names are a nicety: node ids show instead
        return {}


def migrations_with(handle: Any, args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
                    now: Callable[[], float] = time.time) -> int:
    try:
        states = handle.migrations()
    except Exception as exc:
        return _fail("migrations", exc, err)
    rows = migration_rows(states, now(), _node_names(handle))
    print(json.dumps(rows, indent=2) if args.json else format_migrations(rows), file=out)
    return 0


def interrupt_with(handle: Any, args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
                   now: Callable[[], float] = time.time) -> int:
    try:  # --deadline is seconds from now, the CLI's own: once made epoch seconds, a past one would pass
        read_seconds("--deadline", args.deadline, allow_zero=True)
    except FabricError as exc:
        return _fail("interrupt", exc, err)
    t = now()
    deadline = None if args.deadline is None else t + args.deadline
    try:
        state = handle.handle_node_interruption(args.node, kind=args.kind, deadline=deadline)
    except Exception as exc:
        return _fail("interrupt", exc, err)
    d = as_plain(state)
    if args.json:
        print(json.dumps(d, indent=2), file=out)
        return 0
    when = "no deadline" if d.get("deadline") is None else f"deadline in {_secs(d['deadline'] - t)}"
    print(f"interrupt {args.node}: {d.get('kind', args.kind)}, {when}", file=out)
    if d.get("drain") is not None:
        print("\n".join(drain_lines(d["drain"], t, args.node)), file=out)
    return 0


def _runner(command: str, body: Callable[..., int]) -> Callable[[argparse.Namespace], int]:
    """``args -> exit code``: with ``--api``, hand ``body`` the operator API's client; else connect
    to Ray, hand it a ``FabricHandle``, disconnect if we connected."""

    def run(args: argparse.Namespace) -> int:
        if api_address(args):
            return run_over_api(args, command, lambda client: body(client, args, sys.stdout, sys.stderr))
        if bad_address(args.address, command):
            return EXIT_USAGE
        import ray as ray_module

        from fabric.cli.connect import connect
        from fabric.runtime.control import FabricHandle

        ours = not ray_module.is_initialized()  # a driver that was connected already stays connected
        ray = connect(args.address, command)  # on failure it has said why
        if ray is None:
            return EXIT_FAILED
        try:
            return body(FabricHandle(), args, sys.stdout, sys.stderr)  # the streams now, not at import
        finally:
            if ours:
                ray.shutdown()

    run.__name__ = f"run_{command}"
    return run

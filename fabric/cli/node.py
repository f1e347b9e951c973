"""``fabric join`` / ``fabric start-head`` (seed 002's one-shot bootstrap agent) and ``fabric status``.

``join`` and ``start-head`` probe the node (the live machine, a bundled ``--profile`` or a
``--recording DIR``), then run ``ray start`` with the probed capabilities as Ray resources and
labels, print what they ran, and exit with ``ray start``'s code. ``--dry-run`` prints the command
without running it. Which recording a node was joined from reaches its ProbeActor two ways: a
bundled profile as the ``fabric.io/profile`` label; an arbitrary folder (a label cannot hold a
path) as ``FABRIC_RECORDING=<abs dir>`` in ``ray start``'s environment, which the raylet and
every worker it starts (the ProbeActor included) inherit.

They refuse clearly (one line, exit 2) when the ``ray`` command is missing, the address is not
``HOST:PORT``, or nothing answers there; a failure of ``ray start`` itself is summarised.

``status`` connects to a running cluster and prints the fleet as a table (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from fabric.core.names import PROFILE_LABEL, RECORDING_ENV
from fabric.providers.local import find_ray

__all__ = ["NARROW", "add_parser", "add_width_flag", "build_ray_start", "clip", "find_ray", "fit_lines", "format_status_table",
           "gpus_cell", "output_width", "render_table", "status_rows"]


def add_parser(subparsers: Any) -> None:
    for command, helptext in (("join", "probe this node and join it to a fabric's Ray cluster (ray start --address ...)"),
                              ("start-head", "probe this node and start it as a Ray head node (ray start --head)")):
        p = subparsers.add_parser(command, help=helptext, description=helptext)
        if command == "join":
            p.add_argument("--address", required=True, metavar="HOST:PORT", help="the head node's Ray (GCS) address")
        else:
            p.add_argument("--port", type=int, metavar="PORT", help="GCS port of the new head (Ray's default: 6379)")
        src = p.add_mutually_exclusive_group()
        src.add_argument("--recording", metavar="DIR", help="probe a recording folder instead of this machine (a simulated node)")
        src.add_argument("--profile", metavar="NAME", help="probe a bundled profile (fabric.testing.profiles())")
        p.add_argument("--name", help="node name (default: the hostname, or the profile's name)")
        p.add_argument("--role", action="append", default=[], metavar="ROLE", help="declare a role (repeatable), e.g. relay")
        p.add_argument("--max-concurrent-tasks", type=int, metavar="N", help="override the node's slots")
        p.add_argument("--pool", help="pool label")
        p.add_argument("--pool-tier", help="pool tier label")
        p.add_argument("--zone", help="zone label")
        p.add_argument("--ray", metavar="PATH", help="the ray executable (default: next to this Python, else on PATH)")
        p.add_argument("--dry-run", action="store_true", help="print the ray start command, do not run it")
        p.add_argument("ray_args", nargs=argparse.REMAINDER, metavar="-- RAY_START_ARGS",
                       help="extra arguments for ray start after --, e.g. -- --block")
        p.set_defaults(func=run_start, command_name=command)
    s = subparsers.add_parser("status", help="print the fleet the fabric knows: name, tier, GPUs, status, running/max, utilisation, "
                                             "last seen; then its pools, pool tiers, hot spares and prospective nodes")
    s.add_argument("--address", default="auto", metavar="HOST:PORT", help="Ray cluster address (default: auto)")
    s.add_argument("--json", action="store_true", help="one JSON object per node, in a list")
    add_width_flag(s)
    s.set_defaults(func=run_status)


# -- join / start-head ----------------------------------------------------------------------------------
def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ``ValueError`` saying what is wrong."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {address!r} is not HOST:PORT (e.g. 10.0.0.5:6379)")
    return host.strip("[]"), int(port)


def build_ray_start(caps: Any, *, ray: str, address: str | None = None, head_port: int | None = None, profile: str | None = None,
                    recording: str | None = None, pool: str | None = None, pool_tier: str | None = None, zone: str | None = None,
                    extra: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
    """The ``ray start`` argv and the extra environment for a node with capabilities ``caps``: the
    ``local`` provider's builders (``fabric.providers.local``), so a joined node and a provisioned
    one join Ray alike."""
    from dataclasses import replace

    from fabric.providers.local import node_args, ray_start_args

    node = node_args(caps, pool=pool, pool_tier=pool_tier, zone=zone)
    if profile:
        node = replace(node, labels={**node.labels, PROFILE_LABEL: profile})
    argv = ray_start_args(node, ray=ray, address=address, head_port=head_port, extra=extra)
    env = {RECORDING_ENV: str(Path(recording).resolve())} if recording else {}
    return argv, env


def _probe(args: argparse.Namespace) -> Any:
    from probes import LiveSources, RecordedSources, probe_node

    if args.profile:
        from probes.profiles import profile_path

        sources: Any = RecordedSources(profile_path(args.profile))
    elif args.recording:
        if not Path(args.recording).is_dir():
            raise ValueError(f"recording {args.recording!r} is not a folder")
        sources = RecordedSources(args.recording)
    else:
        sources = LiveSources()
    name = args.name or (args.profile if args.profile else None)
    return probe_node(sources, name=name, roles=tuple(args.role), max_concurrent_tasks=args.max_concurrent_tasks)


def _reachable(host: str, port: int, timeout_s: float = 3.0) -> str | None:
    """None when something accepts TCP at host:port, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def _refuse(command: str, message: str) -> int:
    print(f"fabric {command}: error: {message}", file=sys.stderr)
    return 2


def run_start(args: argparse.Namespace) -> int:
    command = args.command_name
    extra = [a for a in (args.ray_args or []) if a != "--"] if args.ray_args else []
    ray = find_ray(args.ray)
    if ray is None:
        where = f"at {args.ray!r}" if args.ray else "next to this Python or on PATH"
        return _refuse(command, f"the `ray` command was not found {where}: install ray[default] (pip install 'ray[default]') or pass --ray PATH")
    address = getattr(args, "address", None)
    if address is not None:
        try:
            host, port = parse_address(address)
        except ValueError as exc:
            return _refuse(command, str(exc))
    try:
        caps = _probe(args)
    except Exception as exc:  # a bad profile/recording/role: one line, no traceback
        return _refuse(command, f"probe failed: {exc}".splitlines()[0])
    try:
        argv, env = build_ray_start(caps, ray=ray, address=address, head_port=getattr(args, "port", None), profile=args.profile,
                                    recording=args.recording, pool=args.pool, pool_tier=args.pool_tier, zone=args.zone, extra=extra)
    except ValueError as exc:
        return _refuse(command, str(exc))
    shown = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *map(shlex.quote, argv)])
    print(f"probed {caps.name}: {caps.summary()}")
    print(f"{'would run' if args.dry_run else 'running'}: {shown}", flush=True)
    if args.dry_run:
        return 0
    if address is not None:
        why = _reachable(host, port)
        if why is not None:
            return _refuse(command, f"cannot reach the head at {address}: {why} (is the address right and the head up?)")
    if "--block" in extra:
        # ray start stays in the foreground: become it, so that signals (and a supervisor's
        # pid) reach ray start itself and it stops its node's processes.
        os.execve(argv[0], argv, {**os.environ, **env})
    proc = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True)
    if proc.returncode != 0:
        text = ((proc.stderr or "") + (proc.stdout or "")).strip().splitlines()
        errors = [ln for ln in text if "error" in ln.lower() or "failed" in ln.lower()] or text[-3:]
        print(f"fabric {command}: ray start failed (exit {proc.returncode}):", file=sys.stderr)
        for line in errors[-5:]:
            print(f"  {line.strip()}", file=sys.stderr)
        return proc.returncode
    verb = "started head" if address is None else f"joined {address} as"
    print(f"{verb} {caps.name} (tier {caps.tier.value}, {caps.limitations.max_concurrent_tasks} slots)")
    return 0


# -- tables that fit a terminal ------------------------------------------------------------------------
NARROW = 80
"""The width a table fits when stdout is not a terminal (a pipe, a file, a test): an 80-column
terminal reads it whole. ``--wide`` lifts the limit (every cell whole, one line per row)."""
ELLIPSIS = "\u2026"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def add_width_flag(parser: Any) -> None:
    """``--wide``: every cell whole, however wide (for grep and awk)."""
    parser.add_argument("--wide", action="store_true", help="print every cell whole, one line per row, however wide")


def output_width(args: argparse.Namespace | None = None, *, isatty: bool | None = None) -> int | None:
    """The columns a command's text fits: None with ``--wide``; the terminal's width on a terminal;
    else ``NARROW`` (80)."""
    if args is not None and getattr(args, "wide", False):
        return None
    if isatty if isatty is not None else sys.stdout.isatty():
        return max(20, shutil.get_terminal_size((NARROW, 24)).columns)
    return NARROW


def clip(text: Any, width: int) -> str:
    """``text`` on one line in at most ``width`` cells: control characters become spaces and a
    longer text ends in an ellipsis."""
    from rich.cells import cell_len, set_cell_size

    text = _CONTROL.sub(" ", str(text))
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, max(0, width - 1)).rstrip() + ELLIPSIS if width > 0 else ""


def render_table(header: Sequence[str], body: Sequence[Sequence[Any]], width: int | None, *, right: Sequence[str] = (),
                 shrink: dict[str, int] | None = None, drop: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """A plain table (no colours, no box): the header line, then one line per row, columns
    separated by two spaces. Returns the lines and the columns left out.

    ``width`` None: every cell whole. Otherwise each line fits ``width`` cells, in this order of
    resort: two spaces between columns; one; then (one space) the ``shrink`` columns (name -> least width, never
    under the header's) cut with an ellipsis, in the order given, each to its least before the
    next; then the ``drop`` columns left out, in order; last, each line cut at ``width``."""
    from rich.cells import cell_len

    cells = [[_CONTROL.sub(" ", str(c)) for c in row] for row in body]
    natural = [max([cell_len(h), *(cell_len(row[i]) for row in cells)]) for i, h in enumerate(header)]
    least = {h: max(cell_len(h), n) for h, n in (shrink or {}).items()}
    cut_order = list(least)
    shown = list(range(len(header)))
    layout: tuple[list[int], list[int], int] | None = None
    if width is None:
        layout = (shown, natural, 2)
    for left_out in range(len(drop) + 1):
        if layout is not None:
            break
        shown = [i for i, h in enumerate(header) if h not in drop[:left_out]]
        for gap, squeeze in ((2, False), (1, False), (1, True)):  # before a cell is cut, the gaps narrow
            widths = [natural[i] for i in shown]
            room = width - gap * (len(shown) - 1)
            if squeeze:
                order = sorted((k for k, i in enumerate(shown) if header[i] in least), key=lambda k: cut_order.index(header[shown[k]]))
                widths = _squeeze(widths, [least.get(header[i]) for i in shown], order, room)
            if sum(widths) <= room:
                layout = (shown, widths, gap)
                break
    if layout is None:  # narrower than the columns that must stay whole: cut each line
        shown = [i for i, h in enumerate(header) if h not in drop]
        layout = (shown, [natural[i] for i in shown], 1)
    shown, widths, gap = layout
    lines = []
    for row in [list(header), *cells]:
        parts = []
        for i, w in zip(shown, widths):
            text = clip(row[i], w)
            pad = " " * (w - cell_len(text))
            parts.append(pad + text if header[i] in right else text + pad)
        line = (" " * gap).join(parts).rstrip()
        lines.append(clip(line, width) if width is not None else line)
    return lines, [h for i, h in enumerate(header) if i not in shown]


def _squeeze(widths: list[int], least: list[int | None], order: list[int], room: int) -> list[int]:
    """``widths`` with the shrinkable columns (``order``: their positions, first cut first) each
    narrowed to its ``least`` before the next, until they fit ``room``."""
    widths = list(widths)
    for i in order:
        excess = sum(widths) - room
        if excess <= 0:
            break
        widths[i] = max(least[i] or 0, widths[i] - excess)
    return widths


def fit_lines(text: str, width: int | None) -> str:
    """``text`` with each line longer than ``width`` wrapped at spaces (continuations indented four
    past the line's own indent; a word longer than the room is cut with an ellipsis)."""
    import textwrap

    if width is None:
        return text
    out = []
    for line in text.splitlines():
        line = _CONTROL.sub(" ", line).rstrip()
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        hang = (indent + "    ")[:max(0, width // 2)]
        wrapped = textwrap.wrap(line.strip(), width=width, initial_indent=indent, subsequent_indent=hang,
                                break_long_words=False, break_on_hyphens=False) or [line]
        out.extend(clip(w, width) for w in wrapped)
    return "\n".join(out)


def gpus_cell(models: Sequence[str]) -> str:
    """GPU models as one short cell: runs of one model counted (``8x NVIDIA H100``), else ``-``."""
    parts: list[list[Any]] = []
    for m in models:
        if parts and parts[-1][0] == m:
            parts[-1][1] += 1
        else:
            parts.append([m, 1])
    return ", ".join(m if n == 1 else f"{n}x {m}" for m, n in parts) or "-"


# -- status ---------------------------------------------------------------------------------------------
def _ago(now: float, then: float | None) -> str:
    if not then:
        return "never"
    s = max(0.0, now - then)
    return f"{s:.1f}s ago" if s < 60 else (f"{s / 60:.0f}m ago" if s < 3600 else f"{s / 3600:.1f}h ago")


def status_rows(records: Sequence[Any], now: float) -> list[dict[str, Any]]:
    """One plain dict per node (``fabric.core.placement.NodeRecord`` in), the ``--json`` form."""
    rows = []
    for r in records:
        caps = r.capabilities
        max_slots = r.max_concurrent_tasks or caps.limitations.max_concurrent_tasks
        rows.append({
            "node_id": r.node_id, "name": r.name, "tier": (r.tier or caps.tier).value, "gpus": [g.model for g in caps.gpus],
            "status": str(r.status.value if hasattr(r.status, "value") else r.status), "running": r.running, "max": max_slots,
            "utilization": round(float(r.utilization), 3), "last_seen": r.last_seen, "last_seen_ago_s": None if not r.last_seen else round(now - r.last_seen, 1),
            "cordoned": r.cordoned, "flap_held": r.flap_held,
        })
    return rows


STATUS_HEADER = ("NAME", "TIER", "GPUS", "STATUS", "RUNNING/MAX", "UTIL", "LAST SEEN", "NODE")
_LEFT_OUT_WHEN_NARROW = ("NODE", "GPUS")
"""Columns left out, in this order, while the table cannot fit even with its long cells cut (``--json`` keeps them)."""
_STATUS_SHRINK = {"GPUS": 10, "STATUS": 16, "NAME": 12}
"""Cells cut (with an ellipsis) to fit, in this order, down to these; a node id is whole (12) or left out."""


def format_status_table(rows: Sequence[dict[str, Any]], now: float, width: int | None = None) -> str:
    """The fleet as a table, best tier first, one line per node, no colours.

    ``width``: the columns to fit in (the CLI passes ``output_width``: 80 unless on a terminal);
    None, as wide as the table needs (every cell whole). A table too wide cuts its long cells
    (name, GPUs, status) with an ellipsis; where even that is too wide, NODE and then GPUS are
    left out, with a line that says so."""
    from fabric.core.tiers import ComputeTier

    body = []
    for row in sorted(rows, key=lambda r: (-ComputeTier.parse(r["tier"]).rank, r["name"], r["node_id"])):
        status = row["status"] + (" cordoned" if row["cordoned"] else "") + (" flap-held" if row["flap_held"] else "")
        body.append((row["name"], row["tier"], gpus_cell(row["gpus"]), status, f"{row['running']}/{row['max']}",
                     f"{row['utilization'] * 100:.0f}%", _ago(now, row["last_seen"]), row["node_id"][:12]))
    lines, left_out = render_table(STATUS_HEADER, body, width, right=("RUNNING/MAX", "UTIL"), shrink=_STATUS_SHRINK,
                                   drop=_LEFT_OUT_WHEN_NARROW)
    if not body:
        lines.append("(no nodes registered)")
    if left_out:
        lines.extend(fit_lines(f"({' and '.join(left_out)} left out on {width} columns; --json has every field)", width).splitlines())
    return "\n".join(lines)


def _pools_text(width: int | None) -> str:
    """The pools as the scheduler sees them (``fabric pools``), or nothing when no scheduler runs."""
    from fabric.cli.pools_cmd import fetch_view, format_pools
    from fabric.runtime.control import FabricHandle

    try:
        return format_pools(fetch_view(FabricHandle()), width)
    except Exception:  # a fleet-only fabric (no scheduler): the node table is all there is
        return ""


def run_status(args: argparse.Namespace) -> int:
    from fabric.cli.connect import connect
    from fabric.runtime.control import FabricHandle

    ray = connect(args.address, "status")  # on failure it has said why (a token problem, nothing there...)
    if ray is None:
        return 2
    try:
        try:
            records = FabricHandle().nodes()
        except RuntimeError as exc:  # the fabric is not up here
            print(f"fabric status: {exc}", file=sys.stderr)
            return 1
        now = time.time()
        rows = status_rows(records, now)
        width = output_width(args)
        print(json.dumps(rows, indent=2) if args.json else format_status_table(rows, now, width))
        if not args.json:
            pools = _pools_text(width)
            if pools:
                print()
                print(pools)
        return 0
    finally:
        ray.shutdown()

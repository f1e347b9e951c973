"""``fabric probe``: what this machine (or a recording, or a bundled profile) is and can do.

Outputs: a human summary (default), ``--json`` (``NodeCapabilities`` with ``tier``/``tiers``),
``--ray-labels`` / ``--k3s-labels`` (JSON objects), ``--ray-start-args`` (the ``--resources`` and
``--labels`` arguments a node joins with), ``--table``. ``--all`` probes this machine and every
bundled profile. ``--record DIR`` also writes what was read as a recording folder (how a real
NVML probe gets recorded on a GPU machine). Bad input (a missing recording folder, an unknown
profile or role) is one line on stderr and exit code 2.

The summary and the tables say why a tier is not served (``NodeCapabilities.unserved``). The
tables are drawn with rich, at least 80 columns wide (wider when the terminal is), and plain
text without ANSI codes when stdout is not a terminal; the JSON and label outputs are for
scripts and never change shape with the terminal.
"""

from __future__ import annotations

import argparse
import io
import json
import shlex
import shutil
import sys
from typing import Any

from fabric.core.capabilities import NodeCapabilities
from fabric.core.errors import ProbeError, SettingsError

__all__ = ["add_parser", "run", "ray_start_args"]


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "probe", help="probe this node (or a recording/profile) and print its capabilities and tiers",
        description=__doc__.split("\n\n")[1].replace("``", "") if __doc__ else None,  # plain text, no RST markup
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", dest="output", action="store_const", const="json", help="NodeCapabilities as JSON")
    out.add_argument("--ray-labels", dest="output", action="store_const", const="ray-labels", help="Ray node labels as JSON")
    out.add_argument("--k3s-labels", dest="output", action="store_const", const="k3s-labels", help="k3s node labels as JSON")
    out.add_argument("--ray-start-args", dest="output", action="store_const", const="ray-start-args",
                     help="the --resources/--labels arguments for `ray start`")
    out.add_argument("--table", dest="output", action="store_const", const="table", help="a one-row-per-node table")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--recording", metavar="DIR", help="probe a recording folder instead of this machine")
    src.add_argument("--profile", metavar="NAME", help="probe a bundled profile (see --all for the list)")
    src.add_argument("--all", action="store_true", help="this machine and every bundled profile (a table by default)")
    p.add_argument("--record", metavar="DIR", help="also write what the probe read as a recording folder")
    p.add_argument("--role", action="append", default=[], metavar="ROLE", help="declare a role (repeatable): relay, batch, wasm, dsp, esp32, ethernet")
    p.add_argument("--name", help="node name (default: hostname, or the profile's name)")
    p.add_argument("--max-concurrent-tasks", type=int, metavar="N", help="override the derived slot count")
    p.add_argument("--config", metavar="FILE", help="fabric settings YAML: its per-node overrides apply (nodes.<name>.max_concurrent_tasks)")
    p.add_argument("--pool", help="pool label to add (--ray-labels/--ray-start-args)")
    p.add_argument("--pool-tier", help="pool tier label to add")
    p.add_argument("--zone", help="zone label to add")
    p.set_defaults(func=run, output=None)


def ray_start_args(caps: NodeCapabilities, *, pool: str | None = None, pool_tier: str | None = None, zone: str | None = None) -> str:
    """``--num-gpus=N --resources='{...}' --labels='k=v,...'`` for ``ray start`` (Ray 2.60's label
    string format). The GPU count is the CUDA devices the probe found (``ray_gpus``), so Ray
    reserves them for work that asks for GPUs and sets its ``CUDA_VISIBLE_DEVICES``."""
    resources = json.dumps(caps.to_ray_resources(), sort_keys=True)
    labels = ",".join(f"{k}={v}" for k, v in sorted(caps.to_ray_labels(pool=pool, pool_tier=pool_tier, zone=zone).items()))
    return f"--num-gpus={caps.ray_gpus} --resources={shlex.quote(resources)} --labels={shlex.quote(labels)}"


def _probe(args: argparse.Namespace, source: str | None) -> NodeCapabilities:
    """Probe one source: None = this machine, ``profile:NAME`` or a recording folder."""
    from probes import LiveSources, RecordedSources, RecordingSources, probe_node

    if source is None:
        sources: Any = LiveSources()
    elif source.startswith("profile:"):
        from probes.profiles import profile_path

        sources = RecordedSources(profile_path(source[len("profile:"):]))
    else:
        sources = RecordedSources(source)
    recorder = RecordingSources(sources) if args.record and not args.all else None
    caps = probe_node(recorder or sources, name=args.name, roles=tuple(args.role), max_concurrent_tasks=args.max_concurrent_tasks)
    if recorder is not None:
        recorder.write(args.record)
        print(f"recorded {caps.source} to {args.record}", file=sys.stderr)
    if args.config and args.max_concurrent_tasks is None:
        from fabric.core.settings import FabricSettings
        from probes.node import apply_settings

        caps = apply_settings(caps, FabricSettings.from_yaml(args.config))
    return caps


def run(args: argparse.Namespace) -> int:
    try:
        if args.all:
            from probes.profiles import profiles

            if args.record:
                raise ValueError("--record cannot be combined with --all")
            nodes = [_probe(args, None)] + [_probe(argparse.Namespace(**{**vars(args), "name": None}), f"profile:{n}") for n in profiles()]
        elif args.profile:
            nodes = [_probe(args, f"profile:{args.profile}")]
        else:
            nodes = [_probe(args, args.recording)]
    except SettingsError as exc:  # the --config file: its problems as `fabric settings validate` prints them
        from fabric.cli.settings_cmd import settings_file_problems

        lines = settings_file_problems(args.config) if args.config else [_one_line(f"fabric probe: error: {exc}")]
        print("\n".join(lines), file=sys.stderr)
        return 2
    except (ProbeError, ValueError) as exc:
        print(_one_line(f"fabric probe: error: {exc}"), file=sys.stderr)
        return 2
    try:
        text = render(nodes, args.output or ("table" if args.all else "summary"), pool=args.pool, pool_tier=args.pool_tier, zone=args.zone)
    except ValueError as exc:  # a bad --pool/--zone label value
        print(_one_line(f"fabric probe: error: {exc}"), file=sys.stderr)
        return 2
    try:
        print(text)
    except BrokenPipeError:  # `fabric probe --json | head`
        sys.stderr.close()
    return 0


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render(nodes: list[NodeCapabilities], output: str, **labels: Any) -> str:
    """``nodes`` in one of the output formats (several nodes: JSON lists, one block per node)."""
    from probes.report import format_summary

    if output == "table":
        return format_tables(nodes, width=max(80, shutil.get_terminal_size().columns), terminal=sys.stdout.isatty())
    if output == "summary":
        return "\n\n".join(format_summary(c) for c in nodes)
    if output == "json":
        data = [c.model_dump(mode="json") for c in nodes]
        return json.dumps(data[0] if len(data) == 1 else data, indent=2)
    if output == "ray-labels":
        data = [c.to_ray_labels(**labels) for c in nodes]
        return json.dumps(data[0] if len(data) == 1 else data, indent=2, sort_keys=True)
    if output == "k3s-labels":
        data = [c.to_k3s_labels() for c in nodes]
        return json.dumps(data[0] if len(data) == 1 else data, indent=2, sort_keys=True)
    if output == "ray-start-args":
        return "\n".join(ray_start_args(c, **labels) for c in nodes)
    raise ValueError(f"unknown output {output!r}")


def format_tables(nodes: list[NodeCapabilities], *, width: int = 80, terminal: bool = False) -> str:
    """One row per node (what it serves, its machine, GPUs and proven hardware encoders), then
    one row per tier a node does not serve, with why; drawn by rich at ``width`` columns, styled
    only for a ``terminal``."""
    from rich.console import Console

    from probes.report import TABLE_COLUMNS, UNSERVED_COLUMNS, table_row, unserved_rows

    why = unserved_rows(nodes)
    shown = [(n if i == 0 or why[i - 1][0] != n else "", t, w) for i, (n, t, w) in enumerate(why)]
    console = Console(file=io.StringIO(), width=width, force_terminal=terminal, no_color=not terminal, highlight=False)
    with console.capture() as capture:
        # A machine line ("30.4 GiB", "12 slots") reads badly broken in two.
        console.print(_rich_table(TABLE_COLUMNS, [table_row(c) for c in nodes], width, whole=("machine",), leading=1))
        if shown:
            console.print()
            console.print(_rich_table(UNSERVED_COLUMNS, shown, width))
    return "\n".join(line.rstrip() for line in capture.get().rstrip("\n").splitlines())


def _rich_table(columns: tuple[str, ...], rows: list[tuple[str, ...]], width: int, whole: tuple[str, ...] = (), **kw: Any) -> Any:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), **kw)
    # Between two columns: one padding and one separator character.
    for name, fitted in zip(columns, _fit_widths(columns, rows, width - 2 * (len(columns) - 1), whole=whole)):
        table.add_column(name, width=fitted, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # Text: a "[" in a name is not rich markup
    return table


def _fit_widths(columns: tuple[str, ...], rows: list[tuple[str, ...]], available: int, *, whole: tuple[str, ...] = ()) -> list[int]:
    """Column widths within ``available`` characters: every column as wide as its longest line
    when all fit, else as wide as its longest word (longest line for the ``whole`` columns) plus
    a share of the room left, in proportion to what it would still like. (Rich's own shrinking
    can crop the last column or split words.)"""
    cells = [[name, *(r[i] for r in rows)] for i, name in enumerate(columns)]
    natural = [max(len(line) for text in col for line in text.splitlines() or [""]) for col in cells]
    least = [n if name in whole else max(len(word) for text in col for word in text.split() or [""])
             for name, n, col in zip(columns, natural, cells)]
    if sum(natural) <= available:
        return natural
    room = max(0, available - sum(least))
    wants = [n - m for n, m in zip(natural, least)]
    total = sum(wants) or 1
    return [m + room * w // total for m, w in zip(least, wants)]

"""``fabric pools``: the pools as the scheduler sees them (also the second half of ``fabric status``).

For each pool, its pool tiers in cost order (scale-out, provider, nodes up / launching / max,
held after a failed provision), its hot spares (target / live, pending, warm for what, backing
off) and the provisions in flight: the task core's prospective nodes (phase, shape, age, time left
before abandoned) and the spare reconcilers' (phase, shape, age). A phase is ``asked`` (the
provider has not answered) or ``started`` (it answered an instance id; the node has not joined).
``--json`` prints the same as one object.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from fabric.api.pools import pools_view, spare_provisions
from fabric.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, api_address, bad_address, remote_parents, run_over_api
from fabric.cli.tables import NARROW, add_width_flag, fit_lines, output_width, render_table


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("pools", help="pools, pool tiers, hot spares and prospective nodes, as the scheduler sees them",
                              parents=remote_parents("one JSON object: pools, spares, prospective"))
    add_width_flag(p)
    p.set_defaults(func=run_pools)


TIERS_HEADER = ("POOL TIER", "SCALE", "PROVIDER", "UP", "LAUNCH", "MAX", "SPARE", "NOTE")
PROSPECTIVE_HEADER = ("PROVISION", "PHASE", "WHERE", "SHAPE", "AGE", "LEFT")
SPARE_PROVISIONS_HEADER = ("PROVISION", "PHASE", "WHERE", "SHAPE", "AGE")
_SHRINK = {"POOL TIER": 12, "PROVIDER": 8, "NOTE": 8, "PROVISION": 12, "WHERE": 12, "SHAPE": 8}
"""Cells cut (with an ellipsis) to fit, in this order, down to these."""
_INDENT = "  "


def _indented(header: Sequence[str], body: Sequence[Sequence[Any]], width: int | None, right: Sequence[str]) -> list[str]:
    """``render_table``'s lines, each indented two spaces, fitting ``width`` with the indent."""
    from rich.cells import cell_len

    room = None if width is None else max(1, width - len(_INDENT))
    natural = {h: max([cell_len(h), *(cell_len(str(row[i])) for row in body)]) for i, h in enumerate(header)}
    shrink = {h: min(least, natural[h]) for h, least in _SHRINK.items() if h in natural}  # never wider than its cells
    lines, _ = render_table(header, body, room, right=right, shrink=shrink)
    return [_INDENT + line for line in lines]


def format_pools(view: dict, width: int | None = NARROW) -> str:
    """The view as lines that fit ``width`` columns (80 by default; None: long names whole): per
    pool its tiers as a table and its hot spares; then the prospective nodes and the spare
    provisions in flight, each a table."""
    lines: list[str] = []
    body: list[Sequence[Any]]
    for pool in view["pools"]:
        lines.append(f"pool {pool['pool']}")
        body = []
        for t in pool["tiers"]:
            note = f"held {t['held_s']:.0f}s (failed)" if t["held_s"] else ("spot" if t["launch_mode"] == "spot" else "")
            cap = "-" if t["max_nodes"] is None else str(t["max_nodes"])
            body.append((t["pool_tier"], t["scale_out"], t["provider"], t["nodes"], t["launching"], cap, t["spares"], note))
        lines.extend(_indented(TIERS_HEADER, body, width, right=("UP", "LAUNCH", "MAX", "SPARE")))
        s = pool["spares"]
        if s is not None:
            warm = ", ".join(s["warm_for"]) or "-"
            extra = " (backing off)" if s["backing_off"] else ""
            lines.append(f"  hot spares: {s['live']}/{s['target']} live, {s['pending']} pending, warm for {warm}{extra}")
    if view["prospective"]:
        lines.append("prospective nodes (provisioning)")
        body = [(p["provision_id"], p["phase"], f"{p['pool']}/{p['pool_tier']}", p["shape"], f"{p['age_s']:.1f}s",
                 f"{p['timeout_in_s']:.0f}s") for p in view["prospective"]]
        lines.extend(_indented(PROSPECTIVE_HEADER, body, width, right=("AGE", "LEFT")))
    if view.get("spare_provisions"):
        lines.append("spare provisions in flight")
        body = [(p["provision_id"], p["phase"], f"{p['pool']}/{p['pool_tier']}", p["shape"], f"{p['age_s']:.1f}s")
                for p in view["spare_provisions"]]
        lines.extend(_indented(SPARE_PROVISIONS_HEADER, body, width, right=("AGE",)))
    return fit_lines("\n".join(lines), width)


def fetch_view(handle: Any) -> dict:
    """The view from a running fabric (``FabricHandle``)."""
    return pools_view(handle.settings_in_force(), handle.scheduler_nodes(), handle.provisions(), handle.spares())


def print_view(view: dict, args: argparse.Namespace) -> int:
    """Print ``view`` as ``--json`` or as text that fits the output."""
    print(json.dumps(view, indent=2, default=str) if args.json else format_pools(view, output_width(args)))
    return EXIT_OK


def run_pools(args: argparse.Namespace) -> int:
    if api_address(args):  # the operator API's ListPools: the same view, without Ray
        return run_over_api(args, "pools", lambda client: print_view(client.pools(), args))
    from fabric.cli.connect import connect
    from fabric.runtime.control import FabricHandle

    if bad_address(args.address, "pools"):
        return EXIT_USAGE
    ray = connect(args.address, "pools")
    if ray is None:
        return EXIT_FAILED
    try:
        try:
            view = fetch_view(FabricHandle())
        except RuntimeError as exc:
            print(f"fabric pools: {exc}", file=sys.stderr)
            return 1
        return print_view(view, args)
    finally:
        ray.shutdown()


__all__ = ["add_parser", "fetch_view", "format_pools", "pools_view", "print_view", "run_pools", "spare_provisions"]

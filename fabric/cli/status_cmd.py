"""``fabric status``: the fleet the fabric knows as a table (or ``--json``), then its pools.

Through Ray (``--address``) the table is the registry's nodes; through the operator API (``--api
HOST:PORT``, no Ray) it is the scheduler's fleet view. Either way the pools follow, the same text
(``ListPools`` over the API), unless no scheduler answers them."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from fabric.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, api_address, bad_address, remote_parents, run_over_api
from fabric.cli.tables import add_width_flag, ago, fit_lines, gpus_cell, output_width, render_table

if TYPE_CHECKING:  # pragma: no cover
    from fabric.api.client import ApiClient

__all__ = ["STATUS_HEADER", "add_parser", "format_status_table", "run_status", "status_rows"]


def add_parser(subparsers: Any) -> None:
    s = subparsers.add_parser("status", help="print the fleet the fabric knows: name, tier, GPUs, status, running/max, utilisation, "
                                             "last seen (--wide: and each node's address); then its pools, pool tiers, "
                                             "hot spares and prospective nodes",
                              parents=remote_parents("one JSON object per node, in a list"))
    add_width_flag(s)
    s.set_defaults(func=run_status)


# -- status ---------------------------------------------------------------------------------------------
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
            "cordoned": r.cordoned, "flap_held": r.flap_held, "address": node_address(r),
        })
    return rows


def node_address(record: Any) -> str | None:
    """The address Ray knows the node by (its ``node:<address>`` resource), or None."""
    for key in getattr(record, "ray_resources", None) or {}:
        if key.startswith("node:") and not key.startswith("node:__"):
            return key[len("node:"):]
    return None


STATUS_HEADER = ("NAME", "TIER", "GPUS", "STATUS", "RUNNING/MAX", "UTIL", "LAST SEEN", "NODE")
WIDE_HEADER = (*STATUS_HEADER, "ADDRESS")
"""``--wide`` adds the address Ray knows each node by."""
_LEFT_OUT_WHEN_NARROW = ("NODE", "GPUS")
"""Columns left out, in this order, while the table cannot fit even with its long cells cut (``--json`` keeps them)."""
_STATUS_SHRINK = {"GPUS": 10, "STATUS": 16, "NAME": 12}
"""Cells cut (with an ellipsis) to fit, in this order, down to these; a node id is whole (12) or left out."""


def format_status_table(rows: Sequence[dict[str, Any]], now: float, width: int | None = None, *, address: bool = False) -> str:
    """The fleet as a table, best tier first, one line per node, no colours.

    ``width``: the columns to fit in (the CLI passes ``output_width``: 80 unless on a terminal);
    None, as wide as the table needs (every cell whole). A table too wide cuts its long cells
    (name, GPUs, status) with an ellipsis; where even that is too wide, NODE and then GPUS are
    left out, with a line that says so. ``address`` (``--wide``) adds each node's address."""
    from fabric.core.tiers import ComputeTier

    body = []
    for row in sorted(rows, key=lambda r: (-ComputeTier.parse(r["tier"]).rank, r["name"], r["node_id"])):
        status = row["status"] + (" cordoned" if row["cordoned"] else "") + (" flap-held" if row["flap_held"] else "")
        body.append((row["name"], row["tier"], gpus_cell(row["gpus"]), status, f"{row['running']}/{row['max']}",
                     f"{row['utilization'] * 100:.0f}%", ago(now, row["last_seen"]), row["node_id"][:12],
                     row.get("address") or "-"))
    header = WIDE_HEADER if address else STATUS_HEADER
    body = [cells[:len(header)] for cells in body]
    lines, left_out = render_table(header, body, width, right=("RUNNING/MAX", "UTIL"), shrink=_STATUS_SHRINK,
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


def print_status(records: Sequence[Any], args: argparse.Namespace, pools: Callable[[int | None], str]) -> int:
    """Print the node table (or ``--json``), then ``pools(width)`` when it says anything."""
    now = time.time()
    rows = status_rows(records, now)
    width = output_width(args)
    wide = bool(getattr(args, "wide", False))
    print(json.dumps(rows, indent=2) if args.json else format_status_table(rows, now, width, address=wide))
    if not args.json:
        text = pools(width)
        if text:
            print()
            print(text)
    return EXIT_OK


def _api_pools_text(client: ApiClient) -> Callable[[int | None], str]:
    """The pools through the operator API (``ListPools``), or nothing when it cannot answer them (an
    older fabric, no scheduler view): the node table is all there is then."""
    def text(width: int | None) -> str:
        from fabric.api.client import ApiError, ApiRefused
        from fabric.cli.pools_cmd import format_pools

        try:
            return format_pools(client.pools(), width)
        except (ApiError, ApiRefused, ValueError, KeyError):
            return ""
    return text


def run_status(args: argparse.Namespace) -> int:
    if api_address(args):  # the API's node view is the scheduler's; the pools come from ListPools
        return run_over_api(args, "status", lambda client: print_status(client.nodes(), args, _api_pools_text(client)))
    if bad_address(args.address, "status"):
        return EXIT_USAGE
    from fabric.cli.connect import connect
    from fabric.runtime.control import FabricHandle

    ray = connect(args.address, "status")  # on failure it has said why (a token problem, nothing there...)
    if ray is None:
        return EXIT_FAILED
    try:
        try:
            records = FabricHandle().nodes()
        except RuntimeError as exc:  # the fabric is not up here
            print(f"fabric status: {exc}", file=sys.stderr)
            return EXIT_FAILED
        return print_status(records, args, _pools_text)
    finally:
        ray.shutdown()

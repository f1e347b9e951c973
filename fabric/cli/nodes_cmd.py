"""``fabric nodes``: one row per node the fabric knows (issue 17), readable on an 80-column terminal.

Each row: name, tier, status (with its flags: cordoned, flap-held, unhealthy, launching, spare),
running/max slots, GPUs, pool/pool tier, last seen. ``--json`` prints one object per node, in a
list, with every field whole (node id, GPU models, zone, provider, instance). Off a terminal the
table fits 80 columns (long names and GPU lists cut with an ellipsis); ``--wide`` keeps every
cell whole. It connects and exits as ``fabric status`` does (``--address HOST:PORT``, default
``auto``, or ``--api HOST:PORT`` through the operator API without Ray): 1 when the cluster or the
API cannot be reached (it has said why) or the fabric is not up there, 2 for a malformed address.

A node that joined without pool labels is in the default pool's fixed tier (as the scheduler's
``FleetView`` reads it); ``node_rows`` resolves that from the settings in force when it has them.

Turning ``NodeRecord`` objects into rows and text is pure (``node_rows``, ``format_nodes_table``);
``run_nodes`` does the I/O.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Sequence

from fabric.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, api_address, bad_address, remote_parents, run_over_api
from fabric.cli.tables import ago, add_width_flag, gpus_cell, output_width, render_table

__all__ = ["NODES_HEADER", "add_parser", "format_nodes_table", "node_rows", "resolve_pool", "run_nodes"]

NODES_HEADER = ("NAME", "TIER", "STATUS", "RUN/MAX", "GPUS", "POOL/TIER", "LAST SEEN")
_NODES_SHRINK = {"POOL/TIER": 10, "GPUS": 8, "STATUS": 16, "NAME": 12}
"""Cells cut (with an ellipsis) to fit the width, in this order, each down to its least before the
next (a status keeps its first flag: ``active cordoned``); at their least the table fits 80
columns, whatever the names."""


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("nodes", help="one row per node: name, tier, status, running/max, GPUs, pool/pool tier, last seen",
                              description="one row per node the fabric knows: name, tier, status, running/max slots, "
                                          "GPUs, pool/pool tier, last seen (--json: every field, node ids included)",
                              parents=remote_parents("one JSON object per node, in a list"))
    add_width_flag(p)
    p.set_defaults(func=run_nodes)


# -- pure: NodeRecord -> rows -> text ---------------------------------------------------------------
def resolve_pool(settings: Any, pool: str | None, pool_tier: str | None) -> tuple[str | None, str | None]:
    """A node's pool and pool tier as the fleet reads them: no pool label is the default pool, no
    pool-tier label that pool's fixed tier (its first, when none is fixed). ``settings`` None (not
    known): the labels as they are."""
    if settings is None:
        return pool, pool_tier
    pool = pool or settings.default_pool.name
    if pool_tier is None:
        match = next((p for p in settings.pools if p.name == pool), None)
        if match is not None and match.tiers:
            pool_tier = next((t.name for t in match.tiers if t.scale_out == "fixed"), match.tiers[0].name)
    return pool, pool_tier


def _flags(r: Any) -> list[str]:
    names = (("cordoned", "cordoned"), ("flap_held", "flap-held"), ("unhealthy", "unhealthy"), ("launching", "launching"),
             ("spare", "spare"))
    return [label for attr, label in names if getattr(r, attr, False)]


def node_rows(records: Sequence[Any], now: float, settings: Any = None) -> list[dict[str, Any]]:
    """One plain dict per node (``fabric.core.placement.NodeRecord`` in), the ``--json`` form.
    ``settings``: the ``FabricSettings`` in force, to name the pool of a node without pool labels."""
    rows = []
    for r in records:
        caps = r.capabilities
        pool, pool_tier = resolve_pool(settings, getattr(r, "pool", None), getattr(r, "pool_tier", None))
        rows.append({
            "node_id": r.node_id, "name": r.name, "tier": (r.tier or caps.tier).value,
            "status": str(getattr(r.status, "value", r.status)), "flags": _flags(r),
            "running": int(r.running), "max": int(r.max_concurrent_tasks or caps.limitations.max_concurrent_tasks),
            "gpus": [g.model for g in caps.gpus], "pool": pool, "pool_tier": pool_tier,
            "last_seen": r.last_seen, "last_seen_ago_s": None if not r.last_seen else round(now - r.last_seen, 1),
            "zone": getattr(r, "zone", None), "provider": getattr(r, "provider", None),
            "instance_id": getattr(r, "instance_id", None),
        })
    return rows


def _pool_cell(row: dict[str, Any]) -> str:
    if not row["pool"] and not row["pool_tier"]:
        return "-"
    return f"{row['pool'] or '-'}/{row['pool_tier'] or '-'}"


def format_nodes_table(rows: Sequence[dict[str, Any]], now: float, width: int | None = None) -> str:
    """The nodes as a table (no colours), best tier first, then by name, one line per node.
    ``width``: the columns to fit (long cells cut with an ellipsis); None, as wide as it needs."""
    from fabric.core.tiers import ComputeTier

    def rank(tier: str) -> int:
        try:
            return ComputeTier.parse(tier).rank
        except Exception:  # a tier this version does not know sorts last, it still shows
            return -1

    body = [(row["name"], row["tier"], " ".join([row["status"], *row["flags"]]), f"{row['running']}/{row['max']}",
             gpus_cell(row["gpus"]), _pool_cell(row), ago(now, row["last_seen"]))
            for row in sorted(rows, key=lambda r: (-rank(r["tier"]), r["name"], r["node_id"]))]
    lines, _ = render_table(NODES_HEADER, body, width, right=("RUN/MAX",), shrink=_NODES_SHRINK)
    if not rows:
        lines.append("(no nodes registered)")
    return "\n".join(lines)


# -- the command ----------------------------------------------------------------------------------
def _settings(handle: Any) -> Any:
    """The settings in force, or None (a fabric whose registry holds none): pools then show as labelled."""
    try:
        return handle.settings_in_force()
    except Exception:
        return None


def print_nodes(handle: Any, records: Sequence[Any], args: argparse.Namespace) -> int:
    """Print ``records`` as the table (or ``--json``), pools resolved with ``handle``'s settings."""
    now = time.time()
    rows = node_rows(records, now, _settings(handle))
    print(json.dumps(rows, indent=2) if args.json else format_nodes_table(rows, now, output_width(args)))
    return EXIT_OK


def run_nodes(args: argparse.Namespace) -> int:
    if api_address(args):
        return run_over_api(args, "nodes", lambda client: print_nodes(client, client.nodes(), args))
    if bad_address(args.address, "nodes"):
        return EXIT_USAGE
    from fabric.cli.connect import connect
    from fabric.runtime.control import FabricHandle

    import ray as ray_module

    ours = not ray_module.is_initialized()  # a driver that was connected already stays connected
    ray = connect(args.address, "nodes")  # on failure it has said why (a token problem, nothing there...)
    if ray is None:
        return EXIT_FAILED
    try:
        handle = FabricHandle()
        try:
            records = handle.nodes()
        except RuntimeError as exc:  # the fabric is not up here
            print(f"fabric nodes: {exc}", file=sys.stderr)
            return EXIT_FAILED
        return print_nodes(handle, records, args)
    finally:
        if ours:
            ray.shutdown()

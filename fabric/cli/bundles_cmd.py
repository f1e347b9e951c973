"""``fabric bundles``: the bundles the scheduler keeps (issue 14), as ``fabric jobs`` shows jobs.

``fabric bundles`` lists every bundle (id, state, replicas, jobs per state, why it is broken) as a
table or ``--json``; ``fabric bundles BUNDLE_ID`` shows one with each of its jobs (replica, name,
state, node). It connects and exits as ``fabric jobs`` does: 2 when the cluster cannot be reached
or the bundle is unknown, 1 when the fabric is not up there.

Turning ``BundleStatus`` and ``JobStatus`` objects into rows and text is pure (``bundle_rows``,
``format_bundles_table``, ``format_bundle``); ``run_bundles`` does the I/O.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from typing import Any, Sequence

from fabric.cli.common import EXIT_FAILED, EXIT_USAGE, address_parent, bad_address, json_parent
from fabric.cli.jobs_cmd import node_names, state_value
from fabric.cli.node import add_width_flag, fit_lines, output_width, render_table

__all__ = ["add_parser", "bundle_rows", "format_bundle", "format_bundles_table", "run_bundles"]

HEADER = ("BUNDLE", "STATE", "REPLICAS", "JOBS", "REASON")
REPLICAS = ("primary", "backup")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("bundles", help="list the fabric's bundles (or show one, with its jobs)",
                              description="list the fabric's bundles: id, state (live|broken|deleting), replicas, "
                                          "their jobs by state, why a broken one broke; with BUNDLE_ID, its jobs",
                              parents=[address_parent(), json_parent("machine-readable output")])
    p.add_argument("bundle_id", nargs="?", metavar="BUNDLE_ID", help="show this bundle and its jobs")
    add_width_flag(p)
    p.set_defaults(func=run_bundles)


def bundle_rows(bundles: Sequence[Any], jobs: Sequence[Any], node_names: dict[str, str]) -> list[dict[str, Any]]:
    """One plain dict per bundle (the ``--json`` form), its jobs listed with their state and node."""
    by_id = {j.job_id: j for j in jobs}
    rows = []
    for b in bundles:
        members = []
        for key, job_id in sorted(b.jobs.items()):
            replica, _, name = key.partition("/")
            j = by_id.get(job_id)
            node_id = j.binding.node_id if j is not None and j.binding is not None else None
            members.append({"replica": REPLICAS[int(replica)] if replica in ("0", "1") else replica, "name": name,
                            "job_id": job_id, "state": state_value(j.state) if j is not None else "gone",
                            "node_id": node_id, "node": node_names.get(node_id) if node_id else None,
                            "restarts_last_hour": int(j.restarts_last_hour) if j is not None else 0})
        rows.append({"bundle_id": b.bundle_id, "state": state_value(b.state), "replicas": b.replicas,
                     "reasons": list(b.reasons), "jobs": members})
    return rows


def _jobs_cell(row: dict[str, Any]) -> str:
    counts = collections.Counter(j["state"] for j in row["jobs"])
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "-"


_BUNDLES_SHRINK = {"REASON": 12, "JOBS": 12, "BUNDLE": 12}
"""Cells cut (with an ellipsis) to fit the width, in this order; ``fabric bundles BUNDLE_ID`` shows
a bundle whole."""


def format_bundles_table(rows: Sequence[dict[str, Any]], width: int | None = None) -> str:
    """The bundles as a table (no colours), one line per bundle. ``width``: the columns to fit
    (long ids, job counts and reasons cut with an ellipsis); None, as wide as it needs."""
    body = [(row["bundle_id"], row["state"], str(row["replicas"]), _jobs_cell(row), "; ".join(row["reasons"]) or "-")
            for row in rows]
    lines, _ = render_table(HEADER, body, width, right=("REPLICAS",), shrink=_BUNDLES_SHRINK)
    if not rows:
        lines.append("(no bundles)")
    return "\n".join(lines)


def format_bundle(row: dict[str, Any], width: int | None = None) -> str:
    """One bundle and each of its jobs; lines longer than ``width`` wrap (None: they stay whole)."""
    lines = [f"bundle    {row['bundle_id']}", f"state     {row['state']}", f"replicas  {row['replicas']}"]
    for reason in row["reasons"]:
        lines.append(f"broken    {reason}")
    lines.append("jobs:" if row["jobs"] else "jobs:     (none)")
    for j in row["jobs"]:
        node = j["node"] or (j["node_id"][:12] if j["node_id"] else "-")
        lines.append(f"  {j['replica']:<8} {j['name']:<16} {j['state']:<10} {node:<24} {j['job_id']}"
                     f"  restarts/h {j['restarts_last_hour']}".rstrip())
    return fit_lines("\n".join(lines), width)


def run_bundles(args: argparse.Namespace) -> int:
    from fabric.cli.connect import connect
    from fabric.runtime.control import FabricHandle

    import ray as ray_module

    ours = not ray_module.is_initialized()
    if bad_address(args.address, "bundles"):
        return EXIT_USAGE
    ray = connect(args.address, "bundles")
    if ray is None:
        return EXIT_FAILED
    try:
        handle = FabricHandle()
        try:
            bundles, jobs = handle.bundles(), handle.jobs()
        except RuntimeError as exc:  # the fabric (its scheduler) is not up here
            print(f"fabric bundles: {exc}", file=sys.stderr)
            return 1
        names = node_names(handle)
        if args.bundle_id is not None:
            bundles = [b for b in bundles if b.bundle_id == args.bundle_id]
            if not bundles:
                print(f"fabric bundles: no bundle {args.bundle_id!r} (`fabric bundles` lists them)", file=sys.stderr)
                return 2
        rows = bundle_rows(bundles, jobs, names)
        if args.json:
            print(json.dumps(rows[0] if args.bundle_id else rows, indent=2))
        else:
            width = output_width(args)
            print(format_bundle(rows[0], width) if args.bundle_id else format_bundles_table(rows, width))
        return 0
    finally:
        if ours:
            ray.shutdown()

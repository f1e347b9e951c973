"""``fabric jobs``: the long-running jobs the scheduler keeps (issue 14), as ``fabric status`` shows nodes.

``fabric jobs`` lists every job (id, name, state, node, instance key, restarts in the last hour,
bundle) as a table, or ``--json`` (one object per job, in a list); ``fabric jobs JOB_ID`` shows
one job (an id or a unique prefix of one) with its history. Both connect as ``fabric status``
does (``--address``, default ``auto``, or ``--api HOST:PORT`` through the operator API without
Ray) and exit as it does: 1 when the cluster cannot be reached (it has said why) or the fabric is
not up there; an unknown or ambiguous job id exits 2 with a line that says so.

Turning ``JobStatus`` objects into rows and text is pure (``job_rows``, ``format_jobs_table``,
``format_job``); ``run_jobs`` does the I/O.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Sequence

from fabric.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, api_address, bad_address, remote_parents, run_over_api
from fabric.cli.tables import ago, add_width_flag, fit_lines, output_width, render_table

__all__ = ["add_parser", "find_job", "format_job", "format_jobs_table", "job_rows", "run_jobs"]

REPLICAS = ("primary", "backup")
JOBS_HEADER = ("JOB", "NAME", "STATE", "NODE", "INSTANCE", "RESTARTS/H", "BUNDLE")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("jobs", help="list the fabric's long-running jobs (or show one, with its history)",
                              description="list the fabric's long-running jobs: id, name, state, node, instance key, "
                                          "restarts in the last hour, bundle; with JOB_ID, that job and its history",
                              parents=remote_parents("machine-readable output (a list of jobs, or one job with its history)"))
    p.add_argument("job_id", nargs="?", metavar="JOB_ID", help="show this job (an id or a unique prefix of one)")
    add_width_flag(p)
    p.set_defaults(func=run_jobs)


# -- pure: JobStatus -> rows -> text ----------------------------------------------------------------
def state_value(state: Any) -> str:
    return str(getattr(state, "value", state))


def job_rows(statuses: Sequence[Any], node_names: dict[str, str], history: bool = False) -> list[dict[str, Any]]:
    """One plain dict per job (``fabric.core.jobs.book.JobStatus`` in), the ``--json`` form.
    ``node_names``: node id -> name (from the registry); ``history``: add each job's history."""
    rows = []
    for st in statuses:
        node_id = st.binding.node_id if st.binding is not None else None
        row: dict[str, Any] = {
            "job_id": st.job_id, "name": st.name, "state": state_value(st.state),
            "node_id": node_id, "node": node_names.get(node_id) if node_id else None,
            "instance_key": st.binding.instance_key if st.binding is not None else None,
            "restarts_last_hour": int(st.restarts_last_hour), "bundle_id": st.bundle_id,
            "replica": REPLICAS[st.replica] if st.bundle_id and 0 <= st.replica < len(REPLICAS) else None,
            "reason": st.reason, "start_at": getattr(st, "start_at", None),
            "started_at": getattr(st, "started_at", None), "first_started_at": getattr(st, "first_started_at", None),
        }
        if history:
            row["history"] = [{"at": at, "state": state_value(state), "reason": reason} for at, state, reason in st.history]
        rows.append(row)
    return rows


def _node_cell(row: dict[str, Any]) -> str:
    if not row["node_id"]:
        return "-"
    return row["node"] or row["node_id"][:12]


def _bundle_cell(row: dict[str, Any]) -> str:
    if not row["bundle_id"]:
        return "-"
    return f"{row['bundle_id']} ({row['replica']})" if row["replica"] else row["bundle_id"]


_JOBS_SHRINK = {"INSTANCE": 9, "BUNDLE": 8, "NAME": 8, "NODE": 8, "JOB": 16}
"""Cells cut (with an ellipsis) to fit the width, in this order (the instance key's token first),
each down to its least: a generated job id (16) stays whole, and a cut one is still a prefix
``fabric jobs JOB_ID`` takes."""


def format_jobs_table(rows: Sequence[dict[str, Any]], width: int | None = None) -> str:
    """The jobs as a table (no colours), in the order given (the scheduler's: oldest first), one
    line per job. ``width``: the columns to fit (long ids and names cut with an ellipsis); None, as
    wide as it needs (for grep and awk)."""
    body = [(row["job_id"], row["name"], row["state"], _node_cell(row), row["instance_key"] or "-",
             str(row["restarts_last_hour"]), _bundle_cell(row)) for row in rows]
    lines, _ = render_table(JOBS_HEADER, body, width, right=("RESTARTS/H",), shrink=_JOBS_SHRINK)
    if not rows:
        lines.append("(no jobs)")
    return "\n".join(lines)


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def format_job(row: dict[str, Any], now: float, width: int | None = None) -> str:
    """One job (a ``job_rows(..., history=True)`` row) and its history, oldest first; lines longer
    than ``width`` wrap (None: they stay whole)."""
    node = "-" if not row["node_id"] else f"{row['node'] or '?'} ({row['node_id']})"
    lines = [
        f"job       {row['job_id']}",
        f"name      {row['name']}",
        f"state     {row['state']}" + (f" ({row['reason']})" if row["reason"] else ""),
        f"node      {node}",
        f"instance  {row['instance_key'] or '-'}",
        f"restarts  {row['restarts_last_hour']} in the last hour",
        f"bundle    {_bundle_cell(row)}",
        *([f"start at  {_stamp(row['start_at'])}"] if row.get("start_at") is not None else []),
        *([f"started   {_stamp(row['started_at'])} (first {_stamp(row['first_started_at'])})"]
          if row.get("started_at") is not None and row.get("first_started_at") is not None else []),
        "history:" if row.get("history") else "history:  (none)",
    ]
    for h in row.get("history") or ():
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h["at"]))
        lines.append(f"  {stamp}  {ago(now, h['at']):>10}  {h['state']:<10}  {h['reason']}".rstrip())
    return fit_lines("\n".join(lines), width)


def find_job(statuses: Sequence[Any], wanted: str) -> tuple[Any | None, str | None]:
    """The job ``wanted`` names (its id, or a unique prefix of one), or None and why not."""
    for st in statuses:
        if st.job_id == wanted:
            return st, None
    matches = [st for st in statuses if st.job_id.startswith(wanted)] if wanted else []
    if len(matches) == 1:
        return matches[0], None
    if matches:
        shown = ", ".join(st.job_id for st in matches[:5]) + (", ..." if len(matches) > 5 else "")
        return None, f"job id {wanted!r} is ambiguous: {len(matches)} jobs start with it ({shown})"
    known = f"{len(statuses)} job{'' if len(statuses) == 1 else 's'} known; `fabric jobs` lists them" if statuses else "no jobs known"
    return None, f"no job {wanted!r} ({known})"


# -- the command ----------------------------------------------------------------------------------
def node_names(handle: Any) -> dict[str, str]:
    """Node id -> name from the registry (a record collected after its drain grace is missing:
    its jobs show the id)."""
    try:
        return {r.node_id: r.name for r in handle.records()}
    except Exception:  # names are a nicety: the jobs still show, with node ids
        return {}


def print_jobs(handle: Any, statuses: Sequence[Any], args: argparse.Namespace) -> int:
    """Print the jobs (or the one ``args.job_id`` names, with its history); node names from ``handle``."""
    names = node_names(handle)
    if args.job_id is None:
        rows = job_rows(statuses, names)
        print(json.dumps(rows, indent=2) if args.json else format_jobs_table(rows, output_width(args)))
        return EXIT_OK
    st, why = find_job(statuses, args.job_id)
    if st is None:
        print(f"fabric jobs: {why}", file=sys.stderr)
        return EXIT_USAGE
    row = job_rows([st], names, history=True)[0]
    print(json.dumps(row, indent=2) if args.json else format_job(row, time.time(), output_width(args)))
    return EXIT_OK


def run_jobs(args: argparse.Namespace) -> int:
    if api_address(args):
        return run_over_api(args, "jobs", lambda client: print_jobs(client, client.jobs(), args))
    if bad_address(args.address, "jobs"):
        return EXIT_USAGE
    from fabric.cli.connect import connect
    from fabric.runtime.control import FabricHandle

    import ray as ray_module

    ours = not ray_module.is_initialized()  # a driver that was connected already stays connected
    ray = connect(args.address, "jobs")  # on failure it has said why (a token problem, nothing there...)
    if ray is None:
        return EXIT_FAILED
    try:
        handle = FabricHandle()
        try:
            statuses = handle.jobs()
        except RuntimeError as exc:  # the fabric (its scheduler) is not up here
            print(f"fabric jobs: {exc}", file=sys.stderr)
            return EXIT_FAILED
        return print_jobs(handle, statuses, args)
    finally:
        if ours:
            ray.shutdown()

_node_names = node_names  # the name it had (kept for callers that still use it)

_value = state_value  # the name it had (kept for callers that still use it)

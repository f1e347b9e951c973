"""``fabric events``: the fabric's one event log (issue 17, docs/operator-api.md), in 80 columns or JSON.

``fabric events`` prints the newest ``--limit`` events (default 50); ``--since N`` those after
number N instead (up to ``--limit``); ``--kind K`` (repeatable) only those kinds. Each line is the
event's number, its time (local, HH:MM:SS), its kind and a short summary of its data, cut to 80
columns. ``--json`` prints one JSON object per event per line (seq, kind, at, stimulus_id, data).
``--follow`` then keeps polling (every ``--interval`` seconds) and prints what comes, until
Ctrl-C or, with ``--for S``, for S seconds (exit 0); over ``--api`` it reads the API's
``WatchEventBatches`` stream instead (each event printed as it comes; ``--interval`` is then the
wait before a failed stream is opened again). It connects as ``fabric jobs`` does
(``--address``, default ``auto``, or ``--api HOST:PORT`` through the operator API without Ray):
exit 2 when the arguments are refused, 1 when the cluster cannot be reached or the fabric is not up.

Rendering is pure (``summary``, ``format_event``); ``events_with`` takes the handle, so tests
drive it with a fake one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable, Iterable, TextIO

from fabric.cli.common import EXIT_FAILED, EXIT_USAGE, api_address, bad_address, remote_parents, run_over_api
from fabric.core.errors import FabricError
from fabric.core.scheduling.messages import read_since

__all__ = ["add_parser", "events_with", "format_event", "summary"]

WIDTH = 80
_FIRST = ("job_id", "bundle_id", "migration_id", "name", "node_id", "pool", "phase")
_LAST = ("reason", "message", "cause")  # long free text: after the facts
_NO_SUMMARY = ("(no data)",)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("events", help="the fabric's event log (fleet, placement, bundle, job, spare, drain, migration)",
                              description="print the fabric's ordered event log: number, time, kind and a summary of each "
                                          "event; --follow keeps printing new ones until Ctrl-C (or --for S)",
                              parents=remote_parents("one JSON object per event per line"))
    p.add_argument("--since", type=int, default=None, metavar="N", help="events after number N (default: the newest --limit)")
    p.add_argument("--kind", action="append", default=None, metavar="KIND", help="only this kind (repeat for several)")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="at most N events before following (default 50)")
    p.add_argument("--follow", "-f", action="store_true", help="keep polling for new events until Ctrl-C")
    p.add_argument("--interval", type=float, default=0.5, metavar="SECONDS", help="--follow's polling interval (default 0.5); over --api, where events stream as they come, "
                        "the wait before a failed stream is opened again")
    p.add_argument("--for", dest="for_s", type=float, default=None, metavar="SECONDS",
                   help="--follow: stop after this many seconds (exit 0; default: until Ctrl-C)")
    p.set_defaults(func=_run)


# -- pure: an event -> a line ---------------------------------------------------------------------------
def _cell(key: str, value: Any) -> str | None:
    if value is None or value == "" or value == [] or value == {}:
        return None
    if key == "node_id" and isinstance(value, str):
        return f"node={value[:12]}"
    if key == "fields" and isinstance(value, dict):
        return "fields=" + ",".join(sorted(value))
    if isinstance(value, dict):
        return f"{key}={{{len(value)}}}"
    if isinstance(value, (list, tuple)):
        return f"{key}=[{len(value)}]" if len(value) > 3 else f"{key}={','.join(map(str, value))}"
    if isinstance(value, float):
        return f"{key}={value:g}"
    return f"{key}={value}"


def summary(data: Any) -> str:
    """A short one-line summary of an event's data: ``from->to``, ids, the rest, then reason and cause."""
    if not isinstance(data, dict) or not data:
        return _NO_SUMMARY[0]
    parts: list[str] = []
    if "from" in data or "to" in data:
        parts.append(f"{data.get('from', '?')}->{data.get('to', '?')}")
    keys = ([k for k in _FIRST if k in data] + sorted(k for k in data if k not in _FIRST + _LAST + ("from", "to"))
            + [k for k in _LAST if k in data])
    if "name" in data and "node_id" in data:  # a node's name says it; its id is the fallback
        keys.remove("node_id" if data.get("name") else "name")
    parts += [c for c in (_cell(k, data[k]) for k in keys) if c is not None]
    return " ".join(parts) or _NO_SUMMARY[0]


def format_event(event: dict[str, Any], width: int = WIDTH) -> str:
    """``SEQ TIME KIND SUMMARY`` in ``width`` columns (the summary cut with ``...``)."""
    at = event.get("at")
    stamp = time.strftime("%H:%M:%S", time.localtime(at)) if isinstance(at, (int, float)) else "--:--:--"
    line = f"{event.get('seq', '?'):>7} {stamp} {str(event.get('kind', '?')):<20} {summary(event.get('data'))}"
    return line if len(line) <= width else line[:width - 3] + "..."


def _print(events: list[dict[str, Any]], as_json: bool, out: TextIO) -> None:
    for e in events:
        print(json.dumps(e, default=str, sort_keys=True) if as_json else format_event(e), file=out, flush=True)


# -- the command ------------------------------------------------------------------------------------------
def events_with(handle: Any, args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
                sleep: Callable[[float], None] = time.sleep, follows: int | None = None,
                clock: Callable[[], float] = time.monotonic) -> int:
    """Print the events ``args`` asks for from ``handle.events``; with ``--follow`` keep polling
    (``follows``: stop after that many polls, for tests; None: until Ctrl-C, or until ``--for``
    seconds by ``clock`` have passed)."""
    limit, interval = args.limit, args.interval  # the command's own: how many of the newest to show, how often to poll
    for_s = getattr(args, "for_s", None)
    if for_s is not None and not (isinstance(for_s, (int, float)) and for_s >= 0):
        print(f"fabric events: --for must be a number of seconds >= 0 (got {for_s!r})", file=err)
        return 2
    stop_at = None if for_s is None else clock() + for_s
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        print(f"fabric events: --limit must be a whole number >= 1 (got {limit!r})", file=err)
        return 2
    if args.follow and not (isinstance(interval, (int, float)) and interval > 0):
        print(f"fabric events: --interval must be a positive number of seconds (got {interval!r})", file=err)
        return 2
    kinds = list(args.kind) if args.kind else None
    try:
        if args.since is not None:  # with the scheduler's own reader: a bad --since fails before anything is asked
            read_since(args.since)
        events = list(handle.events(args.since, kinds, limit) if args.since is not None else handle.events(0, kinds, -limit))
    except RuntimeError as exc:  # the fabric (its scheduler) is not up here
        print(f"fabric events: {exc}", file=err)
        return 1
    except (FabricError, ValueError) as exc:
        print(f"fabric events: {exc}", file=err)
        return 2
    if not events and not args.follow and not args.json:
        print("(no events)", file=out)
    _print(events, args.json, out)
    if not args.follow:
        return 0
    since = int(events[-1]["seq"]) if events else (args.since or 0)
    if not events and args.since is None:  # nothing of these kinds yet: everything from now on is new
        since = 0
    watch = getattr(handle, "watch_events", None)
    if callable(watch):
        return _follow_stream(watch, since, kinds, args.json, out, err, interval, sleep, clock, stop_at)
    polls, down = 0, False
    try:
        while (follows is None or polls < follows) and (stop_at is None or clock() < stop_at):
            sleep(interval if stop_at is None else max(0.0, min(interval, stop_at - clock())))
            polls += 1
            try:
                new = list(handle.events(since, kinds, 1000))
            except Exception as exc:  # a restarting scheduler: say so once, keep following
                if not down:
                    print(f"fabric events: reading the log failed ({type(exc).__name__}: {exc}); retrying", file=err)
                down = True
                continue
            down = False
            _print(new, args.json, out)
            if new:
                since = int(new[-1]["seq"])
    except KeyboardInterrupt:
        pass
    return 0


def _follow_stream(watch: Callable[[int, list[str] | None, float | None], Iterable[list[dict[str, Any]]]], since: int,
                   kinds: list[str] | None, as_json: bool, out: TextIO, err: TextIO, interval: float,
                   sleep: Callable[[float], None], clock: Callable[[], float], stop_at: float | None) -> int:
    """``--follow`` over the operator API: print each batch of the ``watch_events`` stream as it
    comes, until Ctrl-C or ``stop_at`` (by ``clock``); a stream that fails is said once and opened
    again after ``interval`` from the last event printed."""
    down = False
    try:
        while stop_at is None or clock() < stop_at:
            try:
                for batch in watch(since, kinds, None if stop_at is None else max(0.0, stop_at - clock())):
                    down = False
                    _print(batch, as_json, out)
                    since = int(batch[-1]["seq"])
            except Exception as exc:  # a restarting fabric: say so once, keep following
                if not down:
                    print(f"fabric events: the event stream failed ({type(exc).__name__}: {exc}); retrying", file=err)
                down = True
                sleep(interval if stop_at is None else max(0.0, min(interval, stop_at - clock())))
    except KeyboardInterrupt:
        pass
    return 0


def _run(args: argparse.Namespace) -> int:
    if api_address(args):
        return run_over_api(args, "events", lambda client: events_with(client, args, sys.stdout, sys.stderr))
    if bad_address(args.address, "events"):
        return EXIT_USAGE
    import ray as ray_module

    from fabric.cli.connect import connect
    from fabric.runtime.control import FabricHandle

    ours = not ray_module.is_initialized()  # a driver that was connected already stays connected
    ray = connect(args.address, "events")  # on failure it has said why
    if ray is None:
        return EXIT_FAILED
    try:
        return events_with(FabricHandle(), args, sys.stdout, sys.stderr)  # the streams now, not at import
    finally:
        if ours:
            ray.shutdown()

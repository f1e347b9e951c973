"""``fabric up [--config FILE]`` and ``fabric down``: the fabric's actors on a running Ray cluster.

``up`` validates the settings file before anything else (every problem at once, one line each
with its path; exit 2, nothing started), then connects and calls ``fabric.up``. On a fabric that
is already up with other settings it refuses (exit 2) and names the differing fields instead of
silently keeping the old ones; without ``--config`` it attaches to whatever runs. ``down`` stops
the fabric's actors and terminates the nodes its providers started (``--keep-nodes``: those keep
running); Ray and the nodes that joined it stay. Both print what they did; exit 1 is a failure past
the connection.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fabric.cli.connect import connect
from fabric.core.errors import FabricError, SettingsConflictError, SettingsError

__all__ = ["add_parser", "format_settings_error"]


def add_parser(subparsers: Any) -> None:
    u = subparsers.add_parser("up", help="bring the fabric's actors up on a running Ray cluster (validates --config first)",
                              description="bring the fabric's actors up on a running Ray cluster (validates --config first)")
    u.add_argument("--config", metavar="FILE", help="YAML settings (default: the settings in force, or the defaults)")
    u.add_argument("--address", default="auto", metavar="HOST:PORT", help="Ray cluster address (default: auto)")
    u.add_argument("--no-scheduler", action="store_true", help="only the fleet: registry, health monitor, probes")
    u.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS", help="how long the actors may take to come up")
    u.set_defaults(func=run_up)
    down_help = ("stop the fabric's actors and terminate the nodes its providers started; Ray itself and the nodes "
                 "that joined it (fabric join, ray start) keep running")
    d = subparsers.add_parser("down", help=down_help, description=down_help)
    d.add_argument("--address", default="auto", metavar="HOST:PORT", help="Ray cluster address (default: auto)")
    d.add_argument("--keep-nodes", action="store_true",
                   help="leave the nodes the fabric's providers started running (a later fabric up adopts them); "
                        "only the fabric's actors stop")
    d.set_defaults(func=run_down)


def format_settings_error(source: str, err: SettingsError) -> list[str]:
    """One line per problem, each with its path and code, under a line naming the source."""
    count = len(err.problems)
    return [f"{source}: {count} problem{'s' if count != 1 else ''}:"] + [f"  {p}" for p in err.problems]


def _fabric_actor_names(ray: Any) -> set[str]:
    from fabric.rayio.driver import RayDriver

    return set(RayDriver().named_actors())


def run_up(args: argparse.Namespace) -> int:
    from fabric.core.settings import FabricSettings

    settings = None
    if args.config:
        try:
            settings = FabricSettings.from_yaml(args.config)
        except SettingsError as exc:
            for line in format_settings_error(f"fabric up: {args.config}", exc):
                print(line, file=sys.stderr)
            print("fabric up: nothing started", file=sys.stderr)
            return 2
    ray = connect(args.address, "up")
    if ray is None:
        return 2
    try:
        import fabric

        before = _fabric_actor_names(ray)
        try:
            fabric.up(settings, scheduler=not args.no_scheduler, timeout_s=args.timeout)
        except SettingsConflictError as exc:
            print(f"fabric up: {exc}", file=sys.stderr)
            return 2
        except (FabricError, ray.exceptions.GetTimeoutError) as exc:
            print(f"fabric up: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        after = _fabric_actor_names(ray)
        started = sorted(after - before)
        running = sorted(after & before)
        where = f" (settings from {args.config})" if args.config else ""
        if started:
            print(f"fabric up: started {', '.join(started)}{where}")
        if running:
            print(f"fabric up: already running {', '.join(running)}")
        return 0
    finally:
        ray.shutdown()


def run_down(args: argparse.Namespace) -> int:
    ray = connect(args.address, "down")
    if ray is None:
        return 2
    try:
        import fabric

        stopped = fabric.down(keep_nodes=args.keep_nodes)
        print(f"fabric down: stopped {', '.join(stopped)}" if stopped else "fabric down: the fabric is not up here: nothing to stop")
        if stopped:
            print("fabric down: the nodes the fabric's providers started keep running (--keep-nodes)" if args.keep_nodes else
                  "fabric down: terminated the nodes the fabric's providers started (if any); Ray and joined nodes keep running")
        return 0
    finally:
        ray.shutdown()

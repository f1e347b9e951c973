"""``fabric routes``: edge routes through Caddy (issue 17).

``fabric routes --caddy FILE`` writes a Caddy JSON config for the settings' ``routes`` (host ->
job and declared port) from the live bindings: each routable host reverse-proxies to the address
of the node running its job; one line per host on stdout says where it goes or why it is
unroutable. ``--watch`` keeps going: it loads the config into Caddy through its admin API
(``--admin HOST:PORT``, default Caddy's ``127.0.0.1:2019``) and, polling every ``--interval``
seconds (0.5), rewrites and reloads it whenever a binding changes, until interrupted.
``--listen`` is the generated server's listen address (default ``:8080``). ``--config FILE``
(``--settings FILE``, its other name) takes the routes from a settings file instead of the
settings the fabric runs with.

It connects as ``fabric jobs`` does (``--address``, default ``auto``) and exits as it does: 2 when
an argument or the settings file is wrong, 1 when the cluster cannot be reached or the fabric is
not up there (or the file cannot be written); 0 otherwise (an interrupted ``--watch`` too).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fabric.cli.common import EXIT_FAILED, EXIT_USAGE, address_parent, bad_address
from fabric.cli.connect import parse_address

__all__ = ["add_parser", "run_routes"]


def add_parser(subparsers: Any) -> None:
    from fabric.runtime.routes import DEFAULT_ADMIN, DEFAULT_LISTEN

    p = subparsers.add_parser("routes", help="write (and with --watch keep current) a Caddy config for the edge routes",
                              description="write a Caddy JSON config routing each settings route (host -> job, port) "
                                          "to the node running its job now; --watch reloads Caddy on every binding change",
                              parents=[address_parent()])
    p.add_argument("--caddy", required=True, metavar="FILE", help="the Caddy JSON config file to write")
    p.add_argument("--watch", action="store_true", help="keep polling; rewrite and reload Caddy (admin API /load) on every change")
    p.add_argument("--admin", default=DEFAULT_ADMIN, metavar="HOST:PORT", help=f"Caddy's admin API (default: {DEFAULT_ADMIN})")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="ADDR", help=f"the generated server's listen address (default: {DEFAULT_LISTEN})")
    p.add_argument("--interval", type=float, default=0.5, metavar="S", help="--watch: seconds between polls (default: 0.5)")
    p.add_argument("--config", "--settings", dest="settings", default=None, metavar="FILE",
                   help="take the routes from this settings file (default: the fabric's); --settings is its other name")
    p.set_defaults(func=run_routes)


def _problem(args: argparse.Namespace) -> str | None:
    try:
        parse_address(args.admin)
    except ValueError as exc:
        return f"--admin: {exc}"
    if not args.listen or any(c.isspace() for c in args.listen):
        return f"--listen: {args.listen!r} is not a listen address (e.g. :8080 or 127.0.0.1:8080)"
    if not args.interval > 0:
        return f"--interval: must be a positive number of seconds, got {args.interval}"
    return None


def run_routes(args: argparse.Namespace) -> int:
    why = _problem(args)
    if why is not None:
        print(f"fabric routes: error: {why}", file=sys.stderr)
        return EXIT_USAGE
    if bad_address(args.address, "routes"):
        return EXIT_USAGE
    routes = None
    if args.settings is not None:
        from fabric.core.errors import SettingsError
        from fabric.core.settings import FabricSettings

        try:
            routes = dict(FabricSettings.from_yaml(args.settings).routes)
        except SettingsError:
            from fabric.cli.settings_cmd import settings_file_problems

            print("\n".join(settings_file_problems(args.settings)), file=sys.stderr)
            return EXIT_USAGE

    from fabric.cli.connect import connect
    from fabric.runtime.control import FabricHandle
    from fabric.runtime.routes import RouteWatcher, describe

    import ray as ray_module

    ours = not ray_module.is_initialized()
    ray = connect(args.address, "routes")
    if ray is None:
        return EXIT_FAILED
    try:
        watcher = RouteWatcher(FabricHandle(), args.caddy, args.admin, routes=routes, listen=args.listen,
                               interval_s=args.interval, report=lambda line: print(line, flush=True))
        try:
            watcher.refresh(reload=False)
        except RuntimeError as exc:  # the fabric (its scheduler) is not up here
            print(f"fabric routes: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"fabric routes: cannot write {args.caddy}: {exc}", file=sys.stderr)
            return 1
        for line in describe(watcher.plan):
            print(line, flush=True)
        if not watcher.routes:
            print("(no routes in the settings)", flush=True)
        if not args.watch:
            return 0
        print(f"watching; Caddy admin {args.admin} (Ctrl-C stops)", flush=True)
        try:
            watcher.run()
        except KeyboardInterrupt:
            pass
        return 0
    finally:
        if ours:
            ray.shutdown()

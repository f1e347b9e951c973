"""The ``fabric`` command. Each subcommand lives in its own module under ``fabric.cli`` and
registers itself through ``add_parser(subparsers)``; ``main`` only dispatches."""

from __future__ import annotations

import argparse
import sys

from fabric.cli import (
    api_cmd,
    bundles_cmd,
    events_cmd,
    jobs_cmd,
    lifecycle,
    moves_cmd,
    node,
    nodes_cmd,
    ops,
    pools_cmd,
    probe,
    routes_cmd,
    settings_cmd,
    status_cmd,
)

# Subcommand modules, in help order. Each defines ``add_parser(subparsers) -> None`` and sets
# ``func`` on its parser(s): ``func(args) -> int`` (the exit code).
_COMMAND_MODULES = (probe, node, status_cmd, nodes_cmd, pools_cmd, jobs_cmd, bundles_cmd, lifecycle, ops, moves_cmd, routes_cmd, events_cmd, api_cmd, settings_cmd)


def build_parser() -> argparse.ArgumentParser:
    from fabric import __version__

    parser = argparse.ArgumentParser(prog="fabric", description="adaptive-fabric: a Ray-native compute fabric for changing fleets")
    parser.add_argument("--version", action="version", version=f"fabric {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _COMMAND_MODULES:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

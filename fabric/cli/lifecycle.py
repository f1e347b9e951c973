"""``fabric up [--config FILE]`` and ``fabric down``: the fabric's actors on a running Ray cluster.

``up`` says in one line when it found the store of another Ray cluster (a head cold-started where a
cluster that is gone kept its store): which cluster, when last seen, how many of its jobs are held;
``--resume`` resumes them. ``up`` validates the settings file before anything else (every problem at once, one line each
with its file, line and path, as ``fabric settings validate`` prints them; exit 2, nothing started), then connects and calls ``fabric.up``. On a fabric that
is already up with other settings it refuses (exit 2) and names the differing fields instead of
silently keeping the old ones; without ``--config`` it attaches to whatever runs. ``down`` stops
every job that has not ended and waits until each is stopped (``--keep-jobs``: their instances keep
running for the next ``up`` to re-adopt, while their leases last), then terminates the nodes its
providers started (``--keep-nodes``: those keep running) and stops the fabric's actors; Ray and the
nodes that joined it stay. Both print what they did; exit 1 when the cluster cannot be reached or
the operation fails (``down``: a job that did not stop in time, named), 2 for bad input (a
malformed address, a bad settings file, settings that conflict with those in force).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fabric.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, address_parent, bad_address
from fabric.cli.connect import connect
from fabric.core.errors import FabricError, SettingsConflictError, SettingsError

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> None:
    u = subparsers.add_parser("up", help="bring the fabric's actors up on a running Ray cluster (validates --config first)",
                              description="bring the fabric's actors up on a running Ray cluster (validates --config first)",
                              parents=[address_parent()])
    u.add_argument("--config", metavar="FILE", help="YAML settings (default: the settings in force, or the defaults)")
    u.add_argument("--no-scheduler", action="store_true", help="only the fleet: registry, health monitor, probes")
    u.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS", help="how long the actors may take to come up")
    u.add_argument("--resume", action="store_true",
                   help="resume the jobs held from another Ray cluster's store (a head cold-started where a cluster "
                        "that is gone kept its store: its jobs are held, not run again, unless asked)")
    u.set_defaults(func=run_up)
    down_help = ("stop every job that has not ended (waiting until each is stopped, so a later fabric up starts none "
                 "of them), then stop the fabric's actors and terminate the nodes its providers started; Ray itself "
                 "and the nodes that joined it (fabric join, ray start) keep running")
    d = subparsers.add_parser("down", help=down_help, description=down_help, parents=[address_parent()])
    d.add_argument("--keep-nodes", action="store_true",
                   help="leave the nodes the fabric's providers started running (a later fabric up adopts them); "
                        "only the fabric's actors stop")
    d.add_argument("--keep-jobs", action="store_true",
                   help="leave the jobs' instances running for a later fabric up to re-adopt; without the scheduler "
                        "each serves only while its lease lasts (fence.lease_ttl_s, 20 s by default), then ends its "
                        "own process, and that later fabric up recovers those by their policy")
    d.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long the jobs may take to stop (and the actors to go)")
    d.set_defaults(func=run_down)


def _fabric_actor_names(ray: Any) -> set[str]:
    from fabric.rayio.driver import RayDriver

    return set(RayDriver().named_actors())


def run_up(args: argparse.Namespace) -> int:
    from fabric.core.settings import FabricSettings

    settings = None
    if args.config:
        try:
            settings = FabricSettings.from_yaml(args.config)
        except SettingsError:
            from fabric.cli.settings_cmd import settings_file_problems

            print("\n".join(settings_file_problems(args.config)), file=sys.stderr)
            print("fabric up: nothing started", file=sys.stderr)
            return EXIT_USAGE
    if bad_address(args.address, "up"):
        return EXIT_USAGE
    ray = connect(args.address, "up")
    if ray is None:
        return EXIT_FAILED
    try:
        import fabric

        before = _fabric_actor_names(ray)
        try:
            handle = fabric.up(settings, scheduler=not args.no_scheduler, timeout_s=args.timeout,
                               resume=args.resume, announce=False)
        except SettingsConflictError as exc:
            print(f"fabric up: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except (FabricError, ray.exceptions.GetTimeoutError) as exc:
            print(f"fabric up: {type(exc).__name__}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        after = _fabric_actor_names(ray)
        started = sorted(after - before)
        running = sorted(after & before)
        where = f" (settings from {args.config})" if args.config else ""
        if started:
            print(f"fabric up: started {', '.join(started)}{where}")
        if running:
            print(f"fabric up: already running {', '.join(running)}")
        if handle.inherited is not None:  # the store of another cluster: its jobs held (or resumed now)
            print(f"fabric up: {handle.inherited['line']}")
        elif args.resume:
            print("fabric up: --resume: no job of another cluster is held here")
        return EXIT_OK
    finally:
        ray.shutdown()


def jobs_line(jobs: Any) -> str:
    """The one line that says which rule ran for the jobs (``jobs: stopped 3``, or kept running)."""
    if not jobs.scheduler:
        return "jobs: no scheduler runs here: none to stop"
    if jobs.kept:
        lease = f"{jobs.lease_ttl_s:g} s" if jobs.lease_ttl_s is not None else "fence.lease_ttl_s"
        return f"jobs: kept running for the next fabric up (their leases last {lease} without the scheduler)"
    if jobs.error:
        return f"jobs: could not be stopped: {jobs.error}"
    line = f"jobs: stopped {len(jobs.stopped)}"
    if jobs.not_stopped:
        line += f"; not stopped in time: {', '.join(jobs.not_stopped)}"
    return line


def run_down(args: argparse.Namespace) -> int:
    if bad_address(args.address, "down"):
        return EXIT_USAGE
    ray = connect(args.address, "down")
    if ray is None:
        return EXIT_FAILED
    try:
        import fabric

        stopped = fabric.down(args.timeout, keep_nodes=args.keep_nodes, keep_jobs=args.keep_jobs,
                              progress=lambda line: print(f"fabric down: {line}", flush=True))
        jobs = getattr(stopped, "jobs", None)  # what it did to the jobs (a DownResult's)
        print(f"fabric down: stopped {', '.join(stopped)}" if stopped else "fabric down: the fabric is not up here: nothing to stop")
        if stopped:
            print("fabric down: the nodes the fabric's providers started keep running (--keep-nodes)" if args.keep_nodes else
                  "fabric down: terminated the nodes the fabric's providers started (if any); Ray and joined nodes keep running")
        if jobs is not None and (stopped or not jobs.ok):  # which rule ran; on stderr when a job did not stop
            print(f"fabric down: {jobs_line(jobs)}", file=sys.stdout if jobs.ok else sys.stderr)
        return EXIT_OK if jobs is None or jobs.ok else EXIT_FAILED
    finally:
        ray.shutdown()

"""``fabric join`` / ``fabric start-head`` (the one-shot bootstrap agent).

``join`` and ``start-head`` probe the node (the live machine, a bundled ``--profile`` or a
``--recording DIR``), then run ``ray start`` with the probed capabilities as Ray resources and
labels, print what they ran, and exit with ``ray start``'s code. ``--dry-run`` prints the command
without running it. The node's address for Ray is ``--node-ip-address``, else its tailnet
address when one is probed; ``start-head`` takes ``--dashboard-host`` and prints the exact join
line for the other machines and where the dashboard answers. Which recording a node was joined from reaches its ProbeActor two ways: a
bundled profile as the ``fabric.io/profile`` label; an arbitrary folder (a label cannot hold a
path) as ``FABRIC_RECORDING=<abs dir>`` in ``ray start``'s environment, which the raylet and
every worker it starts (the ProbeActor included) inherit.

They refuse clearly with one line: exit 2 when the ``ray`` command is missing or the address is not
``HOST:PORT``, exit 1 when nothing answers there; a failure of ``ray start`` itself is summarised.

Real machines (``fabric.cli.join_checks``): ``start-head`` records the head's Python, Ray and fabric
versions in its GCS and says where the cluster token is; ``join`` asks the head before ``ray start``
and refuses (exit 1, nothing started, one line each) a missing or wrong token or a version that
differs. Its token (``--token-file FILE``, else Ray's own sources) reaches ``ray start`` through the
environment, never its command line.

``start-head`` turns Ray's GCS fault tolerance on (an embedded store beside the registry, or
``--redis-address``; ``--no-fault-tolerance`` for none): the same command after a crash brings the
cluster back. ``join --head-outage-tolerance S`` is how long the node's raylet waits for a head that
went away. Both are ``fabric.cli.head_ft``'s.

On a real machine ``join`` is the one-shot bootstrap (docs/nodes.md): before the probe it brings the
node onto its tailnet and takes the tailnet address as the node's; once the head said yes it starts
a k3s agent and labels the Kubernetes node (``fabric.cli.bootstrap``); after ``ray start`` it waits
for the fabric's registry to list the node and prints one ready line (``fabric.cli.join_ready``;
``--no-wait``, ``--block`` and ``--supervise`` do not wait).

``join --supervise`` stays in the foreground and keeps the node in the fleet: it runs ``ray start
--block`` as a child and starts a new node when that one exits, or is dead to the head while its
raylet runs on (``fabric.cli.supervise``).

``fabric status`` is ``fabric.cli.status_cmd``'s (its ``status_rows`` and ``format_status_table``
are still importable from here). The table helpers it prints with are ``fabric.cli.tables``'s and ``parse_address`` is
``fabric.cli.connect``'s (both still importable from here), so neither of those imports a command.
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from fabric.cli.bootstrap import AUTHKEY_ENV, Outcome, add_bootstrap_flags, bootstrap_problems, cluster_steps, tailnet_step
from fabric.cli.common import EXIT_FAILED, EXIT_USAGE
from fabric.cli.connect import parse_address
from fabric.cli.head_ft import (
    FaultTolerance, add_head_flags, add_join_flags, clear_stale_current_cluster, fault_tolerance, head_gcs_address, head_start_env,
    held_earlier_cluster, join_env, report_after_start, scrub, temp_dir,
)
from fabric.cli.join_checks import (
    HeadSeam, JoinVerdict, check_join, head_token_lines, join_token, local_versions, record_head_versions,
)
from fabric.cli.tables import (  # noqa: F401 - the table helpers, also imported from here as they always were
    ELLIPSIS,
    NARROW,
    add_width_flag,
    ago,
    clip,
    fit_lines,
    gpus_cell,
    output_width,
    render_table,
)
from fabric.cli.status_cmd import format_status_table, status_rows  # noqa: F401 - importable from here as they always were
from fabric.core.names import PROFILE_LABEL, RECORDING_ENV
from fabric.providers.local import find_ray

CLOUDS = ("aws", "gcp", "azure")
"""The clouds ``--cloud`` names."""
INSTANCE_ENV = "FABRIC_INSTANCE_ID"
"""``join --instance``'s default: a provider may set it in the machine's environment instead."""
PROVIDER_ENV = "FABRIC_PROVIDER"
"""``join --provider``'s default."""

_ago = ago  # jobs_cmd and nodes_cmd import it under this name

__all__ = ["NARROW", "add_parser", "add_width_flag", "build_ray_start", "clip", "find_ray", "fit_lines", "format_status_table",
           "gpus_cell", "output_width", "parse_address", "render_table", "status_rows"]


def add_parser(subparsers: Any) -> None:
    for command, helptext in (("join", "probe this node, check its token and versions against the head's, and join it to "
                                       "the fabric's Ray cluster (ray start --address ...)"),
                              ("start-head", "probe this node, start it as a Ray head node (ray start --head) and record its "
                                             "Python, Ray and fabric versions for the joining nodes")):
        p = subparsers.add_parser(command, help=helptext, description=helptext)
        if command == "join":
            p.add_argument("--address", required=True, metavar="HOST:PORT", help="the head node's Ray (GCS) address")
            p.add_argument("--token-file", metavar="FILE",
                           help="a copy of the head's cluster token (its ~/.ray/auth_token): given to ray start through "
                                "the environment (default: RAY_AUTH_TOKEN, else RAY_AUTH_TOKEN_PATH's file, else "
                                "~/.ray/auth_token)")
            p.add_argument("--supervise", action="store_true",
                           help="stay in the foreground (implies --block) and keep this node in the fleet: start a new "
                                "node when ray start or its raylet exits, or when the head says the node is dead while its "
                                "raylet still runs (after a long network cut), with a bounded backoff; SIGTERM stops it")
            p.add_argument("--api", metavar="HOST:PORT",
                           help="with --supervise: also restart the node when the fleet (the operator API at HOST:PORT) "
                                "no longer lists it (default: $FABRIC_API when set)")
            p.add_argument("--api-token-file", metavar="FILE",
                           help="with --api: a file holding the operator API's token (default: $FABRIC_API_TOKEN)")
            add_join_flags(p)
            add_bootstrap_flags(p)
        else:
            p.add_argument("--port", type=int, metavar="PORT", help="GCS port of the new head (Ray's default: 6379)")
            p.add_argument("--dashboard-host", metavar="HOST",
                           help="where Ray's dashboard (and ray job submit) listens: 0.0.0.0 for every interface "
                                "(Ray's default: this machine only)")
            add_head_flags(p)
        p.add_argument("--node-ip-address", metavar="IP",
                       help="the address other nodes reach this one at (default: its tailnet address when one is probed, "
                            "else Ray's choice)")
        src = p.add_mutually_exclusive_group()
        src.add_argument("--recording", metavar="DIR", help="probe a recording folder instead of this machine (a simulated node)")
        src.add_argument("--profile", metavar="NAME", help="probe a bundled profile (fabric.testing.profiles())")
        p.add_argument("--name", help="node name (default: the hostname, or the profile's name)")
        p.add_argument("--role", action="append", default=[], metavar="ROLE", help="declare a role (repeatable), e.g. relay")
        p.add_argument("--max-concurrent-tasks", type=int, metavar="N", help="override the node's slots")
        if command == "join":
            p.add_argument("--instance", metavar="ID", default=os.environ.get(INSTANCE_ENV) or None,
                           help="the instance id a provider gave this machine (the fabric.io/instance label that binds the "
                                f"node to its provision; default: ${INSTANCE_ENV})")
            p.add_argument("--provider", metavar="NAME", default=os.environ.get(PROVIDER_ENV) or None,
                           help=f"the provider that made this machine, e.g. command (the fabric.io/provider label; default: "
                                f"${PROVIDER_ENV})")
            p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                           help="one more node label (repeatable; a KEY without a prefix/ goes under fabric.io/)")
        p.add_argument("--pool", help="pool label")
        p.add_argument("--pool-tier", help="pool tier label")
        p.add_argument("--zone", help="zone label")
        p.add_argument("--cloud", choices=CLOUDS, help="the cloud this machine runs in (a label; the same_cloud rule reads it)")
        p.add_argument("--ray", metavar="PATH", help="the ray executable (default: next to this Python, else on PATH)")
        p.add_argument("--dry-run", action="store_true", help="print the ray start command (and its environment), do not run it")
        p.add_argument("ray_args", nargs=argparse.REMAINDER, metavar="-- RAY_START_ARGS",
                       help="extra arguments for ray start after --, e.g. -- --block")
        p.set_defaults(func=run_start, command_name=command)


# -- join / start-head ----------------------------------------------------------------------------------
def build_ray_start(caps: Any, *, ray: str, address: str | None = None, head_port: int | None = None, profile: str | None = None,
                    recording: str | None = None, pool: str | None = None, pool_tier: str | None = None, zone: str | None = None,
                    cloud: str | None = None, node_ip_address: str | None = None, extra: Sequence[str] = (),
                    instance_id: str | None = None, provider: str | None = None,
                    labels: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The ``ray start`` argv and the extra environment for a node with capabilities ``caps``: the
    ``local`` provider's builders (``fabric.providers.local``), so a joined node and a provisioned
    one join Ray alike (``instance_id`` and ``provider``: the labels binding it to a provision;
    ``labels``: more labels, as a provider's tags). ``ValueError`` naming a bad one."""
    from dataclasses import replace

    from fabric.core.capabilities import label_value
    from fabric.providers.local import node_args, ray_start_args

    for flag, value in (("--instance", instance_id), ("--provider", provider)):
        if value is not None and (not value or label_value(value) != value):
            raise ValueError(f"{flag} {value!r} is not a valid label value (up to 63 of [A-Za-z0-9_.-], alphanumeric at both ends)")
    node = node_args(caps, pool=pool, pool_tier=pool_tier, zone=zone, cloud=cloud, instance_id=instance_id, provider=provider,
                     tags=labels or {})
    if profile:
        node = replace(node, labels={**node.labels, PROFILE_LABEL: profile})
    argv = ray_start_args(node, ray=ray, address=address, head_port=head_port, node_ip_address=node_ip_address, extra=extra)
    env = {RECORDING_ENV: str(Path(recording).resolve())} if recording else {}
    return argv, env


def _probe(args: argparse.Namespace) -> Any:
    from probes import LiveSources, RecordedSources, probe_node

    if args.profile:
        from probes.profiles import profile_path

        sources: Any = RecordedSources(profile_path(args.profile))
    elif args.recording:
        if not Path(args.recording).is_dir():
            raise ValueError(f"recording {args.recording!r} is not a folder")
        sources = RecordedSources(args.recording)
    else:
        sources = LiveSources()
    name = args.name or (args.profile if args.profile else None)
    return probe_node(sources, name=name, roles=tuple(args.role), max_concurrent_tasks=args.max_concurrent_tasks)


def node_address(caps: Any, given: str | None) -> str | None:
    """The address this node is reached at: ``--node-ip-address``, else the first IPv4 of its
    tailnet when one is probed online, else None (Ray chooses)."""
    if given:
        return given
    tailnet = getattr(caps, "tailnet", None)
    if tailnet is not None and tailnet.online:
        return next((ip for ip in tailnet.ips if ip.count(".") == 3), None)
    return None


def head_lines(ip: str | None, port: int | None, dashboard_host: str | None, dashboard_port: int | None = None) -> list[str]:
    """What ``start-head`` tells the operator: the exact join line for the other machines and
    where the dashboard (``ray job submit``) answers (``dashboard_port``: Ray's default 8265)."""
    here = ip or socket.gethostname()
    web = dashboard_port or 8265
    lines = [f"the other machines join with: fabric join --address {here}:{port or 6379}"]
    if dashboard_host in (None, "127.0.0.1", "localhost"):
        lines.append(f"dashboard: http://127.0.0.1:{web}, this machine only (--dashboard-host 0.0.0.0 opens it to the others)")
    else:
        shown = here if dashboard_host in ("0.0.0.0", "::") else dashboard_host
        lines.append(f"dashboard: http://{shown}:{web} (ray job submit --address http://{shown}:{web} --working-dir . -- python JOB.py)")
    return lines


def _reachable(host: str, port: int, timeout_s: float = 3.0) -> str | None:
    """None when something accepts TCP at host:port, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def _refuse(command: str, message: str, code: int = EXIT_USAGE) -> int:
    """Say ``message`` on stderr; ``code``: 2 for bad input (the default), 1 when the head cannot be reached."""
    print(f"fabric {command}: error: {message}", file=sys.stderr)
    return code


def run_start(args: argparse.Namespace) -> int:
    command = args.command_name
    extra = [a for a in (args.ray_args or []) if a != "--"] if args.ray_args else []
    supervised = bool(getattr(args, "supervise", False))
    if supervised and "--block" not in extra:
        extra.append("--block")
    api = (getattr(args, "api", None) or os.environ.get("FABRIC_API", "").strip() or None) if supervised else None
    if api is not None:
        try:
            parse_address(api)
        except ValueError as exc:
            return _refuse(command, f"--api: {exc}")
    ray = find_ray(args.ray)
    if ray is None:
        where = f"at {args.ray!r}" if args.ray else "next to this Python or on PATH"
        return _refuse(command, f"the `ray` command was not found {where}: install ray[default] (pip install 'ray[default]') or pass --ray PATH")
    address = getattr(args, "address", None)
    tailnet = Outcome()
    if address is not None:
        try:
            host, port = parse_address(address)
        except ValueError as exc:
            return _refuse(command, str(exc))
        problems = bootstrap_problems(args)
        if problems:
            return _refuse(command, "; ".join(problems))
        tailnet = tailnet_step(args, os.environ)  # first: the head may be reachable only over the tailnet
        if not _told(tailnet):
            print("fabric join: nothing started", file=sys.stderr)
            return EXIT_FAILED
    try:
        caps = _probe(args)
    except Exception as exc:  # a bad profile/recording/role: one line, no traceback
        return _refuse(command, f"probe failed: {exc}".splitlines()[0])
    in_extra = next((a.split("=", 1)[1] for a in extra if a.startswith("--node-ip-address=")), None)
    ip = node_address(caps, args.node_ip_address or in_extra or tailnet.address)
    dashboard_host = getattr(args, "dashboard_host", None)
    if dashboard_host:
        extra = [f"--dashboard-host={dashboard_host}", *extra]
    try:
        argv, env = build_ray_start(caps, ray=ray, address=address, head_port=getattr(args, "port", None), profile=args.profile,
                                    recording=args.recording, pool=args.pool, pool_tier=args.pool_tier, zone=args.zone,
                                    cloud=getattr(args, "cloud", None),
                                    node_ip_address=None if in_extra else ip, extra=extra,
                                    instance_id=getattr(args, "instance", None), provider=getattr(args, "provider", None),
                                    labels=_labels(getattr(args, "label", [])))
    except ValueError as exc:
        return _refuse(command, str(exc))
    ft: FaultTolerance | None = None
    if address is None:
        ft, why = fault_tolerance(args, head_gcs_address(ip, getattr(args, "port", None)))
        if ft is None:
            return _refuse(command, why or "bad fault-tolerance flags")
        argv, env = ft.wrap(argv, sys.executable), {**env, **ft.env()}
    else:
        outage_env, why = join_env(args)
        if why:
            return _refuse(command, why)
        env = {**env, **outage_env}
    web = next((a.split("=", 1)[1] for a in extra if a.startswith("--dashboard-port=")), None)
    told = [*head_lines(ip, getattr(args, "port", None), dashboard_host, int(web) if web and web.isdigit() else None),
            *head_token_lines(os.environ, Path.home())] if address is None else []
    shown_env = {**env, **ft.shown_env()} if ft is not None else env
    shown = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in shown_env.items()), *map(shlex.quote, argv)])
    print(f"probed {caps.name}: {caps.summary()}")
    print(f"{'would run' if args.dry_run else 'running'}: {shown}", flush=True)
    if args.dry_run:
        print("\n".join([*([ft.describe()] if ft is not None else []), *told]))
        if address is not None:
            _told(cluster_steps(args, caps, ip))
        return 0
    base_env = {k: v for k, v in os.environ.items() if k != AUTHKEY_ENV}  # the tailnet's key stays out of Ray
    run_env = {**base_env, **env} if ft is None else head_start_env(ft, {**base_env, **env})
    held = False
    if ft is not None:
        ft_gcs = head_gcs_address(ip, getattr(args, "port", None))
        if clear_stale_current_cluster(temp_dir(extra), ft_gcs):
            print(f"removed a stale {temp_dir(extra) / 'ray_current_cluster'} naming {ft_gcs} (nothing answers there)")
        held = held_earlier_cluster(ft)
    if address is not None:
        why = _reachable(host, port)
        if why is not None:
            return _refuse(command, f"cannot reach the head at {address}: {why} (is the address right and the head up?)", EXIT_FAILED)
        verdict = _check_join(address, args.token_file)
        for line in verdict.warnings:
            print(f"fabric join: warning: {line}", file=sys.stderr)
        if verdict.problems:
            for line in verdict.problems:
                print(f"fabric join: error: {line}", file=sys.stderr)
            print("fabric join: nothing started", file=sys.stderr)
            return 1
        run_env = {k: v for k, v in {**run_env, **verdict.env}.items() if k not in verdict.unset}
        _told(cluster_steps(args, caps, ip))  # the head said yes: now the k3s agent and the Kubernetes labels
    gcs = f"{ip or '127.0.0.1'}:{getattr(args, 'port', None) or 6379}"
    if supervised and address is not None:
        from fabric.cli.supervise import supervise

        token = join_token(os.environ, Path.home(), args.token_file).token
        return supervise(argv, run_env, address, token, api=api, api_token_file=getattr(args, "api_token_file", None))
    if "--block" in extra:
        if address is None:  # the versions are recorded once the head answers, by a helper that outlives this exec
            subprocess.Popen([sys.executable, "-m", "fabric.cli.join_checks", "record", gcs], env=run_env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print(f"the head's versions are recorded for joining nodes once it answers ({local_versions().summary()})")
            print("\n".join([*([ft.describe(not held)] if ft is not None else []), *told]), flush=True)
            if ft is not None and ft.mode != "off":  # after a restart, the recovery line once the workers are back
                where = str(ft.store_dir) if ft.mode == "embedded" else str(ft.redis_address)
                subprocess.Popen([sys.executable, "-m", "fabric.cli.head_ft", "report", gcs, ft.mode, where, str(int(held))],
                                 env=run_env, stdin=subprocess.DEVNULL)
        # ray start stays in the foreground: become it, so that signals (and a supervisor's
        # pid) reach ray start itself and it stops its node's processes.
        os.execve(argv[0], argv, run_env)
    ready = None
    if address is not None and not args.no_wait:  # the node table before ray start: the new node is the one not in it
        from fabric.cli.join_ready import ReadySeam

        token = join_token(os.environ, Path.home(), args.token_file).token
        ready = ReadySeam(address, token, run_env, verdict.unset, node_ip=ip)
        before = ready.nodes()
    proc = subprocess.run(argv, env=run_env, capture_output=True, text=True)
    if proc.returncode != 0:
        text = scrub((proc.stderr or "") + (proc.stdout or ""), ft).strip().splitlines()
        errors = [ln for ln in text if "error" in ln.lower() or "failed" in ln.lower()] or text[-3:]
        print(f"fabric {command}: ray start failed (exit {proc.returncode}):", file=sys.stderr)
        for line in errors[-5:]:
            print(f"  {line.strip()}", file=sys.stderr)
        return proc.returncode
    verb = "started head" if address is None else f"joined {address} as"
    print(f"{verb} {caps.name} (tier {caps.tier.value}, {caps.limitations.max_concurrent_tasks} slots)")
    if ft is not None:
        print(report_after_start(ft, head_gcs_address(ip, getattr(args, "port", None)), join_token(os.environ, Path.home(), None).token,
                                 held), flush=True)
    if address is None:
        versions = local_versions()
        why = record_head_versions(gcs, versions, os.environ, Path.home(), HeadSeam())
        print(f"recorded the head's versions for joining nodes: {versions.summary()}" if why is None else
              f"fabric start-head: warning: could not record the head's versions at {gcs} ({why}): joining nodes cannot check theirs")
    if told:
        print("\n".join(told))
    if ready is not None:
        return _wait_ready(ready, caps.name, ip, None if before is None else {n.node_id for n in before}, args.ready_timeout)
    return 0


def _labels(given: Sequence[str]) -> dict[str, str]:
    """``--label KEY=VALUE`` flags as a mapping; ``ValueError`` naming one without ``=``."""
    out: dict[str, str] = {}
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--label {item!r} is not KEY=VALUE")
        out[key] = value
    return out


def _told(outcome: Outcome) -> bool:
    """Print what a bootstrap step did; False when it stopped the join (its error said)."""
    for line in outcome.said:
        print(line, flush=True)
    for line in outcome.warnings:
        print(f"fabric join: warning: {line}", file=sys.stderr)
    if outcome.error is not None:
        print(f"fabric join: error: {outcome.error}", file=sys.stderr)
    return outcome.error is None


def _wait_ready(seam: Any, name: str, ip: str | None, before: set[str] | None, timeout_s: float) -> int:
    """Wait for the registry to list the node just started; the ready line (0), or why not (1)."""
    from fabric.cli.join_ready import NotReady, ready_line, wait_ready

    print(f"waiting up to {timeout_s:g} s for the fabric's registry to list {name} as active", flush=True)
    result = wait_ready(seam, name=name, ip=ip, before=before, timeout_s=timeout_s, say=lambda line: print(line, flush=True))
    if isinstance(result, NotReady):
        node = f" (node {result.node_id[:12]})" if result.node_id else ""
        print(f"fabric join: error: {name}{node} not ready within {timeout_s:g} s: {result.reason}; the node stays in Ray "
              f"(`fabric nodes` shows it once registered; --no-wait skips this wait)", file=sys.stderr)
        return EXIT_FAILED
    print(ready_line(result), flush=True)
    return 0


def _check_join(address: str, token_file: str | None) -> JoinVerdict:
    """The token and version checks of ``fabric join`` against the head at ``address``."""
    tok = join_token(os.environ, Path.home(), token_file)
    try:
        return check_join(address, tok, HeadSeam(), local_versions())
    except Exception as exc:  # a check must never be why a join fails: ray start tries, and says
        return JoinVerdict([] if tok.problem is None else [tok.problem],
                           [f"could not ask the head at {address} ({type(exc).__name__}: {exc}): token and versions not checked"],
                           dict(tok.env), tok.unset)

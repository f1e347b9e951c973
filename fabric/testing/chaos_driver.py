"""The Ray driver of the chaos runs on network-namespace hosts (``fabric.testing.chaos_netns``).

A Ray driver needs a raylet on its own host, so this runs inside the head's namespace, started by
the orchestrator as ``python -m fabric.testing.chaos_driver COMMAND ...`` (``RAY_ADDRESS`` and the
fleet's token in its environment). It attaches to the running fabric and prints one JSON line after ``RESULT`` (``result_of`` reads it):

- ``jobs OUT_DIR N PERIOD_MS``: start N ``CounterJob`` jobs (each writes its ticks under
  ``OUT_DIR/job-<i>``), wait until they run; ``{"jobs": [job ids]}``;
- ``where JOB_ID...``: ``{job id: node id}`` of each job's running instance (None while it has none);
- ``load LOG CALLS DURATION_S MONITOR STOP VICTIM``: send CALLS calls over DURATION_S (each logs
  its start in LOG), while every 0.25 s one line of the registry's view of node VICTIM (by name)
  goes to MONITOR; once the file STOP exists, collect the calls and print what came of them, with
  the jobs' events meanwhile;
- ``instances JOB_ID...``: ``{job id: {"state", "actor", "pid", "node", "key", "restarts"}}`` of each
  job's running instance (its Ray actor id and worker pid: the same instance or not, after a head restart);
- ``scheduler-pid``: ``{"pid": ...}`` of the scheduler actor's process (on the head);
- ``stop JOB_ID...``: stop the jobs.

``--node-ip IP`` before the command attaches the driver to the raylet at IP (``ray.init``'s
``_node_ip_address``): on one machine's loopback, where several nodes share a network stack, a driver
that must outlive the head (``fabric.testing.head_fleet``) attaches to a worker node that way.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["RESULT", "main", "result_of"]

MONITOR_EVERY_S = 0.25
RESULT = "chaos-result: "
"""The prefix of the one line that holds the answer (Ray may print its workers' lines too)."""


NODE_IP: str | None = None
"""``--node-ip``: the raylet this driver attaches to (None: the one Ray finds for this host)."""


def _attach() -> Any:
    import fabric

    if NODE_IP is not None:
        import ray

        if not ray.is_initialized():
            ray.init(address="auto", _node_ip_address=NODE_IP, log_to_driver=False)
    return fabric.up()


def _registry_view(handle: Any, victim: str) -> dict[str, Any]:
    try:
        rec = handle.node(victim)
        return {"t": time.time(), "node_id": rec.node_id, "status": rec.status.value, "flap_held": bool(rec.flap_held)}
    except Exception as exc:  # the registry out of reach (the head cut), or the node not known
        return {"t": time.time(), "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}


def jobs(out_dir: str, n: int, period_ms: float, spread: list[str] | None = None) -> dict[str, Any]:
    """``n`` counter jobs; with ``spread`` (node names), in turn on each of those nodes (the others
    cordoned while one is placed, every one uncordoned after)."""
    from fabric import adaptive
    from fabric.testing.counter import CounterJob

    handle = _attach()
    nodes = [_active_node(handle, name) for name in spread or []]
    job = adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, name="chaos-counter",
                          max_restarts_per_hour=1000, call_timeout_s=120)(CounterJob)
    ids = []
    try:
        for i in range(n):
            folder = Path(out_dir) / f"job-{i}"
            folder.mkdir(parents=True, exist_ok=True)
            if nodes:
                here = nodes[i * len(nodes) // n]
                for node in nodes:
                    (handle.uncordon if node == here else handle.cordon)(node)
            ids.append(job.remote(str(folder), period_ms).wait_running(180).job_id)
    finally:
        for node in nodes:
            handle.uncordon(node)
    return {"jobs": ids}


def _active_node(handle: Any, name: str, timeout_s: float = 120.0) -> str:
    """The node id of the active node named ``name`` (waited for: a node that just joined
    registers within seconds)."""
    deadline = time.time() + timeout_s
    while True:
        found = [r.node_id for r in handle.records(["active"]) if r.name == name]
        if found:
            return found[0]
        if time.time() > deadline:
            raise SystemExit(f"no active node named {name!r}: {[(r.name, r.status.value) for r in handle.records()]}")
        time.sleep(0.25)


def where(job_ids: list[str]) -> dict[str, Any]:
    from fabric import JobHandle

    _attach()
    out: dict[str, Any] = {}
    for job_id in job_ids:
        status = JobHandle(job_id).status()
        out[job_id] = status.node_id if status.state.value == "running" else None
    return out


def load(log: str, calls: int, duration_s: float, monitor: str, stop: str, victim: str,
         jobs: list[str] | None = None, watched: list[str] | None = None) -> dict[str, Any]:
    """Calls at a steady rate until ``stop`` exists, the registry's view of ``victim`` every
    ``MONITOR_EVERY_S`` into ``monitor``; the outcome, where ``jobs`` run at the end (``where``: the
    next scenario's victim), and the instances of ``watched`` before the first call and after the
    last (``instances_before`` / ``instances_after``): no driver of their own for either."""
    from fabric import adaptive
    from fabric.core.names import TIER_LABEL
    from fabric.testing.chaos_load import Load, started

    handle = _attach()
    instances_before = instances(watched) if watched else {}
    before = {r.node_id for r in handle.records()} | {r.node_id for r in handle.collected()}
    newest = handle.events(limit=-1)
    since = newest[-1]["seq"] if newest else 0
    done = threading.Event()

    def watch() -> None:
        with open(monitor, "a", buffering=1) as f:
            while not done.is_set():
                f.write(json.dumps(_registry_view(handle, victim)) + "\n")
                done.wait(MONITOR_EVERY_S)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    call = adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", name="chaos-netns")(started)
    work = Load(call, Path(log), calls, duration_s).start()
    while not Path(stop).exists():
        time.sleep(0.2)
    completed, failed = work.collect(timeout_s=120)
    done.set()
    watcher.join(timeout=5)
    records = list(handle.records()) + list(handle.collected())
    moves = [{"at": e["at"], "kind": e["kind"], **{k: e["data"].get(k) for k in ("job_id", "node_id", "reason", "to", "wait_s")
                                                    if k in e["data"]}}
             for e in handle.events(since=since, limit=1000) if e["kind"].startswith("job_")]
    return {"accepted": work.submitted, "completed": sorted(completed), "failed": failed, "refused": work.refused, "refusals": work.refusals,
            "records_before": sorted(before), "records_after": sorted({r.node_id for r in records}),
            "tiers": {r.node_id: r.labels.get(TIER_LABEL, "") for r in records}, "job_events": moves,
            "active_named_victim": sum(1 for r in handle.records(["active"]) if r.name == victim),
            "where": where(jobs) if jobs else {}, "instances_before": instances_before,
            "instances_after": instances(watched) if watched else {}}


def instances(job_ids: list[str]) -> dict[str, Any]:
    import os

    import ray

    from fabric import JobHandle

    _attach()
    out: dict[str, Any] = {}
    for job_id in job_ids:
        status = JobHandle(job_id).status()
        row: dict[str, Any] = {"state": status.state.value, "key": status.instance_key, "node": status.node_id,
                               "restarts": status.restarts_last_hour, "actor": None, "pid": None}
        if status.state.value == "running":
            actor = JobHandle(job_id).instance_actor()
            row["actor"] = actor._actor_id.hex()
            row["pid"] = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()), timeout=60)
        out[job_id] = row
    return out


def scheduler_pid() -> dict[str, Any]:
    import ray

    from fabric.core.names import NAMESPACE, SCHEDULER

    _attach()
    return {"pid": ray.get(ray.get_actor(SCHEDULER, namespace=NAMESPACE).pid.remote(), timeout=60)}


def stop_jobs(job_ids: list[str]) -> dict[str, Any]:
    from fabric import JobHandle

    _attach()
    return {job_id: JobHandle(job_id).stop(wait=True, timeout_s=60).value for job_id in job_ids}


def result_of(stdout: str) -> Any:
    """The answer in a run's output (None when it printed none)."""
    lines = [line[len(RESULT):] for line in stdout.splitlines() if line.startswith(RESULT)]
    return json.loads(lines[-1]) if lines else None


def main(argv: list[str] | None = None) -> int:
    global NODE_IP
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a driver that hangs can be asked where
    p = argparse.ArgumentParser(prog="python -m fabric.testing.chaos_driver")
    p.add_argument("--node-ip", metavar="IP", help="attach to the raylet at IP (one machine's loopback)")
    sub = p.add_subparsers(dest="command", required=True)
    j = sub.add_parser("jobs")
    j.add_argument("out_dir")
    j.add_argument("n", type=int)
    j.add_argument("period_ms", type=float)
    j.add_argument("--spread", metavar="NAMES", help="comma-separated node names: the jobs placed in turn on each")
    w = sub.add_parser("where")
    w.add_argument("job_ids", nargs="+")
    ld = sub.add_parser("load")
    for name in ("log", "calls", "duration_s", "monitor", "stop", "victim"):
        ld.add_argument(name, type=int if name == "calls" else float if name == "duration_s" else str)
    ld.add_argument("--where", metavar="JOB_IDS", help="comma-separated: report where these jobs run at the end")
    ld.add_argument("--instances", metavar="JOB_IDS", help="comma-separated: these jobs' instances before and after")
    s = sub.add_parser("stop")
    s.add_argument("job_ids", nargs="+")
    i = sub.add_parser("instances")
    i.add_argument("job_ids", nargs="+")
    sub.add_parser("scheduler-pid")
    args = p.parse_args(argv)
    NODE_IP = args.node_ip
    if args.command == "jobs":
        out = jobs(args.out_dir, args.n, args.period_ms, args.spread.split(",") if args.spread else None)
    elif args.command == "where":
        out = where(args.job_ids)
    elif args.command == "load":
        out = load(args.log, args.calls, args.duration_s, args.monitor, args.stop, args.victim,
                   args.where.split(",") if args.where else None, args.instances.split(",") if args.instances else None)
    elif args.command == "instances":
        out = instances(args.job_ids)
    elif args.command == "scheduler-pid":
        out = scheduler_pid()
    else:
        out = stop_jobs(args.job_ids)
    print(RESULT + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

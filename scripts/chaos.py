#!/usr/bin/env python
"""Chaos scenarios on a real local fleet: a burst of work and a fault, then the figures.

    ./scripts/chaos.py                      # every scenario
    ./scripts/chaos.py --scenarios scheduler_sigkill,partition --calls 200 --duration 6
    ./scripts/chaos.py --json               # the last line: {"scenarios": {name: {...}}}

Every scenario sends ``--calls`` calls over ``--duration`` seconds from a thread while the fault
hits (the fabric's scheduler, registry or health monitor SIGKILLed; one node, two nodes killed;
a partition: a node's ProbeActor SIGSTOPped while Ray still runs it; a node flapping until it is
held; a node demoted by a re-probe; a 20,000-call burst).
The head restarts run on clusters of their own: ``head_restart_cold`` stops a fleet with no GCS
fault tolerance and starts a new cluster on the same store; ``head_restart_embedded`` and
``head_restart_redis`` SIGKILL every process of a ``fabric start-head`` head (GCS fault tolerance on
the embedded store, or on a private Redis) mid-burst, with four jobs on two joined workers, and run
the same command again (``fabric.testing.chaos_head``: the same instances, job ticks, calls).
Each call appends a line to a run log when it starts, so the figures come from what ran:
calls, completed, lost, refused, run more than once, run below their floor or on an excluded
node, seconds until the fabric placed again (a call of a fresh class, which needs the
scheduler, completing after the fault), and registry records lost. See fabric/testing/chaos.py.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAY_AUTH_MODE", "token")  # Ray 2.60: choose explicitly; the fabric runs with it on
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep every Ray process on loopback

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

import ray  # noqa: E402

from fabric import adaptive  # noqa: E402
from probes.profiles import profile_path  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.chaos import Exclusion, Outcome, read_run_log, score  # noqa: E402
from fabric.testing.chaos_head import summary  # noqa: E402
from fabric.testing.chaos_load import Load, started  # noqa: E402
from fabric.testing.chaos_netns import NETNS_SCENARIOS  # noqa: E402
from fabric.core import names  # noqa: E402
from fabric.core.tiers import ComputeTier  # noqa: E402

PROFILES = ["gpu-cuda-workstation", "steamdeck-apu", "cpu-only-box", "arm64-board", "edge-relay"]
TICK_S = 0.25
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "drain_grace_s": 600.0,
                       "monitor_interval_s": TICK_S, "join_timeout_s": 60.0, "reprobe_interval_s": 600.0,
                       "flap_toggles": 3, "flap_window_s": 20.0, "flap_hold_s": 15.0}}
SCENARIOS = ("scheduler_sigkill", "registry_sigkill", "health_sigkill", "node_kill_one", "node_kill_two", "partition",
             "flapping", "demoted", "burst_20000", "head_restart_cold", "head_restart_embedded", "head_restart_redis")
HEAD_FT = {"head_restart_embedded": "embedded", "head_restart_redis": "redis"}
"""The head restarts with GCS fault tolerance, by their backend (``fabric.testing.head_fleet``)."""
HEAD_SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 5.0, "monitor_interval_s": TICK_S,
                            "join_timeout_s": 90.0},
                 "fence": {"lease_ttl_s": 60.0, "renew_every_s": 2.0, "margin_s": 1.0}}
"""A head restart's fleet: the jobs' leases outlast the outage (the head down, its GCS and the actors back)."""


APU_DOWN = adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg", name="chaos")(started)
CUDA_ONLY = adaptive.remote(min_tier="gpu_cuda", fallback=False, name="chaos-cuda")(started)


class Fleet:
    """The local fleet the scenarios share, and what they need to know about it."""

    def __init__(self, lf: LocalFabric, work: Path) -> None:
        self.lf, self.work = lf, work
        self.sched = lambda: ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)

    def tier_of(self, node_id: str) -> ComputeTier:
        for node in self.lf.history:
            if node.node_id == node_id:
                return ComputeTier.parse(node.labels[names.TIER_LABEL])
        return ComputeTier.RELAY

    def records(self) -> set[str]:
        h = self.lf.handle
        return {r.node_id for r in h.records()} | {r.node_id for r in h.collected()}

    def in_scheduler(self, name: str) -> bool:
        """The scheduler holds ``name`` and may place on it: active, not cordoned, not flap-held.
        (Not ``placeable``: that also needs a free slot, which a burst keeps taken.)"""
        return any(r.name == name and r.status.value == "active" and not r.cordoned and not r.flap_held
                   for r in ray.get(self.sched().nodes.remote(), timeout=30))

    def node_status(self, name: str) -> str:
        return self.lf.handle.node(name).status.value

    def time_to_place(self, since: float, timeout_s: float = 120.0) -> float | None:
        """Seconds from ``since`` until a call of a fresh class (a new lease: the scheduler must
        answer) completes."""
        log = str(self.work / "probes.log")
        while time.time() - since < timeout_s:
            probe = APU_DOWN.options(name=f"chaos-probe-{uuid.uuid4().hex[:8]}")
            try:
                ray.get(probe.remote("probe", log, 0.0), timeout=30)
                return time.time() - since
            except Exception:
                time.sleep(0.1)
        return None


def run(fleet: Fleet, name: str, fault, *, n: int, duration_s: float, fn=APU_DOWN, floor=ComputeTier.CPU_FFMPEG,
        seconds: float = 0.05, note: str = "") -> Outcome:
    """One scenario: start the load, let it ramp up, inject ``fault`` (a ``Fault``), measure.
    ``recovery_s``: from the fault until the fabric had absorbed it (it dropped, demoted or held
    the node), or, for a fabric actor killed, until a call of a fresh class (a new lease: the
    scheduler must answer) completed."""
    log = fleet.work / f"{name}.log"
    before = fleet.records()
    load = Load(fn, log, n, duration_s, seconds).start()
    time.sleep(min(2.0, duration_s / 4))
    f = fault(fleet)
    if f.nothing_to_recover:
        recovery = None
    else:
        recovery = f.recovered_at - f.at if f.recovered_at is not None else fleet.time_to_place(f.at)
    done, failed = load.collect(timeout_s=300)
    f.cleanup()
    exclusions, tier_changes = f.exclusions, f.tier_changes

    def below(r) -> bool:
        tier = fleet.tier_of(r.node_id)
        change = tier_changes.get(r.node_id)
        if change is not None and r.start >= change[0]:
            tier = change[1]
        return tier < floor

    return score(name, accepted=load.submitted, completed=done, failed=failed, refused=load.refused, runs=read_run_log(log),
                 below_floor=below, exclusions=exclusions, recovery_s=recovery, records_before=before,
                 records_after=fleet.records(), note=note)


# -- faults --------------------------------------------------------------------------------------------
@dataclass
class Fault:
    """What a fault did: when it hit, the exclusions and tier changes it causes, how to undo it,
    and when the fabric had absorbed it (None: measured by a call of a fresh class)."""

    at: float
    exclusions: list = field(default_factory=list)
    tier_changes: dict = field(default_factory=dict)
    cleanup: Callable[[], object] = lambda: None
    recovered_at: float | None = None
    nothing_to_recover: bool = False


def sigkill(actor: str, pid_of):
    """SIGKILL one of the fabric's detached actors; Ray restarts it (``max_restarts=-1``). The
    clean-up waits until it answers ``pid_of`` with a new pid."""
    def fault(fleet: Fleet):
        pid = pid_of(ray.get_actor(actor, namespace=names.NAMESPACE))
        os.kill(pid, signal.SIGKILL)
        at = time.time()

        def cleanup():
            fleet.lf.wait_until(lambda: pid_of(ray.get_actor(actor, namespace=names.NAMESPACE)) != pid, f"{actor} back")
        return Fault(at, cleanup=cleanup)
    return fault


def kill_nodes(*node_names: str):
    def fault(fleet: Fleet):
        for name in node_names:
            fleet.lf.kill_node(name)
        at = time.time()
        fleet.lf.wait_until(lambda: not any(fleet.in_scheduler(n) for n in node_names), "the scheduler to drop the killed nodes")
        dropped = time.time()

        def cleanup():
            for name in node_names:
                fleet.lf.add_node(name)
            fleet.lf.wait_until(lambda: all(fleet.in_scheduler(n) for n in node_names), "the killed nodes back in the scheduler")
        return Fault(at, cleanup=cleanup, recovered_at=dropped)
    return fault


def _probe_pid(fleet: Fleet, name: str) -> int:
    probe = ray.get_actor(names.probe_actor_name(fleet.lf.node(name).node_id), namespace=names.NAMESPACE)
    return ray.get(probe.info.remote(), timeout=30)["pid"]


def partition(name: str, hold_s: float = 3.0):
    def fault(fleet: Fleet):
        pid = _probe_pid(fleet, name)
        at = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            fleet.lf.wait_until(lambda: not fleet.in_scheduler(name), f"the scheduler to drop {name}")
            dropped = time.time()
            since = dropped + 2 * TICK_S
            time.sleep(hold_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        until = time.time()

        def cleanup():
            fleet.lf.wait_until(lambda: fleet.in_scheduler(name), f"{name} back after the partition")
        return Fault(at, [Exclusion(fleet.lf.node(name).node_id, since, until, "offline by missed heartbeats")], cleanup=cleanup,
                     recovered_at=dropped)
    return fault


def flapping(name: str):
    def fault(fleet: Fleet):
        at = time.time()
        for _ in range(2):
            fleet.lf.kill_node(name)
            fleet.lf.wait_until(lambda: fleet.node_status(name) == "offline", f"{name} offline")
            fleet.lf.add_node(name)
        held = fleet.lf.wait_until(lambda: next((r for r in fleet.lf.handle.records() if r.node_id == fleet.lf.node(name).node_id
                                                 and r.held_until), None), f"{name} flap-held")
        seen = time.time()
        since, until = seen + 2 * TICK_S, held.held_until

        def cleanup():
            fleet.lf.wait_until(lambda: fleet.in_scheduler(name), f"{name} released from its flap hold", timeout_s=60)
        return Fault(at, [Exclusion(fleet.lf.node(name).node_id, since, until, "flap-held")], cleanup=cleanup, recovered_at=seen)
    return fault


def demote(name: str, recording: Path):
    def fault(fleet: Fleet):
        nvml = recording / "nvml.json"
        saved = nvml.read_text()
        nvml.write_text(json.dumps({"error": "NVMLError_LibraryNotFound"}))
        node_id = fleet.lf.node(name).node_id
        probe = ray.get_actor(names.probe_actor_name(node_id), namespace=names.NAMESPACE)
        at = time.time()
        ray.get(probe.reprobe_now.remote(), timeout=60)
        fleet.lf.wait_until(lambda: all(r.tier.value != "gpu_cuda" for r in ray.get(fleet.sched().nodes.remote()) if r.name == name),
                            f"the scheduler to demote {name}")
        seen = time.time()

        def cleanup():
            nvml.write_text(saved)
            ray.get(probe.reprobe_now.remote(), timeout=60)
        return Fault(at, tier_changes={node_id: (seen + 2 * TICK_S, ComputeTier.GPU_APU)}, cleanup=cleanup, recovered_at=seen)
    return fault


def no_fault(fleet: Fleet):
    return Fault(time.time(), nothing_to_recover=True)


# -- the head restarts run on clusters of their own --------------------------------------------------------
def head_restart_cold(work: Path, n: int, duration_s: float) -> Outcome:
    """No GCS fault tolerance: the fleet stops and a new cluster starts on the same store."""
    settings = {**SETTINGS, "store": {"path": str(work / "restart" / "fabric.db")}}
    nodes = ["cpu-only-box", "arm64-board"]
    with LocalFabric(nodes, settings=settings, max_slots=2, timeout_s=120) as first:
        ray.get([APU_DOWN.remote("warm", str(work / "probes.log"), 0.0) for _ in range(8)], timeout=120)
        before = {r.node_id for r in first.handle.records()}
    at = time.time()
    with LocalFabric(nodes, settings=settings, max_slots=2, timeout_s=120) as second:
        fleet = Fleet(second, work)
        recovery = fleet.time_to_place(at)
        log = work / "head_restart_cold.log"
        load = Load(APU_DOWN, log, n, duration_s).start()
        done, failed = load.collect(timeout_s=300)
        after = fleet.records()
        return score("head_restart_cold", accepted=load.submitted, completed=done, failed=failed, refused=load.refused,
                     runs=read_run_log(log), below_floor=lambda r: fleet.tier_of(r.node_id) < ComputeTier.CPU_FFMPEG,
                     recovery_s=recovery, records_before=before, records_after=after,
                     note="calls sent after the new head is up; recovery_s counts from the old head's stop")


def head_restart_ft(name: str, work: Path, n: int, duration_s: float, say: Callable[[str], None]) -> dict:
    """``name`` (``HEAD_FT``) on a ``HeadFleet`` of a head and two workers: four jobs, two on each
    worker, and ``n`` calls over at least 18 s; the chaos JSON of ``fabric.testing.chaos_head``."""
    from fabric.testing.chaos_head import HeadRestart, head_restart
    from fabric.testing.head_fleet import HeadFleet
    from fabric.testing.redis import redis_problem

    backend = HEAD_FT[name]
    if backend == "redis" and redis_problem():
        raise SystemExit(f"{name}: {redis_problem()}")
    with HeadFleet(backend, workers=2, say=say) as fleet:
        fleet.up(HEAD_SETTINGS)
        ticks = work / name / "ticks"
        jobs = fleet.driver("jobs", str(ticks), "4", "50", "--spread", ",".join(fleet.workers))["jobs"]
        t = HeadRestart(calls=n, load_s=max(duration_s, 18.0))
        return head_restart(fleet, jobs, ticks, work / name / "run", t, name=name)


def head_ft_clean(doc: dict) -> bool:
    jobs = doc["same_instances"].split("/")
    return (doc["lost"] == 0 and doc["below_floor"] == 0 and doc["calls_run_twice"] == 0 and doc["job_duplicates"] == 0
            and doc["records_lost"] == 0 and jobs[0] == jobs[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", choices=("local", "netns"), default="local",
                    help="local: every node on this machine's network (default); netns: each host in a network "
                         f"namespace of its own, links cut for real ({', '.join(NETNS_SCENARIOS)}; needs root and ip)")
    ap.add_argument("--scenarios", help=f"comma-separated (default: all); local: {', '.join(SCENARIOS)}")
    ap.add_argument("--scenario", help="one scenario")
    ap.add_argument("--calls", type=int, help="calls per scenario (default 400; netns: the profile's; burst_20000 sends 20,000)")
    ap.add_argument("--duration", type=float, help="seconds each scenario's calls are spread over (default 10; netns: the profile's)")
    ap.add_argument("--profile", choices=("full", "suite"), default="full",
                    help="netns: full (Ray's own health checks, the default lease) or suite (the test suite's short timings)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object on the last line")
    args = ap.parse_args(argv)
    known = (*NETNS_SCENARIOS, *HEAD_FT) if args.hosts == "netns" else SCENARIOS
    wanted = [args.scenario] if args.scenario else [s.strip() for s in (args.scenarios or ",".join(known)).split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(known))
    if unknown:
        ap.error(f"unknown scenario(s) {unknown} for --hosts {args.hosts}; scenarios: {', '.join(known)}")
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=args.json, highlight=False, width=max(110, shutil.get_terminal_size((110, 24)).columns))
    if args.hosts == "netns":
        return netns_main(args, wanted, console)
    args.calls = 400 if args.calls is None else args.calls
    args.duration = 10.0 if args.duration is None else args.duration
    work = Path(tempfile.mkdtemp(prefix="fabric-chaos-"))
    outcomes: list[Outcome] = []
    heads: dict[str, dict] = {}
    try:
        fleet_scenarios = [s for s in wanted if not s.startswith("head_restart")]
        if fleet_scenarios:
            fragile = work / "fragile-gpu"
            shutil.copytree(profile_path("gpu-cuda-workstation"), fragile)
            # fragile-gpu (a second gpu_cuda node, from a recording of its own) is the node only
            # "demoted" uses (it rewrites its recording): started only when that scenario runs
            with_fragile = "demoted" in fleet_scenarios
            console.print(f"==> starting a local fleet: {', '.join(PROFILES + ['fragile-gpu'] * with_fragile)}")
            with LocalFabric(PROFILES, settings=SETTINGS, max_slots=2, timeout_s=120) as lf:
                if with_fragile:
                    lf.add_node("fragile-gpu", recording=str(fragile))
                fleet = Fleet(lf, work)
                faults = {
                    "scheduler_sigkill": lambda: run(fleet, "scheduler_sigkill", sigkill(names.SCHEDULER, lambda h: ray.get(h.pid.remote(), timeout=10)),
                                                     n=args.calls, duration_s=args.duration),
                    "registry_sigkill": lambda: run(fleet, "registry_sigkill", sigkill(names.REGISTRY, lambda h: ray.get(h.ping.remote(), timeout=10)["pid"]),
                                                    n=args.calls, duration_s=args.duration),
                    "health_sigkill": lambda: run(fleet, "health_sigkill", sigkill(names.HEALTH, lambda h: ray.get(h.status.remote(), timeout=10)["pid"]),
                                                  n=args.calls, duration_s=args.duration),
                    "node_kill_one": lambda: run(fleet, "node_kill_one", kill_nodes("cpu-only-box"), n=args.calls, duration_s=args.duration,
                                                 seconds=0.3),
                    "node_kill_two": lambda: run(fleet, "node_kill_two", kill_nodes("gpu-cuda-workstation", "steamdeck-apu"),
                                                 n=args.calls, duration_s=args.duration, seconds=0.3),
                    "partition": lambda: run(fleet, "partition", partition("arm64-board"), n=args.calls, duration_s=max(args.duration, 8.0)),
                    "flapping": lambda: run(fleet, "flapping", flapping("cpu-only-box"), n=args.calls, duration_s=max(args.duration, 20.0)),
                    "demoted": lambda: run(fleet, "demoted", demote("fragile-gpu", fragile), n=args.calls, duration_s=args.duration,
                                           fn=CUDA_ONLY, floor=ComputeTier.GPU_CUDA),
                    "burst_20000": lambda: run(fleet, "burst_20000", no_fault, n=20_000, duration_s=0.0, seconds=0.0,
                                               note="no fault: one burst as fast as the caller submits"),
                }
                for name in fleet_scenarios:
                    console.print(f"==> {name}")
                    outcomes.append(faults[name]())
                    console.print(f"    {json.dumps(outcomes[-1].as_json())}")
        if "head_restart_cold" in wanted:
            console.print("==> head_restart_cold")
            outcomes.append(head_restart_cold(work, args.calls, args.duration))
            console.print(f"    {json.dumps(outcomes[-1].as_json())}")
        for name in (s for s in wanted if s in HEAD_FT):
            console.print(f"==> {name}")
            heads[name] = head_restart_ft(name, work, args.calls, args.duration, say=lambda line: console.print(f"    {line}"))
            console.print(f"    {summary(heads[name])}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = Table(title="chaos scenarios", show_lines=False)
    for col in ("scenario", "calls", "completed", "lost", "refused", "run twice", "below floor", "on excluded", "recovery s", "records lost"):
        table.add_column(col, justify="left" if col == "scenario" else "right")
    for o in outcomes:
        table.add_row(o.name, str(o.calls), str(o.completed), str(o.lost), str(o.refused), str(o.duplicates), str(o.below_floor),
                      str(o.on_excluded), "-" if o.recovery_s is None else f"{o.recovery_s:.2f}", str(o.records_lost))
    if outcomes or not heads:
        console.print(table)
    if heads:
        console.print(head_table(heads))
    if args.json:
        print(json.dumps({"scenarios": {**{o.name: o.as_json() for o in outcomes}, **heads}}))
    return 0 if all(o.clean for o in outcomes) and all(head_ft_clean(d) for d in heads.values()) else 1


def head_table(heads: dict[str, dict]):
    from rich.table import Table

    table = Table(title="head restarts (GCS fault tolerance)")
    cols = ("lost", "below_floor", "calls_run_twice", "job_duplicates", "job_gap_ms", "records_lost", "recovery_s",
            "outage_s", "same_instances", "refused")
    table.add_column("scenario")
    for col in cols:
        table.add_column(col.replace("_", " "), justify="right")
    for name, d in heads.items():
        table.add_row(name, *("-" if d[c] is None else str(d[c]) for c in cols))
    return table


def netns_main(args: argparse.Namespace, wanted: list[str], console) -> int:
    """The scenarios on network-namespace hosts (``fabric.testing.chaos_netns``): a table, and the JSON."""
    from dataclasses import replace

    from rich.table import Table

    from fabric.testing.chaos_netns import FULL, SUITE, NetnsChaos
    from fabric.testing.netns import netns_problem

    problem = netns_problem()
    if problem:
        console.print(f"chaos --hosts netns: {problem}")
        return 2
    timings = FULL if args.profile == "full" else SUITE
    timings = replace(timings, calls=args.calls or timings.calls, load_s=args.duration or timings.load_s)
    doc: dict = {}
    plain = [name for name in wanted if name not in HEAD_FT]
    if plain:
        console.print(f"==> a fleet of network namespaces: head, n1, n2 (fabric join --supervise); {args.profile} timings")
        with NetnsChaos(timings, say=lambda line: console.print(f"    {line}")) as chaos:
            for name in plain:
                console.print(f"==> {name}")
                doc[name] = chaos.scenario(name)
    heads: dict[str, dict] = {}
    for name in (n for n in wanted if n in HEAD_FT):  # each on a fleet of its own, whose head is restarted
        from fabric.testing.chaos_netns_head import head_restart_netns

        console.print(f"==> {name}: head, n1, n2 in network namespaces, the head's GCS on the {HEAD_FT[name]} store")
        heads[name] = head_restart_netns(name, HEAD_FT[name], args.calls or 150, args.duration or 18.0,
                                         say=lambda line: console.print(f"    {line}"))
        console.print(f"    {summary(heads[name])}")
    table = Table(title="chaos scenarios on network-namespace hosts")
    cols = ("scenario", "lost", "below floor", "run twice", "job dups", "job gap ms", "records lost", "recovery s",
            "rejoin s", "cut s", "offline seen s", "ray dead s")
    for col in cols:
        table.add_column(col, justify="left" if col == "scenario" else "right")

    def cell(v: object) -> str:
        return "-" if v is None else str(v)
    for name, d in doc.items():
        w = d["windows"]
        table.add_row(name, *(cell(d[k]) for k in ("lost", "below_floor", "calls_run_twice", "job_duplicates", "job_gap_ms",
                                                     "records_lost", "recovery_s", "rejoin_s")),
                      cell(w["cut_s"]), cell(w["offline_seen_s"]), cell(w["ray_dead_seen_s"]))
    if doc:
        console.print(table)
    if heads:
        console.print(head_table(heads))
    if args.json:
        print(json.dumps({"hosts": "netns", "profile": args.profile, "scenarios": {**doc, **heads}}))
    clean = all(d["lost"] == 0 and d["below_floor"] == 0 and d["job_duplicates"] == 0 and d["records_lost"] == 0
                for d in doc.values())
    return 0 if clean and all(head_ft_clean(d) for d in heads.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

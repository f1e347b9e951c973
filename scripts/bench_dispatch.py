#!/usr/bin/env python
"""Dispatch speed: ``@adaptive.remote`` against plain ``@ray.remote`` on the same local fleet.

One ``LocalFabric`` (4 nodes: workstation, Steam Deck, CPU box, relay), in the same run,
the five kinds taking turns so all see the same machine load:

(a) plain ``@ray.remote`` tiny tasks with the equivalent label selector (every tier inside the
    floor) and one ``fabric.slots`` each;
(b) ``@adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")`` tiny tasks: the same nodes
    are eligible, the fabric decides where;
(c) "shaped": plain ``@ray.remote`` tiny tasks given the options the fabric gives a burst's
    spilled calls (the selector, plus a soft affinity to the best node that spills when it is
    busy). Against (a) the fabric's ratio shows what a user gains; against (c), what the fabric
    itself costs on top of those Ray options;
(d) "fallback_strategy": the peer a Ray user would pick instead, plain ``@ray.remote`` with Ray
    2.60's own ``fallback_strategy``: a label selector for ``min_tier`` (every tier at or above
    it) first, then one per lower tier down to the floor;
(e) "waiting": the fabric with work that would rather wait for its ``min_tier`` than spill below
    it: ``@adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg", when_full="wait")`` tiny
    tasks (when the ``min_tier`` nodes are full, calls wait on their slots instead of going down
    the tiers). Its calls are given a generous ``queue_timeout_s`` (600 s, against the default
    300 s) so that a 10,000-call burst queued behind the few ``min_tier`` slots of a loaded
    machine cannot time out: it is a deadline only, it changes nothing while met. Against (d) its
    ratio shows what keeping the work at ``min_tier`` costs in throughput, next to its share there.

Every task reports the tier of the node it ran on, so each kind's row says *where the work ran*:
the share of calls that ran at their ``min_tier`` or above (``at_min_tier_share``) and the count
that ran below their floor (``below_floor``: must be 0 for the fabric).

Decisions on the record (docs/explain.md) cost the dispatch path: after the kinds' rounds, the
adaptive kind runs ``--recording-rounds`` more pairs of bursts of the biggest size, one with decision
recording on (the default, with the default sampling) and one with it off (the scheduler's
``decision_recording``), the order turning every round; ``recording_ratio_median`` is the median over
those pairs of on/off (``recording_paired_ratios`` each, ``decisions_recorded`` how many the on bursts
wrote).

Bursts of 1,000 and 10,000 (submit all, then ``ray.get``), and single-call latency (submit one,
wait for it) p50/p99. Prints a table; with ``--json`` a final JSON object with
``plain_tasks_per_s``, ``adaptive_tasks_per_s``, ``throughput_ratio`` (10,000-task bursts),
``plain_p50_ms``, ``adaptive_p50_ms``, ``added_p50_ms`` and the rest of the measurements
(``paired_ratio_median``: the median over rounds of adaptive/plain within a round; per burst
size, the worker-lease requests the driver sent per task, from the event stats Ray logs;
``fallback_strategy_tasks_per_s``, ``ratio_to_fallback_strategy``, ``waiting_tasks_per_s``,
``ratio_waiting_to_fallback_strategy`` (waiting/fallback_strategy, same run) with
``paired_ratio_waiting_to_fallback_strategy_median`` and, per kind, ``at_min_tier_share`` and
``below_floor``, the waiting kind's included: its ``below_floor`` must be 0 too).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only

PROFILES = ["gpu-cuda-workstation", "steamdeck-apu", "cpu-only-box", "edge-relay"]
MIN_TIER, FLOOR = "gpu_apu", "cpu_ffmpeg"
"""What every kind's tasks ask for: the fabric's ``min_tier`` and ``floor``; the plain kinds get
the equivalent Ray options."""
WAIT_QUEUE_TIMEOUT_S = 600.0
"""The waiting kind's queue timeout: generous, so that a 10,000-call burst waiting for the
``min_tier`` slots does not fail on a slow or loaded machine (the default is 300 s)."""


def tiny(x):
    """The task of every kind: its argument back, and the rank of the node's tier it ran on (read
    once per worker process), so a burst tells where its work ran."""
    from fabric.rayio.worker_calls import node_rank

    return x, node_rank()


def machine_cpu_s() -> float:
    """CPU seconds spent so far by everything on this machine (user + system, all cores)."""
    import psutil

    t = psutil.cpu_times()
    return t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def settle(quiet_pct: float, max_s: float = 20.0) -> float:
    """Wait until the machine is quiet again after a burst (Ray frees the burst's objects and
    flushes its task events after ``ray.get`` returns); returns the seconds waited. Without this
    the burst that runs second in a round pays for the first one's cleanup. ``quiet_pct`` 100 or
    more: no wait (the machine's CPU use is never over 100 percent; no 0.5 s sample is taken)."""
    import psutil

    t0 = time.perf_counter()
    if quiet_pct >= 100:
        return 0.0
    while time.perf_counter() - t0 < max_s:
        if psutil.cpu_percent(interval=0.5) < quiet_pct:
            break
    return time.perf_counter() - t0


def process_role(proc, driver_pid: int) -> str | None:
    """What a process on this machine is to the cluster (None: not part of it)."""
    if proc.pid == driver_pid:
        return "driver"
    try:
        name, cmd = proc.name(), proc.cmdline()
    except Exception:  # gone, or not ours to read
        return None
    if name in ("raylet", "gcs_server"):
        return name
    title = cmd[0] if cmd else ""
    if title.startswith("ray::"):  # a worker process: an actor's, or one that runs tasks
        actor = title[5:].split(".")[0].split(" ")[0]
        if actor.endswith("Agent"):
            return "dashboard, agents, monitors"
        return "task workers" if actor in ("IDLE", "tiny", "run") else actor
    text = " ".join(cmd)
    if "default_worker.py" in text:
        return "task workers"
    if "dashboard" in text or "agent" in text or "log_monitor" in text or "monitor.py" in text:
        return "dashboard, agents, monitors"
    return None


class ProcessCPU:
    """CPU seconds per cluster process role, between two snapshots (a role is fixed the first time
    a process is seen: a worker's title changes with the task it runs)."""

    def __init__(self) -> None:
        self.roles: dict[int, str | None] = {}
        self.driver = os.getpid()

    def snapshot(self) -> dict[int, tuple[str, float]]:
        import psutil

        # This cluster's processes only: ``LocalFabric`` starts its GCS and raylets from this
        # driver, and they start the workers, agents and actors, so every one descends from it
        # (other clusters on the same machine do not count).
        me = psutil.Process(self.driver)
        out = {}
        for proc in [me, *me.children(recursive=True)]:
            if proc.pid not in self.roles:
                self.roles[proc.pid] = process_role(proc, self.driver)
            role = self.roles[proc.pid]
            if role is None:
                continue
            try:
                t = proc.cpu_times()
            except Exception:
                continue
            out[proc.pid] = (role, t.user + t.system)
        return out

    @staticmethod
    def per_role(before: dict, after: dict) -> dict[str, float]:
        spent: dict[str, float] = {}
        for pid, (role, cpu_s) in after.items():
            spent[role] = spent.get(role, 0.0) + cpu_s - before.get(pid, (role, 0.0))[1]
        return spent


def burst(fn, n: int) -> tuple[float, float, list[int]]:
    """Submit ``n`` calls, then wait for all; returns tasks per second, the machine's CPU
    milliseconds per task (on 2 cores the burst is CPU-bound: the two move together) and the tier
    rank of the node each call ran on."""
    import ray

    gc.collect()
    c0, t0 = machine_cpu_s(), time.perf_counter()
    refs = [fn.remote(i) for i in range(n)]
    out = ray.get(refs)
    dt = time.perf_counter() - t0
    cpu_ms = (machine_cpu_s() - c0) * 1000 / n
    assert [x for x, _ in out] == list(range(n)), "a burst lost or mixed up results"
    return n / dt, cpu_ms, [rank for _, rank in out]


def peer_options(min_tier: str, floor: str) -> dict:
    """Plain Ray's own way to say "``min_tier``, else down the tiers to ``floor``": a label selector
    for every tier at or above ``min_tier``, then Ray 2.60's ``fallback_strategy`` with one
    selector per lower tier, best first, down to the floor."""
    from fabric.core.names import TIER_LABEL
    from fabric.core.tiers import TIERS_BEST_FIRST, ComputeTier

    top, low = ComputeTier.parse(min_tier), ComputeTier.parse(floor)
    at_or_above = [t.value for t in TIERS_BEST_FIRST if t >= top]
    return {"label_selector": {TIER_LABEL: f"in({','.join(at_or_above)})"},
            "fallback_strategy": [{"label_selector": {TIER_LABEL: t.value}} for t in TIERS_BEST_FIRST if low <= t < top]}


def where_it_ran(ranks: list[int], min_tier: str, floor: str) -> tuple[float, int]:
    """The share of calls that ran at ``min_tier`` or above, and the count below ``floor``."""
    from fabric.core.tiers import ComputeTier

    top, low = ComputeTier.parse(min_tier).rank, ComputeTier.parse(floor).rank
    return sum(r >= top for r in ranks) / len(ranks), sum(r < low for r in ranks)


def lease_requests() -> int | None:
    """Worker-lease requests this process has sent so far, from the first event-stats block Ray
    logs after now (None when it logs none)."""
    from fabric.testing.raystats import LEASE_REQUESTS, rpc_counts

    counts = rpc_counts()
    return None if counts is None else counts.get(LEASE_REQUESTS, 0)


def latencies(fn, n: int) -> list[float]:
    import ray

    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        assert ray.get(fn.remote(i))[0] == i
        lat.append((time.perf_counter() - t0) * 1000)
    return lat


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def compare_recording(lf, fn, size: int, rounds: int, quiet_pct: float) -> dict:
    """``rounds`` pairs of ``size``-call bursts of ``fn``, decision recording on and off in turn (the
    order turning every round); the rates, the on/off ratio within each pair and its median, and the
    decisions the on bursts recorded. Recording is left on (the default) afterwards."""
    import ray

    from fabric.core import names

    if rounds <= 0:
        return {}
    sched = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
    rates: dict[bool, list[float]] = {True: [], False: []}
    recorded = 0
    try:
        for r in range(rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                ray.get(sched.decision_recording.remote(on))
                settle(quiet_pct)
                last = lf.handle.events(kinds=["placement_recorded"], limit=-1)
                since = last[-1]["seq"] if last else 0
                rate, _, _ = burst(fn, size)
                rates[on].append(rate)
                if on:
                    recorded += len(lf.handle.events(since=since, kinds=["placement_recorded"], limit=100_000))
                print(f"  recording round {r + 1}: {'on' if on else 'off':<3} {size:>6} tasks  {rate:8.0f}/s", file=sys.stderr)
    finally:
        ray.get(sched.decision_recording.remote(True))
    paired = [a / b for a, b in zip(rates[True], rates[False])]
    return {"recording_on_tasks_per_s": round(statistics.median(rates[True])),
            "recording_off_tasks_per_s": round(statistics.median(rates[False])),
            "recording_paired_ratios": [round(x, 4) for x in paired], "recording_ratio_median": round(statistics.median(paired), 4),
            "recording_rounds": rounds, "decisions_recorded": recorded}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a final JSON object")
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounds per burst size; each runs every kind, the order turning every round (default 4)")
    parser.add_argument("--sizes", default="1000,10000", help="burst sizes (default 1000,10000)")
    parser.add_argument("--quiet-pct", type=float, default=25.0,
                        help="before each burst, wait until the machine's CPU use is under this percent (default 25; 100: no wait)")
    parser.add_argument("--latency-calls", type=int, default=300, help="single calls for p50/p99 (default 300)")
    parser.add_argument("--recording-rounds", type=int, default=5,
                        help="paired bursts of the biggest size, decision recording on against off (default 5; 0: none)")
    parser.add_argument("--by-process", action="store_true",
                        help="also report CPU per task by process role (driver, raylet, GCS, workers, the fabric's actors)")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]

    import ray

    from fabric import adaptive
    from fabric.testing import LocalFabric

    # Ray logs each process's RPC counts every second: the lease requests per task come from there
    with LocalFabric(PROFILES, max_slots=2, timeout_s=120, system_config={"event_stats_print_interval_ms": 1000}) as lf:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from fabric.core.names import SLOTS_RESOURCE
        from fabric.rayio.tasks import tier_selector

        fabric_fn = adaptive.remote(min_tier=MIN_TIER, floor=FLOOR)(tiny)
        slot = {"resources": {SLOTS_RESOURCE: 1}, "num_cpus": 1}
        floor = {"label_selector": tier_selector(fabric_fn.requirement), **slot}
        plain = ray.remote(tiny).options(**floor)
        best = NodeAffinitySchedulingStrategy(lf.node("gpu-cuda-workstation").node_id, soft=True, _spill_on_unavailable=True)
        shaped = ray.remote(tiny).options(scheduling_strategy=best, **floor)
        peer = ray.remote(tiny).options(**peer_options(MIN_TIER, FLOOR), **slot)
        waiting = adaptive.remote(min_tier=MIN_TIER, floor=FLOOR, when_full="wait", queue_timeout_s=WAIT_QUEUE_TIMEOUT_S)(tiny)
        kinds = [("plain", plain), ("adaptive", fabric_fn), ("shaped", shaped), ("fallback_strategy", peer), ("waiting", waiting)]
        names = [kind for kind, _ in kinds]
        for _, fn in kinds:  # warm each: workers started, functions exported, lease granted
            burst(fn, 200)

        def in_turn(r: int, among=kinds):  # the order turns every round, so no kind always goes first
            return among[r % len(among):] + among[:r % len(among)]

        rows: dict[tuple[str, int], list[float]] = {}
        cpu: dict[tuple[str, int], list[float]] = {}
        ran: dict[tuple[str, int], list[int]] = {}  # (kind, size) -> the tier rank each call ran on, all rounds
        lease_rows: dict[tuple[str, int], list[float]] = {}
        by_role: dict[tuple[str, str], list[float]] = {}  # (kind, role) -> CPU ms per task, biggest burst only
        procs = ProcessCPU() if args.by_process else None
        leases_after = lease_requests()
        for size in sizes:
            for r in range(args.rounds):
                for kind, fn in in_turn(r):
                    waited = settle(args.quiet_pct)
                    # the count after the last burst is the count before this one: the counter is
                    # cumulative and the driver sends nothing between two bursts (one wait for Ray's
                    # next stats block per burst, not two)
                    leases_before = leases_after
                    before = procs.snapshot() if procs and size == max(sizes) else None
                    rate, cpu_ms, ranks = burst(fn, size)
                    ran.setdefault((kind, size), []).extend(ranks)
                    if before is not None:
                        for role, spent in ProcessCPU.per_role(before, procs.snapshot()).items():
                            by_role.setdefault((kind, role), []).append(spent * 1000 / size)
                    leases_after = lease_requests()
                    leases = None if leases_before is None or leases_after is None else (leases_after - leases_before) / size
                    rows.setdefault((kind, size), []).append(rate)
                    cpu.setdefault((kind, size), []).append(cpu_ms)
                    if leases is not None:
                        lease_rows.setdefault((kind, size), []).append(leases)
                    shown = "" if leases is None else f"  {leases:6.2f} lease requests/task"
                    print(f"  round {r + 1}: {kind:<17} {size:>6} tasks  {rate:8.0f}/s  {cpu_ms:5.2f} ms CPU/task{shown}"
                          f"  (settled {waited:.1f} s)", file=sys.stderr)
        recording = compare_recording(lf, fabric_fn, max(sizes), args.recording_rounds, args.quiet_pct)
        lat = {"plain": [], "adaptive": []}
        for r in range(2):
            for kind, fn in in_turn(r, kinds[:2]):
                settle(args.quiet_pct)
                lat[kind] += latencies(fn, args.latency_calls // 2)
        metrics = lf.handle.metrics()

    def against(base: str, size: int, kind: str = "adaptive") -> tuple[float, float, list[float], float]:
        """The base kind's median rate, ``kind``'s (adaptive unless said), and kind/base within each
        round (each round's ``kind`` burst against the base burst next to it in time: drift over the
        run, as the cluster ages, cancels within a pair) with their median."""
        paired = [ra / rb for ra, rb in zip(rows[(kind, size)], rows[(base, size)])]
        return (statistics.median(rows[(base, size)]), statistics.median(rows[(kind, size)]), paired,
                statistics.median(paired))

    print(f"\n{'burst':>8}  {'plain tasks/s':>14}  {'adaptive tasks/s':>16}  {'ratio':>6}  {'paired ratios: median (min-max)':>32}")
    result: dict = {"sizes": {}}
    for size in sizes:
        p, a, paired, pm = against("plain", size)
        print(f"{size:>8}  {p:>14.0f}  {a:>16.0f}  {a / p:>6.2f}  {pm:>15.2f} ({min(paired):.2f}-{max(paired):.2f})")
        result["sizes"][str(size)] = {"plain_tasks_per_s": round(p), "adaptive_tasks_per_s": round(a), "ratio": round(a / p, 3),
                                      "paired_ratio_median": round(pm, 3), "paired_ratios": [round(x, 3) for x in paired]}
    print(f"\n{'burst':>8}  {'shaped tasks/s':>14}  {'adaptive/shaped':>16}  {'paired: median (min-max)':>25}")
    for size in sizes:
        sh, a, paired, pm = against("shaped", size)
        print(f"{size:>8}  {sh:>14.0f}  {a / sh:>16.2f}  {pm:>8.2f} ({min(paired):.2f}-{max(paired):.2f})")
        result["sizes"][str(size)].update({"shaped_tasks_per_s": round(sh), "ratio_to_shaped": round(a / sh, 3),
                                           "paired_ratio_to_shaped_median": round(pm, 3)})
    print(f"\n{'burst':>8}  {'fallback_strategy tasks/s':>25}  {'adaptive/fallback_strategy':>26}  {'paired: median (min-max)':>25}")
    for size in sizes:
        fs, a, paired, pm = against("fallback_strategy", size)
        print(f"{size:>8}  {fs:>25.0f}  {a / fs:>26.2f}  {pm:>8.2f} ({min(paired):.2f}-{max(paired):.2f})")
        result["sizes"][str(size)].update({"fallback_strategy_tasks_per_s": round(fs), "ratio_to_fallback_strategy": round(a / fs, 3),
                                           "paired_ratio_to_fallback_strategy_median": round(pm, 3)})
    print(f"\n{'burst':>8}  {'waiting tasks/s':>25}  {'waiting/fallback_strategy':>26}  {'paired: median (min-max)':>25}")
    for size in sizes:
        fs, w, paired, pm = against("fallback_strategy", size, kind="waiting")
        print(f"{size:>8}  {w:>25.0f}  {w / fs:>26.2f}  {pm:>8.2f} ({min(paired):.2f}-{max(paired):.2f})")
        result["sizes"][str(size)].update({"waiting_tasks_per_s": round(w), "ratio_waiting_to_fallback_strategy": round(w / fs, 3),
                                           "paired_ratio_waiting_to_fallback_strategy_median": round(pm, 3)})
    print(f"\nwhere the work ran (min_tier {MIN_TIER}, floor {FLOOR}): share at min_tier or above / calls below the floor")
    print(f"{'burst':>8}" + "".join(f"  {kind:>22}" for kind in names))
    for size in sizes:
        where = {kind: where_it_ran(ran[(kind, size)], MIN_TIER, FLOOR) for kind in names}
        print(f"{size:>8}" + "".join(f"  {share:>14.3f} / {below:>5}" for share, below in where.values()))
        result["sizes"][str(size)].update({"at_min_tier_share": {kind: round(w[0], 4) for kind, w in where.items()},
                                           "below_floor": {kind: w[1] for kind, w in where.items()}})
    print(f"\n{'burst':>8}  {'machine CPU ms/task:':>20}" + "".join(f"  {kind:>17}" for kind in names))
    for size in sizes:
        got = {kind: statistics.median(cpu[(kind, size)]) for kind in names}
        print(f"{size:>8}  {'':>20}" + "".join(f"  {v:>17.2f}" for v in got.values()))
        result["sizes"][str(size)].update({f"{kind}_cpu_ms_per_task": round(v, 3) for kind, v in got.items()})
    if all(lease_rows.get((kind, size)) for kind in names for size in sizes):
        print(f"\n{'burst':>8}  {'worker-lease requests/task:':>27}" + "".join(f"  {kind:>17}" for kind in names))
        for size in sizes:
            got = {kind: statistics.median(lease_rows[(kind, size)]) for kind in names}
            print(f"{size:>8}  {'':>27}" + "".join(f"  {v:>17.2f}" for v in got.values()))
            result["sizes"][str(size)].update({f"{kind}_lease_requests_per_task": round(v, 3) for kind, v in got.items()})
    if by_role:
        big = max(sizes)
        print(f"\n{'CPU ms/task by process, ' + str(big) + '-task bursts':>44}" + "".join(f"  {kind:>17}" for kind in names)
              + f"  {'adaptive-shaped':>15}")
        result["by_process"] = {}
        for role in sorted({r for _, r in by_role}):
            got = {kind: statistics.median(by_role.get((kind, role), [0.0])) for kind in names}
            print(f"{role:>44}" + "".join(f"  {v:>17.3f}" for v in got.values()) + f"  {got['adaptive'] - got['shaped']:>+15.3f}")
            result["by_process"][role] = {f"{kind}_cpu_ms_per_task": round(v, 3) for kind, v in got.items()}
    if recording:
        print(f"\ndecision recording, {max(sizes)}-task adaptive bursts: on {recording['recording_on_tasks_per_s']}/s, "
              f"off {recording['recording_off_tasks_per_s']}/s, paired on/off median {recording['recording_ratio_median']:.3f} "
              f"({min(recording['recording_paired_ratios']):.3f}-{max(recording['recording_paired_ratios']):.3f}), "
              f"{recording['decisions_recorded']} decisions recorded")
        result.update(recording)
    p50p, p50a = statistics.median(lat["plain"]), statistics.median(lat["adaptive"])
    p99p, p99a = pct(lat["plain"], 0.99), pct(lat["adaptive"], 0.99)
    print(f"\n{'single call':>12}  {'p50 ms':>7}  {'p99 ms':>7}")
    print(f"{'plain':>12}  {p50p:>7.3f}  {p99p:>7.3f}")
    print(f"{'adaptive':>12}  {p50a:>7.3f}  {p99a:>7.3f}")
    print(f"added p50: {p50a - p50p:+.3f} ms   leases granted: {metrics.get('leases_granted')}   "
          f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    big = str(max(sizes))
    result.update({
        "plain_tasks_per_s": result["sizes"][big]["plain_tasks_per_s"],
        "adaptive_tasks_per_s": result["sizes"][big]["adaptive_tasks_per_s"],
        "throughput_ratio": result["sizes"][big]["ratio"],
        "shaped_tasks_per_s": result["sizes"][big]["shaped_tasks_per_s"],
        "ratio_to_shaped": result["sizes"][big]["ratio_to_shaped"],
        "fallback_strategy_tasks_per_s": result["sizes"][big]["fallback_strategy_tasks_per_s"],
        "ratio_to_fallback_strategy": result["sizes"][big]["ratio_to_fallback_strategy"],
        "waiting_tasks_per_s": result["sizes"][big]["waiting_tasks_per_s"],
        "ratio_waiting_to_fallback_strategy": result["sizes"][big]["ratio_waiting_to_fallback_strategy"],
        "paired_ratio_median": result["sizes"][big]["paired_ratio_median"],
        "plain_p50_ms": round(p50p, 3), "adaptive_p50_ms": round(p50a, 3), "added_p50_ms": round(p50a - p50p, 3),
        "plain_p99_ms": round(p99p, 3), "adaptive_p99_ms": round(p99a, 3),
        "leases_granted": metrics.get("leases_granted"), "load_average": round(os.getloadavg()[0], 2),
    })
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

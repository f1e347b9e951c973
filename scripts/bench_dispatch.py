#!/usr/bin/env python
"""Dispatch speed: ``@adaptive.remote`` against plain ``@ray.remote`` on the same local fleet.

One ``LocalFabric`` (4 nodes: workstation, Steam Deck, CPU box, relay), in the same run,
alternating the two kinds so both see the same machine load:

(a) plain ``@ray.remote`` tiny tasks with the equivalent label selector (every tier inside the
    floor) and one ``fabric.slots`` each;
(b) ``@adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")`` tiny tasks: the same nodes
    are eligible, the fabric decides where.

Bursts of 1,000 and 10,000 (submit all, then ``ray.get``), and single-call latency (submit one,
wait for it) p50/p99. Prints a table; with ``--json`` a final JSON object with
``plain_tasks_per_s``, ``adaptive_tasks_per_s``, ``throughput_ratio`` (10,000-task bursts),
``plain_p50_ms``, ``adaptive_p50_ms``, ``added_p50_ms`` and the rest of the measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only

PROFILES = ["gpu-cuda-workstation", "steamdeck-apu", "cpu-only-box", "edge-relay"]


def tiny(x):
    return x


def burst(fn, n: int) -> float:
    import ray

    t0 = time.perf_counter()
    refs = [fn.remote(i) for i in range(n)]
    out = ray.get(refs)
    dt = time.perf_counter() - t0
    assert out == list(range(n)), "a burst lost or mixed up results"
    return n / dt


def latencies(fn, n: int) -> list[float]:
    import ray

    lat = []
    for i in range(n):
        t0 = time.perf_counter()
        assert ray.get(fn.remote(i)) == i
        lat.append((time.perf_counter() - t0) * 1000)
    return lat


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a final JSON object")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per burst size (default 3)")
    parser.add_argument("--sizes", default="1000,10000", help="burst sizes (default 1000,10000)")
    parser.add_argument("--latency-calls", type=int, default=300, help="single calls for p50/p99 (default 300)")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]

    import ray

    from fabric import adaptive
    from fabric.testing import LocalFabric

    with LocalFabric(PROFILES, max_slots=2, timeout_s=120) as lf:
        plain = ray.remote(tiny).options(label_selector={"fabric.io/tier": "in(gpu_cuda,gpu_vaapi,gpu_apu,cpu_ffmpeg)"},
                                         resources={"fabric.slots": 1}, num_cpus=1)
        fabric_fn = adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")(tiny)
        # warm both: workers started, functions exported, lease granted
        burst(plain, 200)
        burst(fabric_fn, 200)
        rows: dict[tuple[str, int], list[float]] = {}
        for size in sizes:
            for r in range(args.rounds):
                order = [("plain", plain), ("adaptive", fabric_fn)] if r % 2 == 0 else [("adaptive", fabric_fn), ("plain", plain)]
                for kind, fn in order:
                    rate = burst(fn, size)
                    rows.setdefault((kind, size), []).append(rate)
                    print(f"  round {r + 1}: {kind:<8} {size:>6} tasks  {rate:8.0f}/s", file=sys.stderr)
        lat = {"plain": [], "adaptive": []}
        for r in range(2):
            for kind, fn in ([("plain", plain), ("adaptive", fabric_fn)] if r == 0 else [("adaptive", fabric_fn), ("plain", plain)]):
                lat[kind] += latencies(fn, args.latency_calls // 2)
        metrics = lf.handle.metrics()

    print(f"\n{'burst':>8}  {'plain tasks/s':>14}  {'adaptive tasks/s':>16}  {'ratio':>6}")
    result: dict = {"sizes": {}}
    for size in sizes:
        p = statistics.median(rows[("plain", size)])
        a = statistics.median(rows[("adaptive", size)])
        print(f"{size:>8}  {p:>14.0f}  {a:>16.0f}  {a / p:>6.2f}")
        result["sizes"][str(size)] = {"plain_tasks_per_s": round(p), "adaptive_tasks_per_s": round(a), "ratio": round(a / p, 3)}
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
        "plain_p50_ms": round(p50p, 3), "adaptive_p50_ms": round(p50a, 3), "added_p50_ms": round(p50a - p50p, 3),
        "plain_p99_ms": round(p99p, 3), "adaptive_p99_ms": round(p99a, 3),
        "leases_granted": metrics.get("leases_granted"), "load_average": round(os.getloadavg()[0], 2),
    })
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

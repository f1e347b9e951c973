#!/usr/bin/env python
"""How long a 5-profile LocalFabric takes to come up, fabric actors included (issue 4: < 30 s).

Prints the phases (head, fabric actors up, raylets started, every node registered) and, as the
baseline measured in the same run, a bare cluster of the same raylets with no fabric.

    .venv/bin/python scripts/bench_fleet_startup.py [--runs N] [--scheduler] [--no-baseline]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

# Before Ray is imported: token auth on (as Ray 2.60 defaults it), every process on loopback.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

PROFILES = ["gpu-cuda-workstation", "steamdeck-apu", "cpu-only-box", "arm64-board", "edge-relay"]
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 6.0, "monitor_interval_s": 0.25}}


def run_fabric(scheduler: bool) -> dict[str, float]:
    from fabric.testing import LocalFabric

    t0 = time.monotonic()
    with LocalFabric(PROFILES, settings=SETTINGS, scheduler=scheduler, max_slots=2, timeout_s=120) as lf:
        total = time.monotonic() - t0
        assert sorted(r.name for r in lf.handle.nodes()) == sorted(PROFILES)
        timings = dict(lf.timings)
    timings["total_s"] = total
    return timings


def run_bare() -> float:
    from fabric.testing import LocalFabric

    t0 = time.monotonic()
    with LocalFabric(PROFILES, fabric=False, max_slots=2):
        return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--scheduler", action="store_true", help="also start the scheduler/dispatcher actors")
    p.add_argument("--no-baseline", action="store_true", help="skip the bare-cluster baseline")
    args = p.parse_args(argv)
    totals = []
    for i in range(args.runs):
        t = run_fabric(args.scheduler)
        totals.append(t["total_s"])
        print(f"run {i + 1}: head {t['head_s']:.1f}s, fabric actors up {t.get('up_s', 0):.1f}s, "
              f"raylets started {t['nodes_s']:.1f}s, all registered {t['ready_s']:.1f}s, total {t['total_s']:.1f}s")
    best = min(totals)
    print(f"LocalFabric, 5 profiles + fabric actors: best {best:.1f}s, median {statistics.median(totals):.1f}s "
          f"over {len(totals)} run(s); target < 30 s: {'OK' if best < 30 else 'MISSED'}")
    if not args.no_baseline:
        bare = run_bare()
        print(f"baseline, the same 6 raylets without the fabric: {bare:.1f}s; fabric overhead x{best / bare:.2f}")
    return 0 if best < 30 else 1


if __name__ == "__main__":
    sys.exit(main())

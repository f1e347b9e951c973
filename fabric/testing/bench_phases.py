"""Two long phases of ``scripts/bench_control_plane.py``: a soak at one fleet size, and a run past
the wall (twice the largest fleet sustained) that shows how the control plane degrades.

Both drive the benchmark's ``Bench`` (its ``measure``, ``run_size``, ``usage`` and fleet); they
live here to keep the script short. Neither asserts anything: they report.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable

SOAK_FLAT = 0.10
"""A soak is flat when RSS and the SQLite files end within 10 % of where they started."""


def store_bytes(paths: Iterable[Path]) -> int:
    """Bytes of the SQLite files (each with its ``-wal`` and ``-shm``) that exist."""
    total = 0
    for p in paths:
        for f in (p, p.with_name(p.name + "-wal"), p.with_name(p.name + "-shm")):
            try:
                total += os.path.getsize(f)
            except OSError:
                pass
    return total


def soak(bench: Any, seconds: float, paths: Iterable[Path], log: Callable[[str], None], window_s: float = 300.0) -> dict[str, Any]:
    """Keep the fleet the benchmark holds running for ``seconds`` under its churn and placements,
    measured in windows of ``window_s``: RSS per actor and the stores' size at the start and the
    end (after a first window, so start-up is not counted), and whether both stayed flat."""
    paths = list(paths)
    windows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    start_rss = {k: v[1] for k, v in bench.usage().items()}
    start_db = store_bytes(paths)
    while time.monotonic() - t0 < seconds:
        left = seconds - (time.monotonic() - t0)
        bench.args.window = max(10.0, min(window_s, left))
        r = bench.measure(len(bench.alive_ids()))
        rss = {k: v[1] for k, v in bench.usage().items()}
        w = {"at_s": round(time.monotonic() - t0, 1), "rss_mib": round(sum(rss.values()) / 2**20, 1),
             "store_mib": round(store_bytes(paths) / 2**20, 2), "lag_p99_s": r["lag_p99_s"], "tick_p99_ms": r["tick_p99_ms"],
             "placement_p99_ms": r["placement_p99_ms"], "heartbeats_per_s": r["heartbeats_per_s"]}
        windows.append(w)
        log(f"  soak {w['at_s']:>6.0f} s: rss {w['rss_mib']} MiB, store {w['store_mib']} MiB, lag p99 {w['lag_p99_s']} s")
        if len(windows) == 1:  # the first window warms the caches: the soak is judged from its end
            start_rss = rss
            start_db = store_bytes(paths)
    end_rss = {k: v[1] for k, v in bench.usage().items()}
    end_db = store_bytes(paths)
    rss_growth = growth(sum(start_rss.values()), sum(end_rss.values()))
    db_growth = growth(start_db, end_db)
    return {"seconds": round(time.monotonic() - t0, 1), "nodes": len(bench.alive_ids()),
            "rss_mib_start": {k: round(v / 2**20, 1) for k, v in start_rss.items()},
            "rss_mib_end": {k: round(v / 2**20, 1) for k, v in end_rss.items()},
            "store_bytes_start": start_db, "store_bytes_end": end_db,
            "rss_growth": rss_growth, "store_growth": db_growth,
            "flat": rss_growth is not None and db_growth is not None and abs(rss_growth) <= SOAK_FLAT and abs(db_growth) <= SOAK_FLAT,
            "windows": windows}


def growth(start: float, end: float) -> float | None:
    """``end / start - 1``, rounded (None when nothing was there at the start)."""
    return None if start <= 0 else round(end / start - 1.0, 4)


def past_wall(bench: Any, size: int, heartbeat_s: float) -> dict[str, Any]:
    """The fleet grown to ``size`` (twice the largest sustained) and measured: what was taken, what
    the kernel shed (``datagrams_shed``: counted, not lost silently), whether placements were still
    answered and the lag stayed bounded. ``graceful``: placements answered without errors, heartbeats
    still taken, and the lag p99 within three heartbeat intervals (a shed beat delays a node by one)."""
    r = bench.run_size(size)
    lag = r.get("lag_p99_s")
    graceful = (r["placements_per_s"] > 0 and not r["placement_errors"] and r["heartbeats_per_s"] > 0
                and lag is not None and lag <= 3 * heartbeat_s)
    return {"size": size, **{k: r[k] for k in (
        "nodes", "heartbeats_per_s", "heartbeats_expected_per_s", "datagrams_taken", "datagrams_shed", "shed_per_s",
        "lag_p50_s", "lag_p99_s", "tick_p99_ms", "placement_p99_ms", "placements_per_s", "placement_errors", "rss_mib")},
        "graceful": graceful}


__all__ = ["SOAK_FLAT", "growth", "past_wall", "soak", "store_bytes"]

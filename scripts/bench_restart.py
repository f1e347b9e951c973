#!/usr/bin/env python
"""What a scheduler SIGKILL costs a migration in flight, per strategy, measured by the job itself.

For each strategy a ``CounterJob`` (one tick per ``--period-ms`` per instance, each instance to its
own file) is migrated twice on a local fleet of three raylets: once untouched (the baseline), once
with the scheduler SIGKILLed past the saga's point of no return (the source's stop held by
``hold_stop`` for stop_then_start and overlap, a slow ``__fabric_cut__`` for handover). Printed per
strategy and run: the saga's end, the gap (ms nobody wrote), the duplicated ticks (written by two
instances), and for the killed run the scheduler's resume time (from the kill to the saga's
"resumed after a scheduler restart" step) and the job's restarts (a resumed saga counts none).
``--json``: the last line is ``{"strategies": {name: {"baseline": {...}, "killed": {...}}}}``.

    python scripts/bench_restart.py [--period-ms 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

STRATEGIES = ("stop_then_start", "overlap", "handover")
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0, "reprobe_interval_s": 600.0, "flap_toggles": 50},
            "failure": {"min_recovery_interval_s": 0.5}}


def _run(lf, counter, out: Path, strategy: str, period_ms: float, kill: bool) -> dict:
    from fabric.testing.counter_report import analyze

    hold = out / "hold-stop"
    kwargs = {"period_ms": period_ms}
    if kill and strategy == "handover":
        kwargs["cut_delay_s"] = 4.0
    elif kill:
        kwargs["hold_stop"] = str(hold)
    job = counter.remote(str(out / "ticks"), **kwargs)
    job.wait_running(120)
    lf.wait_until(lambda: analyze(str(out / "ticks"), period_ms).ticks >= 10, "first ticks", timeout_s=60)
    if kill and strategy != "handover":
        hold.write_text("held")
    mid = lf.handle.migrate_job(job.job_id, strategy=strategy)
    killed_at = None
    if kill:
        phase = "cutting" if strategy == "handover" else "stopping_source"
        lf.wait_until(lambda: lf.handle.migration(mid).phase == phase, f"the saga in {phase}", timeout_s=60)
        killed_at = lf.kill_scheduler()
        if hold.exists():
            hold.unlink()
    state = lf.wait_until(lambda: (s := lf.handle.migration(mid)).terminal and s, "the saga to end", timeout_s=120)
    time.sleep(0.5)  # the target writes on past the move
    status = lf.handle.job(job.job_id)
    job.stop()
    r = analyze(str(out / "ticks"), period_ms)
    row = {"phase": str(state.phase), "gap_ms": r.gap_ms, "duplicates": r.duplicates, "writers": r.writers,
           "restarts": status.restarts_last_hour}
    if killed_at is not None:
        resumed = next((at for _, at, why in state.history if why == "resumed after a scheduler restart"), None)
        row["resume_ms"] = None if resumed is None else round((resumed - killed_at) * 1000.0, 1)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--period-ms", type=float, default=10.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    from fabric import adaptive
    from fabric.testing import LocalFabric
    from fabric.testing.counter import CounterJob

    counter = adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60)(CounterJob)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp, \
            LocalFabric(["cpu-only-box"] * 3, settings=SETTINGS, max_slots=3, timeout_s=120) as lf:
        for strategy in STRATEGIES:
            results[strategy] = {
                "baseline": _run(lf, counter, Path(tmp) / f"{strategy}-base", strategy, args.period_ms, kill=False),
                "killed": _run(lf, counter, Path(tmp) / f"{strategy}-kill", strategy, args.period_ms, kill=True)}
            for run, row in results[strategy].items():
                extra = f"  resume {row['resume_ms']:>7.1f} ms" if "resume_ms" in row and row["resume_ms"] is not None else ""
                print(f"{strategy:<16} {run:<9} {row['phase']:<8} gap {row['gap_ms']:>8.1f} ms  "
                      f"duplicates {row['duplicates']:>5}  restarts {row['restarts']}{extra}", flush=True)
    if args.json:
        print(json.dumps({"strategies": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A head restart, mid-burst, on a ``HeadFleet``: what the calls and the jobs did.

``head_restart(fleet, jobs, ticks)``: a driver attached to the first worker sends a steady stream
of ``@adaptive.remote`` calls (``chaos_driver load``); a few seconds in, every process of the head
is SIGKILLed, and ``outage_s`` later the same ``fabric start-head`` runs again; the load goes on to
its end. Calls sent during the outage wait, or fail with a typed error (``failures``, by class);
none may be lost. The answer has the chaos JSON keys:

- ``lost``, ``below_floor`` (a call on the head: tier relay), ``calls_run_twice``, ``records_lost``,
  ``calls``, ``completed``, ``refused``, ``failures`` (``fabric.testing.chaos.score``), ``refusals``
  (the refused calls by their error's class);
- ``job_duplicates`` / ``job_gap_ms``: ticks two instances of a job wrote, and the longest run of
  ticks no instance wrote (``fabric.testing.counter_report.analyze``);
- ``recovery_s``: from the kill until the fabric placed again: the first call sent after the kill
  that started and was answered; ``outage_s``: the kill until the restart command returned;
  ``cut_at``: when the kill began (epoch seconds);
- ``same_instances``: ``"k/n"``, the jobs whose Ray actor id and worker pid did not change, with
  ``job_restarts`` (before, after) and ``jobs_running`` after;
- ``recovered``: the restart's own line (``recovered the cluster ... N of N worker nodes came back``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fabric.testing.chaos import read_run_log, score
from fabric.testing.chaos_driver import result_of
from fabric.testing.counter_report import analyze
from fabric.testing.head_fleet import wait_until

__all__ = ["HeadRestart", "RestartableHead", "head_restart", "jobs_report"]

RELAY = "relay"


class RestartableHead(Protocol):
    """What the scenario drives: ``fabric.testing.head_fleet.HeadFleet`` on loopback, or
    ``fabric.testing.chaos_netns_head.NetnsHeadFleet`` on network-namespace hosts."""

    backend: str

    def driver(self, *args: str, timeout_s: float = ...) -> Any: ...

    def spawn_driver(self, *args: str) -> subprocess.Popen[str]: ...

    def kill_head(self) -> list[int]: ...

    def restart_head(self) -> str: ...


@dataclass(frozen=True)
class HeadRestart:
    """The scenario's timings: ``calls`` over ``load_s`` seconds, the kill ``ramp_s`` after the
    first call started, the head down ``outage_s``; the jobs tick every ``period_ms``."""

    calls: int = 150
    load_s: float = 18.0
    ramp_s: float = 3.0
    outage_s: float = 3.0
    period_ms: float = 50.0


def jobs_report(ticks: Path, period_ms: float, since: float, until: float) -> dict[str, Any]:
    """Duplicates and the longest gap of the jobs' ticks (one folder per job under ``ticks``)
    between ``since`` and ``until`` (epoch seconds)."""
    first, last = int(since * 1000 / period_ms), int(until * 1000 / period_ms)
    duplicates, gap_ms, per_job = 0, 0.0, {}
    for folder in sorted(p for p in ticks.iterdir() if p.is_dir()):
        rep = analyze(str(folder), period_ms, first, last)
        duplicates += rep.duplicates
        gap_ms = max(gap_ms, rep.gap_ms)
        per_job[folder.name] = {"ticks": rep.ticks, "writers": rep.writers, "gap_ms": rep.gap_ms, "duplicates": rep.duplicates}
    return {"duplicates": duplicates, "gap_ms": round(gap_ms, 1), "per_job": per_job}


def _serving(ticks: Path) -> bool:
    """Every job wrote a tick in the last second."""
    now = time.time()
    folders = [p for p in ticks.iterdir() if p.is_dir()]
    return bool(folders) and all(now - max((f.stat().st_mtime for f in d.glob("*.ticks")), default=0.0) < 1.0 for d in folders)


def head_restart(fleet: RestartableHead, jobs: list[str], ticks: Path, work: Path, t: HeadRestart = HeadRestart(),
                 name: str = "head_restart") -> dict[str, Any]:
    """Run the scenario (see the module docstring) on ``fleet``, whose ``jobs`` write their ticks
    under ``ticks``; ``work`` holds the run log. The chaos JSON."""
    folder = work / name
    folder.mkdir(parents=True)
    log, monitor, stop = folder / "calls.log", folder / "monitor.jsonl", folder / "stop"
    window_start = time.time()
    load = fleet.spawn_driver("load", str(log), str(t.calls), str(t.load_s), str(monitor), str(stop), "head",
                              "--instances", ",".join(jobs))  # the instances before the first call and after the last
    try:
        wait_until(lambda: load.poll() is not None or read_run_log(log), "the first call of the load", timeout_s=120, every_s=0.1)
        if load.poll() is not None:
            raise RuntimeError(f"chaos driver load exited {load.returncode} before its first call")
        load_began = time.time()
        time.sleep(t.ramp_s)
        cut_at = time.time()
        fleet.kill_head()
        time.sleep(t.outage_s)
        restarted = fleet.restart_head()
        healed_at = time.time()
        time.sleep(max(0.0, load_began + t.load_s + 2.0 - time.time()))
        wait_until(lambda: _serving(ticks), "every job ticking again", timeout_s=90)
    except BaseException as exc:
        stop.touch()
        load.kill()
        out, err = load.communicate(timeout=30)
        raise RuntimeError(f"{name}: {exc}; the load's driver said: {out[-800:]}{err[-2500:]}") from exc
    stop.touch()
    try:
        out, err = load.communicate(timeout=300)
    except subprocess.TimeoutExpired:  # say where it hangs (its threads' stacks), then end it
        os.kill(load.pid, signal.SIGUSR1)
        time.sleep(2.0)
        load.kill()
        out, err = load.communicate(timeout=30)
        stacks = err[err.find("Thread 0x"):][:20000] if "Thread 0x" in err else err[-6000:]
        raise RuntimeError(f"{name}: the load's driver did not end within 300 s of its stop: {out[-800:]}{stacks}")
    result = result_of(out)
    if load.returncode != 0 or result is None:
        raise RuntimeError(f"chaos driver load failed ({load.returncode}): {out[-800:]}{err[-2500:]}")
    before, after = result["instances_before"], result["instances_after"]
    runs = read_run_log(log)
    tiers = result["tiers"]
    outcome = score(name, accepted=result["accepted"], completed=result["completed"], failed=result["failed"],
                    refused=result["refused"], runs=runs, below_floor=lambda r: tiers.get(r.node_id) == RELAY,
                    records_before=set(result["records_before"]), records_after=set(result["records_after"]))
    ticked = jobs_report(ticks, t.period_ms, window_start, time.time() - 1.0)
    sent, done = dict(result["accepted"]), set(result["completed"])
    placed = sorted(r.start for r in runs if sent.get(r.call_id, 0.0) >= cut_at and r.call_id in done)
    same = [j for j in jobs if before.get(j, {}).get("actor") and
            (before[j]["actor"], before[j]["pid"]) == (after.get(j, {}).get("actor"), after.get(j, {}).get("pid"))]
    return {"lost": outcome.lost, "below_floor": outcome.below_floor, "calls_run_twice": outcome.duplicates,
            "job_duplicates": ticked["duplicates"], "job_gap_ms": ticked["gap_ms"], "records_lost": outcome.records_lost,
            "recovery_s": round(placed[0] - cut_at, 2) if placed else None, "outage_s": round(healed_at - cut_at, 2),
            "same_instances": f"{len(same)}/{len(jobs)}", "calls": outcome.calls, "completed": outcome.completed,
            "refused": outcome.refused, "failures": outcome.failures, "refusals": result.get("refusals", {}),
            "cut_at": round(cut_at, 3),
            "placed_during_outage": sum(1 for r in runs if cut_at <= r.start < healed_at),
            "job_restarts": {j: [before.get(j, {}).get("restarts"), after.get(j, {}).get("restarts")] for j in jobs},
            "jobs_running": sum(1 for j in jobs if after.get(j, {}).get("state") == "running"),
            "backend": fleet.backend,
            "recovered": next((line.strip() for line in restarted.splitlines() if "recovered the cluster" in line), None),
            "job_events": [{**e, "at": round(e["at"] - cut_at, 2)} for e in result.get("job_events", [])],
            "instances": {"before": before, "after": after}}


def summary(doc: dict[str, Any]) -> str:
    """One line of the figures (no events, no instances)."""
    return json.dumps({k: v for k, v in doc.items() if k not in ("job_events", "instances")})

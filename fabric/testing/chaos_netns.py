"""Chaos on real hosts: the scenarios of ``scripts/chaos.py --hosts netns``.

A fleet of network namespaces (``fabric.testing.netns``): a head (tier relay, so no call or job
lands there) and two nodes joined with ``fabric join --supervise``, token auth on. Two
``CounterJob`` jobs count their own output (a tick every 100 ms, one file per instance); during
each scenario a driver in the head's namespace (``fabric.testing.chaos_driver``) sends a steady
stream of ``@adaptive.remote`` calls and writes the registry's view of the victim four times a
second, while this process cuts links and measures Ray's view over the bridge. Nothing in the
fabric is told.

The scenarios (their windows are measured on each run, see ``Timings``):

- ``link_cut_short``: the node of a job cut for less than ``offline_after_s``;
- ``link_cut_medium``: cut past ``offline_after_s`` but short of Ray's death detection;
- ``link_cut_long``: cut past Ray's death detection, then healed: the node rejoins by itself
  (its supervisor starts a new raylet);
- ``link_flap``: three cuts in a row past ``offline_after_s``: flap damping holds the node off;
- ``head_cut``: the head cut from every node;
- ``one_way``: the packets sent to the node dropped, those it sends let through;
- ``node_kill``: every process of a job's node killed (its supervisor too), the node joined again
  by hand ``medium_s`` later;
- ``scheduler_sigkill``: the scheduler actor's process SIGKILLed on the head.

Per scenario: ``lost``, ``below_floor``, ``calls_run_twice`` (allowed: calls are at least once),
``job_duplicates`` (ticks two instances wrote: must be 0), ``job_gap_ms`` (the longest time no
instance of a job wrote), ``records_lost``, ``recovery_s`` (the cut until every job serves again;
0 when none stopped), ``rejoin_s`` (the heal until the node is active in the fleet again), and
``windows``: the cut's length and the configured offline, lease and Ray times beside what was
seen (``offline_seen_s``, ``ray_dead_seen_s``: from the cut, None when it did not happen); and
``job_events``: the jobs' events of the scenario, their times from the cut (what explains a gap);
``victim_active_records``: the active registry records of the victim's name at the end (a node that
rejoined under a new Ray id is one active node).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from fabric.testing.chaos import read_run_log, score
from fabric.testing.chaos_driver import result_of
from fabric.testing.counter_report import analyze
from fabric.testing.netns import NetnsFleet, one_way_problem

__all__ = ["FULL", "NETNS_SCENARIOS", "SUITE", "NetnsChaos", "Timings"]

NETNS_SCENARIOS = ("link_cut_short", "link_cut_medium", "link_cut_long", "head_cut", "one_way", "link_flap", "node_kill",
                   "scheduler_sigkill")
"""In the order they run (the flaps last: the hold they earn would slow what comes after)."""
PERIOD_MS = 100.0
RELAY = "relay"


@dataclass(frozen=True)
class Timings:
    """A run's settings and cut lengths. The windows' order: ``short_s < offline_after_s <
    medium_s < ray_death_s < long_s``; ``ray_health`` None is Ray's own health checks."""

    heartbeat_s: float
    offline_after_s: float
    lease_ttl_s: float
    renew_every_s: float
    margin_s: float
    ray_health: dict[str, int] | None
    ray_death_s: float
    """The longest Ray may take to declare a cut node dead with ``ray_health`` (threshold x (period + timeout))."""
    short_s: float
    medium_s: float
    long_s: float
    flap_cut_s: float
    flap_gap_s: float
    head_cut_s: float
    one_way_s: float
    calls: int
    load_s: float
    settle_s: float = 2.0

    def settings(self) -> dict[str, Any]:
        return {"health": {"heartbeat_interval_s": self.heartbeat_s, "offline_after_s": self.offline_after_s,
                           "monitor_interval_s": 0.25, "join_timeout_s": 60.0, "reprobe_interval_s": 600.0,
                           "drain_grace_s": 600.0, "flap_toggles": 3, "flap_window_s": 120.0, "flap_hold_s": 20.0},
                "failure": {"min_recovery_interval_s": 0.5},
                "fence": {"lease_ttl_s": self.lease_ttl_s, "renew_every_s": self.renew_every_s, "margin_s": self.margin_s}}


FULL = Timings(heartbeat_s=1.0, offline_after_s=4.0, lease_ttl_s=20.0, renew_every_s=4.0, margin_s=2.0, ray_health=None,
               ray_death_s=65.0, short_s=2.0, medium_s=10.0, long_s=75.0, flap_cut_s=5.0, flap_gap_s=6.0, head_cut_s=10.0,
               one_way_s=10.0, calls=200, load_s=25.0)
"""``scripts/chaos.py --hosts netns``: Ray's own health checks (a check every 3 s with a 10 s timeout,
dead after 5 failures: up to 65 s) and the fabric's default lease (20 s); the offline time short
(4 s) so that the medium window exists."""
SUITE = Timings(heartbeat_s=0.5, offline_after_s=2.0, lease_ttl_s=4.0, renew_every_s=1.0, margin_s=0.5,
                ray_health={"health_check_period_ms": 1000, "health_check_failure_threshold": 5,
                            "health_check_timeout_ms": 1000},
                ray_death_s=10.0, short_s=1.0, medium_s=4.0, long_s=14.0, flap_cut_s=3.0, flap_gap_s=3.0, head_cut_s=2.5,
                one_way_s=5.0, calls=30, load_s=6.0, settle_s=1.0)
"""The suite's profile: Ray's checks scaled down, the windows in the same order."""


class NetnsChaos:
    """The fleet, its jobs and the scenarios (a context manager: ``with NetnsChaos(SUITE) as c``)."""

    def __init__(self, timings: Timings, *, auth: bool = True, say: Callable[[str], None] = print) -> None:
        self.t = timings
        self.auth = auth
        self.say = say
        self.work = Path(tempfile.mkdtemp(prefix="fabric-chaos-netns-"))
        self.work.chmod(0o777)
        health = timings.ray_health or {}
        self.fleet = NetnsFleet(auth=auth, ray_defaults=timings.ray_health is None, **health)
        self.jobs: list[str] = []
        self.where: dict[str, str | None] = {}
        """Job id -> the Ray node id it ran on when the last scenario's load ended (empty: ask)."""

    # -- the fleet ---------------------------------------------------------------------------------------
    def __enter__(self) -> "NetnsChaos":
        f = self.fleet.open()
        try:
            f.start_head("head", profile="edge-relay")
            f.join("n1", profile="cpu-only-box", slots=4, supervise=True)
            f.join("n2", profile="cpu-only-box", slots=4, supervise=True)
            f.wait_nodes(3, timeout_s=180)
            config = self.work / "fabric.json"
            config.write_text(json.dumps(self.t.settings()))
            up = f.run(None, ["fabric", "up", "--address", f.address, "--config", str(config), "--timeout", "180"],
                       timeout_s=300)
            if up.returncode != 0:
                raise RuntimeError(f"fabric up failed: {up.stdout[-1500:]}{up.stderr[-1500:]}")
            self.jobs = self.driver("jobs", str(self.work / "ticks"), "2", str(PERIOD_MS))["jobs"]
            self.say(f"fleet up: head {f.head.address if f.head else '?'}, n1, n2; jobs {', '.join(self.jobs)}")
        except BaseException:
            self.fleet.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.fleet.close()
        finally:
            import shutil

            shutil.rmtree(self.work, ignore_errors=True)

    def driver(self, *args: str, timeout_s: float = 300.0) -> Any:
        proc = self.fleet.run(None, [sys.executable, "-m", "fabric.testing.chaos_driver", *args], timeout_s=timeout_s)
        answer = result_of(proc.stdout)
        if proc.returncode != 0 or answer is None:
            raise RuntimeError(f"chaos driver {args[0]} failed ({proc.returncode}): {proc.stdout[-800:]}{proc.stderr[-2000:]}")
        return answer

    def _node_ids(self) -> dict[str, str]:
        """Host name -> the Ray id of its ALIVE node."""
        by_ip = {h.address: name for name, h in self.fleet.hosts.items()}
        return {by_ip[str(r["ip"])]: str(r["node_id"]) for r in self.fleet.nodes(timeout_s=10)
                if r.get("state") == "ALIVE" and str(r.get("ip")) in by_ip}

    def _victim(self) -> str:
        """The host running the first job (a node, never the head)."""
        where = self.where or self.driver("where", *self.jobs)
        ids = self._node_ids()
        for node_id in where.values():
            host = next((h for h, n in ids.items() if n == node_id), None)
            if host and host != "head":
                return host
        return "n1"

    # -- one scenario ------------------------------------------------------------------------------------
    def scenario(self, name: str) -> dict[str, Any]:
        if name not in NETNS_SCENARIOS:
            raise ValueError(f"unknown scenario {name!r}: one of {', '.join(NETNS_SCENARIOS)}")
        if name == "one_way" and one_way_problem() is not None:
            raise RuntimeError(f"one_way needs nft or iptables: {one_way_problem()}")
        victim = "head" if name in ("head_cut", "scheduler_sigkill") else self._victim()
        ids = self._node_ids()
        folder = self.work / name
        folder.mkdir()
        folder.chmod(0o777)
        log, monitor, stop = folder / "calls.log", folder / "monitor.jsonl", folder / "stop"
        window_start = time.time()
        load = subprocess.Popen(["ip", "netns", "exec", self.fleet.hosts["head"].namespace, sys.executable, "-m",
                                 "fabric.testing.chaos_driver", "load", str(log), str(self.t.calls), str(self.t.load_s),
                                 str(monitor), str(stop), victim, "--where", ",".join(self.jobs)],
                                env=self.fleet.driver_env(), cwd=str(self.work),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ray_seen: list[tuple[float, str]] = []
        watching = threading.Event()
        watcher = threading.Thread(target=self._watch_ray, args=(ids.get(victim), ray_seen, watching), daemon=True)
        try:
            time.sleep(self.t.settle_s + 2.0)  # the driver attaches and the load ramps up
            watcher.start()
            cut_at, healed_at, cut_s, held = self._fault(name, victim)
            rejoin_s = self._rejoin(victim, ids.get(victim), healed_at, monitor) if victim != "head" else None
            time.sleep(max(0.0, window_start + self.t.load_s + 4.0 - time.time()))
            self._wait_jobs_serving(timeout_s=90.0)
        finally:
            watching.set()
            stop.touch()
        out, err = load.communicate(timeout=300)
        result = result_of(out)
        if load.returncode != 0 or result is None:
            raise RuntimeError(f"chaos driver load failed ({load.returncode}): {out[-800:]}{err[-2000:]}")
        self.where = result.get("where") or {}
        seen = [json.loads(x) for x in monitor.read_text().splitlines() if x.strip()] if monitor.exists() else []
        tiers = result["tiers"]
        outcome = score(name, accepted=result["accepted"], completed=result["completed"], failed=result["failed"],
                        refused=result["refused"], runs=read_run_log(log),
                        below_floor=lambda r: tiers.get(r.node_id) == RELAY,
                        records_before=set(result["records_before"]), records_after=set(result["records_after"]))
        jobs = self._jobs_report(window_start, cut_at)
        offline = next((s["t"] - cut_at for s in seen if s.get("t", 0) >= cut_at and s.get("status") == "offline"), None)
        dead = next((t - cut_at for t, state in ray_seen if t >= cut_at and state == "dead"), None)
        doc = {"lost": outcome.lost, "below_floor": outcome.below_floor, "calls_run_twice": outcome.duplicates,
               "job_duplicates": jobs["duplicates"], "job_gap_ms": jobs["gap_ms"], "records_lost": outcome.records_lost,
               "recovery_s": jobs["recovery_s"], "rejoin_s": None if rejoin_s is None else round(rejoin_s, 2),
               "calls": outcome.calls, "completed": outcome.completed, "refused": outcome.refused, "victim": victim,
               "victim_active_records": result.get("active_named_victim"),
               "windows": {"cut_s": round(cut_s, 2), "offline_after_s": self.t.offline_after_s,
                           "lease_ttl_s": self.t.lease_ttl_s, "ray_death_s": self.t.ray_death_s,
                           "offline_seen_s": None if offline is None else round(offline, 2),
                           "ray_dead_seen_s": None if dead is None else round(dead, 2)},
               "failures": outcome.failures,
               "job_events": [{**e, "at": round(e["at"] - cut_at, 2)} for e in result.get("job_events", [])]}
        if name == "link_flap":
            doc["held"] = held
        self.say(f"{name}: " + json.dumps({k: v for k, v in doc.items() if k not in ("failures", "job_events")}))
        return doc

    def _fault(self, name: str, victim: str) -> tuple[float, float, float, bool]:
        """Cut ``victim`` as ``name`` says; (cut at, healed at, total seconds cut, flap-held)."""
        f, t = self.fleet, self.t
        length = {"link_cut_short": t.short_s, "link_cut_medium": t.medium_s, "link_cut_long": t.long_s,
                  "head_cut": t.head_cut_s, "one_way": t.one_way_s}.get(name)
        cut_at = time.time()
        if name == "node_kill":
            f.stop(victim)
            time.sleep(t.medium_s)
            healed = time.time()
            f.join(victim, profile="cpu-only-box", slots=4, supervise=True)
            return cut_at, healed, healed - cut_at, False
        if name == "scheduler_sigkill":
            pid = int(self.driver("scheduler-pid")["pid"])
            cut_at = time.time()
            os.kill(pid, signal.SIGKILL)
            return cut_at, cut_at, 0.0, False
        if name == "link_flap":
            total = 0.0
            for i in range(3):
                start = time.time()
                f.cut(victim)
                time.sleep(t.flap_cut_s)
                f.heal(victim)
                total += time.time() - start
                if i < 2:
                    time.sleep(t.flap_gap_s)
            held = self._held(victim, timeout_s=t.flap_gap_s + 10.0)
            return cut_at, time.time(), total, held
        assert length is not None
        if name == "one_way":
            f.cut_one_way(victim, "in")
        else:
            f.cut(victim)
        time.sleep(length)
        f.heal(victim)
        healed = time.time()
        return cut_at, healed, healed - cut_at, False

    def _held(self, victim: str, timeout_s: float) -> bool:
        monitor = sorted(self.work.glob("link_flap/monitor.jsonl"))
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            for path in monitor:
                if any(json.loads(x).get("flap_held") for x in path.read_text().splitlines() if x.strip()):
                    return True
            time.sleep(0.5)
        return False

    def _watch_ray(self, node_id: str | None, seen: list[tuple[float, str]], done: threading.Event) -> None:
        """Ray's view of the victim's node, four times a second, asked over the bridge."""
        from fabric.rayio.gcs_nodes import node_state

        if node_id is None or self.fleet.head is None:
            return
        token = self.fleet.token_file.read_text().strip() if self.fleet.token_file else None
        while not done.is_set():
            seen.append((time.time(), node_state(self.fleet.address, token, node_id, timeout_s=1.0)))
            done.wait(0.25)

    def _rejoin(self, victim: str, old_id: str | None, healed_at: float, monitor: Path, timeout_s: float = 120.0) -> float | None:
        """Seconds from the heal until the victim's node is active in the fleet again (its old id or a
        new one); None when not within ``timeout_s``."""
        deadline = healed_at + timeout_s
        while time.time() < deadline:
            lines = monitor.read_text().splitlines() if monitor.exists() else []
            for line in reversed(lines):
                s = json.loads(line) if line.strip() else {}
                if s.get("t", 0) >= healed_at and s.get("status") == "active" and not s.get("flap_held"):
                    return s["t"] - healed_at
                if s.get("t", 0) < healed_at:
                    break
            time.sleep(0.5)
        return None

    def _wait_jobs_serving(self, timeout_s: float) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            fresh = []
            for folder in sorted((self.work / "ticks").glob("job-*")):
                newest = max((p.stat().st_mtime for p in folder.glob("*.ticks")), default=0.0)
                fresh.append(time.time() - newest < 1.0)
            if fresh and all(fresh):
                return
            time.sleep(0.5)

    def _jobs_report(self, start: float, cut_at: float) -> dict[str, Any]:
        """Duplicates, the longest gap and the recovery of the jobs' ticks since ``start``."""
        first = int(start * 1000 / PERIOD_MS)
        last = int(time.time() * 1000 / PERIOD_MS) - 10  # the last second: writers may not have flushed yet
        duplicates, gap_ms, recovery = 0, 0.0, 0.0
        for folder in sorted((self.work / "ticks").glob("job-*")):
            rep = analyze(str(folder), PERIOD_MS, first, last)
            duplicates += rep.duplicates
            gap_ms = max(gap_ms, rep.gap_ms)
            for gap_start, length in rep.gaps:
                end_s = (gap_start + length) * PERIOD_MS / 1000.0
                if end_s >= cut_at:
                    recovery = max(recovery, end_s - cut_at)
        return {"duplicates": duplicates, "gap_ms": round(gap_ms, 1), "recovery_s": round(recovery, 2)}

    def run(self, scenarios: list[str]) -> dict[str, Any]:
        out = {}
        for name in scenarios:
            out[name] = self.scenario(name)
        return {"hosts": "netns", "timings": asdict(self.t), "scenarios": out}

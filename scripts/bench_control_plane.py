#!/usr/bin/env python
"""Benchmark the control plane at fleet scale: the real registry, health monitor and scheduler
actors on a local Ray, fed by thousands of simulated nodes (issue 22).

What runs is production code: ``RegistryActor``, ``HealthMonitorActor`` and ``SchedulerActor``,
the classes ``fabric.up()`` starts, with the options it starts them with (on the head, no CPU).
What is simulated is the fleet: its rows of Ray's node table (``fabric.testing.sim_fleet``:
``SimRayAdapter``, the actors' own Ray seam with the simulated rows beside Ray's) and its probes.
``--procs`` simulator processes (at least two), each its own Ray driver, make for every node the
calls its probe actor would: ``register`` once, ``heartbeat`` with a load every
``heartbeat_interval_s`` (each node at its own phase), ``report`` every ``reprobe_interval_s``;
payloads are the bundled probe recordings probed as on a real node. No call exists only for the
benchmark.

Each fleet size (``--sizes``, default 1,000, 5,000, 10,000; the fleet grows from one size to the
next) is measured over ``--window`` seconds, while:

- churn: 1 % of the fleet a minute, split evenly over join (a new node: a row, then its probe
  registers), leave (its row dies, its probe stops), degrade (a report with a degradation; the next
  re-probe is clean again) and flap (its probe goes quiet past ``offline_after_s``, then beats again);
- placement: ``select_worker`` at a fixed ``--rate`` (default 200/s), each timed from the call to
  its answer;
- lag: ``--markers`` nodes at a time carry a utilisation step in their next regular heartbeat; the
  lag is from that heartbeat's sending to the scheduler's fleet view showing the new load
  (``fleet_node``, polled every 10 ms).

Heartbeats go the way ``--transport`` says (``health.heartbeat_transport``; default here ``udp``:
signed datagrams, every tenth beat a Ray call, as a probe sends them; ``ray``: every beat a Ray
call).

Per size it reports: ``heartbeats_per_s`` (taken by the registry: Ray calls answered and datagrams
taken), lag p50/p99, the
scheduler's tick p50/p99 (``loop_stats``: its own loop, timed), placement p50/p99, RSS per actor and
in all, CPU seconds per actor over the window (by pid; the simulator's own apart), and
``cpu_s_per_node_hour``: the three actors' CPU seconds per node per hour, and
``registry_cpu_us_per_heartbeat``. Before the sizes, ``ray_floor`` measures what one Ray call of a
heartbeat's shape costs an actor that does nothing with it (the simulator processes call it at
1,000/s for ``--floor-s``): the floor under a heartbeat that is one Ray call. A size is sustained when
its lag p99 stays under one heartbeat interval. With ``--search`` (and time left in ``--budget``)
the fleet then grows past the largest size by doubling, then bisects, for ``largest_sustained``.
Each size also says what the registry's kernel socket shed (``datagrams_shed``): past its wall the
registry sheds heartbeats there, counted, instead of collapsing. ``--soak S`` then keeps the largest
size running S seconds (``soak``: RSS and store size at its start and end, ``flat`` within 10 %);
``--past-wall`` then runs at twice ``largest_sustained`` (``past_wall``: shed, lag, placements,
``graceful``).

Usage: scripts/bench_control_plane.py [--sizes 1000,5000,10000] [--window 60] [--heartbeat 5] [--settle 10]
       [--procs 2] [--rate 200] [--search] [--budget 1500] [--floor-s 10] [--soak S] [--past-wall] [--json]
With ``--json`` the last line is ``{"sizes": {"1000": {...}, ...}, "largest_sustained": N,
"ray_floor": {...}, ...}``.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabric.testing.sim_probes import sim_process  # noqa: E402
from fabric.testing import bench_phases as phases  # noqa: E402

SETTLE_S = 10.0
"""After a fleet grows: let registrations and the first heartbeats settle before measuring (``--settle``)."""


def log(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


# -- the driver -------------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        import ray

        from fabric.core.names import NAMESPACE
        from fabric.core.settings import FabricSettings
        from fabric.testing.sim_fleet import SimNodeTable

        self.args, self.folder = args, folder
        self.settings = FabricSettings.load({
            "health": {"heartbeat_interval_s": args.heartbeat, "offline_after_s": 3 * args.heartbeat,
                       "reprobe_interval_s": args.reprobe, "heartbeat_transport": args.transport},
            "store": {"url": f"sqlite:///{folder / 'store'}"},
            "api": {"enabled": False},
        })
        self.table_path = folder / "sim-nodes.pickle"
        self.table = SimNodeTable(self.table_path)
        self.rows: dict[str, Any] = {}
        self.table.write({})
        # its own Ray, always: never one that another process left running on this machine
        ray.init(address="local", num_cpus=2, namespace=NAMESPACE, include_dashboard=False,
                 logging_level="ERROR", log_to_driver=False)
        self.address = ray.get_runtime_context().gcs_address
        self.owner: dict[str, int] = {}
        self.next_index = 0
        self.procs: list[Any] = []
        self.commands: list[Any] = []
        self.out: Any = None
        self.lock = threading.Lock()
        self.dirty = False

    # -- bring-up -----------------------------------------------------------------------------------
    def start_actors(self) -> None:
        import ray

        from actors.fleet_feed import FleetFeed
        from actors.health import HealthMonitorActor
        from actors.registry import RegistryActor
        from actors.scheduler import SchedulerActor
        from fabric.core.names import HEAD_RESOURCE, HEALTH, NAMESPACE, REGISTRY, SCHEDULER, SETTINGS_KEY
        from fabric.rayio.scheduler_client import SchedulerClient
        from fabric.store.paths import configured_store_paths
        from fabric.testing.sim_fleet import SimRayAdapter

        opts = dict(namespace=NAMESPACE, num_cpus=0, resources={HEAD_RESOURCE: 0.001}, max_restarts=-1, max_task_retries=-1)
        as_dict = self.settings.model_dump(mode="json")
        paths = self.paths = configured_store_paths(self.settings)
        adapter = SimRayAdapter(self.table_path)
        self.registry = RegistryActor.options(name=REGISTRY, **opts).remote(str(paths.nodes), adapter)
        ray.get(self.registry.ping.remote(), timeout=120)
        ray.get(self.registry.put_state.remote(SETTINGS_KEY, as_dict))  # the settings in force, as fabric.up() keeps them
        self.health = HealthMonitorActor.options(name=HEALTH, **opts).remote(as_dict, adapter)
        ray.get(self.health.ready.remote(), timeout=120)
        feed = FleetFeed(self.settings, SimRayAdapter(self.table_path))
        self.sched_handle = SchedulerActor.options(name=SCHEDULER, **opts).remote(as_dict, feed=feed)
        self.sched = SchedulerClient(self.sched_handle, lambda ref, timeout: ray.get(ref, timeout=timeout or 60))
        self.sched.ping()
        self.pids = {"registry": ray.get(self.registry.ping.remote())["pid"],
                     "health": ray.get(self.health.status.remote())["pid"], "scheduler": self.sched.pid()}
        log(f"actors up: {self.pids}")

    def start_sims(self) -> None:
        ctx = mp.get_context("spawn")
        self.out = ctx.Queue()
        for _ in range(self.args.procs):
            q = ctx.Queue()
            p = ctx.Process(target=sim_process, args=(self.address, self.args.heartbeat, self.args.reprobe, q, self.out),
                            daemon=True)
            p.start()
            self.procs.append(p)
            self.commands.append(q)
        ready = 0
        while ready < len(self.procs):
            msg = self.out.get(timeout=120)
            ready += msg[0] == "ready"
        self.listener = threading.Thread(target=self._listen, daemon=True)
        self.stepped: dict[str, tuple[float, float]] = {}
        self.stats_in: list[tuple] = []
        self.listener.start()

    def _listen(self) -> None:
        while True:
            try:
                msg = self.out.get()
            except (EOFError, OSError):
                return
            if msg[0] == "stepped":
                with self.lock:
                    self.stepped[msg[1]] = (msg[2], msg[3])
            elif msg[0] in ("stats", "floor-done"):
                with self.lock:
                    self.stats_in.append(msg)

    # -- the fleet ----------------------------------------------------------------------------------
    def grow(self, count: int) -> None:
        from fabric.testing.sim_fleet import fleet_payloads

        made = fleet_payloads(count, start=self.next_index)
        self.next_index += count
        per: list[list[tuple[str, dict]]] = [[] for _ in self.procs]
        with self.lock:
            for node_id, _name, _profile, caps, row in made:
                self.rows[node_id] = row
                k = hash(node_id) % len(self.procs)
                self.owner[node_id] = k
                per[k].append((node_id, caps))
            self.table.write(self.rows)
        for k, nodes in enumerate(per):
            for i in range(0, len(nodes), 500):
                self.commands[k].put(("add", nodes[i:i + 500]))

    def leave(self, node_id: str) -> None:
        from dataclasses import replace

        self.commands[self.owner[node_id]].put(("leave", node_id))
        with self.lock:
            self.rows[node_id] = replace(self.rows[node_id], alive=False)
            self.dirty = True

    def alive_ids(self) -> list[str]:
        return [n for n, r in self.rows.items() if r.alive]

    def flush_table(self) -> None:
        with self.lock:
            if self.dirty:
                self.table.write(self.rows)
                self.dirty = False

    def wait_registered(self, want: int, timeout_s: float) -> int:
        """Until the scheduler's fleet view holds ``want`` nodes (or the time is up): how many it holds."""
        t_end = time.monotonic() + timeout_s
        n = 0
        while time.monotonic() < t_end:
            n = self.sched.loop_stats()["fleet"]
            if n >= want:
                break
            time.sleep(1.0)
        return n

    # -- one measured window ------------------------------------------------------------------------
    def churn(self, stop: threading.Event, counts: dict[str, int]) -> None:
        """1 % of the fleet a minute, evenly over join, leave, degrade and flap."""
        rnd = random.Random(7)
        kinds = ["join", "leave", "degrade", "flap"]
        i = 0
        while not stop.is_set():
            alive = self.alive_ids()
            per_s = 0.01 * len(alive) / 60.0
            if stop.wait(1.0 / max(per_s, 1e-3)):
                break
            kind = kinds[i % 4]
            i += 1
            counts[kind] += 1
            if kind == "join":
                self.grow(1)
            elif kind == "leave":
                self.leave(rnd.choice(alive))
                self.flush_table()
            elif kind == "degrade":
                node_id = rnd.choice(alive)
                self.commands[self.owner[node_id]].put(("degrade", node_id))
            else:
                node_id = rnd.choice(alive)
                self.commands[self.owner[node_id]].put(("flap", node_id, 3.5 * self.args.heartbeat))

    def placements(self, stop: threading.Event, latencies: list[float], errors: list[str]) -> None:
        from fabric.core.placement import Requirement

        reqs = [Requirement(min_tier="cpu_ffmpeg"), Requirement(min_tier="gpu_cuda", fallback=True),
                Requirement(min_tier="gpu_vaapi", fallback=True), Requirement(min_tier="gpu_apu", fallback=True)]
        period = 1.0 / self.args.rate

        async def one(req: Any) -> None:
            t0 = time.perf_counter()
            try:
                await self.sched_handle.select_worker.remote(req)
                latencies.append((time.perf_counter() - t0) * 1e3)
            except Exception as exc:
                if len(errors) < 5:
                    errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")

        async def run() -> None:
            t_next, k, pending = time.perf_counter(), 0, set()
            while not stop.is_set():
                t_next += period
                task = asyncio.ensure_future(one(reqs[k % len(reqs)]))
                pending.add(task)
                task.add_done_callback(pending.discard)
                k += 1
                await asyncio.sleep(max(0.0, t_next - time.perf_counter()))
            if pending:
                await asyncio.wait(pending, timeout=30)

        asyncio.run(run())

    def lags(self, stop: threading.Event, lags: list[float], missed: list[str]) -> None:
        """``--markers`` nodes at a time carry a load step; each is timed until the scheduler shows it."""
        rnd = random.Random(11)
        watching: dict[str, float] = {}
        asked: dict[str, float] = {}
        while not stop.is_set():
            now = time.monotonic()
            while len(watching) + len(asked) < self.args.markers:
                alive = self.alive_ids()
                node_id = rnd.choice(alive)
                if node_id in watching or node_id in asked:
                    continue
                value = rnd.choice([3.0, 97.0]) + rnd.uniform(0, 1)
                self.commands[self.owner[node_id]].put(("step", node_id, value))
                asked[node_id] = now
            with self.lock:
                for node_id in list(asked):
                    got = self.stepped.pop(node_id, None)
                    if got is not None:
                        watching[node_id] = got[1]
                        asked[node_id] = -1
                        del asked[node_id]
                        self._want = getattr(self, "_want", {})
                        self._want[node_id] = got[0] / 100.0
                    elif now - asked[node_id] > 4 * self.args.heartbeat:
                        missed.append(node_id)  # its heartbeat never went out (left, flapping)
                        del asked[node_id]
            for node_id, sent in list(watching.items()):
                rec = self.sched.fleet_node(node_id)
                if rec is not None and abs(rec.utilization - self._want[node_id]) < 0.005:
                    lags.append(time.time() - sent)
                    del watching[node_id]
                elif time.time() - sent > 10 * self.args.heartbeat:
                    missed.append(node_id)
                    del watching[node_id]
            stop.wait(0.01)

    def channel_counts(self) -> dict[str, Any]:
        import ray

        return ray.get(self.registry.ping.remote(), timeout=60).get("heartbeat_channel") or {}

    def usage(self) -> dict[str, tuple[float, int]]:
        import psutil

        out = {}
        for name, pid in self.pids.items():
            try:
                p = psutil.Process(pid)
                t = p.cpu_times()
                out[name] = (t.user + t.system, p.memory_info().rss)
            except psutil.Error:
                out[name] = (0.0, 0)
        return out

    def sim_stats(self, command: tuple = ("stats",), timeout_s: float = 30.0) -> list[tuple]:
        with self.lock:
            self.stats_in.clear()
        for q in self.commands:
            q.put(command)
        t_end = time.monotonic() + timeout_s
        while time.monotonic() < t_end:
            with self.lock:
                if len(self.stats_in) >= len(self.commands):
                    return list(self.stats_in)
            time.sleep(0.05)
        raise RuntimeError("a simulator process did not answer")

    def ray_floor(self, rate: float = 1000.0, seconds: float = 10.0) -> dict[str, float]:
        """What one call costs the actor that takes it, in Ray alone: ``rate`` calls a second of a
        heartbeat's shape from the simulator processes to an async actor that does nothing (started
        like the registry: on the head, no CPU), its CPU by pid. The floor under any heartbeat path
        that is one Ray call a beat."""
        import psutil
        import ray

        from fabric.core.names import NAMESPACE

        @ray.remote(num_cpus=0)
        class Floor:
            async def heartbeat(self, node_id: str, utilization: dict) -> float:
                return time.time()

            async def pid(self) -> int:
                return os.getpid()

        actor = Floor.options(name="bench.floor", namespace=NAMESPACE).remote()
        proc = psutil.Process(ray.get(actor.pid.remote()))
        c0 = sum(proc.cpu_times()[:2])
        t0 = time.monotonic()
        done = self.sim_stats(("floor", "bench.floor", rate / len(self.commands), seconds), timeout_s=seconds + 120)
        elapsed = time.monotonic() - t0
        calls = sum(m[2] for m in done)
        cpu_us = (sum(proc.cpu_times()[:2]) - c0) / max(1, calls) * 1e6
        ray.kill(actor)
        out = {"calls": calls, "calls_per_s": round(calls / elapsed, 1), "actor_cpu_us_per_call": round(cpu_us, 1),
               "max_calls_per_s_per_core": round(1e6 / cpu_us) if cpu_us else None}
        log(f"Ray's floor: {out['actor_cpu_us_per_call']} µs of the receiving actor's CPU a call "
            f"(at most {out['max_calls_per_s_per_core']} calls/s on a whole core)")
        return out

    def measure(self, size: int) -> dict[str, Any]:
        window = self.args.window
        counts = {"join": 0, "leave": 0, "degrade": 0, "flap": 0}
        lat: list[float] = []
        lag: list[float] = []
        missed: list[str] = []
        errors: list[str] = []
        before_sim = {s[1]: s for s in self.sim_stats()}
        before_channel = self.channel_counts()
        before = self.usage()
        self.sched.loop_stats(reset=True)
        stop = threading.Event()
        threads = [threading.Thread(target=self.churn, args=(stop, counts), daemon=True),
                   threading.Thread(target=self.placements, args=(stop, lat, errors), daemon=True),
                   threading.Thread(target=self.lags, args=(stop, lag, missed), daemon=True)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        while time.monotonic() - t0 < window:
            time.sleep(min(5.0, window - (time.monotonic() - t0)) if window > time.monotonic() - t0 else 0)
            self.flush_table()
        stop.set()
        for t in threads:
            t.join(timeout=60)
        elapsed = time.monotonic() - t0
        after = self.usage()
        after_channel = self.channel_counts()
        after_sim = {s[1]: s for s in self.sim_stats()}
        loop = self.sched.loop_stats()
        acked = sum(after_sim[p][2]["acked"] - before_sim[p][2]["acked"] for p in after_sim)
        taken = after_channel.get("taken", 0) - before_channel.get("taken", 0)  # datagrams the registry took
        refused = {k: after_channel[k] - before_channel.get(k, 0) for k in after_channel
                   if k not in ("taken", "received", "address", "last_refusal", "shed", "rcvbuf")
                   and after_channel[k] - before_channel.get(k, 0)}
        shed = (after_channel.get("shed") or 0) - (before_channel.get("shed") or 0)  # dropped by the kernel, unread
        acked += taken
        late = sum(after_sim[p][2]["late"] - before_sim[p][2]["late"] for p in after_sim)
        failed = sum(after_sim[p][2]["failed"] - before_sim[p][2]["failed"] for p in after_sim)
        sim_cpu = sum(after_sim[p][4] - before_sim[p][4] for p in after_sim)
        sim_errors = [e for s in after_sim.values() for e in s[3]][:5]
        cpu = {k: round(after[k][0] - before[k][0], 2) for k in self.pids}
        rss = {k: round(after[k][1] / 2**20, 1) for k in self.pids}
        nodes = len(self.alive_ids())
        cp_cpu = sum(cpu.values())
        lag_p99 = pct(lag, 0.99)
        r = {
            "nodes": nodes, "fleet_in_scheduler": loop["fleet"], "window_s": round(elapsed, 1),
            "heartbeats_per_s": round(acked / elapsed, 1), "heartbeats_expected_per_s": round(nodes / self.args.heartbeat, 1),
            "heartbeats_late": late, "calls_failed": failed, "datagrams_taken": taken, "datagrams_refused": refused,
            "datagrams_shed": shed, "shed_per_s": round(shed / elapsed, 1),
            "lag_p50_s": _r(pct(lag, 0.5)), "lag_p99_s": _r(lag_p99), "lag_samples": len(lag), "lag_missed": len(missed),
            "tick_p50_ms": loop["tick_p50_ms"], "tick_p99_ms": loop["tick_p99_ms"], "tick_max_ms": loop["tick_max_ms"],
            "ticks": loop["window"],
            "placement_p50_ms": _r(pct(lat, 0.5)), "placement_p99_ms": _r(pct(lat, 0.99)), "placements": len(lat),
            "placements_per_s": round(len(lat) / elapsed, 1), "placement_errors": errors[:3],
            "rss_mib": {**rss, "total": round(sum(rss.values()), 1)},
            "cpu_s": {**cpu, "total": round(cp_cpu, 2), "simulator": round(sim_cpu, 2)},
            "cpu_s_per_node_hour": round(cp_cpu / max(nodes, 1) * 3600.0 / elapsed, 3),
            "registry_cpu_us_per_heartbeat": round(cpu["registry"] / max(acked, 1) * 1e6, 1),
            "churn": counts, "sim_errors": sim_errors,
        }
        r["sustained"] = lag_p99 is not None and lag_p99 <= self.args.heartbeat and not missed_too_many(missed, lag)
        return r

    def run_size(self, size: int) -> dict[str, Any]:
        have = len(self.alive_ids())
        if size > have:
            t0 = time.monotonic()
            self.grow(size - have)
            got = self.wait_registered(size, timeout_s=max(120.0, size / 20))
            log(f"  {size} nodes: {got} in the scheduler's view after {time.monotonic() - t0:.0f} s")
        time.sleep(self.args.settle)
        r = self.measure(size)
        log(f"  {size:>6} nodes: {r['heartbeats_per_s']:>7.0f} beats/s (of {r['heartbeats_expected_per_s']:.0f})  "
            f"lag p50/p99 {_s(r['lag_p50_s'])}/{_s(r['lag_p99_s'])} s  tick p50/p99 {r['tick_p50_ms']}/{r['tick_p99_ms']} ms  "
            f"placement p50/p99 {_s(r['placement_p50_ms'])}/{_s(r['placement_p99_ms'])} ms  rss {r['rss_mib']['total']} MiB  "
            f"cpu {r['cpu_s']['total']} s (sim {r['cpu_s']['simulator']} s)  {'sustained' if r['sustained'] else 'NOT sustained'}")
        return r

    def close(self) -> None:
        import ray

        for q in self.commands:
            try:
                q.put(("stop",))
            except Exception:
                pass
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
        for h in (getattr(self, "sched_handle", None), getattr(self, "health", None), getattr(self, "registry", None)):
            if h is not None:
                try:
                    ray.kill(h, no_restart=True)
                except Exception:
                    pass
        ray.shutdown()


def missed_too_many(missed: list[str], lag: list[float]) -> bool:
    """More than a tenth of the steps never showed: the lag figure would hide them."""
    return len(missed) > 0.1 * max(1, len(missed) + len(lag))


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,10000", help="fleet sizes, ascending, comma-separated")
    ap.add_argument("--window", type=float, default=60.0, help="seconds measured per size")
    ap.add_argument("--heartbeat", type=float, default=5.0, help="heartbeat interval (s)")
    ap.add_argument("--settle", type=float, default=SETTLE_S,
                    help=f"seconds after a fleet grows before its window is measured (default {SETTLE_S:g})")
    ap.add_argument("--reprobe", type=float, default=300.0, help="re-probe (report) interval (s)")
    ap.add_argument("--procs", type=int, default=2, help="simulator processes (at least 2)")
    ap.add_argument("--rate", type=float, default=200.0, help="placement requests per second")
    ap.add_argument("--markers", type=int, default=4, help="load steps in flight at a time (the lag's samples)")
    ap.add_argument("--search", action="store_true", help="grow past the largest size for largest_sustained")
    ap.add_argument("--budget", type=float, default=1500.0, help="seconds for the whole run (the search stops at it)")
    ap.add_argument("--transport", choices=("ray", "udp"), default="udp",
                    help="health.heartbeat_transport: heartbeats as Ray calls, or as signed datagrams (default)")
    ap.add_argument("--floor-s", type=float, default=10.0, help="seconds of the Ray floor measurement (0: skip)")
    ap.add_argument("--soak", type=float, default=0.0, help="then run this many seconds at the largest size (RSS, store size)")
    ap.add_argument("--past-wall", action="store_true", help="then run at twice largest_sustained (shed, not collapse)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.procs < 2:
        ap.error("--procs: at least 2 simulator processes")
    if args.settle < 0:
        ap.error("--settle: seconds, 0 or more")
    sizes = sorted(int(s) for s in args.sizes.split(",") if s.strip())
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    t_start = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="bench-control-plane-"))
    results: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    floor = None
    largest, not_measured = 0, None
    bench = Bench(args, folder)
    try:
        bench.start_actors()
        bench.start_sims()
        floor = bench.ray_floor(seconds=args.floor_s) if args.floor_s > 0 else None
        for size in sizes:
            results[str(size)] = bench.run_size(size)
        sustained = [int(k) for k, r in results.items() if r["sustained"]]
        largest = max(sustained) if sustained else 0
        not_measured = None
        if args.soak > 0:
            window = args.window
            extra["soak"] = phases.soak(bench, args.soak, [bench.paths.nodes], log)
            args.window = window
        if args.search and largest == max(sizes):
            lo, hi = largest, None
            per_size = (time.monotonic() - t_start) / max(1, len(sizes))
            while time.monotonic() - t_start + 2 * per_size < args.budget:
                size = hi and (lo + hi) // 2 or lo * 2
                if hi is not None and hi - lo <= max(500, lo // 10):
                    break
                if size < len(bench.alive_ids()):
                    break  # a fleet does not shrink here: the bisection stops at the fleet it has
                r = bench.run_size(size)
                results[str(size)] = r
                if r["sustained"]:
                    lo = size
                else:
                    hi = size
            largest = lo
            if hi is None:
                not_measured = "the time budget ended before a size failed: largest_sustained is a lower bound"
        if args.past_wall and largest:
            extra["past_wall"] = phases.past_wall(bench, 2 * largest, args.heartbeat)
    finally:
        bench.close()
        shutil.rmtree(folder, ignore_errors=True)
    doc = {"sizes": results, "largest_sustained": largest, "ray_floor": floor, "heartbeat_transport": args.transport, "heartbeat_interval_s": args.heartbeat,
           "placement_rate_per_s": args.rate, "window_s": args.window, "simulator_procs": args.procs,
           "run_s": round(time.monotonic() - t_start, 1)}
    doc.update(extra)
    if not_measured:
        doc["not_measured"] = not_measured
    print(f"largest fleet sustained (lag p99 <= {args.heartbeat} s): {largest}")
    if args.json:
        print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

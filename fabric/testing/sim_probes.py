"""The simulator's processes for ``scripts/bench_control_plane.py``: each is its own Ray driver and
makes, for its share of the simulated nodes, the calls their probe actors would make
(``actors.probe.Probe``): ``register`` once, a heartbeat every interval (as a Ray call, or as a
signed datagram on the registry's heartbeat channel when it offers one, every tenth beat a Ray
call), ``report`` every re-probe interval. The benchmark's driver steers them through a command
queue (add nodes, leave, degrade, flap, a load step, the Ray floor's calls) and reads their
counts back on an output queue."""

from __future__ import annotations

import asyncio
import heapq
import os
import queue
import random
import time
from typing import Any

from fabric.rayio.heartbeat_channel import RAY_BEAT_EVERY, HeartbeatSender

MAX_INFLIGHT = 256
"""Ray calls one simulator process keeps in flight at most (more wait: it fell behind). A beat due as a
datagram is sent all the same: a real probe's datagram waits for no other node's call."""

__all__ = ["MAX_INFLIGHT", "SimNodes", "sim_process"]


class SimNodes:
    """One simulator process's nodes: what their probes would send, on their schedules."""

    def __init__(self, registry: Any, interval: float, reprobe: float, out: Any) -> None:
        self.registry, self.interval, self.reprobe, self.out = registry, interval, reprobe, out
        self.caps: dict[str, dict] = {}
        self.load: dict[str, float] = {}
        self.registered: set[str] = set()
        self.quiet_until: dict[str, float] = {}
        self.degraded: dict[str, tuple[str, ...]] = {}
        self.next_report: dict[str, float] = {}
        self.steps: dict[str, float] = {}
        self.heap: list[tuple[float, str]] = []
        self.inflight = 0
        self.counts = {"beats": 0, "acked": 0, "failed": 0, "registered": 0, "reports": 0, "late": 0, "datagrams": 0}
        self.channel: dict[str, tuple[tuple[str, int], bytes]] = {}
        """Per node: the registry's heartbeat channel (address, key), when it offers one (as a probe asks)."""
        self.nbeat: dict[str, int] = {}
        self.sender = HeartbeatSender()
        self.errors: list[str] = []
        self.rnd = random.Random(os.getpid())

    def add(self, nodes: list[tuple[str, dict]]) -> None:
        now = time.monotonic()
        for node_id, caps in nodes:
            self.caps[node_id] = caps
            self.load[node_id] = self.rnd.uniform(5, 95)
            self.next_report[node_id] = now + self.rnd.uniform(0, self.reprobe)
            heapq.heappush(self.heap, (now + self.rnd.uniform(0, self.interval), node_id))

    def command(self, cmd: tuple) -> None:
        kind, node_id = cmd[0], cmd[1] if len(cmd) > 1 else None
        if kind == "add":
            self.add(cmd[1])
        elif kind == "leave":
            self.caps.pop(node_id, None)
        elif kind == "degrade" and node_id in self.caps:
            self.degraded[node_id] = ("hardware encoder lost (simulated)",)
            self.next_report[node_id] = 0.0
        elif kind == "flap" and node_id in self.caps:
            self.quiet_until[node_id] = time.monotonic() + cmd[2]
        elif kind == "step" and node_id in self.caps:
            self.steps[node_id] = cmd[2]
        elif kind == "floor":
            asyncio.ensure_future(self._floor(cmd[1], cmd[2], cmd[3]))

    async def _floor(self, actor_name: str, rate: float, seconds: float) -> None:
        """Calls of a heartbeat's shape to a trivial actor (the Ray floor), at ``rate`` for ``seconds``."""
        import ray

        from fabric.core.names import NAMESPACE

        target = ray.get_actor(actor_name, namespace=NAMESPACE)
        util = {"cpu_percent": 12.5, "memory_percent": 40.0, "gpus": ()}
        t, t_end, pending = time.monotonic(), time.monotonic() + seconds, []
        while time.monotonic() < t_end:
            t += 1.0 / rate
            pending.append(asyncio.ensure_future(target.heartbeat.remote("5e" * 28, util)))
            await asyncio.sleep(max(0.0, t - time.monotonic()))
        await asyncio.gather(*pending, return_exceptions=True)
        self.out.put(("floor-done", os.getpid(), len(pending)))

    async def _call(self, what: str, ref: Any, node_id: str, sent: float, step: float | None) -> None:
        try:
            await ref
            self.counts["acked" if what == "beat" else what] += 1
            if what == "registered":
                self.registered.add(node_id)
            if what == "registered" or (what == "beat" and node_id in self.channel):  # as a probe asks it
                got = await self.registry.heartbeat_channel.remote(node_id)
                if got is None:
                    self.channel.pop(node_id, None)
                else:
                    self.channel[node_id] = ((got["address"][0], int(got["address"][1])), bytes.fromhex(got["key"]))
            if step is not None:
                self.out.put(("stepped", node_id, step, sent))
        except Exception as exc:  # a refused or lost call: the next beat retries, as a probe's does
            self.counts["failed"] += 1
            if len(self.errors) < 5:
                self.errors.append(f"{what} {node_id[:12]}: {type(exc).__name__}: {str(exc)[:200]}")
            if what == "registered":
                self.registered.discard(node_id)
        finally:
            self.inflight -= 1

    def _datagram_next(self, node_id: str, now: float) -> bool:
        """Whether ``node_id``'s next beat goes as a datagram (no Ray call, nothing to wait for)."""
        return (node_id in self.registered and node_id in self.channel and now < self.next_report.get(node_id, 0.0)
                and (self.nbeat.get(node_id, 0) + 1) % RAY_BEAT_EVERY != 0)

    def _send(self, node_id: str, now: float) -> None:
        caps = self.caps[node_id]
        step = self.steps.pop(node_id, None)
        load = step if step is not None else min(100.0, max(0.0, self.load[node_id] + self.rnd.uniform(-8, 8)))
        self.load[node_id] = load
        util = {"cpu_percent": round(load, 3), "memory_percent": 40.0, "gpus": ()}
        sent = time.time()
        self.inflight += 1
        if node_id not in self.registered:
            self.registered.add(node_id)  # one registration in flight; a refusal takes it back
            ref, what = self.registry.register.remote(node_id, caps, util), "registered"
        elif now >= self.next_report[node_id]:
            self.next_report[node_id] = now + self.reprobe
            degraded = list(self.degraded.pop(node_id, ()))
            ref, what = self.registry.report.remote(node_id, caps, degraded, util), "reports"
        else:
            n = self.nbeat[node_id] = self.nbeat.get(node_id, 0) + 1
            channel = self.channel.get(node_id)
            self.counts["beats"] += 1
            if channel is not None and n % RAY_BEAT_EVERY:  # a datagram, as a probe on the channel sends
                self.inflight -= 1
                if self.sender.send(channel[0], channel[1], node_id, sent, util):
                    self.counts["datagrams"] += 1
                if step is not None:
                    self.out.put(("stepped", node_id, step, sent))
                return
            ref, what = self.registry.heartbeat.remote(node_id, util), "beat"
        asyncio.ensure_future(self._call(what, ref, node_id, sent, step))

    async def run(self, commands: Any) -> None:
        while True:
            while True:
                try:
                    cmd = commands.get_nowait()
                except queue.Empty:
                    break
                if cmd[0] == "stop":
                    return
                if cmd[0] == "stats":
                    import resource

                    ru = resource.getrusage(resource.RUSAGE_SELF)
                    self.out.put(("stats", os.getpid(), dict(self.counts), list(self.errors), ru.ru_utime + ru.ru_stime,
                                  len(self.caps)))
                    continue
                self.command(cmd)
            now = time.monotonic()
            while self.heap and self.heap[0][0] <= now:
                if self.inflight >= MAX_INFLIGHT and not self._datagram_next(self.heap[0][1], now):
                    break  # Ray calls wait for room; a datagram, as a probe sends it, waits for nobody
                due, node_id = heapq.heappop(self.heap)
                if node_id not in self.caps:
                    continue  # it left
                if now - due > self.interval:
                    self.counts["late"] += 1
                heapq.heappush(self.heap, (max(due + self.interval, now), node_id))
                if self.quiet_until.get(node_id, 0.0) > now:
                    continue  # flapping: its probe is quiet
                self._send(node_id, now)
            await asyncio.sleep(0.005)


def sim_process(address: str, interval: float, reprobe: float, commands: Any, out: Any) -> None:
    import ray

    from fabric.core.names import NAMESPACE, REGISTRY

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
    registry = ray.get_actor(REGISTRY, namespace=NAMESPACE)
    sim = SimNodes(registry, interval, reprobe, out)
    out.put(("ready", os.getpid()))
    asyncio.run(sim.run(commands))
    ray.shutdown()

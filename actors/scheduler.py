"""SchedulerActor: the fabric's detached, named placement service (seed 002 §3 and §5).

It holds a ``SchedulerCore`` (pure: fleet view, reservations, deferred queue) and keeps its fleet
current from two feeds every tick: Ray's node table (a dead raylet leaves the fleet within one
tick of Ray noticing) and the registry's records (capabilities, status, flap holds, cordons).
Everything it decides, the core decides; this class only gathers facts and carries out the
instructions (wake a waiting call, fail an expired one, mark a drained node in the registry).

Restart: a detached actor with ``max_restarts=-1`` re-runs ``__init__``; the fleet comes back from
the registry and Ray, and work that was already dispatched is unaffected (it runs on its node and
its result goes straight to the caller). Reservations of work in flight are not remembered; Ray's
``fabric.slots`` still refuses any oversubscription meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

from actors.fleet_feed import FleetFeed
from fabric.core.scheduling import messages as msg
from fabric.core.errors import CapacityError, MessageError
from fabric.core.placement import PlacementContext, Requirement, dry_run
from fabric.core.scheduling import Expired, MarkDraining, NodeAssignment, Placed, SchedulerCore
from fabric.core.settings import FabricSettings


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=100_000)
class SchedulerActor:
    def __init__(self, settings: dict | None = None, tick_s: float | None = None) -> None:
        self.settings = FabricSettings.load(settings or {})
        self.core = SchedulerCore(self.settings, clock=time.monotonic)
        self.feed = FleetFeed(self.settings)
        self.tick_s = tick_s if tick_s is not None else min(self.settings.health.monitor_interval_s, 0.5)
        self._waiters: dict[str, asyncio.Future] = {}
        self._started = time.time()
        self._ready = asyncio.Event()
        self._loop_task = asyncio.get_event_loop().create_task(self._run())
        self._metrics = None

    # -- the loop ------------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            try:
                await self._sync()
                self._carry_out(self.core.tick())
            except Exception as exc:  # keep serving; the next tick retries
                print(f"[fabric.scheduler] tick failed: {type(exc).__name__}: {exc}")
            self._ready.set()
            await asyncio.sleep(self.tick_s)

    async def _sync(self) -> None:
        changes = await self.feed.poll()
        self.core.ray_outsiders(self.feed.outsiders)
        for change in changes:
            if change.kind == "lost":
                self._carry_out(self.core.node_lost(change.node_id))
            elif change.kind == "joined":
                self._carry_out(self.core.node_joined(change.record))
            elif change.kind == "changed":
                self._carry_out(self.core.node_changed(change.node_id, **change.fields))
        if changes:
            self._export_gauges()

    def _carry_out(self, instructions) -> None:
        for ins in instructions:
            if isinstance(ins, Placed):
                fut = self._waiters.pop(ins.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(ins.assignment)
                elif ins.assignment.allocation_id is not None:
                    self.core.release([ins.assignment.allocation_id])  # nobody waits any more
            elif isinstance(ins, Expired):
                fut = self._waiters.pop(ins.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_exception(ins.error)
            elif isinstance(ins, MarkDraining):
                asyncio.get_event_loop().create_task(self.feed.mark_draining(ins.node_id))

    # -- placement ------------------------------------------------------------------------------------
    async def place_task(self, req: Requirement, release: list[str] = ()) -> NodeAssignment:
        """Place one call now (reserving a slot), or say it is deferred. ``CapacityError`` for a
        hard requirement that no node serves. ``release``: the caller's idle leases, given back first."""
        req, release = msg.read_requirement(req), msg.read_ids("release", release)
        if not self._ready.is_set():
            await self._ready.wait()
        for idle in release:
            self.end_lease(idle)
        self._count("attempted")
        return self.core.place(req)

    async def wait_for_placement(self, request_id: str, req: Requirement, priority: int = 0,
                                 timeout_s: float | None = None) -> NodeAssignment:
        """Queue a call until a node can take it; ``CapacityError`` at the deadline."""
        request_id, req, timeout_s = msg.read_id("request_id", request_id), msg.read_requirement(req), msg.read_timeout("timeout_s", timeout_s)
        if not (isinstance(priority, int) and not isinstance(priority, bool) and abs(priority) <= msg.MAX_COUNT):
            raise MessageError("priority", "must be an integer", priority)
        if not self._ready.is_set():
            await self._ready.wait()
        a = self.core.place(req, request_id=request_id, queue=True, priority=priority, timeout_s=timeout_s)
        if a.status == "assigned":
            return a
        fut = asyncio.get_event_loop().create_future()
        self._waiters[request_id] = fut
        try:
            return await fut
        except asyncio.CancelledError:
            self.core.cancel(request_id)
            raise

    async def lease(self, lease_id: str, req: Requirement, holding: dict[str, int] | None = None, want: int = 64,
                    release: list[str] = ()):
        """Grant or renew a client's placement lease for ``req``'s class (the fast path), after giving
        back the client's idle leases (``release``)."""
        lease_id, req, holding, want, release = msg.read_lease_request(lease_id, req, holding, want, release)
        if not self._ready.is_set():
            await self._ready.wait()
        grant, out = self.core.grant_lease(lease_id, req, holding, want, release)
        self._carry_out(out)
        return grant

    def end_lease(self, lease_id: str) -> None:
        self._carry_out(self.core.end_lease(msg.read_id("lease_id", lease_id)))

    def report_calls(self, placed: int = 0, fallbacks: int = 0) -> None:
        self.core.report_calls(*msg.read_call_report(placed, fallbacks))

    def queue_timeout_s(self) -> float:
        return self.settings.queue_timeout_s

    def release(self, allocation_ids: list[int]) -> None:
        """Work ended on its node: its slot is free again."""
        self._carry_out(self.core.release(msg.read_allocations(allocation_ids)))

    async def select_worker(self, req: Requirement) -> NodeAssignment:
        """Seed 002's ``select_worker``: where would this go now (no reservation kept)."""
        req = msg.read_requirement(req)
        if not self._ready.is_set():
            await self._ready.wait()
        return self.core.select_worker(req)

    async def explain(self, req: Requirement, ctx: PlacementContext | None = None, verbose: bool = False) -> dict:
        """A dry-run placement against the live fleet, with its trace: the decision, each node's
        first failing filter, each survivor's key, and the text a person reads."""
        req = msg.read_requirement(req)
        if ctx is not None and not isinstance(ctx, PlacementContext):
            raise MessageError("ctx", "must be a fabric.core.placement.PlacementContext or None", type(ctx).__name__)
        if not self._ready.is_set():
            await self._ready.wait()
        d = dry_run(self.core.fleet, self.core.check_requirement(req), ctx)
        names = {r.node_id: r.name for r in self.core.fleet.records()}
        verdicts = {f"{names.get(k, k)} ({k[:12]})": v for k, v in d.trace.verdicts().items()}
        survivors = [{"node": names.get(node_id, node_id), "node_id": node_id, "key": list(map(str, key))}
                     for key, node_id in d.trace.survivors()]
        return {"decision": {**d.to_dict(), "node_name": d.node_name}, "verdicts": verdicts, "survivors": survivors,
                "text": d.explain(verbose=verbose)}

    # -- operator surface ---------------------------------------------------------------------------------
    def fallback_count(self) -> int:
        return self.core.fallback_count

    def metrics(self) -> dict[str, Any]:
        m = self.core.metrics()
        m["uptime_s"] = round(time.time() - self._started, 3)
        return m

    def nodes(self) -> list:
        return self.core.fleet.records()

    async def cordon(self, node: str) -> str:
        node_id = self._resolve(node)
        self.core.cordon(node_id)
        await self.feed.set_cordoned(node_id, True)
        return node_id

    async def uncordon(self, node: str) -> str:
        node_id = self._resolve(node)
        self._carry_out(self.core.uncordon(node_id))
        await self.feed.set_cordoned(node_id, False)
        return node_id

    async def drain(self, node: str, grace_s: float | None = None) -> str:
        node_id = self._resolve(node)
        grace_s = msg.read_seconds("grace_s", grace_s, allow_zero=True)
        await self.feed.set_cordoned(node_id, True)
        self._carry_out(self.core.drain(node_id, grace_s))
        return node_id

    async def sync_now(self) -> int:
        """Refresh the fleet at once (tests and the CLI use it instead of waiting a tick)."""
        await self._sync()
        return len(self.core.fleet)

    def ping(self) -> str:
        return "ok"

    def pid(self) -> int:
        import os

        return os.getpid()

    # -- internals ------------------------------------------------------------------------------------------
    def _resolve(self, node: str) -> str:
        node = msg.read_id("node", node)
        if node in self.core.fleet:
            return node
        matches = [r.node_id for r in self.core.fleet.records() if r.name == node]
        if len(matches) == 1:
            return matches[0]
        from fabric.core.errors import NodeNotFoundError

        raise NodeNotFoundError(node)

    def _count(self, what: str) -> None:
        m = self._ray_metrics()
        if m is not None:
            m["placements"].inc(tags={"outcome": what})

    def _ray_metrics(self):
        """Counters exported through ``ray.util.metrics`` (Ray's Prometheus endpoint)."""
        if self._metrics is None:
            try:
                from ray.util.metrics import Counter, Gauge

                self._metrics = {
                    "placements": Counter("fabric_placements", "placement calls", tag_keys=("outcome",)),
                    "nodes": Gauge("fabric_nodes", "nodes per compute tier", tag_keys=("tier",)),
                    "utilization": Gauge("fabric_utilization", "running / slots per compute tier", tag_keys=("tier",)),
                    "fallbacks": Gauge("fabric_fallbacks", "placements made below their min_tier"),
                    "queue": Gauge("fabric_queue_depth", "calls waiting for capacity"),
                }
            except Exception:  # metrics are best effort
                self._metrics = {}
        return self._metrics or None

    def _export_gauges(self) -> None:
        m = self._ray_metrics()
        if m is None:
            return
        snap = self.core.metrics()
        for tier, t in snap["tiers"].items():
            m["nodes"].set(t["nodes"], tags={"tier": tier})
            m["utilization"].set(t["utilization"], tags={"tier": tier})
        m["fallbacks"].set(snap["fallbacks"])
        m["queue"].set(snap["queue_depth"])


__all__ = ["SchedulerActor", "CapacityError"]

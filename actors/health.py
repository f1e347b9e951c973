"""HealthMonitorActor: the fabric's health monitor, as a loop around the pure ``HealthPolicy``.

Every ``monitor_interval_s`` it reads Ray's node table (~0.3 ms) and the registry's heartbeats and
degradation reports, feeds them to the policy, applies the resulting statuses to the registry,
starts a ProbeActor on every node that joined (by any means: LocalFabric, ``fabric join``, the
autoscaler), and publishes the events: kept in a numbered log that anyone can read with
``events(since)``, and pushed to subscribed actors (``subscribe(actor_name, method)``).

Restart: a detached actor re-runs ``__init__``; the policy's state (statuses and since when,
last beats, flap histories, collected ids) comes back from the registry, so drain graces and
flap holds keep counting from where they were.

Self-healing probes: a ProbeActor that dies past its Ray restart budget (``max_restarts=3``)
stays dead, and its node would stop heartbeating and leave placement for good. So every tick the
monitor looks up the probe of each live node that has gone quiet (by name,
``fabric.probe.<node_id>``: a dead actor's name is free again) and starts a missing one again,
backed off per node by the pure ``ProbeRestarts`` (1 s doubling to 60 s, reset after 60 s up),
however many times it died; ``status()["probe_restarts"]`` counts them. The node comes back when
its probe registers and beats again.

The registry takes a batch of events whole or not at all; a refused batch is applied again one
event at a time, so only the refused events are left out (counted in ``status()["refused_events"]``).

``HealthMonitor`` is the logic, over the Ray seam (``fabric.rayio.adapter.RayAdapter``; a fake in
unit tests) and a clock; ``HealthMonitorActor`` is the thin async Ray actor around it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from typing import Any, Callable

import ray

from actors.probe import ProbeActor
from fabric.core.names import HEAD_RESOURCE, REGISTRY, probe_actor_name
from fabric.rayio.adapter import RayAdapter
from fabric.core.errors import RegistrationError, TransitionError
from fabric.core.events import NodeAdded, NodeFlapHeld, NodeFlapReleased, NodeLost, NodeRecovered
from fabric.core.health import HealthPolicy, NodeHealth, ProbeRestarts, RayNodeView
from fabric.core.messages import MAX_EVENTS
from fabric.core.lifecycle import NodeStatus
from fabric.core.settings import FabricSettings

_FLAPS_KEY = "health.flaps"
_SUBSCRIBERS_KEY = "health.subscribers"
EVENT_LOG_SIZE = 10_000


class HealthMonitor:
    """The health monitor's logic: the restore, the tick, the surface. ``adapter`` is the Ray seam
    (default: a ``RayAdapter``), ``probe_actor`` the actor class started on every node (default:
    ``ProbeActor``), ``clock`` the time (the policy and the probe backoff read it too)."""

    def __init__(self, settings: dict | None = None, *, adapter: Any = None, probe_actor: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = FabricSettings.load(settings or {})
        self.adapter = adapter if adapter is not None else RayAdapter()
        self.probe_actor = probe_actor if probe_actor is not None else ProbeActor
        self.clock = clock
        self.policy = HealthPolicy(self.settings.health, clock=clock)
        self.probes = ProbeRestarts(clock=clock)
        self.refused_events = 0
        self.last_refusal: str | None = None
        self.log: deque[tuple[int, Any]] = deque(maxlen=EVENT_LOG_SIZE)
        self.seq = 0
        self.ticks = 0
        self.subscribers: dict[str, str] = {}
        self._unapplied: list[Any] = []
        self._unannounced: list[Any] = []
        self._flaps_written: dict[str, Any] | None = None
        """The flap document last written to the registry (a write that would change nothing is skipped)."""
        self.started_at = clock()
        self.last_error: str | None = None
        self._ready = asyncio.Event()
        self._restored = asyncio.Event()
        self.released: set[str] = set()
        """Nodes given back to their provider: their probes left and are not started again."""

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Restore, then tick every ``monitor_interval_s`` for ever."""
        registry = await self.start()
        while True:
            registry = await self.step(registry)
            self._ready.set()
            await asyncio.sleep(self.settings.health.monitor_interval_s)

    async def _registry(self) -> Any:
        return await self.adapter.wait_for_actor(REGISTRY)

    async def _restore(self, registry: Any) -> None:
        records = await registry.records.remote()
        flaps = await registry.get_state.remote(_FLAPS_KEY, {})
        collected = await registry.collected_ids.remote()
        self.subscribers = dict(await registry.get_state.remote(_SUBSCRIBERS_KEY, {}) or {})
        # A live node's silence is timed afresh from the restart (as for a new node: its first
        # beat may take join_timeout_s), so that the monitor's own downtime, or a down()/up()
        # that restarted every probe, is not read as missed heartbeats: that would flap the
        # whole fleet. Nodes Ray lost meanwhile are still caught at once, from Ray's table.
        now = self.clock()
        self.policy.restore(
            [NodeHealth(node_id=r.node_id, name=r.name, status=r.status, since=r.status_since,
                        last_beat=r.last_seen if r.status is NodeStatus.OFFLINE else max(r.last_seen, now),
                        degraded=tuple(r.degraded), heard=r.status is NodeStatus.OFFLINE) for r in records],
            flaps, collected,
        )

    async def start(self) -> Any:
        """Restore the policy from the registry (retried until the registry answers), start the
        probes of the live nodes it tracks; the registry's handle."""
        registry = await self._registry()
        while True:
            try:
                await self._restore(registry)
                self._restored.set()
                break
            except Exception as exc:  # the registry may be restarting: try again
                self.last_error = f"restore: {type(exc).__name__}: {exc}"
                await asyncio.sleep(0.5)
                registry = await self._registry()
        alive = {n.node_id for n in self.adapter.list_nodes() if n.alive and n.is_fabric_node}
        self._ensure_probes([n for n in self.policy.nodes.values() if n.node_id in alive and n.status is not NodeStatus.OFFLINE])
        return registry

    async def step(self, registry: Any) -> Any:
        """One tick that never raises: a failure is kept in ``last_error`` and the next tick
        retries, with the registry looked up again (it may have restarted). The registry's handle."""
        try:
            await self.tick(registry)
            self.last_error = None
        except Exception as exc:  # keep watching; the next tick retries
            self.last_error = f"tick: {type(exc).__name__}: {exc}"
            registry = self.adapter.get_actor(REGISTRY) or registry
        return registry

    async def tick(self, registry: Any) -> None:
        """Read Ray's node table and the registry's heartbeats, let the policy decide, heal the
        probes, apply the decided events to the registry, then announce them: start the probes of
        added nodes, push the events to the subscribers. Raises when the registry does not answer;
        what was decided stays queued, and is applied and announced by the next tick that gets
        through (in order: a probe starts after its node's events reached the registry)."""
        self.ticks += 1
        sid = f"tick-{self.ticks}"
        rows = self.adapter.list_nodes()
        events = self.policy.observe_ray(rows, stimulus_id=sid)
        try:
            inputs = await registry.health_inputs.remote()
        except Exception:
            # What Ray's table decided stands without the registry (a node Ray declared dead is
            # lost, and the policy will not decide it again): keep it for the registry's return.
            self._decided(events)
            raise
        events += self.policy.observe_heartbeats({k: v["last_seen"] for k, v in inputs.items()}, stimulus_id=sid)
        for node_id, v in inputs.items():
            events += self.policy.observe_degradation(node_id, v["degraded"], stimulus_id=sid)
        events += self.policy.tick(stimulus_id=sid)
        self._decided(events, rows)
        if self._unapplied:
            flaps_changed = any(isinstance(e, (NodeLost, NodeRecovered, NodeAdded, NodeFlapHeld, NodeFlapReleased)) for e in self._unapplied)
            await self._apply(registry)
            flaps = self.policy.flaps_json() if flaps_changed else None
            if flaps is not None and flaps != self._flaps_written:  # what a restart needs changed
                await registry.put_state.remote(_FLAPS_KEY, flaps)
                self._flaps_written = flaps
        by_id = {r.node_id: r for r in rows}
        announce, self._unannounced = self._unannounced, []
        if announce:
            self._ensure_probes([self.policy.nodes[e.node_id] for e in announce
                                 if isinstance(e, NodeAdded) and e.node_id in self.policy.nodes and e.node_id in by_id])
            self._push(announce)

    def _decided(self, events: list[Any], rows: list[RayNodeView] | None = None) -> None:
        """Log what the policy decided and queue it for the registry: the policy has moved on once
        it decided, so events the registry has not taken yet (it was restarting) go with the next
        tick and no status change is ever lost. With ``rows``, heal the probes in between: before
        the registry calls, so a registry that is down does not stop it."""
        self._log(events)
        if rows is not None:
            self._heal_probes(rows)
        self._unapplied += events

    async def _apply(self, registry: Any) -> None:
        """Send the queued events in batches the registry takes (``MAX_EVENTS``). A refused batch
        (the registry takes it whole or not at all) goes again one event at a time, leaving out
        only what is refused: retrying the same batch could never help. A transient failure (the
        registry restarting) propagates and leaves the rest queued for the next tick. What the
        registry took (or refused) waits in ``_unannounced`` for the tick to announce it."""
        while self._unapplied:
            chunk = self._unapplied[:MAX_EVENTS]
            try:
                await registry.apply.remote(chunk)
                del self._unapplied[:len(chunk)]
                self._unannounced += chunk
                continue
            except (RegistrationError, TransitionError):
                pass
            while chunk:
                try:
                    await registry.apply.remote(chunk[:1])
                except (RegistrationError, TransitionError) as exc:
                    self.refused_events += 1
                    self.last_refusal = f"{type(chunk[0]).__name__} for {chunk[0].node_id[:12]}: {exc}"
                self._unannounced.append(chunk.pop(0))
                del self._unapplied[:1]

    def _heal_probes(self, rows: list[RayNodeView]) -> None:
        """Start again the probe of every live tracked node that went quiet and has none (by name);
        ``ProbeRestarts`` says when, with a per-node backoff."""
        alive = {r.node_id: r for r in rows if r.alive}
        tracked = {n.node_id: n for n in self.policy.nodes.values() if n.node_id in alive}
        self.probes.keep_only(tracked)
        h = self.settings.health
        quiet = set(self.probes.quiet({n: node.last_beat for n, node in tracked.items()}, 2 * h.heartbeat_interval_s + h.monitor_interval_s))
        for node_id in tracked:
            if node_id in self.released:
                continue
            present = node_id not in quiet or self.adapter.get_actor(probe_actor_name(node_id)) is not None
            if self.probes.observe(node_id, present):
                self._ensure_probes([tracked[node_id]], rows)

    def _ensure_probes(self, nodes: list[NodeHealth], table: list[RayNodeView] | None = None) -> None:
        rows = {r.node_id: r for r in (self.adapter.list_nodes() if table is None else table)}
        h = self.settings.health
        spot = self.settings.spot_notices.model_dump(mode="json")
        for node in nodes:
            row = rows.get(node.node_id)
            if row is None or not row.alive or node.node_id in self.released:
                continue
            try:
                self.adapter.ensure_probe(self.probe_actor, row, heartbeat_interval_s=h.heartbeat_interval_s, reprobe_interval_s=h.reprobe_interval_s,
                                          spot_notices=spot)
            except Exception as exc:
                self.last_error = f"probe for {node.node_id[:12]}: {type(exc).__name__}: {exc}"

    def _log(self, events: list[Any]) -> None:
        for event in events:
            self.seq += 1
            self.log.append((self.seq, event))

    def _push(self, events: list[Any]) -> None:
        for name, method in list(self.subscribers.items()):
            handle = self.adapter.get_actor(name)
            if handle is None:
                continue
            for event in events:
                getattr(handle, method).remote(event)  # fire and forget: a slow subscriber never stalls health

    # -- the surface ---------------------------------------------------------------------------------
    async def release_node(self, node_id: str) -> bool:
        """A node given back to its provider (``ray-autoscaler``): Ray's autoscaler counts a node
        with a running actor as busy, so its probe leaves and is not started again; the node then
        goes quiet (offline) and Ray gives it back once idle. True when there was a probe to stop."""
        self.released.add(node_id)
        had = self.adapter.get_actor(probe_actor_name(node_id)) is not None
        self.adapter.kill_actor(probe_actor_name(node_id))
        return had

    async def ready(self) -> bool:
        """True once the policy is restored and one tick has run."""
        await self._ready.wait()
        return True

    async def events(self, since: int = 0) -> tuple[int, list[Any]]:
        """Events numbered after ``since`` (the log keeps the last 10,000) and the newest number."""
        await self._restored.wait()
        return self.seq, [e for n, e in self.log if n > since]

    async def subscribe(self, actor_name: str, method: str = "on_fleet_event") -> None:
        """Push every future event to ``actor_name.method(event)`` (a named actor in namespace ``fabric``)."""
        await self._restored.wait()
        self.subscribers[actor_name] = method
        await self._save_subscribers()

    async def unsubscribe(self, actor_name: str) -> None:
        await self._restored.wait()
        self.subscribers.pop(actor_name, None)
        await self._save_subscribers()

    async def _save_subscribers(self) -> None:
        registry = self.adapter.get_actor(REGISTRY)
        if registry is not None:
            await registry.put_state.remote(_SUBSCRIBERS_KEY, self.subscribers)

    async def held_until(self, name: str) -> float | None:
        await self._restored.wait()
        return self.policy.held_until(name)

    async def status(self) -> dict[str, Any]:
        await self._restored.wait()
        return {
            "pid": os.getpid(), "node_id": self.adapter.current_node_id(), "started_at": self.started_at, "ticks": self.ticks, "last_error": self.last_error,
            "nodes": {n.node_id: {"name": n.name, "status": n.status.value, "since": n.since, "last_beat": n.last_beat,
                                  "ray_dead": n.ray_dead, "degraded": list(n.degraded)} for n in self.policy.nodes.values()},
            "flaps": self.policy.flaps_json(), "collected": sorted(self.policy.collected),
            "probe_restarts": {"total": self.probes.total_restarts, "nodes": self.probes.status()},
            "refused_events": self.refused_events, "last_refusal": self.last_refusal,
        }


@ray.remote(num_cpus=0, resources={HEAD_RESOURCE: 0.001}, max_restarts=-1, max_task_retries=-1)
class HealthMonitorActor:
    """The named, detached health monitor (``fabric.core.health``): a ``HealthMonitor`` and its loop."""

    def __init__(self, settings: dict | None = None, adapter: Any = None) -> None:
        self.monitor = HealthMonitor(settings, adapter=adapter)
        self._task = asyncio.get_event_loop().create_task(self.monitor.run())

    async def ready(self) -> bool:
        """True once the policy is restored and one tick has run."""
        return await self.monitor.ready()

    async def events(self, since: int = 0) -> tuple[int, list[Any]]:
        """Events numbered after ``since`` (the log keeps the last 10,000) and the newest number."""
        return await self.monitor.events(since)

    async def subscribe(self, actor_name: str, method: str = "on_fleet_event") -> None:
        """Push every future event to ``actor_name.method(event)`` (a named actor in namespace ``fabric``)."""
        await self.monitor.subscribe(actor_name, method)

    async def unsubscribe(self, actor_name: str) -> None:
        await self.monitor.unsubscribe(actor_name)

    async def held_until(self, name: str) -> float | None:
        return await self.monitor.held_until(name)

    async def release_node(self, node_id: str) -> bool:
        return await self.monitor.release_node(node_id)

    async def status(self) -> dict[str, Any]:
        return await self.monitor.status()

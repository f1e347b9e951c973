"""ProbeActor: one per node, hard-pinned to it; it registers the node, heartbeats, re-probes.

The health monitor starts one on every node that joins (by any means), so nothing needs to be
run by hand on a node after ``fabric join``. The actor reads the node the way its bootstrap did:

1. a ``fabric.io/profile=<name>`` label (``LocalFabric``, ``fabric join --profile``) means the
   bundled profile's recording (``probes.profiles.profile_path``);
2. else ``FABRIC_RECORDING`` in the environment (``fabric join --recording DIR`` starts the
   raylet with it, and Ray's workers inherit the raylet's environment; a label cannot hold a path);
3. else the live machine.

So a simulated node behaves like a real one end to end. It also reports which artifacts the
node's cache holds (``probes.artifacts.ArtifactCache``: placement's warmth), after registering
and whenever that changes, and fills the cache on request (``prefetch``, a spare warming up). On a
node with a ``fabric.io/cloud`` label it also reads the cloud's own reclaim notices and hands each
to the scheduler (``actors.spot_watch``, the ``spot_notices`` settings). Every ``heartbeat_interval_s`` it sends
a heartbeat with utilisation (``Sources.utilization()``: CPU, memory, per-GPU via NVML on a live
node); every ``reprobe_interval_s`` it probes again and reports what the node lost since it
joined (a GPU that vanished, an encoder that stopped working). Being pinned, it dies with its
node; that is the point (the monitor notices through Ray, not through this actor).

``Probe`` is the logic, over the Ray seam (``fabric.rayio.adapter.RayAdapter``; a fake in unit
tests), its ``Sources`` and a clock; ``ProbeActor`` is the thin async Ray actor around it.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Callable, Mapping

import ray

from actors.spot_watch import spot_watch_for
from fabric.core.names import LABEL_PREFIX, PROFILE_LABEL, RECORDING_ENV, REGISTRY
from fabric.rayio.adapter import RayAdapter
from fabric.rayio.heartbeat_channel import BLOCKED_RETRY_S, RAY_BEAT_EVERY, HeartbeatSender
from fabric.core.capabilities import NodeCapabilities
from fabric.core.errors import RegistrationError
from fabric.core.health import detect_degradation
from fabric.core.records import Utilization


def sources_for(labels: dict[str, str], environ: dict[str, str] | None = None) -> tuple[Any, str]:
    """The probe ``Sources`` for a node with these labels, and a word saying which (profile name,
    recording path or ``live``): the ``fabric.io/profile`` label, else ``FABRIC_RECORDING`` in
    ``environ`` (default: this process's), else the live machine."""
    from probes import LiveSources, RecordedSources

    environ = dict(os.environ) if environ is None else environ
    profile = labels.get(PROFILE_LABEL)
    if profile:
        from probes.profiles import profile_path

        return RecordedSources(profile_path(profile)), profile
    recording = environ.get(RECORDING_ENV)
    if recording:
        return RecordedSources(recording), recording
    return LiveSources(), "live"


class Probe:
    """The probe's logic: register, heartbeat, re-probe. ``adapter`` is the Ray seam (default: a
    ``RayAdapter``); ``sources`` the node's ``Sources`` and ``source`` the word naming them
    (default: ``sources_for(labels)``; given sources are named by their ``label``); ``clock`` a
    monotonic time; ``artifacts`` the node's ``ArtifactCache`` (default: at ``cache_root(name)``);
    ``spot_notices`` the settings section of that name (a dict; None: the defaults) and
    ``spot_poller`` what reads the cloud's notices instead of HTTP (a test's)."""

    def __init__(self, node_id: str, *, name: str, labels: dict[str, str], heartbeat_interval_s: float, reprobe_interval_s: float,
                 adapter: Any = None, sources: Any = None, source: str | None = None, clock: Callable[[], float] = time.monotonic,
                 artifacts: Any = None, spot_notices: Mapping[str, Any] | None = None, spot_poller: Any = None) -> None:
        self.node_id = node_id
        self.name = name
        self.labels = dict(labels)
        self.heartbeat_interval_s = heartbeat_interval_s
        self.reprobe_interval_s = reprobe_interval_s
        self.adapter = adapter if adapter is not None else RayAdapter()
        self.clock = clock
        if sources is None:
            self.sources, self.source = sources_for(self.labels)
        else:
            self.sources, self.source = sources, source or sources.label
        self.baseline = self._probe()
        self.current = self.baseline
        self.degraded: tuple[str, ...] = ()
        self.registered = False
        self.last_error: str | None = None
        self.beats = 0
        self.paused_until = 0.0
        self.next_probe = clock() + reprobe_interval_s
        if artifacts is None:
            from probes.artifacts import ArtifactCache, cache_root

            artifacts = ArtifactCache(cache_root(name))
        self.artifacts = artifacts
        self.reported_warm: frozenset[str] | None = None
        """The warmth the registry holds from us (None: not reported since registering)."""
        self.channel: tuple[tuple[str, int], bytes] | None = None
        """The registry's heartbeat channel (address, this node's key) when heartbeats go as datagrams."""
        self.sender = HeartbeatSender()
        self._asked = (0, 0)
        """Datagrams sent and taken (the registry's count) at the last ask for the channel."""
        self.channel_blocked_until = 0.0
        self.channel_note: str | None = None
        """Why the probe left the channel, when it did."""
        self.spot = spot_watch_for(node_id, self.labels, spot_notices, self.adapter, poller=spot_poller)
        """The watch on the cloud's reclaim notices (None: no cloud label, or turned off)."""
        self._spot_task: asyncio.Task | None = None

    def _probe(self) -> NodeCapabilities:
        from probes import probe_node

        slots = self.labels.get(f"{LABEL_PREFIX}slots")
        roles = [r for r in self.labels.get(f"{LABEL_PREFIX}role", "").split("-") if r]
        return probe_node(self.sources, name=self.name, roles=roles or (), max_concurrent_tasks=int(slots) if slots and slots.isdigit() else None)

    async def _registry(self) -> Any:
        return await self.adapter.wait_for_actor(REGISTRY)

    async def run(self) -> None:
        """Beat every ``heartbeat_interval_s`` for ever (nothing while paused)."""
        self.sources.utilization()  # prime psutil's CPU counter
        self.next_probe = self.clock() + self.reprobe_interval_s
        if self.spot is not None and self._spot_task is None:
            self._spot_task = asyncio.get_running_loop().create_task(self.spot.run())
        while True:
            if self.clock() < self.paused_until:
                await asyncio.sleep(min(self.heartbeat_interval_s, self.paused_until - self.clock()))
                continue
            await self.beat()
            await asyncio.sleep(self.heartbeat_interval_s)

    async def beat(self) -> None:
        """One heartbeat: register the node (the first time, or again when the registry lost it)
        or heartbeat, with the load now; re-probe and report when ``reprobe_interval_s`` is up.
        Never raises: a failure is kept in ``last_error`` and the next beat retries."""
        try:
            registry = await self._registry()
            util = self.sources.utilization()
            if not self.registered:
                await registry.register.remote(self.node_id, self.current.model_dump(mode="json"), util.model_dump())
                self.registered = True
                self.reported_warm = None
                self.channel = await self._ask_channel(registry)
            elif self.channel is not None and self.beats % RAY_BEAT_EVERY:  # a datagram; every tenth beat a Ray call
                self.sender.send(self.channel[0], self.channel[1], self.node_id, time.time(), util.model_dump())
            else:
                await registry.heartbeat.remote(self.node_id, util.model_dump())
                if self.channel is not None:  # the Ray beat also refreshes the channel (a restarted registry's)
                    self.channel = await self._ask_channel(registry)
            self.beats += 1
            await self._report_warmth(registry)
            if self.clock() >= self.next_probe:
                self.next_probe = self.clock() + self.reprobe_interval_s
                await self._reprobe(registry, util)
            self.last_error = None
        except RegistrationError as exc:
            self.last_error = str(exc)
            if exc.field == "node_id" and "unregistered" in str(exc):
                self.registered = False  # the registry lost us (a fresh store): register again
        except Exception as exc:  # the registry restarting, a transient Ray error: retry next beat
            self.last_error = f"{type(exc).__name__}: {exc}"

    async def _ask_channel(self, registry: Any) -> tuple[tuple[str, int], bytes] | None:
        """The registry's heartbeat channel for this node (address, key), or None: heartbeats go as
        Ray calls (the settings say so, a registry that has no channel, or datagrams that did not
        arrive since the last ask: then for ``BLOCKED_RETRY_S``)."""
        if self.clock() < self.channel_blocked_until:
            return None
        try:
            got = await registry.heartbeat_channel.remote(self.node_id)
            host, port = got["address"]
            channel = (str(host), int(port)), bytes.fromhex(got["key"])
            taken = int(got.get("taken", 0))
        except RegistrationError:
            raise
        except Exception:  # None, an older registry, a malformed answer: Ray calls
            return None
        sent_before, taken_before = self._asked
        sent = self.sender.sent - sent_before
        arrived = taken - taken_before if taken >= taken_before else taken  # a restarted registry counts anew
        self._asked = (self.sender.sent, taken)
        if self.channel is not None and sent >= 3 and arrived <= 0:
            self.channel_blocked_until = self.clock() + BLOCKED_RETRY_S
            self.channel_note = f"{sent} heartbeat datagrams to {host}:{port} were not taken: Ray calls for {BLOCKED_RETRY_S:.0f} s"
            return None
        return channel

    async def _report_warmth(self, registry: Any, force: bool = False) -> frozenset[str]:
        """Tell the registry what the artifact cache holds, when that changed (or ``force``)."""
        held = await asyncio.to_thread(self.artifacts.held)
        if force or held != self.reported_warm:
            await registry.report_warmth.remote(self.node_id, sorted(held))
            self.reported_warm = held
        return held

    async def prefetch(self, uris: Any, timeout_s: float | None = None) -> list[dict[str, Any]]:
        """Fetch ``uris`` into the node's artifact cache, report the warmth to the registry at
        once, and return one result per URI (``FetchResult.to_dict()``: uri, ok, error, bytes,
        seconds); a failed fetch leaves that artifact cold. A report that fails (the registry
        restarting) is retried by the next beat; the results stand."""
        from probes.artifacts import DEFAULT_TIMEOUT_S, MAX_URIS

        if isinstance(uris, str) or not isinstance(uris, (list, tuple)):
            raise TypeError(f"prefetch takes a list of artifact URIs, got {type(uris).__name__}")
        if len(uris) > MAX_URIS:
            raise ValueError(f"at most {MAX_URIS} URIs per prefetch, got {len(uris)}")
        results = await asyncio.to_thread(self.artifacts.fetch, list(uris), DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s)
        if self.registered:
            try:
                await self._report_warmth(await self._registry(), force=True)
            except Exception as exc:
                self.reported_warm = None
                self.last_error = f"warmth report: {type(exc).__name__}: {exc}"
        return [r.to_dict() for r in results]

    async def _reprobe(self, registry: Any, util: Utilization) -> tuple[str, ...]:
        self.current = await asyncio.to_thread(self._probe)
        self.degraded = detect_degradation(self.baseline, self.current)
        await registry.report.remote(self.node_id, self.current.model_dump(mode="json"), list(self.degraded), util.model_dump())
        return self.degraded

    async def reprobe_now(self) -> list[str]:
        """Probe again at once and report; the degradation reasons found."""
        registry = await self._registry()
        return list(await self._reprobe(registry, self.sources.utilization()))

    def pause(self, seconds: float) -> None:
        """Send nothing for ``seconds``: what the registry sees of a network partition (the raylet
        stays up, the heartbeats stop). For tests and drills."""
        self.paused_until = self.clock() + seconds

    def info(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "name": self.name, "pid": os.getpid(), "source": self.source,
                "registered": self.registered, "beats": self.beats, "last_error": self.last_error,
                "tier": self.current.tier.value, "degraded": list(self.degraded),
                "artifact_cache": str(getattr(self.artifacts, "root", "")), "warm": sorted(self.reported_warm or ()),
                "heartbeat_transport": "udp" if self.channel is not None else "ray", "datagrams_sent": self.sender.sent,
                "channel_note": self.channel_note, "spot": None if self.spot is None else self.spot.info()}


@ray.remote(num_cpus=0)
class ProbeActor:
    """Registers its node, heartbeats, re-probes. Started by the health monitor, pinned to the node:
    a ``Probe`` and its loop."""

    def __init__(self, node_id: str, *, name: str, labels: dict[str, str], heartbeat_interval_s: float, reprobe_interval_s: float,
                 adapter: Any = None, spot_notices: dict[str, Any] | None = None) -> None:
        self.probe = Probe(node_id, name=name, labels=labels, heartbeat_interval_s=heartbeat_interval_s,
                           reprobe_interval_s=reprobe_interval_s, adapter=adapter, spot_notices=spot_notices)
        self._task = asyncio.get_event_loop().create_task(self.probe.run())

    async def reprobe_now(self) -> list[str]:
        """Probe again at once and report; the degradation reasons found."""
        return await self.probe.reprobe_now()

    async def pause(self, seconds: float) -> None:
        """Send nothing for ``seconds``: what the registry sees of a network partition (the raylet
        stays up, the heartbeats stop). For tests and drills."""
        self.probe.pause(seconds)

    async def prefetch(self, uris: list[str], timeout_s: float | None = None) -> list[dict[str, Any]]:
        """Fetch ``uris`` into this node's artifact cache and report the warmth to the registry at
        once; one ``{uri, ok, error, bytes, seconds}`` per URI (``ok: False``: that one stays cold)."""
        return await self.probe.prefetch(uris, timeout_s)

    async def info(self) -> dict[str, Any]:
        return self.probe.info()

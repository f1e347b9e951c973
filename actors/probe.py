"""ProbeActor: one per node, hard-pinned to it; it registers the node, heartbeats, re-probes.

The health monitor starts one on every node that joins (by any means), so nothing needs to be
run by hand on a node after ``fabric join``. The actor reads the node the way its bootstrap did:

1. a ``fabric.io/profile=<name>`` label (``LocalFabric``, ``fabric join --profile``) means the
   bundled profile's recording (``probes.profiles.profile_path``);
2. else ``FABRIC_RECORDING`` in the environment (``fabric join --recording DIR`` starts the
   raylet with it, and Ray's workers inherit the raylet's environment; a label cannot hold a path);
3. else the live machine.

So a simulated node behaves like a real one end to end. Every ``heartbeat_interval_s`` it sends
a heartbeat with utilisation (CPU, memory, per-GPU via NVML when present); every
``reprobe_interval_s`` it probes again and reports what the node lost since it joined (a GPU
that vanished, an encoder that stopped working). Being pinned, it dies with its node; that is
the point (the monitor notices through Ray, not through this actor).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import ray

from fabric.core.names import LABEL_PREFIX, PROFILE_LABEL, RECORDING_ENV, REGISTRY
from fabric.rayio.adapter import RayAdapter
from fabric.core.capabilities import NodeCapabilities
from fabric.core.errors import RegistrationError
from fabric.core.health import detect_degradation
from fabric.core.records import GpuUtilization, Utilization

"""Environment variable naming the recording folder a node was joined from (``fabric join --recording``)."""


def sources_for(labels: dict[str, str], environ: dict[str, str] | None = None) -> tuple[Any, str]:
    """The probe ``Sources`` for a node with these labels, and a word saying which (profile name,
    recording path or ``live``)."""
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


def read_utilization(live: bool) -> Utilization:
    """This machine's load now: CPU and memory from psutil; per-GPU from NVML when ``live`` and NVML
    answers (a recorded node has no real GPU to read)."""
    import psutil

    gpus: list[GpuUtilization] = []
    if live:
        try:
            import pynvml

            pynvml.nvmlInit()
            try:
                for i in range(pynvml.nvmlDeviceGetCount()):
                    h = pynvml.nvmlDeviceGetHandleByIndex(i)
                    rates = pynvml.nvmlDeviceGetUtilizationRates(h)
                    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                    try:
                        enc = float(pynvml.nvmlDeviceGetEncoderUtilization(h)[0])
                    except pynvml.NVMLError:
                        enc = None
                    gpus.append(GpuUtilization(index=i, gpu_percent=float(rates.gpu), memory_used_mib=int(mem.used) >> 20,
                                               memory_total_mib=int(mem.total) >> 20, encoder_percent=enc))
            finally:
                pynvml.nvmlShutdown()
        except Exception:  # no NVML, no driver, no GPU: absent means absent
            gpus = []
    return Utilization(cpu_percent=float(psutil.cpu_percent(interval=None)), memory_percent=float(psutil.virtual_memory().percent),
                       gpus=tuple(gpus))


@ray.remote(num_cpus=0)
class ProbeActor:
    """Registers its node, heartbeats, re-probes. Started by the health monitor, pinned to the node."""

    def __init__(self, node_id: str, *, name: str, labels: dict[str, str], heartbeat_interval_s: float, reprobe_interval_s: float) -> None:
        self.node_id = node_id
        self.name = name
        self.labels = dict(labels)
        self.heartbeat_interval_s = heartbeat_interval_s
        self.reprobe_interval_s = reprobe_interval_s
        self.adapter = RayAdapter()
        self.sources, self.source = sources_for(self.labels)
        self.baseline = self._probe()
        self.current = self.baseline
        self.degraded: tuple[str, ...] = ()
        self.registered = False
        self.last_error: str | None = None
        self.beats = 0
        self.paused_until = 0.0
        self._task = asyncio.get_event_loop().create_task(self._run())

    def _probe(self) -> NodeCapabilities:
        from probes import probe_node

        slots = self.labels.get(f"{LABEL_PREFIX}slots")
        roles = [r for r in self.labels.get(f"{LABEL_PREFIX}role", "").split("-") if r]
        return probe_node(self.sources, name=self.name, roles=roles or (), max_concurrent_tasks=int(slots) if slots and slots.isdigit() else None)

    async def _registry(self) -> Any:
        return await self.adapter.wait_for_actor(REGISTRY)

    async def _run(self) -> None:
        live = self.source == "live"
        read_utilization(live)  # prime psutil's CPU counter
        next_probe = time.monotonic() + self.reprobe_interval_s
        while True:
            if time.monotonic() < self.paused_until:
                await asyncio.sleep(min(self.heartbeat_interval_s, self.paused_until - time.monotonic()))
                continue
            try:
                registry = await self._registry()
                util = read_utilization(live)
                if not self.registered:
                    await registry.register.remote(self.node_id, self.current.model_dump(mode="json"), util.model_dump())
                    self.registered = True
                else:
                    await registry.heartbeat.remote(self.node_id, util.model_dump())
                self.beats += 1
                if time.monotonic() >= next_probe:
                    next_probe = time.monotonic() + self.reprobe_interval_s
                    await self._reprobe(registry, util)
                self.last_error = None
            except RegistrationError as exc:
                self.last_error = str(exc)
                if exc.field == "node_id" and "unregistered" in str(exc):
                    self.registered = False  # the registry lost us (a fresh store): register again
            except Exception as exc:  # the registry restarting, a transient Ray error: retry next beat
                self.last_error = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(self.heartbeat_interval_s)

    async def _reprobe(self, registry: Any, util: Utilization) -> tuple[str, ...]:
        self.current = await asyncio.to_thread(self._probe)
        self.degraded = detect_degradation(self.baseline, self.current)
        await registry.report.remote(self.node_id, self.current.model_dump(mode="json"), list(self.degraded), util.model_dump())
        return self.degraded

    async def reprobe_now(self) -> list[str]:
        """Probe again at once and report; the degradation reasons found."""
        registry = await self._registry()
        return list(await self._reprobe(registry, read_utilization(self.source == "live")))

    async def pause(self, seconds: float) -> None:
        """Send nothing for ``seconds``: what the registry sees of a network partition (the raylet
        stays up, the heartbeats stop). For tests and drills."""
        self.paused_until = time.monotonic() + seconds

    async def info(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "name": self.name, "pid": os.getpid(), "source": self.source,
                "registered": self.registered, "beats": self.beats, "last_error": self.last_error,
                "tier": self.current.tier.value, "degraded": list(self.degraded)}

"""A node's load now (CPU, memory, per-GPU): what every heartbeat carries.

``Sources.utilization()`` is the way in: ``LiveSources`` reads psutil and NVML, a
``RecordedSources`` node reads psutil's CPU and memory of the machine it runs on and no GPUs (a
recorded node has no real GPU to read). The bindings are arguments so a test hands in fakes.
"""

from __future__ import annotations

from typing import Any

from fabric.core.records import GpuUtilization, Utilization

__all__ = ["read_utilization", "nvml_utilization"]


def nvml_utilization(binding: Any = None) -> tuple[GpuUtilization, ...]:
    """Per-GPU load from NVML (``binding`` stands in for ``pynvml``); empty when there is no
    binding, no driver or no GPU, or when any device query fails (absent means absent). A GPU
    that cannot report its encoder load has ``encoder_percent=None``."""
    gpus: list[GpuUtilization] = []
    try:
        if binding is None:
            import pynvml as binding
        pynvml = binding
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
    except Exception:  # noqa: BLE001 - no NVML, no driver, no GPU: absent means absent
        return ()
    return tuple(gpus)


def read_utilization(gpus: bool, *, psutil: Any = None, nvml: Any = None) -> Utilization:
    """This machine's load now: CPU (since the previous call: the first one primes psutil's
    counter) and memory from psutil; per-GPU from NVML when ``gpus``. ``psutil``/``nvml``
    stand in for the modules."""
    if psutil is None:
        import psutil
    return Utilization(cpu_percent=float(psutil.cpu_percent(interval=None)), memory_percent=float(psutil.virtual_memory().percent),
                       gpus=nvml_utilization(nvml) if gpus else ())

"""Why a node does not serve a tier: one line per tier, for ``fabric probe`` and the JSON.

``classify`` says what a node serves; a person looking at a node that lacks ``gpu_apu`` wants to
know whether the GPU, its driver or ffmpeg is missing. The GPU reasons rest on facts only the
probe saw (NVML's error class, which test encode failed with which exit code), so the probe
passes them in; the CPU, framebuffer and relay-role reasons follow from the capabilities alone.
Pure: no I/O, the same inputs give the same reasons.

Only the tiers the hardware decides are explained (``gpu_cuda``, ``gpu_vaapi``, ``gpu_apu``,
``cpu_ffmpeg``, ``framebuffer``); the role tiers need only a declared role, and ``relay`` is
served by every node.
"""

from __future__ import annotations

from typing import Mapping

from fabric.core.capabilities import MIN_COMPUTE_CPUS, MIN_COMPUTE_MEMORY_MIB, GpuVendor, NodeCapabilities, classify
from fabric.core.tiers import TIERS_BEST_FIRST, ComputeTier

__all__ = ["explain_unserved", "EXPLAINED_TIERS", "RELAY_CAPPED"]

EXPLAINED_TIERS = (ComputeTier.GPU_CUDA, ComputeTier.GPU_VAAPI, ComputeTier.GPU_APU, ComputeTier.CPU_FFMPEG, ComputeTier.FRAMEBUFFER)
RELAY_CAPPED = "the relay role caps this node at relay"


def explain_unserved(caps: NodeCapabilities, *, cuda: str, vaapi: Mapping[str, str]) -> dict[ComputeTier, str]:
    """Tier -> reason for each explained tier ``caps`` does not serve, best tier first.

    ``cuda`` is why no NVML-enumerated NVIDIA GPU is here; ``vaapi`` maps a GPU's render node
    (``/dev/dri/renderD128``) to why its VA-API encode is not proven (absent for a proven GPU).
    """
    served = set(caps.tiers)
    hardware = set(classify(caps.model_copy(update={"roles": ()}))) if "relay" in caps.roles else served
    reasons: dict[ComputeTier, str] = {}
    for tier in EXPLAINED_TIERS:
        if tier in served:
            continue
        if tier in hardware:
            reasons[tier] = RELAY_CAPPED
        elif tier is ComputeTier.GPU_CUDA:
            reasons[tier] = cuda
        elif tier in (ComputeTier.GPU_VAAPI, ComputeTier.GPU_APU):
            reasons[tier] = _vaapi_reason(caps, discrete=tier is ComputeTier.GPU_VAAPI, vaapi=vaapi)
        elif tier is ComputeTier.CPU_FFMPEG:
            cpus = f"{caps.cpu_usable:g} usable CPU{'' if caps.cpu_usable == 1 else 's'}"
            reasons[tier] = (f"{cpus}, {caps.memory_mib} MiB: a CPU encode node needs >= {MIN_COMPUTE_CPUS:g} CPUs "
                             f"and >= {MIN_COMPUTE_MEMORY_MIB} MiB")
        elif tier is ComputeTier.FRAMEBUFFER:
            reasons[tier] = "no framebuffer (/dev/fb0)"
    return {t: reasons[t] for t in TIERS_BEST_FIRST if t in reasons}


def _vaapi_reason(caps: NodeCapabilities, *, discrete: bool, vaapi: Mapping[str, str]) -> str:
    candidates = [g for g in caps.gpus if g.vendor is not GpuVendor.NVIDIA and g.discrete == discrete]
    if not candidates:
        why = f"no {'discrete AMD or Intel GPU' if discrete else 'integrated GPU (APU or iGPU)'}"
        if any(g.vendor is GpuVendor.NVIDIA for g in caps.gpus):
            why += " (VA-API on NVIDIA is decode-only)"
        return why
    whys = [vaapi.get(g.render_node or "", "VA-API encode not proven") for g in candidates]
    if len(candidates) == 1:
        return whys[0]
    return "; ".join(f"{(g.render_node or g.model).rsplit('/', 1)[-1]}: {w}" for g, w in zip(candidates, whys))

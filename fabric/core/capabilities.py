"""What a probe found on one node, and what follows from it: tiers, Ray resources, labels.

Pure data (pydantic v2) and pure derivations. The probes fill these models; the registry,
the placement engine and the node bootstrap read them. Nothing here touches hardware or Ray.
"""

from __future__ import annotations

import math
import re
from enum import Enum
from functools import cached_property
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator, model_validator

from fabric.core.names import K3S_PREFIX, LABEL_PREFIX, SLOTS_RESOURCE, TIER_RESOURCE_PREFIX
from fabric.core.tiers import TIERS_BEST_FIRST, ComputeTier


#: Below these a node cannot usefully run CPU encode work: it only relays (an edge VPS).
MIN_COMPUTE_CPUS = 2.0
MIN_COMPUTE_MEMORY_MIB = 2048

NonNegInt = Annotated[int, Field(ge=0)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def names(value: object, what: str) -> list[str]:
    """``value`` as the list of ``what`` names a field holds (a list, tuple or set of strings).
    Anything else is a ``ValueError`` (which pydantic reports under the field's name), never a
    ``TypeError``: a single string is not a list of names, nor is a number."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(f"a list of {what} names, got {type(value).__name__}")
    bad = [item for item in value if not isinstance(item, str)]
    if bad:
        raise ValueError(f"a list of {what} names, with a {type(bad[0]).__name__} among them")
    return list(value)


class GpuVendor(str, Enum):
    """GPU vendors the probes recognise (PCI vendor ids 0x10de, 0x1002, 0x8086; Arm Mali by driver)."""

    NVIDIA = "nvidia"
    AMD = "amd"
    INTEL = "intel"
    ARM = "arm"


PCI_VENDORS: dict[str, GpuVendor] = {"0x10de": GpuVendor.NVIDIA, "0x1002": GpuVendor.AMD, "0x8086": GpuVendor.INTEL}


class StorageKind(str, Enum):
    """Storage class of a block device, as the ``storage-tier`` label means it."""

    NVME = "nvme"
    SSD = "ssd"
    HDD = "hdd"
    VIRTUAL = "virtual"
    UNKNOWN = "unknown"


class GpuInfo(_Model):
    """One GPU device."""

    index: NonNegInt = 0
    """Position among this node's GPUs (NVML index for NVIDIA, render-node order otherwise)."""
    vendor: GpuVendor
    """Who made it."""
    model: str = Field(min_length=1)
    """Marketing name, e.g. ``NVIDIA GeForce RTX 4070`` or ``AMD Custom GPU 0405``."""
    vram_mib: NonNegInt = 0
    """Dedicated memory (MiB); for an integrated GPU the carve-out it reports."""
    discrete: bool
    """True for a PCIe card with its own memory; False for an integrated GPU (APU/iGPU)."""
    bus: Literal["pcie", "integrated", "unknown"] = "unknown"
    """Bus type from NVML or sysfs evidence."""
    compute_capability: str | None = None
    """CUDA compute capability, e.g. ``8.9`` (NVIDIA only)."""
    cuda: bool = False
    """CUDA usable: an NVIDIA device that NVML enumerated."""
    mig_mode: bool | None = None
    """NVIDIA MIG mode enabled (None when not supported or unknown)."""
    encoders: tuple[str, ...] = ()
    """Codecs this device can encode in hardware (``h264``, ``hevc``, ``av1``...): NVENC or VA-API,
    each proven by a one-frame test encode (NVML's capacity or vainfo's entrypoints alone are not)."""
    encoder_capacity: dict[str, int] = Field(default_factory=dict)
    """NVML encoder capacity per codec (percent of one engine), when NVML reports it."""
    decoders: tuple[str, ...] = ()
    """Codecs this device can decode in hardware."""
    vaapi_profiles: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """VA-API profile -> entrypoints, as vainfo/libva lists them (empty when VA-API is absent),
    less every encode entrypoint whose codec no test encode proved: the probe keeps an encode
    entrypoint only for a codec in ``encoders`` (listing is not having)."""
    vaapi_driver: str | None = None
    """VA-API driver version string."""
    render_node: str | None = None
    """``/dev/dri/renderD128`` and so on, when the device has one."""
    driver: str | None = None
    """Kernel driver (``amdgpu``, ``i915``, ``nvidia``...)."""
    pci_id: str | None = None
    """``vendor:device`` PCI ids, e.g. ``0x1002:0x163f``."""
    gtt_mib: NonNegInt = 0
    """GTT (system memory the GPU may map), from sysfs; large on APUs."""

    @field_validator("encoders", "decoders", mode="before")
    @classmethod
    def _sorted_codecs(cls, v):
        return tuple(sorted(set(names(v, "codec")))) if v is not None else ()

    @property
    def label_name(self) -> str:
        """The model normalised like Ray's accelerator type (``GeForce-RTX-4070``), label-safe."""
        return normalise_gpu_name(self.model)


class StorageInfo(_Model):
    """One mounted block device."""

    device: str
    mount: str = "/"
    kind: StorageKind = StorageKind.UNKNOWN
    size_gib: NonNegFloat = 0.0


class FramebufferInfo(_Model):
    """A Linux framebuffer (``/dev/fb0``): the framebuffer tier."""

    device: str = "/dev/fb0"
    resolution: str | None = None
    """``WIDTHxHEIGHT`` from ``/sys/class/graphics/fbN/modes`` or ``virtual_size``."""


class TailnetInfo(_Model):
    """This node on a tailnet (``tailscale status --json``)."""

    dns_name: str | None = None
    ips: tuple[str, ...] = ()
    online: bool = True


class FfmpegInfo(_Model):
    """ffmpeg on this node: what it lists, and what a one-frame test encode proved."""

    path: str | None = None
    version: str | None = None
    listed: tuple[str, ...] = ()
    """Video encoders ``ffmpeg -encoders`` lists."""
    working: tuple[str, ...] = ()
    """Encoders whose test encode succeeded. Listing is not having."""


class Limitations(_Model):
    """What this node should not be asked to do (``DeviceLimitations``)."""

    max_concurrent_tasks: Annotated[int, Field(ge=1)] = 1
    """Concurrent fabric tasks this node takes; also its ``fabric.slots`` Ray resource."""
    notes: tuple[str, ...] = ()
    """Human-readable reasons behind the limits or missing capabilities."""


class NodeCapabilities(_Model):
    """Everything a probe found on one node. ``tier``/``tiers`` are derived, never stored."""

    name: str = Field(min_length=1)
    """Stable node name: hostname or tailnet DNS name."""
    arch: str = "x86_64"
    """``uname -m``: ``x86_64``, ``aarch64``..."""
    cpu_logical: Annotated[int, Field(ge=1)] = 1
    cpu_physical: Annotated[int, Field(ge=1)] = 1
    cpu_usable: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    """CPUs this process may really use: affinity and cgroup quota honoured."""
    memory_mib: NonNegInt = 0
    gpus: tuple[GpuInfo, ...] = ()
    storage: tuple[StorageInfo, ...] = ()
    ffmpeg: FfmpegInfo = Field(default_factory=FfmpegInfo)
    framebuffer: FramebufferInfo | None = None
    tailnet: TailnetInfo | None = None
    roles: tuple[str, ...] = ()
    """Declared roles (``relay``, ``batch``, ``wasm``, ``dsp``, ``esp32``, ``ethernet``): a role names
    a tier the hardware alone cannot show; ``relay`` also caps the node at the relay tier."""
    limitations: Limitations = Field(default_factory=Limitations)
    unserved: dict[ComputeTier, str] = Field(default_factory=dict)
    """Tier -> why this node does not serve it (``gpu_vaapi``: ``VA-API encode not proven: no
    ffmpeg``), best tier first, for the hardware-decided tiers the probe can explain; never a tier
    in ``tiers``. For people and ``fabric probe``; placement reads ``tiers`` only."""
    source: str = "live"
    """``live`` or the recording (profile) this was read from."""

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data):
        # ``tier``/``tiers`` are serialised for readers but always re-derived on load.
        if isinstance(data, dict) and ("tier" in data or "tiers" in data):
            data = {k: v for k, v in data.items() if k not in ("tier", "tiers")}
        return data

    @field_validator("arch")
    @classmethod
    def _arch(cls, v: str) -> str:
        v = v.strip().lower()
        return {"amd64": "x86_64", "arm64": "aarch64"}.get(v, v) or "unknown"

    @field_validator("roles", mode="before")
    @classmethod
    def _roles(cls, v):
        roles = tuple(sorted({r.strip().lower() for r in (names(v, "role") if v is not None else ()) if r.strip()}))
        unknown = [r for r in roles if r not in ROLES]
        if unknown:
            raise ValueError(f"unknown role(s) {unknown}; valid roles: {sorted(ROLES)}")
        return roles

    # -- derived ------------------------------------------------------------------------
    @cached_property
    def _derived(self) -> tuple[tuple[ComputeTier, ...], frozenset[str]]:
        """``tiers`` and ``capability_tags``, derived once per instance (the model is frozen; a
        placement record and the scheduler's feed rebuild records of the same capabilities often)."""
        tiers = classify(self)
        return tiers, self._tags(tiers)

    def model_copy(self, *, update=None, deep: bool = False):
        """A copy; its derived values are derived again (an ``update`` may change them)."""
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("_derived", None)
        return copied

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tiers(self) -> tuple[ComputeTier, ...]:
        """Every tier this node serves, best first."""
        return self._derived[0]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tier(self) -> ComputeTier:
        """The best tier this node serves."""
        return self.tiers[0]

    @property
    def capability_tags(self) -> frozenset[str]:
        """Flat tags that requirements name: ``arch:aarch64``, ``ffmpeg:h264_vaapi``, ``gpu:nvidia``,
        ``encode:hevc``, ``tier:gpu_apu``, ``role:relay``, ``framebuffer``, ``tailnet``."""
        return self._derived[1]

    def _tags(self, tiers: tuple[ComputeTier, ...]) -> frozenset[str]:
        tags = {f"arch:{self.arch}"}
        tags.update(f"ffmpeg:{e}" for e in self.ffmpeg.working)
        for g in self.gpus:
            tags.add(f"gpu:{g.vendor.value}")
            tags.add(f"gpu-model:{g.label_name}")
            tags.update(f"encode:{c}" for c in g.encoders)
            tags.update(f"decode:{c}" for c in g.decoders)
            if g.cuda:
                tags.add("cuda")
            if any(_is_encode_entrypoint(ep) for eps in g.vaapi_profiles.values() for ep in eps):
                tags.add("vaapi-encode")
        tags.update(f"tier:{t.value}" for t in tiers)
        tags.update(f"role:{r}" for r in self.roles)
        if self.framebuffer is not None:
            tags.add("framebuffer")
        if self.tailnet is not None:
            tags.add("tailnet")
        return frozenset(tags)

    @property
    def ray_gpus(self) -> int:
        """GPUs the node declares to Ray (``ray start --num-gpus``): its CUDA devices, which is what
        Ray's own detection counts and what the ``CUDA_VISIBLE_DEVICES`` Ray sets for a task indexes.
        Other GPUs (VA-API) are the fabric's to account for, not Ray's."""
        return sum(1 for g in self.gpus if g.cuda)

    @property
    def primary_gpu(self) -> GpuInfo | None:
        """The GPU that gives the node its tier (CUDA first, then discrete, then the rest)."""
        if not self.gpus:
            return None
        return sorted(self.gpus, key=lambda g: (not g.cuda, not g.discrete, -g.vram_mib, g.index))[0]

    @property
    def storage_kind(self) -> StorageKind:
        """The storage class of the root mount (or the first device)."""
        for s in self.storage:
            if s.mount == "/":
                return s.kind
        return self.storage[0].kind if self.storage else StorageKind.UNKNOWN

    # -- what Ray and Kubernetes see ------------------------------------------------------
    def to_ray_resources(self) -> dict[str, float]:
        """Custom resources for ``ray start --resources``: the slot capacity that makes Ray refuse
        to oversubscribe the node, and one marker per served tier."""
        res: dict[str, float] = {SLOTS_RESOURCE: float(self.limitations.max_concurrent_tasks)}
        for t in self.tiers:
            res[f"{TIER_RESOURCE_PREFIX}{t.value}"] = 1.0
        return res

    def to_ray_labels(self, *, pool: str | None = None, pool_tier: str | None = None, zone: str | None = None,
                      cloud: str | None = None) -> dict[str, str]:
        """Node labels for ``ray start --labels``; every key and value passes Ray's label rules."""
        labels = {
            f"{LABEL_PREFIX}tier": self.tier.value,
            f"{LABEL_PREFIX}arch": label_value(self.arch),
            f"{LABEL_PREFIX}name": label_value(self.name),
            f"{LABEL_PREFIX}storage": self.storage_kind.value,
            f"{LABEL_PREFIX}slots": str(self.limitations.max_concurrent_tasks),
        }
        gpu = self.primary_gpu
        if gpu is not None:
            labels[f"{LABEL_PREFIX}gpu"] = gpu.label_name
            labels[f"{LABEL_PREFIX}gpu-vendor"] = gpu.vendor.value
            labels[f"{LABEL_PREFIX}gpu-count"] = str(len(self.gpus))
        if self.roles:
            labels[f"{LABEL_PREFIX}role"] = label_value("-".join(self.roles))
        if pool:
            labels[f"{LABEL_PREFIX}pool"] = label_value(pool)
        if pool_tier:
            labels[f"{LABEL_PREFIX}pool-tier"] = label_value(pool_tier)
        if zone:
            labels[f"{LABEL_PREFIX}zone"] = label_value(zone)
        if cloud:
            labels[f"{LABEL_PREFIX}cloud"] = label_value(cloud)
        return labels

    def to_k3s_labels(self) -> dict[str, str]:
        """The ``topology.researchstack.io/...`` labels. A vendor and model join with ``-``
        (``nvidia-rtx4070``, ``auto-foxtop``): ``:`` is not valid in a Kubernetes label value."""
        gpu = self.primary_gpu
        role = self.roles[0] if self.roles else f"auto-{self.tier.value.replace('_', '-')}"
        labels = {
            f"{K3S_PREFIX}role": label_value(role),
            f"{K3S_PREFIX}tier": self.tier.value,
            f"{K3S_PREFIX}gpu": label_value(f"{gpu.vendor.value}-{gpu.label_name}".lower()) if gpu else "none",
            f"{K3S_PREFIX}arm64": "true" if self.arch == "aarch64" else "false",
            f"{K3S_PREFIX}storage-tier": _K3S_STORAGE[self.storage_kind],
            f"{K3S_PREFIX}network": "tailscale" if self.tailnet is not None else "lan",
        }
        return labels

    def summary(self) -> str:
        """One line for people: ``gpu_cuda  x86_64 12 cpu 30.4 GiB  NVIDIA GeForce RTX 4070 (12282 MiB)``."""
        gpus = ", ".join(f"{g.model} ({g.vram_mib} MiB{'' if g.discrete else ', integrated'})" for g in self.gpus) or "no GPU"
        return f"{self.tier.value:<11} {self.arch:<8} {self.cpu_usable:g} cpu {self.memory_mib / 1024:.1f} GiB  {gpus}"


ROLES = frozenset({"relay", "batch", "wasm", "dsp", "esp32", "ethernet"})
_ROLE_TIERS = {
    "batch": ComputeTier.BATCH,
    "ethernet": ComputeTier.ETHERNET,
    "wasm": ComputeTier.WASM,
    "dsp": ComputeTier.DSP,
    "esp32": ComputeTier.ESP32,
}
_K3S_STORAGE = {
    StorageKind.NVME: "nvme-ssd",
    StorageKind.SSD: "sata-ssd",
    StorageKind.HDD: "hdd",
    StorageKind.VIRTUAL: "virtual",
    StorageKind.UNKNOWN: "unknown",
}


def _is_encode_entrypoint(entrypoint: str) -> bool:
    return entrypoint.startswith("VAEntrypointEncSlice") or entrypoint == "VAEntrypointEncPicture"


def classify(caps: NodeCapabilities) -> tuple[ComputeTier, ...]:
    """Every tier ``caps`` serves, best first (the tier table, made concrete):

    - ``gpu_cuda``: an NVIDIA GPU that NVML enumerated (CUDA usable).
    - ``gpu_vaapi``: a discrete AMD/Intel GPU whose VA-API offers hardware encode.
    - ``gpu_apu``: an integrated AMD/Intel GPU whose VA-API offers hardware encode.
      (The probe leaves an encode entrypoint in ``vaapi_profiles`` only where a one-frame test
      encode on that GPU's render node proved it, so vainfo's listing alone makes neither tier.)
    - ``cpu_ffmpeg``: a general-purpose node (>= 2 usable CPUs, >= 2 GiB) that can run CPU encode work.
    - ``batch``/``ethernet``/``wasm``/``dsp``/``esp32``: declared by role; the hardware cannot show them.
    - ``framebuffer``: a ``/dev/fb0`` is present.
    - ``relay``: every node; a ``relay`` role caps the node here (it only relays).
    """
    if "relay" in caps.roles:
        return (ComputeTier.RELAY,)
    served: set[ComputeTier] = {ComputeTier.RELAY}
    for g in caps.gpus:
        if g.vendor is GpuVendor.NVIDIA:
            if g.cuda:
                served.add(ComputeTier.GPU_CUDA)
            continue  # VA-API on NVIDIA is decode-only: never a VA-API tier
        if any(_is_encode_entrypoint(ep) for eps in g.vaapi_profiles.values() for ep in eps):
            served.add(ComputeTier.GPU_VAAPI if g.discrete else ComputeTier.GPU_APU)
    if caps.cpu_usable >= MIN_COMPUTE_CPUS and caps.memory_mib >= MIN_COMPUTE_MEMORY_MIB:
        served.add(ComputeTier.CPU_FFMPEG)
    for role in caps.roles:
        if role in _ROLE_TIERS:
            served.add(_ROLE_TIERS[role])
    if caps.framebuffer is not None:
        served.add(ComputeTier.FRAMEBUFFER)
    return tuple(t for t in TIERS_BEST_FIRST if t in served)


def derive_max_concurrent_tasks(cpu_usable: float, tiers: tuple[ComputeTier, ...]) -> int:
    """``DeviceLimitations.max_concurrent_tasks`` from the hardware: one task per usable
    CPU (at least one); a relay-only node takes one at a time."""
    if tiers == (ComputeTier.RELAY,):
        return 1
    return max(1, int(math.floor(cpu_usable)))


# -- label helpers ---------------------------------------------------------------------------
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
_NVIDIA_NAME = re.compile(r"\w+\s+((?:[A-Z]+\s+)*[A-Z0-9]*\d[A-Z0-9]*)")


def label_value(raw: str) -> str:
    """``raw`` made into a valid Ray/Kubernetes label value: [A-Za-z0-9_.-], alphanumeric at both
    ends, at most 63 characters. Empty input gives ``unknown``."""
    v = _LABEL_BAD.sub("-", raw.strip())
    v = re.sub(r"-{2,}", "-", v)[:63].strip("-_.")
    return v or "unknown"


def normalise_gpu_name(name: str) -> str:
    """A GPU model the way Ray names accelerator types: data-centre names keep their uppercase
    model token (``Tesla V100-SXM2-16GB`` -> ``V100``), consumer names drop ``NVIDIA`` and join
    words with ``-`` (``NVIDIA GeForce RTX 4070`` -> ``GeForce-RTX-4070``). Other vendors' names
    are joined the same way (``AMD Radeon RX 7600`` -> ``AMD-Radeon-RX-7600``)."""
    name = name.strip()
    if name.upper().startswith("NVIDIA") or name.startswith("Tesla"):
        match = _NVIDIA_NAME.match(name)
        result = match.group(1).replace(" ", "-") if match else None
        if result and len(result) > 1:
            return label_value(result)
        name = re.sub(r"^NVIDIA\s+", "", name).strip()
    return label_value(name.replace(" ", "-"))

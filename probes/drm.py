"""GPUs as the kernel's DRM render nodes show them (``/sys/class/drm/renderD*/device``).

This is how AMD and Intel GPUs are found (NVIDIA ones come from NVML; an NVIDIA render node is
only matched to its NVML device, or reported as an NVIDIA GPU without CUDA when NVML is absent).
Read per render node: PCI ``vendor`` and ``device`` ids, the kernel ``driver`` (the basename of
the ``driver`` symlink), the PCI address (the basename of the ``device`` symlink), and amdgpu's
``mem_info_vram_total`` / ``mem_info_gtt_total``.

Integrated or discrete is decided from this sysfs evidence, never from vainfo: an APU's vainfo
reads exactly like a discrete card's. The rule, first match wins:

1. Intel: discrete when the PCI device id belongs to a discrete family (DG1 ``0x4905``-``0x4909``,
   Alchemist/Arc ``0x56xx``, Battlemage ``0xe20x``/``0xe21x``, Ponte Vecchio ``0x0bdx``);
   otherwise integrated (Intel's iGPU also sits at its fixed address ``0000:00:02.0``).
2. AMD: integrated when the device id is a known APU (table below: Raven to Strix Halo, the
   Steam Deck's Van Gogh and Sephiroth); otherwise from the VRAM amdgpu reports: a carve-out of
   at most 1 GiB is an APU, more is a discrete card (a 2 GiB Radeon 550 is discrete).
3. Arm Mali (``panfrost``/``panthor``/``lima`` drivers, no PCI ids): integrated.
4. No evidence (no VRAM figure, unknown id): integrated, bus ``unknown``, with a note. Promising
   the lower tier is the safe mistake: work that needs a discrete card is not sent to an iGPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from fabric.core.capabilities import PCI_VENDORS, GpuVendor
from probes._numbers import parse_index, parse_int

__all__ = ["RenderNode", "read_render_nodes", "decide_integrated", "AMD_APU_IDS"]

GiB = 1024**3
MiB = 1024**2

#: AMD PCI device ids of integrated GPUs (APUs), with a codename for the model fallback.
AMD_APU_IDS: dict[str, str] = {
    "0x9874": "Carrizo", "0x98e4": "Stoney", "0x15dd": "Raven", "0x15d8": "Picasso",
    "0x1636": "Renoir", "0x164c": "Lucienne", "0x1638": "Cezanne", "0x15e7": "Barcelo",
    "0x163f": "Van Gogh", "0x1435": "Sephiroth", "0x1681": "Rembrandt", "0x164e": "Raphael",
    "0x1506": "Mendocino", "0x15bf": "Phoenix", "0x15c8": "Phoenix2", "0x150e": "Strix Point",
    "0x1586": "Strix Halo", "0x13c0": "Granite Ridge",
}
_INTEL_DISCRETE = re.compile(r"^0x(490[5-9]|56[0-9a-f]{2}|e2[01][0-9a-f]|0bd[0-9a-f])$")
_ARM_DRIVERS = frozenset({"panfrost", "panthor", "lima", "mali"})

ListDir = Callable[[str], list[str]]
ReadFile = Callable[[str], "str | None"]
ResolveLink = Callable[[str], "str | None"]


@dataclass(frozen=True)
class RenderNode:
    """One render node's sysfs evidence, and what it means."""

    name: str
    """``renderD128``."""
    vendor: GpuVendor | None
    vendor_id: str | None
    device_id: str | None
    driver: str | None
    pci_address: str | None
    """``0000:03:00.0`` (None for platform devices)."""
    vram_bytes: int | None
    gtt_bytes: int | None
    integrated: bool
    evidence: str
    """Why ``integrated`` came out as it did (shown in notes)."""
    certain: bool = True

    @property
    def path(self) -> str:
        return f"/dev/dri/{self.name}"


def _hex(text: str | None) -> str | None:
    if not text:
        return None
    v = text.strip().lower()
    return v if re.fullmatch(r"0x[0-9a-f]{1,8}", v) else None


def _num(text: str | None) -> int | None:
    value = parse_int(text)
    return value if value is not None and value >= 0 else None


def _basename(path: str | None) -> str | None:
    if not path:
        return None
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name or None


def decide_integrated(vendor: GpuVendor | None, device_id: str | None, driver: str | None, vram_bytes: int | None) -> tuple[bool, str, bool]:
    """(integrated, evidence, certain) by the module's rule."""
    if vendor is GpuVendor.INTEL:
        if device_id and _INTEL_DISCRETE.match(device_id):
            return False, f"Intel device id {device_id} is a discrete family", True
        return True, f"Intel device id {device_id or '?'} is not a discrete family", True
    if vendor is GpuVendor.AMD:
        if device_id in AMD_APU_IDS:
            return True, f"AMD device id {device_id} is the {AMD_APU_IDS[device_id]} APU", True
        if vram_bytes is not None and vram_bytes > 0:
            if vram_bytes <= GiB:
                return True, f"amdgpu VRAM {vram_bytes // MiB} MiB is an APU carve-out (<= 1 GiB)", True
            return False, f"amdgpu VRAM {vram_bytes // MiB} MiB is a discrete card's (> 1 GiB)", True
    if vendor is GpuVendor.ARM or (driver in _ARM_DRIVERS):
        return True, f"Arm GPU ({driver}) is on-chip", True
    return True, "no sysfs evidence of dedicated memory; assumed integrated", False


def read_render_nodes(list_dir: ListDir, read_file: ReadFile, resolve_link: ResolveLink) -> list[RenderNode]:
    """Every ``renderD*`` node with its evidence, in number order."""
    numbered = {n: parse_index(n, "renderD") for n in list_dir("sys/class/drm")}
    names = sorted((n for n, i in numbered.items() if i is not None), key=lambda n: numbered[n])
    out: list[RenderNode] = []
    for name in names:
        base = f"sys/class/drm/{name}/device"
        vendor_id = _hex(read_file(f"{base}/vendor"))
        device_id = _hex(read_file(f"{base}/device"))
        driver = _basename(resolve_link(f"{base}/driver"))
        pci = _basename(resolve_link(base))
        if pci and not re.fullmatch(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", pci):
            pci = None
        vendor = PCI_VENDORS.get(vendor_id or "")
        if vendor is None and driver in _ARM_DRIVERS:
            vendor = GpuVendor.ARM
        vram = _num(read_file(f"{base}/mem_info_vram_total"))
        gtt = _num(read_file(f"{base}/mem_info_gtt_total"))
        integrated, evidence, certain = decide_integrated(vendor, device_id, driver, vram)
        out.append(RenderNode(name, vendor, vendor_id, device_id, driver, pci, vram, gtt, integrated, evidence, certain))
    return out


def same_pci_address(a: str | None, b: str | None) -> bool:
    """``0000:01:00.0`` (sysfs) equals ``00000000:01:00.0`` (NVML): domains differ in width."""
    if not a or not b:
        return False

    def norm(x: str) -> tuple[int, str] | None:
        parts = x.strip().lower().split(":")
        if len(parts) != 3:
            return None
        try:
            return int(parts[0], 16), f"{parts[1]}:{parts[2]}"
        except ValueError:
            return None

    na, nb = norm(a), norm(b)
    return na is not None and na == nb

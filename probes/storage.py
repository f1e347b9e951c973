"""Storage class of each mounted block device: nvme, ssd, hdd or virtual (the storage-tier label).

``/sys/block/<dev>/queue/rotational`` is the kernel's word on spinning media, but a virtio disk
reports ``rotational=1`` whatever backs it (see the cloud VM fixture), so virtual devices are
recognised first: ``vd*``/``xvd*`` names, or a sysfs device path that runs through ``virtio`` or
Xen's ``vbd``. Then ``nvme*`` is nvme, ``rotational=0`` is ssd, ``1`` is hdd, and anything we
cannot read is unknown.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from fabric.core.capabilities import StorageInfo, StorageKind
from probes._numbers import as_int

__all__ = ["base_device", "storage_kind", "parse_storage"]

GiB = 1024**3
_SKIP = re.compile(r"^(loop|ram|zram|sr|fd)\d*")


def base_device(device: str) -> str | None:
    """``/dev/nvme0n1p2`` -> ``nvme0n1``, ``/dev/sda1`` -> ``sda``, ``/dev/mmcblk0p1`` -> ``mmcblk0``;
    None for things that are not a plain block device (``overlay``, ``/dev/mapper/...``)."""
    if not device.startswith("/dev/") or device.startswith("/dev/mapper/"):
        return None
    name = device[len("/dev/"):]
    if "/" in name:
        return None
    if m := re.fullmatch(r"((?:nvme\d+n\d+)|(?:mmcblk\d+))(p\d+)?", name):
        return m.group(1)
    if m := re.fullmatch(r"((?:[shv]|xv)d[a-z]+)\d*", name):
        return m.group(1)
    return name


def storage_kind(dev: str, rotational: str | None, sys_path: str | None) -> StorageKind:
    """The class of block device ``dev`` from its sysfs evidence."""
    if re.match(r"^(vd|xvd)[a-z]", dev) or (sys_path and ("/virtio" in sys_path or "/vbd-" in sys_path)):
        return StorageKind.VIRTUAL
    if dev.startswith("nvme"):
        return StorageKind.NVME
    value = (rotational or "").strip()
    if value == "0":
        return StorageKind.SSD
    if value == "1":
        return StorageKind.HDD
    return StorageKind.UNKNOWN


def parse_storage(
    disks: tuple[dict[str, Any], ...], read_file: Callable[[str], "str | None"], resolve_link: Callable[[str], "str | None"]
) -> list[StorageInfo]:
    """One ``StorageInfo`` per mounted block device (first mount wins; ``/`` first). Entries that
    are not a dict with a device path are skipped; a size that is not a sane integer is 0."""
    out: list[StorageInfo] = []
    seen: set[str] = set()
    usable = [d for d in disks if isinstance(d, dict) and isinstance(d.get("device"), str)]
    ordered = sorted(usable, key=lambda d: d.get("mountpoint") != "/")
    for d in ordered:
        device = d["device"]
        dev = base_device(device)
        if dev is None or _SKIP.match(dev) or device in seen:
            continue
        seen.add(device)
        rotational = read_file(f"sys/block/{dev}/queue/rotational")
        kind = storage_kind(dev, rotational, resolve_link(f"sys/block/{dev}"))
        total = as_int(d.get("total"))
        size = round(total / GiB, 1) if total is not None and total > 0 else 0.0
        mount = d.get("mountpoint") if isinstance(d.get("mountpoint"), str) and d.get("mountpoint") else "/"
        out.append(StorageInfo(device=device, mount=mount, kind=kind, size_gib=size))
    return out

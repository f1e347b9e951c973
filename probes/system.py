"""CPU, memory and mounts: what the node has, and how much of it this process may really use.

A container or a systemd slice often sees every CPU and all memory of its host in psutil, yet
may use only a share: CPU affinity (``sched_getaffinity``) and the cgroup CPU quota
(v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``, v2 ``cpu.max``) cap the CPUs, the memory
cgroup (v1 ``memory.limit_in_bytes``, v2 ``memory.max``) caps memory. Sizing ``fabric.slots``
from the host's numbers would oversubscribe such a node, so the usable numbers win.

The cgroup files are read through a ``read_file(path)`` callable (paths relative to ``/``), so
a recording or a fake tree in a test stands in for the machine. Every level from the process's
cgroup up to the root is read and the tightest limit wins, as the kernel enforces it.
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from probes._numbers import as_int

__all__ = ["SystemFacts", "read_psutil", "parse_system", "cgroup_cpu_quota", "cgroup_memory_limit", "cgroup_files"]

MiB = 1024 * 1024
#: cgroup v1 reports "no limit" as a page-rounded LONG_MAX; anything this large is unlimited.
_UNLIMITED = 1 << 60
#: A cgroup path deeper than this is garbage, not a hierarchy (systemd's are under ten levels);
#: every level costs file reads, so an unbounded path would make the probe quadratic.
_MAX_CGROUP_LEVELS = 64

ReadFile = Callable[[str], "str | None"]


@dataclass(frozen=True)
class SystemFacts:
    """Parsed ``system.json`` plus cgroup limits."""

    hostname: str | None
    arch: str
    cpu_logical: int
    cpu_physical: int
    cpu_usable: float
    memory_mib: int
    disks: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]


def read_psutil() -> dict[str, Any]:
    """The live ``system.json``: psutil's readings, affinity and the mounted block devices."""
    import psutil  # imported here so that parsing recordings never needs it

    data: dict[str, Any] = {"machine": platform.machine(), "hostname": socket.gethostname()}
    data["cpu_logical"] = psutil.cpu_count(logical=True)
    data["cpu_physical"] = psutil.cpu_count(logical=False)
    try:
        data["cpu_affinity"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    data["mem_total"] = psutil.virtual_memory().total
    disks = []
    for part in psutil.disk_partitions(all=False):
        entry: dict[str, Any] = {"device": part.device, "mountpoint": part.mountpoint, "fstype": part.fstype}
        try:
            entry["total"] = psutil.disk_usage(part.mountpoint).total
        except OSError:
            pass
        disks.append(entry)
    data["disks"] = disks
    return data


_int = partial(as_int, from_text=True)


def _disks(data: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """``disks`` (our shape) or ``parts`` + ``usage_root`` (the psutil fixture's shape)."""
    raw = data.get("disks")
    if not isinstance(raw, list):
        raw = data.get("parts") if isinstance(data.get("parts"), list) else []
    root_total = None
    usage_root = data.get("usage_root")
    if isinstance(usage_root, dict):
        root_total = _int(usage_root.get("total"))
    out = []
    for d in raw:
        if not isinstance(d, dict) or not isinstance(d.get("device"), str) or not d["device"]:
            continue
        mount = d.get("mountpoint") if isinstance(d.get("mountpoint"), str) else ""
        total = _int(d.get("total"))
        if total is None and mount == "/" and root_total is not None:
            total = root_total
        out.append({"device": d["device"], "mountpoint": mount, "fstype": d.get("fstype") if isinstance(d.get("fstype"), str) else "", "total": total})
    return tuple(out)


def parse_system(data: Any, read_file: ReadFile | None = None) -> SystemFacts:
    """Facts from a ``system.json`` dict (None or garbage: absent) and the cgroup files."""
    notes: list[str] = []
    if not isinstance(data, dict):
        data = {}
    arch = data.get("machine") if isinstance(data.get("machine"), str) and data.get("machine").strip() else "unknown"
    logical = _int(data.get("cpu_logical"))
    logical = logical if logical and logical > 0 else 1
    physical = _int(data.get("cpu_physical"))
    physical = physical if physical and physical > 0 else logical
    mem = _int(data.get("mem_total"))
    if mem is None and isinstance(data.get("mem"), dict):
        mem = _int(data["mem"].get("total"))
    mem = mem if mem and mem > 0 else 0

    usable = float(logical)
    affinity = _int(data.get("cpu_affinity"))
    if affinity and 0 < affinity < usable:
        usable = float(affinity)
        notes.append(f"CPU affinity allows {affinity} of {logical} CPUs")
    if read_file is not None:
        quota = cgroup_cpu_quota(read_file)
        if quota is not None and quota < usable:
            notes.append(f"cgroup CPU quota allows {quota:g} of {logical} CPUs")
            usable = quota
        limit = cgroup_memory_limit(read_file)
        if limit is not None and (mem == 0 or limit < mem):
            notes.append(f"cgroup memory limit {limit // MiB} MiB (host has {mem // MiB} MiB)")
            mem = limit
    usable = max(round(usable, 2), 0.01)
    hostname = data.get("hostname") if isinstance(data.get("hostname"), str) and data.get("hostname").strip() else None
    return SystemFacts(hostname, arch, logical, physical, usable, mem // MiB, _disks(data), tuple(notes))


# -- cgroups ------------------------------------------------------------------------------------
def _cgroup_paths(read_file: ReadFile) -> tuple[dict[str, str], str | None]:
    """From ``/proc/self/cgroup``: v1 controller -> path, and the v2 (unified) path."""
    v1: dict[str, str] = {}
    v2: str | None = None
    text = read_file("proc/self/cgroup") or ""
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not path.startswith("/") or path.count("/") > _MAX_CGROUP_LEVELS:
            continue
        if controllers == "":
            v2 = path
        for c in controllers.split(","):
            v1.setdefault(c, path)
    return v1, v2


def _levels(mount: str, path: str) -> list[str]:
    """``sys/fs/cgroup/cpu`` + ``/a/b`` -> [``.../a/b``, ``.../a``, ``...``] (leaf first)."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    out = []
    for i in range(len(parts), -1, -1):
        out.append("/".join([mount, *parts[:i]]))
    return out


def cgroup_files(read_file: ReadFile) -> list[str]:
    """Every cgroup file path the limits depend on (the recorder reads exactly these)."""
    v1, v2 = _cgroup_paths(read_file)
    files: list[str] = []
    if "cpu" in v1:
        for mount in ("sys/fs/cgroup/cpu", "sys/fs/cgroup/cpu,cpuacct"):
            for level in _levels(mount, v1["cpu"]):
                files += [f"{level}/cpu.cfs_quota_us", f"{level}/cpu.cfs_period_us"]
    if "memory" in v1:
        files += [f"{level}/memory.limit_in_bytes" for level in _levels("sys/fs/cgroup/memory", v1["memory"])]
    if v2 is not None:
        for level in _levels("sys/fs/cgroup", v2):
            files += [f"{level}/cpu.max", f"{level}/memory.max"]
    return files


def cgroup_cpu_quota(read_file: ReadFile) -> float | None:
    """CPUs the cgroup quota allows (tightest level), or None when unlimited or unknown."""
    v1, v2 = _cgroup_paths(read_file)
    best: float | None = None

    def take(q: float) -> None:
        nonlocal best
        if q > 0 and (best is None or q < best):
            best = q

    if "cpu" in v1:
        for mount in ("sys/fs/cgroup/cpu", "sys/fs/cgroup/cpu,cpuacct"):
            for level in _levels(mount, v1["cpu"]):
                quota = _int(read_file(f"{level}/cpu.cfs_quota_us"))
                period = _int(read_file(f"{level}/cpu.cfs_period_us"))
                if quota is not None and quota > 0 and period:
                    take(quota / period)
    if v2 is not None:
        for level in _levels("sys/fs/cgroup", v2):
            text = read_file(f"{level}/cpu.max")
            fields = (text or "").split()
            if len(fields) >= 1 and fields[0] != "max":
                quota = _int(fields[0])
                period = _int(fields[1]) if len(fields) > 1 else 100000
                if quota is not None and quota > 0 and period:
                    take(quota / period)
    return best


def cgroup_memory_limit(read_file: ReadFile) -> int | None:
    """Bytes the memory cgroup allows (tightest level), or None when unlimited or unknown."""
    v1, v2 = _cgroup_paths(read_file)
    candidates: list[str] = []
    if "memory" in v1:
        candidates += [f"{level}/memory.limit_in_bytes" for level in _levels("sys/fs/cgroup/memory", v1["memory"])]
    if v2 is not None:
        candidates += [f"{level}/memory.max" for level in _levels("sys/fs/cgroup", v2)]
    best: int | None = None
    for path in candidates:
        value = _int(read_file(path))
        if value is not None and 0 < value < _UNLIMITED and (best is None or value < best):
            best = value
    return best

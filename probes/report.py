"""Human-readable views of probe results: a one-node summary and a fleet table.

Kept apart from the CLI so the demo (and later the live multi-node demo) prints the same table
from any list of ``NodeCapabilities``.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from fabric.capabilities import NodeCapabilities
from probes.ffmpeg import is_hardware

__all__ = ["hardware_encoders", "format_table", "format_summary", "TABLE_COLUMNS"]

TABLE_COLUMNS = ("name", "source", "tier", "serves", "arch", "cpus", "memory", "gpus", "hw encoders", "slots")


def hardware_encoders(caps: NodeCapabilities) -> list[str]:
    """The hardware encoders whose test encode succeeded, sorted."""
    return sorted(e for e in caps.ffmpeg.working if is_hardware(e))


def _gpus(caps: NodeCapabilities) -> str:
    if not caps.gpus:
        return "-"
    parts = []
    for g in caps.gpus:
        kind = "cuda" if g.cuda else ("dGPU" if g.discrete else "iGPU")
        mem = f" {g.vram_mib / 1024:.0f}G" if g.vram_mib >= 1024 else (f" {g.vram_mib}M" if g.vram_mib else "")
        parts.append(f"{g.label_name}{mem} ({kind})")
    return "; ".join(parts)


def _row(caps: NodeCapabilities) -> tuple[str, ...]:
    return (
        caps.name,
        caps.source,
        caps.tier.value,
        ",".join(t.value for t in caps.tiers),
        caps.arch,
        f"{caps.cpu_usable:g}",
        f"{caps.memory_mib / 1024:.1f} GiB",
        _gpus(caps),
        ",".join(hardware_encoders(caps)) or "-",
        str(caps.limitations.max_concurrent_tasks),
    )


def format_table(nodes: Iterable[NodeCapabilities], columns: Sequence[str] = TABLE_COLUMNS) -> str:
    """A plain-text table, one row per node, columns padded to fit."""
    rows = [tuple(columns)] + [_row(c) for c in nodes]
    widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_summary(caps: NodeCapabilities) -> str:
    """Several lines for one node: what it is, what it serves, what it lacks and why."""
    lines = [
        f"{caps.name} ({caps.source})",
        f"  tier        {caps.tier.value}",
        f"  serves      {', '.join(t.value for t in caps.tiers)}",
        f"  cpu         {caps.cpu_usable:g} usable of {caps.cpu_logical} logical ({caps.cpu_physical} physical), {caps.arch}",
        f"  memory      {caps.memory_mib} MiB",
    ]
    for g in caps.gpus:
        enc = ",".join(g.encoders) or "none"
        extra = f" cc {g.compute_capability}" if g.compute_capability else ""
        lines.append(f"  gpu {g.index}       {g.model} [{g.vendor.value}, {'discrete' if g.discrete else 'integrated'}, "
                     f"{g.vram_mib} MiB{extra}] encode: {enc}")
    if not caps.gpus:
        lines.append("  gpu         none")
    for s in caps.storage:
        lines.append(f"  storage     {s.mount} on {s.device}: {s.kind.value}, {s.size_gib:g} GiB")
    ff = caps.ffmpeg
    if ff.path:
        lines.append(f"  ffmpeg      {ff.version or '?'}: {len(ff.listed)} video encoders listed, working: {', '.join(ff.working) or 'none'}")
    else:
        lines.append("  ffmpeg      absent")
    if caps.framebuffer:
        lines.append(f"  framebuffer {caps.framebuffer.device} {caps.framebuffer.resolution or ''}".rstrip())
    if caps.tailnet:
        lines.append(f"  tailnet     {caps.tailnet.dns_name or '?'} {' '.join(caps.tailnet.ips)}".rstrip())
    if caps.roles:
        lines.append(f"  roles       {', '.join(caps.roles)}")
    lines.append(f"  slots       {caps.limitations.max_concurrent_tasks} (fabric.slots)")
    for note in caps.limitations.notes:
        lines.append(f"  note        {note}")
    return "\n".join(lines)

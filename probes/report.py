"""Human-readable views of probe results: table cells for a fleet, and a one-node summary.

Kept apart from the CLI so the demo (and later the live multi-node demo) shows the same cells
from any list of ``NodeCapabilities``; how they are drawn (``fabric probe`` uses rich) is the
caller's business. Cells are plain text; a newline inside one is a break that belongs there (one
GPU per line), and words are separated by spaces so a narrow terminal wraps between them.
"""

from __future__ import annotations

from typing import Iterable

from fabric.core.capabilities import NodeCapabilities
from probes.ffmpeg import HARDWARE_SUFFIXES, is_hardware

__all__ = ["hardware_encoders", "encoder_families", "table_row", "unserved_rows", "format_summary",
           "TABLE_COLUMNS", "UNSERVED_COLUMNS"]

TABLE_COLUMNS = ("node", "serves", "machine", "gpus", "hw encoders")
UNSERVED_COLUMNS = ("node", "not served", "why")


def hardware_encoders(caps: NodeCapabilities) -> list[str]:
    """The hardware encoders whose test encode succeeded, sorted."""
    return sorted(e for e in caps.ffmpeg.working if is_hardware(e))


def encoder_families(caps: NodeCapabilities) -> list[str]:
    """The proven hardware encoders by family: ``["nvenc av1 h264 hevc", "vaapi h264 hevc"]``."""
    families: dict[str, list[str]] = {suffix.lstrip("_"): [] for suffix in HARDWARE_SUFFIXES}
    for encoder in hardware_encoders(caps):
        codec, family = encoder.rsplit("_", 1)
        families.setdefault(family, []).append(codec)
    return [f"{family} {' '.join(codecs)}" for family, codecs in families.items() if codecs]


def _gpus(caps: NodeCapabilities) -> list[str]:
    parts = []
    for g in caps.gpus:
        kind = "cuda" if g.cuda else ("dGPU" if g.discrete else "iGPU")
        mem = f" {g.vram_mib / 1024:.0f}G" if g.vram_mib >= 1024 else (f" {g.vram_mib}M" if g.vram_mib else "")
        parts.append(f"{g.model}{mem} ({kind})")
    return parts


def table_row(caps: NodeCapabilities) -> tuple[str, ...]:
    """One node's cells, in ``TABLE_COLUMNS`` order."""
    slots = caps.limitations.max_concurrent_tasks
    return (
        caps.name if caps.source == caps.name else f"{caps.name}\n{caps.source}",
        " ".join(t.value for t in caps.tiers),
        f"{caps.arch}\n{caps.cpu_usable:g} cpu\n{caps.memory_mib / 1024:.1f} GiB\n{slots} slot{'' if slots == 1 else 's'}",
        "\n".join(_gpus(caps)) or "-",
        "\n".join(encoder_families(caps)) or "-",
    )


def unserved_rows(nodes: Iterable[NodeCapabilities]) -> list[tuple[str, str, str]]:
    """(node, tier, why) for every tier a node does not serve and the probe explained, best first."""
    return [(caps.name, tier.value, why) for caps in nodes for tier, why in caps.unserved.items()]


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
    for tier, why in caps.unserved.items():
        lines.append(f"  not served  {tier.value}: {why}")
    for note in caps.limitations.notes:
        lines.append(f"  note        {note}")
    return "\n".join(lines)

"""What a node lost since it joined: the probe's current capabilities against its baseline."""

from __future__ import annotations

from fabric.core.capabilities import NodeCapabilities


def detect_degradation(baseline: NodeCapabilities, current: NodeCapabilities) -> tuple[str, ...]:
    """What ``current`` lost against ``baseline`` (the capabilities the node joined with): GPUs that
    vanished, hardware encoders and working ffmpeg encoders that stopped working, tiers no longer
    served. Empty when nothing was lost (gaining is not degradation)."""
    reasons: list[str] = []
    now_gpus = {(g.vendor, g.model) for g in current.gpus}
    for g in baseline.gpus:
        if (g.vendor, g.model) not in now_gpus:
            reasons.append(f"gpu vanished: {g.model}")
    if len(current.gpus) < len(baseline.gpus) and not reasons:
        reasons.append(f"gpu count dropped: {len(baseline.gpus)} -> {len(current.gpus)}")
    enc_before = {c for g in baseline.gpus for c in g.encoders}
    enc_now = {c for g in current.gpus for c in g.encoders}
    reasons += [f"hardware encoder stopped: {c}" for c in sorted(enc_before - enc_now)]
    reasons += [f"ffmpeg encoder stopped: {e}" for e in sorted(set(baseline.ffmpeg.working) - set(current.ffmpeg.working))]
    reasons += [f"tier no longer served: {t.value}" for t in baseline.tiers if t not in current.tiers]
    return tuple(reasons)

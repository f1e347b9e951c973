"""Compute tiers: the ordered hardware classes the adaptive scheduler places by.

A node *serves* every tier its hardware supports; its *tier* is the best one. Tiers compare by
rank, not by name, so ``ComputeTier.GPU_CUDA > ComputeTier.CPU_FFMPEG`` holds.
"""

from __future__ import annotations

from enum import Enum


class ComputeTier(str, Enum):
    """One hardware class, ranked 10 (best) to 0. The value is the tier's wire name."""

    GPU_CUDA = "gpu_cuda"
    GPU_VAAPI = "gpu_vaapi"
    GPU_APU = "gpu_apu"
    CPU_FFMPEG = "cpu_ffmpeg"
    BATCH = "batch"
    ETHERNET = "ethernet"
    FRAMEBUFFER = "framebuffer"
    WASM = "wasm"
    DSP = "dsp"
    ESP32 = "esp32"
    RELAY = "relay"

    @property
    def rank(self) -> int:
        """10 for ``gpu_cuda`` down to 0 for ``relay``."""
        return _RANKS[self]

    @classmethod
    def parse(cls, value: "str | ComputeTier") -> "ComputeTier":
        """The tier named by ``value`` (case-insensitive); ``ValueError`` naming the valid tiers."""
        if isinstance(value, ComputeTier):
            return value
        if isinstance(value, str):
            key = value.strip().lower()
            for tier in cls:
                if tier.value == key:
                    return tier
        valid = ", ".join(t.value for t in cls)
        raise ValueError(f"unknown compute tier {value!r}; valid tiers: {valid}")

    @classmethod
    def from_rank(cls, rank: int) -> "ComputeTier":
        """The tier with this rank; ``ValueError`` outside 0..10."""
        for tier in cls:
            if tier.rank == rank:
                return tier
        raise ValueError(f"no compute tier has rank {rank}; ranks run 0..10")

    def below(self) -> "ComputeTier | None":
        """The next lower tier (one fallback step), or None under ``relay``."""
        return None if self.rank == 0 else ComputeTier.from_rank(self.rank - 1)

    def __str__(self) -> str:  # "gpu_cuda", not "ComputeTier.GPU_CUDA", in messages and labels
        return self.value

    # Order by rank. ``str`` already defines these, so they must be overridden explicitly.
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, ComputeTier):
            return _refuse(self, other)
        return self.rank < other.rank

    def __le__(self, other: object) -> bool:
        if not isinstance(other, ComputeTier):
            return _refuse(self, other)
        return self.rank <= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, ComputeTier):
            return _refuse(self, other)
        return self.rank > other.rank

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, ComputeTier):
            return _refuse(self, other)
        return self.rank >= other.rank

    __hash__ = str.__hash__


def _refuse(tier: ComputeTier, other: object):
    # Without this, ``str`` would quietly compare names ("gpu_cuda" < "relay") and be wrong.
    if isinstance(other, str):
        raise TypeError(f"compare compute tiers with tiers, not strings: use ComputeTier.parse({other!r})")
    return NotImplemented


_RANKS: dict[ComputeTier, int] = {
    ComputeTier.GPU_CUDA: 10,
    ComputeTier.GPU_VAAPI: 9,
    ComputeTier.GPU_APU: 8,
    ComputeTier.CPU_FFMPEG: 7,
    ComputeTier.BATCH: 6,
    ComputeTier.ETHERNET: 5,
    ComputeTier.FRAMEBUFFER: 4,
    ComputeTier.WASM: 3,
    ComputeTier.DSP: 2,
    ComputeTier.ESP32: 1,
    ComputeTier.RELAY: 0,
}

#: Every tier, best first.
TIERS_BEST_FIRST: tuple[ComputeTier, ...] = tuple(sorted(ComputeTier, key=lambda t: -t.rank))

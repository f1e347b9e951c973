"""Parse what ``vainfo`` prints into profiles, entrypoints and the codecs they mean.

vainfo's output is meant for people: ``libva info:`` chatter, X/Wayland complaints when no
display is around, tabs or spaces after the colon depending on the libva version, and a
one-line failure (``vaInitialize failed ...``) when there is no usable driver. The parser
therefore looks only for lines that *are* a profile/entrypoint pair and for the driver line,
and ignores everything else; it never raises. Entrypoints it does not know (say, a line cut in
half by a truncated recording) are dropped rather than guessed.

Encode vs decode follows libva's entrypoints: ``VLD`` decodes; ``EncSlice``, ``EncSliceLP`` and
``EncPicture`` (JPEG) encode. The probe decides elsewhere whether a device is integrated and
whether VA-API on it may count (never on NVIDIA: decode-only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["VaInfo", "parse_vainfo", "codec_of_profile", "ENCODE_ENTRYPOINTS", "DECODE_ENTRYPOINTS"]

#: Every entrypoint name libva (va.h, VAEntrypoint) defines, without the ``VAEntrypoint`` prefix.
KNOWN_ENTRYPOINTS = frozenset({
    "VLD", "IZZ", "IDCT", "MoComp", "Deblocking", "EncSlice", "EncPicture", "EncSliceLP",
    "VideoProc", "FEI", "Stats", "ProtectedTEEComm", "ProtectedContent",
})
ENCODE_ENTRYPOINTS = frozenset({"VAEntrypointEncSlice", "VAEntrypointEncSliceLP", "VAEntrypointEncPicture"})
DECODE_ENTRYPOINTS = frozenset({"VAEntrypointVLD"})

# Profile name prefix (after "VAProfile") -> codec name used across the fabric.
_CODEC_PREFIXES: tuple[tuple[str, str], ...] = (
    ("H264", "h264"),
    ("HEVC", "hevc"),
    ("AV1", "av1"),
    ("VP8", "vp8"),
    ("VP9", "vp9"),
    ("JPEG", "jpeg"),
    ("MPEG2", "mpeg2"),
    ("VC1", "vc1"),
)

#: Longest driver string kept (real ones are under 100 characters); also bounds the regexes
#: below, whose lazy groups would take quadratic time over a megabyte-long line.
MAX_DRIVER_CHARS = 256
_PAIR = re.compile(r"^\s*(VAProfile[A-Za-z0-9_]+)\s*:\s*VAEntrypoint([A-Za-z0-9_]+)\s*$")
_DRIVER = re.compile(r"Driver version:\s*(.*?)\s*$")


@dataclass(frozen=True)
class VaInfo:
    """What one render node's VA-API driver offers."""

    driver: str | None = None
    """The ``Driver version`` string (names the GPU for Mesa drivers), or None."""
    profiles: dict[str, list[str]] = field(default_factory=dict)
    """``VAProfile...`` -> its ``VAEntrypoint...`` names, in vainfo's order."""

    @property
    def encodes(self) -> set[str]:
        """Codecs with an encode entrypoint."""
        return self._codecs(ENCODE_ENTRYPOINTS)

    @property
    def decodes(self) -> set[str]:
        """Codecs with a decode (VLD) entrypoint."""
        return self._codecs(DECODE_ENTRYPOINTS)

    @property
    def ok(self) -> bool:
        """True when the driver initialised and listed at least one profile."""
        return bool(self.profiles)

    def _codecs(self, entrypoints: frozenset[str]) -> set[str]:
        out = set()
        for profile, eps in self.profiles.items():
            codec = codec_of_profile(profile)
            if codec and any(ep in entrypoints for ep in eps):
                out.add(codec)
        return out


def codec_of_profile(profile: str) -> str | None:
    """``VAProfileH264High`` -> ``h264``; ``VAProfileNone`` and unknown profiles -> None."""
    name = profile.removeprefix("VAProfile")
    for prefix, codec in _CODEC_PREFIXES:
        if name.startswith(prefix):
            return codec
    return None


def parse_vainfo(text: str | bytes | None) -> VaInfo:
    """Profiles and driver from vainfo's stdout+stderr; noise and failures give an empty result."""
    if text is None:
        return VaInfo()
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    driver: str | None = None
    profiles: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = _PAIR.match(line)
        if m:
            profile, entry = m.group(1), m.group(2)
            if entry not in KNOWN_ENTRYPOINTS:
                continue
            eps = profiles.setdefault(profile, [])
            full = f"VAEntrypoint{entry}"
            if full not in eps:
                eps.append(full)
            continue
        d = _DRIVER.search(line[: 2 * MAX_DRIVER_CHARS]) if driver is None else None
        if d and d.group(1):
            driver = d.group(1)[:MAX_DRIVER_CHARS]
    return VaInfo(driver=driver, profiles=profiles)


def model_from_driver(driver: str | None) -> str | None:
    """The GPU name inside a Mesa/Intel driver string, or None.

    ``Mesa Gallium driver 19.0.0-devel for Radeon 550 Series (POLARIS12, ...)`` -> ``Radeon 550 Series``;
    ``Intel iHD driver for Intel(R) Gen Graphics - 20.2.0 ()`` -> ``Intel(R) Gen Graphics``.
    """
    if not driver or not isinstance(driver, str):
        return None
    m = re.search(r"\bfor\s+(.+?)(?:\s+\(|\s+-\s+\d|$)", driver[:MAX_DRIVER_CHARS])
    if not m:
        return None
    name = m.group(1).strip()
    return name or None

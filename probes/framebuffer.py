"""A Linux framebuffer (``/sys/class/graphics/fb0``): the framebuffer tier.

Any node with a display device can do framebuffer compute, so presence is enough; the
resolution comes from ``modes`` (``U:1920x1080p-60``) or, failing that, ``virtual_size``
(``1920,1080``).
"""

from __future__ import annotations

import re
from typing import Callable

from fabric.core.capabilities import FramebufferInfo
from probes._numbers import parse_index

__all__ = ["parse_framebuffer"]


def parse_framebuffer(list_dir: Callable[[str], list[str]], read_file: Callable[[str], "str | None"]) -> FramebufferInfo | None:
    """The first framebuffer device, or None when there is none."""
    numbered = {n: parse_index(n, "fb") for n in list_dir("sys/class/graphics")}
    fbs = sorted((n for n, i in numbered.items() if i is not None), key=lambda n: numbered[n])
    if not fbs:
        return None
    fb = fbs[0]
    resolution = None
    modes = read_file(f"sys/class/graphics/{fb}/modes") or ""
    if m := re.search(r"(\d{2,5})x(\d{2,5})", modes):
        resolution = f"{m.group(1)}x{m.group(2)}"
    else:
        size = read_file(f"sys/class/graphics/{fb}/virtual_size") or ""
        if m := re.fullmatch(r"\s*(\d{2,5}),(\d{2,5})\s*", size):
            resolution = f"{m.group(1)}x{m.group(2)}"
    return FramebufferInfo(device=f"/dev/{fb}", resolution=resolution)

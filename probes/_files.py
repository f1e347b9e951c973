"""Reading a probe source file safely: regular files only, a size cap, JSON with a depth limit.

A recording comes from a machine we do not control, and so can hold anything where a file should
be: a FIFO (a plain ``open`` would wait for a writer forever), a device (``/dev/zero`` never
ends), a folder, a symlink loop, gigabytes, JSON nested a hundred thousand levels deep (Python's
parser raises ``RecursionError``) or a 5,000-digit number (``ValueError``). Each read here says
either what the file holds or, in one line, why it holds nothing usable; a file that simply is
not there is absent without a reason (the common case: that hardware is not on the machine).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fabric.core.bounded_read import ABSENT, read_regular

__all__ = ["MAX_READ", "MAX_JSON_DEPTH", "read_capped", "load_json", "nesting_depth"]

MAX_READ = 1 << 20
"""No sysfs/procfs file, tool output or recording file the probe reads is anywhere near 1 MiB."""
MAX_JSON_DEPTH = 32
"""The deepest JSON a probe source has is four levels (``nvml.json``: devices, a device, its
encoder capacity); 32 leaves room and keeps every walker over the result far from Python's
recursion limit."""

def read_capped(path: str | Path, limit: int = MAX_READ) -> tuple[str | None, str | None]:
    """(text, None) for a regular file of at most ``limit`` bytes (decoded as UTF-8, undecodable
    bytes replaced); (None, None) when nothing is there; (None, why) for anything else (see
    ``fabric.core.bounded_read.read_regular``: never blocks on a FIFO, never reads past the cap)."""
    data, kind, why = read_regular(path, limit)
    if data is None:
        return None, None if kind == ABSENT else why
    return data.decode("utf-8", errors="replace"), None


def nesting_depth(value: Any, stop_after: int) -> int:
    """How deeply ``value``'s lists and dicts nest (a scalar: 0), without recursion; the count
    stops once it passes ``stop_after``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > stop_after:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def load_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> tuple[Any, str | None]:
    """(value, None) for JSON nested at most ``max_depth`` levels; (None, why) otherwise."""
    try:
        value = json.loads(text)
    except RecursionError:
        return None, f"nests deeper than {max_depth} levels"
    except ValueError as exc:  # JSONDecodeError, a number past int()'s digit limit, bad UTF-8 bytes
        return None, f"is not valid JSON ({type(exc).__name__}: {str(exc)[:80]})"
    if nesting_depth(value, max_depth) > max_depth:
        return None, f"nests deeper than {max_depth} levels"
    return value, None

"""``PlainWriter``: a job that does not cooperate with the fabric, for the fence's tests.

A plain class, no fabric hooks: its constructor starts a thread of its own that appends one line,
``<wall time> <pid> <host address>``, to a file every ``period_s`` (flushed per line) until its
process ends. Every instance of a job writes to the same file, as a job writes to a shared disk or a
database both sides of a cut can reach: two instances serving at once show as lines of two pids
interleaved. ``overlaps`` reads such a file back.

Used as ``adaptive.remote(...)(PlainWriter)`` (the fabric package is importable on every node).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PlainWriter", "WriterLine", "overlaps", "read_lines"]


class PlainWriter:
    def __init__(self, path: str, period_s: float = 0.1) -> None:
        self.path, self.period_s = path, period_s
        threading.Thread(target=self._write, name="plain-writer", daemon=True).start()

    def _write(self) -> None:
        me = f"{os.getpid()} {_address()}"
        with open(self.path, "a", buffering=1) as f:
            while True:
                f.write(f"{time.time():.3f} {me}\n")
                time.sleep(self.period_s)

    def where(self) -> str:
        """This instance's pid and address (a method call, so the job answers)."""
        return f"{os.getpid()} {_address()}"


def _address() -> str:
    """This host's address toward the outside (its namespace's), or its name."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("198.51.100.1", 9))  # no packet is sent: the route picks the source address
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostname()


@dataclass(frozen=True)
class WriterLine:
    at: float
    writer: str
    """``<pid> <address>``: one instance."""


def read_lines(path: str | Path) -> list[WriterLine]:
    out = []
    for line in Path(path).read_text().splitlines():
        parts = line.split(" ", 1)
        if len(parts) == 2:
            try:
                out.append(WriterLine(float(parts[0]), parts[1]))
            except ValueError:
                continue
    return out


def overlaps(lines: list[WriterLine]) -> int:
    """Lines written while another instance had already begun and had not yet ended: 0 when the
    instances took turns (each writer's span, first line to last, is disjoint from every other's)."""
    spans: dict[str, tuple[float, float]] = {}
    for ln in lines:
        first, last = spans.get(ln.writer, (ln.at, ln.at))
        spans[ln.writer] = (min(first, ln.at), max(last, ln.at))
    n = 0
    for ln in lines:
        for writer, (first, last) in spans.items():
            if writer != ln.writer and first <= ln.at <= last:
                n += 1
                break
    return n

"""Reading a ``CounterJob``'s output back: ``analyze(out_dir)`` -> ``CounterReport``.

Each ``*.ticks`` file in ``out_dir`` is one writer (one instance of the job). A file is read line
by line; a last line without its newline is a write cut short and is ignored. Over the union of
the writers' ticks (optionally inside ``[start, end]``):

- ``writers``: the files with at least one tick in the window; ``ticks``: distinct ticks written;
  ``first``/``last``: the lowest and highest (None with no ticks);

- ``gaps``: each run of ticks nobody wrote between the first and the last, as
  ``(start_tick, length)``; ``gap_ms`` = the longest run x the period (0.0 with none);
- ``duplicates``: ticks written by more than one writer; ``overlap_writers``: the most writers
  of one tick (1 when every tick had one writer, 0 with no ticks).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

SUFFIX = ".ticks"


@dataclass(frozen=True)
class CounterReport:
    """What a counter's writers produced (see the module docstring)."""

    writers: int
    ticks: int
    first: int | None
    last: int | None
    gaps: list[tuple[int, int]] = field(default_factory=list)
    gap_ms: float = 0.0
    duplicates: int = 0
    overlap_writers: int = 0
    per_writer: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """writer -> (first tick, last tick, ticks written) inside the window."""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["gaps"] = [list(g) for g in self.gaps]
        out["per_writer"] = {k: list(v) for k, v in self.per_writer.items()}
        return out


def read_ticks(path: str) -> list[int]:
    """The ticks of one writer's file, in file order; a partial last line is ignored, a complete
    line that is not an integer is a ``ValueError`` naming the file and line."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    complete = lines[:-1]  # the piece after the last newline is empty, or a partial write
    out: list[int] = []
    for i, line in enumerate(complete, 1):
        line = line.strip()
        if not line:
            continue
        try:
            out.append(int(line))
        except ValueError:
            raise ValueError(f"{path}:{i}: not a tick: {line!r}") from None
    return out


def analyze(out_dir: str, period_ms: float = 10.0, start: int | None = None, end: int | None = None) -> CounterReport:
    """The ``CounterReport`` of every writer in ``out_dir`` (ticks outside ``[start, end]`` left
    out when given)."""
    if not period_ms > 0:
        raise ValueError(f"period_ms must be > 0, got {period_ms!r}")
    writers: dict[str, set[int]] = {}
    names = sorted(n for n in os.listdir(out_dir) if n.endswith(SUFFIX)) if os.path.isdir(out_dir) else []
    for name in names:
        ticks = {t for t in read_ticks(os.path.join(out_dir, name))
                 if (start is None or t >= start) and (end is None or t <= end)}
        writers[name[: -len(SUFFIX)]] = ticks
    counts: dict[int, int] = {}
    for ticks in writers.values():
        for t in ticks:
            counts[t] = counts.get(t, 0) + 1
    per_writer = {w: (min(t), max(t), len(t)) for w, t in writers.items() if t}
    if not counts:
        return CounterReport(writers=len(per_writer), ticks=0, first=None, last=None, per_writer=per_writer)
    order = sorted(counts)
    gaps = [(a + 1, b - a - 1) for a, b in zip(order, order[1:]) if b - a > 1]
    return CounterReport(
        writers=len(per_writer), ticks=len(order), first=order[0], last=order[-1], gaps=gaps,
        gap_ms=max((n for _, n in gaps), default=0) * float(period_ms),
        duplicates=sum(1 for c in counts.values() if c > 1), overlap_writers=max(counts.values()),
        per_writer=per_writer)

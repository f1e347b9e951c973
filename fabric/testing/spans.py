"""Checking concurrency from what calls report: how many ran at once, per node."""

from __future__ import annotations

import collections
from typing import Iterable


def max_overlap(spans: Iterable[tuple[float, float]]) -> int:
    """The most ``(start, end)`` intervals open at one moment."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def overlap_by_node(results: Iterable[tuple[str, float, float]]) -> dict[str, int]:
    """``(node_id, start, end)`` results -> the most calls each node ran at once."""
    per_node: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for node, start, end in results:
        per_node[node].append((start, end))
    return {node: max_overlap(spans) for node, spans in per_node.items()}

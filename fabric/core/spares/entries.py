"""The live hot-spare list: validated whole, and what changed (``h.update_hot_spares``).

``validate_hot_spares(entries, settings)`` checks a replacement ``hot_spares`` list against the
settings in force the way ``FabricSettings.load`` checks it at boot (it runs that same
validation over the settings with the list swapped in, so the rules live in one place:
structure, ``unknown_pool``, ``duplicate_hot_spare_pool``, ``exclusive_without_reservation``,
``unknown_shape`` (a ``shape`` that names no candidate shape of the pool's elastic pool tiers), a
negative ``target_count``) and raises one ``SettingsError`` with every problem, paths as in a
settings file (``hot_spares.1.shape``).
``diff_hot_spares(old, new)`` says per pool what was added, removed or changed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from fabric.core.errors import SettingsError, SettingsProblem
from fabric.core.placement.records import NodeRecord
from fabric.core.settings import FabricSettings, HotSpareSettings

_ENTRY_INDEX = re.compile(r"^hot_spares\.(\d+)(\.|$)")


def _raw(entry: Any) -> Any:
    return entry.model_dump() if isinstance(entry, HotSpareSettings) else entry


def _order(p: SettingsProblem) -> tuple[int, str]:
    m = _ENTRY_INDEX.match(p.path)
    return (int(m.group(1)) if m else -1, p.path)


def parse_hot_spares(entries: Any, settings: FabricSettings) -> tuple[HotSpareSettings, ...]:
    """``entries`` (``HotSpareSettings`` or mappings) as a valid hot-spare list for ``settings``;
    ``SettingsError`` with every problem otherwise (module docstring). Problems elsewhere in
    ``settings`` are not this list's and are not reported."""
    raw_entries = [_raw(e) for e in entries] if isinstance(entries, (list, tuple)) else entries
    doc = settings.model_dump()
    doc["hot_spares"] = raw_entries
    problems: list[SettingsProblem] = []
    parsed: FabricSettings | None = None
    try:
        parsed = FabricSettings.load(doc)
    except SettingsError as exc:
        problems += [p for p in exc.problems if p.path == "hot_spares" or p.path.startswith("hot_spares.")]
    if problems:
        raise SettingsError(sorted(problems, key=_order))
    if parsed is None:  # the only problems were elsewhere in the settings: the list itself is fine
        return tuple(HotSpareSettings.model_validate(r) for r in raw_entries)
    return parsed.hot_spares


def validate_hot_spares(entries: Any, settings: FabricSettings) -> None:
    """``SettingsError`` with every problem of ``entries`` as ``settings``' hot-spare list; None when valid."""
    parse_hot_spares(entries, settings)


def diff_hot_spares(old: Sequence[HotSpareSettings], new: Sequence[HotSpareSettings]) -> dict[str, dict[str, Any]]:
    """What changed, per pool (pools whose entry is unchanged are left out), JSON-ready:
    ``{"change": "added", "new": {...}}``, ``{"change": "removed", "old": {...}}`` or
    ``{"change": "changed", "fields": {field: {"old": ..., "new": ...}}}`` (only the fields that
    differ, in field order). Both lists are valid ones: one entry per pool."""
    before, after = _by_pool(old, "old"), _by_pool(new, "new")
    out: dict[str, dict[str, Any]] = {}
    for pool in list(before) + [p for p in after if p not in before]:
        a, b = before.get(pool), after.get(pool)
        if a is None and b is not None:
            out[pool] = {"change": "added", "new": b}
        elif b is None and a is not None:
            out[pool] = {"change": "removed", "old": a}
        elif a is not None and b is not None and a != b:
            out[pool] = {"change": "changed", "fields": {
                f: {"old": a[f], "new": b[f]} for f in HotSpareSettings.model_fields if a[f] != b[f]}}
    return out


def _by_pool(entries: Sequence[HotSpareSettings], which: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        if e.pool in out:
            raise ValueError(f"the {which} hot-spare list has two entries for pool {e.pool!r}")
        out[e.pool] = e.model_dump(mode="json")
    return out


@dataclass(frozen=True)
class SpareSpec:
    """One node's spare spec (``h.spare_spec(node)``): its tags, and its pool's ``warm_for``."""

    node_id: str
    spare: bool
    unconsumed: bool
    reserved_for: tuple[str, ...]
    exclusive: bool
    warm_for: tuple[str, ...]
    warm: tuple[str, ...]
    """What the node holds (sorted)."""


def spare_spec(record: NodeRecord, entries: Mapping[str, HotSpareSettings] | Sequence[HotSpareSettings],
               default_pool: str = "default") -> SpareSpec:
    """``record``'s spare spec; ``warm_for`` is its pool's entry's (empty when it is no spare or
    its pool has no entry). ``entries``: the live list, or a pool -> entry mapping."""
    by_pool = entries if isinstance(entries, Mapping) else {e.pool: e for e in entries}
    entry = by_pool.get(record.pool or default_pool)
    return SpareSpec(
        node_id=record.node_id, spare=record.spare, unconsumed=record.unconsumed_spare,
        reserved_for=tuple(sorted(record.spare_reserved_for)), exclusive=record.spare_exclusive,
        warm_for=entry.warm_for if entry is not None and record.spare else (), warm=tuple(sorted(record.warm)),
    )

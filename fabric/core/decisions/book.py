"""``DecisionBook``: the recorded decisions, by event number, compressed and bounded.

A decision is kept as one compressed row (requirement, context, outcome, the walk as
``summarize_trace`` gives it, why it was recorded) that refers to its fleet slice and its settings by
content. A fleet slice (node id -> node record digest, the held pool tiers) is kept once per fleet
version; a node record once per content; the settings once per content. Each is counted by the
decisions that refer to it and forgotten with the last one. Past ``max_records`` or ``max_bytes``
the oldest decisions go first.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from fabric.core.decisions.rows import (
    capabilities_from_row, capabilities_row, context_from_row, context_row, digest, node_from_row, node_row, pack, requirement_from_row,
    requirement_row, settings_from_row, settings_row, unpack,
)
from fabric.core.decisions.tap import Capture
from fabric.core.placement import NodeRecord, PlacementContext, Requirement
from fabric.core.placement.explain import summarize_trace
from fabric.core.placement.reference import walk_fleet
from fabric.core.placement.trace import PlacementTrace
from fabric.core.settings import FabricSettings

ENTRY_OVERHEAD = 64
"""Bytes counted per kept entry beside its blob (its key and book-keeping)."""


@dataclass
class RecordedDecision:
    """A kept decision, read back: its row and the inputs the engine read."""

    seq: int
    row: dict[str, Any]
    """subject, why, at, stimulus_id, job_id, decision (with summary), walk, grant, fleet, settings."""
    requirement: Requirement
    context: PlacementContext
    records: list[NodeRecord]
    provision_held: frozenset
    settings: FabricSettings


class _Shared:
    """Blobs kept once by key and counted by their users; each one kept or forgotten is noted in
    ``dirty`` under ``prefix`` + key (for the store)."""

    def __init__(self, prefix: str, dirty: dict) -> None:
        self.blobs: dict[str, list] = {}  # key -> [blob, users]
        self.prefix = prefix
        self.dirty = dirty

    def add(self, key: str, make: Any) -> int:
        """One more user of ``key`` (its blob made by ``make()`` if new); bytes added."""
        entry = self.blobs.get(key)
        if entry is not None:
            entry[1] += 1
            return 0
        blob = make()
        self.blobs[key] = [blob, 1]
        self.dirty[self.prefix + key] = blob
        return len(blob) + ENTRY_OVERHEAD

    def drop(self, key: str) -> int:
        """One user fewer; the bytes freed when it was the last."""
        entry = self.blobs.get(key)
        if entry is None:
            return 0
        entry[1] -= 1
        if entry[1] > 0:
            return 0
        del self.blobs[key]
        self.dirty[self.prefix + key] = None
        return len(entry[0]) + ENTRY_OVERHEAD

    def get(self, key: str) -> bytes:
        return self.blobs[key][0]


class DecisionBook:
    """Recorded decisions by event number (see the module docstring)."""

    def __init__(self, max_records: int = 2000, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.bytes = 0
        self.forgotten = 0
        """Decisions dropped to stay inside the bounds."""
        self._rows: OrderedDict[int, tuple[bytes, str, str]] = OrderedDict()  # seq -> (row blob, slice, settings)
        self._dirty: dict[str, bytes | None] = {}
        """Parts kept (their blob) or forgotten (None) since the store last took them (``take_writes``)."""
        self._dirty_rows: dict[int, bytes | None] = {}
        self._slices = _Shared("fleet:", self._dirty)  # fleet version -> packed {"nodes": [[id, digest]...], "held"}
        self._nodes = _Shared("node:", self._dirty)  # node digest -> packed [node row, capabilities digest]
        self._caps = _Shared("caps:", self._dirty)  # capabilities digest -> packed capabilities
        self._caps_keys: dict[int, tuple[Any, str, bytes]] = {}
        """id(capabilities) -> (the object, digest, blob): records share their capabilities object."""
        self._settings = _Shared("settings:", self._dirty)
        self._node_keys: dict[tuple[str, int], tuple[str, bytes]] = {}
        """(node id, record generation) -> (digest, blob): a record is packed once while it is unchanged."""
        self._settings_key: tuple[FabricSettings, str, bytes] | None = None
        self._caps_blobs: dict[str, bytes] = {}
        """Capabilities digest -> blob, for the capabilities packed but not yet kept."""

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, seq: object) -> bool:
        return seq in self._rows

    def figures(self) -> dict[str, int]:
        return {"decisions_kept": len(self._rows), "decision_bytes": self.bytes, "fleet_versions": len(self._slices.blobs),
                "node_records": len(self._nodes.blobs), "capabilities": len(self._caps.blobs),
                "decisions_forgotten": self.forgotten}

    # -- keeping ----------------------------------------------------------------------------------
    def keep(self, seq: int, c: Capture, at: float, job_id: str | None = None) -> dict[str, Any]:
        """Keep ``c`` under event number ``seq``; its fleet version and the bytes the book holds."""
        d = c.decision
        req, ctx = d.requirement, d.context
        _, steps, decided = walk_fleet(c.fleet, req, ctx, trace=True)
        version, node_keys = self._slice(c)
        settings_key, settings_blob = self._settings_blob(c.settings)
        row = {"v": 1, "subject": c.subject, "why": c.why, "at": at, "stimulus_id": c.stimulus_id, "job_id": job_id or ctx.job_id,
               "requirement": requirement_row(req), "context": context_row(ctx),
               "decision": {**d.to_dict(), "node_name": d.node_name, "summary": d.summary()},
               "walk": summarize_trace(PlacementTrace(steps, decided)), "grant": c.grant,
               "fleet": version, "settings": settings_key, "nodes": len(node_keys)}
        blob = pack(row)
        if seq in self._rows:
            self._forget(seq)
        blobs = {key: node_blob for key, node_blob in self._node_keys.values()}
        self._add(seq, blob, version, settings_key,
                  lambda: pack({"nodes": node_keys, "held": sorted(map(list, c.fleet.provision_held))}),
                  blobs.__getitem__, self._caps_blobs.__getitem__, lambda: settings_blob)
        self._bound(keep=seq)
        return {"fleet_version": version, "nodes": len(node_keys), "record_bytes": len(blob)}

    def _add(self, seq: int, blob: bytes, version: str, settings_key: str, slice_blob: Callable[[], bytes],
             node_blob: Callable[[str], bytes], caps_blob: Callable[[str], bytes], settings_blob: Callable[[], bytes]) -> None:
        """File a decision's row and take a share of its fleet slice (its node records and their
        capabilities with it, when the slice is new) and of its settings."""
        added = len(blob) + ENTRY_OVERHEAD
        if self._slices.add(version, slice_blob):
            for _, key in unpack(self._slices.get(version))["nodes"]:
                grown = self._nodes.add(key, lambda k=key: node_blob(k))
                if grown:
                    caps_key = unpack(self._nodes.get(key))[1]
                    added += grown + self._caps.add(caps_key, lambda k=caps_key: caps_blob(k))
            added += len(self._slices.get(version)) + ENTRY_OVERHEAD
        added += self._settings.add(settings_key, settings_blob)
        self._rows[seq] = (blob, version, settings_key)
        self._dirty_rows[seq] = blob
        self.bytes += added

    # -- the store --------------------------------------------------------------------------------------
    def take_writes(self) -> tuple[list[tuple[int, bytes | None]], list[tuple[str, bytes | None]]]:
        """What to write to the store since the last take: decision rows and parts, each its blob
        (kept) or None (forgotten)."""
        rows, parts = sorted(self._dirty_rows.items()), sorted(self._dirty.items())
        self._dirty_rows.clear()
        self._dirty.clear()
        return rows, parts

    def load(self, rows: list[tuple[int, bytes]], parts: dict[str, bytes]) -> int:
        """The store's decisions read back (after a restart); a row whose parts are missing is
        dropped, and so is a part no row uses. How many decisions were read back."""
        for seq, blob in sorted(rows):
            try:
                row = unpack(blob)
                version, settings_key = row["fleet"], row["settings"]
                _ = parts["settings:" + settings_key]
                if version not in self._slices.blobs:  # every part it needs is there before it takes a share
                    for _, key in unpack(parts["fleet:" + version])["nodes"]:
                        _ = parts["caps:" + unpack(parts["node:" + key])[1]]
                self._add(seq, blob, version, settings_key, lambda: parts["fleet:" + version],
                          lambda k: parts["node:" + k], lambda k: parts["caps:" + k], lambda: parts["settings:" + settings_key])
            except Exception:  # unreadable, or a part is missing: what it took a share of goes back
                if seq in self._rows:
                    self._forget(seq)
                self._dirty_rows[seq] = None
        live = {p + k for shared in (self._slices, self._nodes, self._caps, self._settings) for p in (shared.prefix,)
                for k in shared.blobs}
        self._dirty_rows = {seq: None for seq, blob in self._dirty_rows.items() if blob is None}
        self._dirty.clear()
        self._dirty.update({key: None for key in parts if key not in live})
        self._bound(keep=-1)
        return len(self._rows)

    def _slice(self, c: Capture) -> tuple[str, list[list[str]]]:
        recs = c.fleet.records()
        keys = []
        cache = self._node_keys
        for rec in recs:
            k = (rec.node_id, rec.__dict__["_gen"])
            hit = cache.get(k)
            if hit is None:
                blob = pack([node_row(rec), self._capabilities(rec.capabilities)])
                hit = (digest(blob), blob)
                cache[k] = hit
            keys.append([rec.node_id, hit[0]])
        if len(cache) > 4 * max(256, len(recs)):  # records long replaced: pack again if ever met
            live = {(r.node_id, r.__dict__["_gen"]) for r in recs}
            self._node_keys = {k: v for k, v in cache.items() if k in live}
        held = sorted(map(list, c.fleet.provision_held))
        version = digest(json.dumps([keys, held], separators=(",", ":")).encode())
        return version, keys

    def _capabilities(self, caps: Any) -> str:
        """The digest of ``caps`` (packed once per object, kept once per content)."""
        hit = self._caps_keys.get(id(caps))
        if hit is None or hit[0] is not caps:
            if len(self._caps_keys) > 4096:
                self._caps_keys.clear()
            blob = pack(capabilities_row(caps))
            hit = (caps, digest(blob), blob)
            self._caps_keys[id(caps)] = hit
            self._caps_blobs[hit[1]] = blob
        return hit[1]

    def _settings_blob(self, settings: FabricSettings) -> tuple[str, bytes]:
        cached = self._settings_key
        if cached is not None and cached[0] is settings:
            return cached[1], cached[2]
        blob = pack(settings_row(settings))
        key = digest(blob)
        self._settings_key = (settings, key, blob)
        return key, blob

    def _forget(self, seq: int) -> None:
        blob, version, settings_key = self._rows.pop(seq)
        self._dirty_rows[seq] = None
        freed = len(blob) + ENTRY_OVERHEAD
        slice_blob = self._slices.blobs.get(version, [b""])[0]
        dropped = self._slices.drop(version)
        if dropped:
            freed += dropped
            for _, key in unpack(slice_blob)["nodes"]:
                node_blob = self._nodes.blobs.get(key, [None])[0]
                gone = self._nodes.drop(key)
                if gone and node_blob is not None:
                    freed += gone + self._caps.drop(unpack(node_blob)[1])
        freed += self._settings.drop(settings_key)
        self.bytes -= freed

    def _bound(self, keep: int) -> None:
        while self._rows and (len(self._rows) > self.max_records or self.bytes > self.max_bytes):
            oldest = next(iter(self._rows))
            if oldest == keep and len(self._rows) == 1:
                break  # the newest alone stays, whatever its size
            self._forget(oldest)
            self.forgotten += 1

    # -- reading ----------------------------------------------------------------------------------
    def get(self, seq: int) -> RecordedDecision | None:
        kept = self._rows.get(seq)
        if kept is None:
            return None
        blob, version, settings_key = kept
        row = unpack(blob)
        fleet = unpack(self._slices.get(version))
        caps: dict[str, Any] = {}
        records = []
        for _, key in fleet["nodes"]:
            node, caps_key = unpack(self._nodes.get(key))
            if caps_key not in caps:
                caps[caps_key] = capabilities_from_row(unpack(self._caps.get(caps_key)))
            records.append(node_from_row(node, caps[caps_key]))
        return RecordedDecision(seq, row, requirement_from_row(row["requirement"]), context_from_row(row["context"]),
                                records, frozenset(tuple(h) for h in fleet["held"]),
                                settings_from_row(unpack(self._settings.get(settings_key))))


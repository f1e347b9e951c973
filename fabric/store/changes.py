"""The registry's change log: a sequence number per record change, kept in memory, with an epoch.

Followers of the registry (the scheduler's ``FleetFeed``) ask "what changed after number N?"
instead of listing every record each tick; the answer costs what changed, not the fleet.

Why memory and not a SQLite table: the log is a cache of recent changes for followers, not state.
The records stay the truth (``FabricStore``); a follower that cannot be answered from the log
starts again from a full listing (``FeedSnapshot``). So the log is a bounded list of
``(node id, cause, stimulus id)`` entries, numbered from 1 in each incarnation of the registry,
and the incarnation has a random ``epoch``: a restarted registry starts a new epoch, so a number
from before the restart can never be answered incrementally (it would be stale: the old log is
gone) and the follower resyncs. A number older than the oldest entry kept resyncs too.

Per node the log keeps only what the next answer needs: the live fields of its newest record
(``fabric.core.records.LIVE_FIELDS``, a few hundred bytes) and the number of its newest identity
change (registered, new capabilities or labels); the whole record of a node whose identity
changed is read from the store when a page needs it. No Ray, no SQLite: the registry feeds it
after each write commits.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

from fabric.core.records import ChangePage, RecordChange, RegistryRecord, live_fields

__all__ = ["ChangeLog", "DEFAULT_RETAIN"]

DEFAULT_RETAIN = 100_000
"""Entries kept: at 10,000 nodes heartbeating every 5 s (the default) with a new load each time
(~2,000 a second), about 50 s of changes; a follower further behind resyncs."""


class ChangeLog:
    """Numbered changes of one registry incarnation."""

    def __init__(self, *, retain: int = DEFAULT_RETAIN, epoch: str | None = None) -> None:
        if retain < 1:
            raise ValueError(f"retain must be at least 1, got {retain}")
        self.retain = retain
        self.epoch = epoch or uuid.uuid4().hex
        """This incarnation: numbers of another epoch are never answered incrementally."""
        self.seq = 0
        """The newest number handed out (0: nothing changed yet)."""
        self._first = 1  # the number of _entries[0]
        self._entries: list[tuple[str, str, str | None]] = []
        self._state: dict[str, tuple[str, dict[str, Any] | None]] = {}  # node id -> (kind, live fields)
        self._identity: dict[str, int] = {}  # node id -> number of its newest identity change

    # -- writing (after the store committed) --------------------------------------------------------
    def record(self, record: RegistryRecord, cause: str, stimulus_id: str | None = None, *, identity: bool = False) -> int:
        """``record`` is the node's record now; ``identity``: it is new, or its capabilities, name,
        labels or profile changed (a follower needs the whole record). Returns its number."""
        seq = self._append(record.node_id, cause, stimulus_id)
        self._state[record.node_id] = ("record", live_fields(record))
        if identity:
            self._identity[record.node_id] = seq
        return seq

    def collected(self, node_id: str, cause: str, stimulus_id: str | None = None) -> int:
        """The node's record went to the collected trail (a tombstone for followers)."""
        seq = self._append(node_id, cause, stimulus_id)
        self._state[node_id] = ("collected", None)
        self._identity.pop(node_id, None)
        return seq

    def seen(self, node_id: str, cause: str, stimulus_id: str | None = None) -> int:
        """Ray runs a fabric raylet the registry holds no record of (its probe has not registered)."""
        seq = self._append(node_id, cause, stimulus_id)
        self._state[node_id] = ("seen", None)
        return seq

    def published_live(self, node_id: str) -> dict[str, Any] | None:
        """The live fields of the node's record as last numbered (None: not numbered in this epoch)."""
        state = self._state.get(node_id)
        return state[1] if state is not None else None

    def _append(self, node_id: str, cause: str, stimulus_id: str | None) -> int:
        self.seq += 1
        self._entries.append((node_id, cause, stimulus_id))
        if len(self._entries) >= 2 * self.retain:  # trim in one go: amortised O(1) per change
            drop = len(self._entries) - self.retain
            del self._entries[:drop]
            self._first += drop
        return self.seq

    # -- reading ---------------------------------------------------------------------------------------
    def page(self, epoch: Any, since: Any, read_record: Callable[[str], RegistryRecord | None]) -> ChangePage:
        """What changed after number ``since`` of ``epoch``: one ``RecordChange`` per node changed,
        ordered by its newest change, or ``changes=None`` (resync) for another epoch, a number this
        log no longer holds (or never handed out), or an argument that is not a number.
        ``read_record``: the store's current record of a node (for a whole-record change).
        Costs the number of changes after ``since``, not the number of records."""
        if epoch != self.epoch or isinstance(since, bool) or not isinstance(since, int):
            return ChangePage(self.epoch, self.seq, None)
        if since > self.seq or since < self._first - 1:
            return ChangePage(self.epoch, self.seq, None)
        newest: dict[str, int] = {}
        why: dict[str, tuple[str, str | None]] = {}
        for offset, (node_id, cause, sid) in enumerate(self._entries[since - self._first + 1:]):
            newest.pop(node_id, None)  # re-insert: the dict keeps nodes in the order of their newest change
            newest[node_id] = since + 1 + offset
            earlier = why.get(node_id)
            if earlier is None or sid is not None or earlier[1] is None:
                why[node_id] = (cause, sid)  # a heartbeat's load does not hide the event that came before it
        out = []
        for node_id, seq in newest.items():
            kind, live = self._state[node_id]
            cause, sid = why[node_id]
            if kind == "record" and self._identity.get(node_id, 0) > since:
                record = read_record(node_id)
                if record is None:  # cannot happen while the registry is the store's only writer
                    return ChangePage(self.epoch, self.seq, None)
                out.append(RecordChange(node_id, seq, "record", cause, sid, record=record))
            elif kind == "record":
                out.append(RecordChange(node_id, seq, "update", cause, sid, live=live))
            else:
                out.append(RecordChange(node_id, seq, kind, cause, sid))
        return ChangePage(self.epoch, self.seq, tuple(out))

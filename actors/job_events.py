"""The fabric's event log as the job runner keeps it (``JobEventLog``).

Every event the scheduler records (a job's state, a placement, a drain's step, a provider's note)
is numbered here, kept in memory for the readers (``h.job_events``, the operator's watch) and
handed to the job store with the runner's next write. It lives apart from the runner because it
is a store of its own: numbered, bounded, read back after a restart, counted by kind.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

from fabric.core.scheduling.stimuli import new_stimulus_id
from fabric.store.job_rows import decode_event, encode_event

__all__ = ["JobEventLog", "MAX_EVENTS"]

MAX_EVENTS = 10_000
"""Events kept in memory (the store keeps its own bound)."""


class JobEventLog:
    """The numbered events, newest last (see the module docstring). ``last_seq``: the store's last
    number (numbering goes on from it); ``counters``: the runner's, where each kind is counted."""

    def __init__(self, last_seq: int, clock: Callable[[], float], counters: collections.Counter) -> None:
        self.events: collections.deque = collections.deque(maxlen=MAX_EVENTS)
        self.seq = last_seq
        self.clock = clock
        self.counters = counters
        self.unwritten: list[tuple[int, bytes]] = []
        """Encoded events the store has not got yet (``take_unwritten``)."""

    def load(self, rows: list[tuple[int, bytes]]) -> None:
        """The store's last events, read back after a restart (an unreadable one is skipped)."""
        for _, blob in rows:
            try:
                self.events.append(decode_event(blob))
            except Exception:
                pass

    def emit(self, kind: str, data: dict, stimulus_id: str | None = None) -> dict[str, Any]:
        """Append one event (``seq``, ``kind``, ``at``, ``stimulus_id``, ``data``) and count it:
        ``stimulus_id`` names what caused it (a fresh one when not given). The event."""
        self.seq += 1
        event = {"seq": self.seq, "kind": kind, "at": self.clock(), "stimulus_id": stimulus_id or new_stimulus_id(),
                 "data": dict(data)}
        self.events.append(event)
        self.unwritten.append((self.seq, encode_event(event)))
        self.counters[f"events_{kind}"] += 1
        if kind == "job_state" and data.get("to") == "recovering":
            self.counters["job_restarts"] += 1
        if kind == "job_dropped":
            self.counters["jobs_dropped"] += 1
        elif kind == "bundle_broken":
            self.counters["bundles_broken"] += 1
        elif kind == "job_rejected":
            self.counters["jobs_rejected"] += 1
        return event

    def since(self, since: int = 0, kinds: list[str] | None = None) -> list[dict]:
        """Events numbered after ``since``, oldest first. The log is in seq order, so only its tail
        newer than ``since`` is walked (a watcher that keeps up reads a few events, not the log)."""
        newer: list[dict] = []
        for e in reversed(self.events):
            if e["seq"] <= since:
                break
            if not kinds or e["kind"] in kinds:
                newer.append(e)
        newer.reverse()
        return newer

    def take_unwritten(self) -> list[tuple[int, bytes]]:
        """The events to write now; they are the store's from here on."""
        rows, self.unwritten = self.unwritten, []
        return rows

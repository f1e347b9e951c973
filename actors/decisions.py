"""``DecisionRecorder``: the scheduler's placement decisions on the record.

The core's ``DecisionTap`` captures the decisions due (``fabric.core.decisions``); after each stimulus
the scheduler hands them here (``collect``). A job's placement is kept under the number of the
``placement_decision`` event its runner writes (``job_placed``); every other decision is written as a
``placement_recorded`` event and kept under its number. The book is written to the jobs store every
scheduler tick (``flush``) and read back when the scheduler starts again, so a restart (or a ``fabric down`` and ``up``
with other settings) keeps the record. ``explain`` answers ``fabric explain --event
SEQ``: why, from what was recorded, and with ``replay`` whether the engine decides the same today.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

from fabric.core.decisions import Capture, DecisionBook, DecisionTap, explain_recorded, replay
from fabric.core.errors import MessageError
from fabric.core.settings import FabricSettings

PENDING_JOBS = 256
"""Job placements waiting for their ``placement_decision`` event, at most (the oldest go first)."""

Emit = Callable[[str, dict, "str | None"], "dict[str, Any] | None"]
"""Writes one event to the fabric's log; the event (with its ``seq``), or None when there is no log."""


class DecisionRecorder:
    """Captured decisions into the event log and the ``DecisionBook`` (see the module docstring)."""

    def __init__(self, tap: DecisionTap, settings: FabricSettings, emit: Emit, clock: Callable[[], float],
                 store: Any = None) -> None:
        self.tap = tap
        self.store = store
        """The jobs store (``JobStore``: ``decisions``, ``write_decisions``), or None: kept in memory only."""
        self.settings = settings
        self.book = DecisionBook(settings.decisions.max_records, settings.decisions.max_bytes)
        self.emit = emit
        self.clock = clock
        self.pending: OrderedDict[str, Capture] = OrderedDict()
        if store is not None:
            try:
                self.book.load(*store.decisions())
                self._write()  # what the bounds or a missing part dropped on the way in
            except Exception as exc:  # an unreadable record is a note; placing goes on
                print(f"[fabric.scheduler] decisions on the record not read back: {type(exc).__name__}: {exc}")

    def collect(self) -> None:
        """Write and keep what the tap captured since the last call."""
        if not self.tap.captured:
            return
        for c in self.tap.take():
            job_id = c.decision.context.job_id
            if c.subject == "job" and c.decision.status == "placed" and job_id:
                self.pending[job_id] = c
                self.pending.move_to_end(job_id)
                while len(self.pending) > PENDING_JOBS:
                    self.pending.popitem(last=False)
                continue
            d = c.decision
            event = self.emit("placement_recorded", {
                "subject": c.subject, "why": c.why, "job_id": job_id, "status": d.status, "node_id": d.node_id,
                "node": d.node_name, "tier": d.tier.value if d.tier else None, "fallback_levels": d.fallback_levels,
                "summary": d.summary()}, c.stimulus_id)
            if event is not None:
                self._keep(event["seq"], c, job_id)

    def job_placed(self, job_id: str, seq: int) -> None:
        """The ``placement_decision`` event numbered ``seq`` placed ``job_id``: keep its decision under it."""
        self.collect()
        c = self.pending.pop(job_id, None)
        if c is not None:
            self._keep(seq, c, job_id)

    def flush(self) -> None:
        """What the book kept and forgot since the last flush, into the store (every scheduler tick:
        off the placement path)."""
        self._write()

    def _write(self) -> None:
        if self.store is None:
            return
        rows, parts = self.book.take_writes()
        try:
            self.store.write_decisions(rows, parts)
        except Exception as exc:
            print(f"[fabric.scheduler] decisions on the record not written: {type(exc).__name__}: {exc}")

    def _keep(self, seq: int, c: Capture, job_id: str | None) -> None:
        try:
            self.book.keep(seq, c, self.clock(), job_id)
        except Exception as exc:  # a decision that cannot be kept is said, never in the way of placing
            print(f"[fabric.scheduler] decision {seq} not recorded: {type(exc).__name__}: {exc}")

    def set_enabled(self, enabled: bool | None) -> bool:
        """Turn recording on or off (None: leave it); whether it is on."""
        if enabled is not None:
            self.tap.enabled = bool(enabled)
        return self.tap.enabled

    def explain(self, seq: int, replay_it: bool = False, settings_now: bool = False, verbose: bool = False) -> dict:
        """Why the decision of event ``seq`` was made (``text``), and with ``replay_it`` the engine
        again on its recorded inputs (recorded settings, or today's with ``settings_now``)."""
        rd = self.book.get(seq)
        if rd is None:
            raise MessageError("event_seq", "no decision is on the record under this event (never recorded, "
                                            "or forgotten past the decisions bounds)", seq)
        out: dict[str, Any] = {"seq": seq, "subject": rd.row["subject"], "why": rd.row["why"], "job_id": rd.row["job_id"],
                               "decision": rd.row["decision"], "fleet_version": rd.row["fleet"], "nodes": rd.row["nodes"],
                               "text": explain_recorded(rd, verbose)}
        if replay_it or settings_now:
            again = replay(rd, self.settings if settings_now else None)
            out["replay"] = {k: again[k] for k in ("same", "settings", "now", "why")}
            verdict = "decides the same" if again["same"] else "would now decide differently"
            lines = [f"replay ({again['settings']} settings): {verdict}"] + [f"  {w}" for w in again["why"]]
            out["text"] += "\n" + "\n".join(lines)
        return out

    def figures(self) -> dict[str, int]:
        return self.book.figures()

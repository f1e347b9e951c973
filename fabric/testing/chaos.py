"""Scoring a chaos scenario (pure): what a burst of calls did while a fault hit the fleet.

``scripts/chaos.py`` runs the scenarios on a real local fleet: every call appends one line to a
run log when it starts (its call id, its node, the time), and the driver records which calls
were accepted, which completed and which failed. ``score`` turns that into the figures the
issue asks for, per scenario: calls, completed, lost (accepted and never completed), refused
(``.remote()`` raised a typed error: the caller knew at once, nothing was accepted), run more
than once (at-least-once, allowed and reported), run below their floor or on an excluded node,
seconds until the fabric placed again, and registry records lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable


@dataclass(frozen=True)
class RunLine:
    """One start of one call, as the call wrote it."""

    call_id: str
    node_id: str
    start: float


@dataclass(frozen=True)
class Exclusion:
    """A node that must take no call submitted at or after ``since`` that starts before ``until``
    (offline, flap-held...: ``since`` is when the fabric saw it plus one tick). A call submitted
    earlier was placed while the node was fine; it may still wait in the node's queue and start
    there later, which is no fault."""

    node_id: str
    since: float
    until: float = math.inf
    reason: str = ""


@dataclass
class Outcome:
    """The figures of one scenario."""

    name: str
    calls: int = 0
    completed: int = 0
    lost: int = 0
    refused: int = 0
    duplicates: int = 0
    below_floor: int = 0
    on_excluded: int = 0
    recovery_s: float | None = None
    records_lost: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    """Exception type name -> calls that failed with it (lost calls, by cause)."""
    offenders: list[dict] = field(default_factory=list)
    """The first few starts below the floor or on an excluded node, with their times."""
    note: str = ""

    def as_json(self) -> dict:
        return {"calls": self.calls, "completed": self.completed, "lost": self.lost, "refused": self.refused,
                "duplicates": self.duplicates, "below_floor": self.below_floor, "on_excluded": self.on_excluded,
                "recovery_s": None if self.recovery_s is None else round(self.recovery_s, 3),
                "records_lost": self.records_lost, "failures": dict(self.failures), "offenders": list(self.offenders),
                "note": self.note}

    @property
    def clean(self) -> bool:
        """Nothing lost, nothing below its floor or on an excluded node, no record lost."""
        return self.lost == 0 and self.below_floor == 0 and self.on_excluded == 0 and self.records_lost == 0


def read_run_log(path: Path) -> list[RunLine]:
    """The run log's lines (``call_id node_id start``); a torn last line is skipped."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        try:
            out.append(RunLine(parts[0], parts[1], float(parts[2])))
        except ValueError:
            continue
    return out


def score(name: str, *, accepted: dict[str, float] | Iterable[str], completed: Iterable[str], failed: dict[str, str], refused: int,
          runs: Iterable[RunLine], below_floor: Callable[[RunLine], bool], exclusions: Iterable[Exclusion] = (),
          recovery_s: float | None = None, records_before: Iterable[str] = (), records_after: Iterable[str] = (),
          note: str = "") -> Outcome:
    """The scenario's figures. ``accepted``: call id -> when it was submitted (or just the ids, when
    nothing is excluded); ``failed``: call id -> exception type name, for accepted calls whose
    result was an error or never came; ``below_floor(run)``: whether that start was on a node below
    the call's floor at that time."""
    submitted = dict(accepted) if isinstance(accepted, dict) else {c: -math.inf for c in accepted}
    accepted = list(submitted)
    done = set(completed)
    starts: dict[str, int] = {}
    runs = list(runs)
    for run in runs:
        starts[run.call_id] = starts.get(run.call_id, 0) + 1
    exclusions = list(exclusions)
    failures: dict[str, int] = {}
    for kind in failed.values():
        failures[kind] = failures.get(kind, 0) + 1

    def excluded_by(r: RunLine) -> Exclusion | None:
        sent = submitted.get(r.call_id, -math.inf)
        return next((e for e in exclusions if e.node_id == r.node_id and sent >= e.since and r.start < e.until), None)

    offenders = []
    for r in runs:
        e = excluded_by(r)
        if (e is not None or below_floor(r)) and len(offenders) < 5:
            offenders.append({"call_id": r.call_id, "node_id": r.node_id[:12], "sent": submitted.get(r.call_id),
                              "start": r.start, "excluded": None if e is None else [e.since, e.until, e.reason]})
    return Outcome(
        name=name,
        calls=len(accepted) + refused,
        completed=sum(1 for c in accepted if c in done),
        lost=sum(1 for c in accepted if c not in done),
        refused=refused,
        duplicates=sum(1 for c in accepted if starts.get(c, 0) > 1),
        below_floor=sum(1 for r in runs if below_floor(r)),
        on_excluded=sum(1 for r in runs if excluded_by(r) is not None),
        recovery_s=recovery_s,
        records_lost=len(set(records_before) - set(records_after)),
        failures=failures,
        offenders=offenders,
        note=note,
    )

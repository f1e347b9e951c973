"""``PlacementTrace``: a placement decision's walk, replayed step by step.

A trace is the walk replayed: for each step (compute level x pool tier) every node's first
failing filter and every survivor's key, then any provisioning attempts. The fast engine
records only a snapshot of the fleet (a shallow dict copy: records are immutable) and the
trace is computed from it by the reference walk the first time it is read, so asking for a
trace costs a copy, and reading it costs a reference walk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from fabric.core.tiers import ComputeTier


@dataclass(frozen=True, slots=True)
class TraceStep:
    """One step of the walk."""

    kind: str
    """``existing`` (nodes filtered and ranked) or ``provision`` (elastic pool tier tried)."""
    level: ComputeTier
    pool: str
    pool_tier: str
    verdicts: dict[str, str] = field(default_factory=dict)
    """node id -> first failing filter (existing steps)."""
    survivors: tuple[tuple[tuple, str], ...] = ()
    """(key, node id) of every survivor, best first (existing steps)."""
    note: str = ""
    """What the step concluded, in words."""


class PlacementTrace:
    """Every step walked, every node's verdict, every survivor's key; where it was decided."""

    __slots__ = ("_steps", "_decided", "_compute")

    def __init__(self, steps: "list[TraceStep] | None" = None, decided: "tuple[str, str] | None" = None,
                 compute: "Callable[[], tuple[list[TraceStep], tuple[str, str] | None]] | None" = None) -> None:
        self._steps = steps
        self._decided = decided
        self._compute = compute

    def _load(self) -> None:
        if self._steps is None:
            assert self._compute is not None
            self._steps, self._decided = self._compute()
            self._compute = None

    @property
    def steps(self) -> list[TraceStep]:
        self._load()
        return self._steps  # type: ignore[return-value]

    @property
    def decided_at(self) -> "tuple[str, str] | None":
        """(level, pool tier) of the step that decided, or None when deferred."""
        self._load()
        return self._decided

    def verdicts(self) -> dict[str, str]:
        """Every node's verdict at the deciding step (the last existing-node step walked when
        nothing was placed): its first failing filter, or ``survivor``."""
        step = self._main_step()
        if step is None:
            return {}
        out = dict(step.verdicts)
        for _, nid in step.survivors:
            out[nid] = "survivor"
        return out

    def _main_step(self) -> "TraceStep | None":
        steps = [s for s in self.steps if s.kind == "existing"]
        if self._decided is not None:
            for s in steps:
                if (s.level.value, s.pool_tier) == self._decided:
                    return s
        return steps[-1] if steps else None

    def survivors(self) -> list[tuple[tuple, str]]:
        """(key, node id) of the survivors at the deciding step (or the last step), best first."""
        step = self._main_step()
        return list(step.survivors) if step is not None else []

    def __reduce__(self):  # a lazy trace is materialised to cross a process boundary
        return (PlacementTrace, (self.steps, self.decided_at))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlacementTrace):
            return NotImplemented
        return self.steps == other.steps and self.decided_at == other.decided_at

    __hash__ = None  # type: ignore[assignment]

"""What the engine returns: ``Decision`` (placed / provision / deferred) and the ``Allocation``
a placed decision reserves. The ``PlacementTrace`` that explains a decision is ``trace``'s, the
text a person reads is ``explain``'s; both sit below this module.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from fabric.core.placement.context import PlacementContext
from fabric.core.placement.explain import explain
from fabric.core.placement.requirement import Requirement
from fabric.core.placement.trace import PlacementTrace
from fabric.core.settings import NodeShape
from fabric.core.tiers import ComputeTier

ALLOC_IDS = itertools.count(1)


@dataclass(slots=True)
class Allocation:
    """What one placed decision reserves on its node; ``FleetView.release`` gives it back.
    Treat it as immutable (not frozen only because a frozen dataclass is slow to build)."""

    node_id: str
    cpus: float = 0.0
    memory_mib: float = 0.0
    gpu_index: int | None = None
    """The (first) GPU device's index (``GpuInfo.index``), when GPUs were asked for."""
    gpu_fraction: float = 0.0
    """Fraction reserved on each chosen device (1.0 for whole devices)."""
    gpu_positions: tuple[int, ...] = ()
    """Positions in ``capabilities.gpus`` of every device reserved."""
    ports: tuple[str, ...] = ()
    slots: int = 1
    """Concurrency slots taken (always one)."""
    job_id: str | None = None
    """A long-running job bound to the node by this allocation."""
    template: str | None = None
    exclusive: bool = False
    allocation_id: int = field(default_factory=lambda: next(ALLOC_IDS))


class Decision:
    """``placed(node)``, ``provision(pool tier, shape)`` or ``deferred(reason)``."""

    __slots__ = (
        "status", "node_id", "node_name", "tier", "node_tier", "fallback_levels", "reason", "pool", "pool_tier",
        "shape", "gpu_index", "allocation", "resilience_violations", "requirement", "context", "trace",
    )

    def __init__(
        self,
        status: str,
        requirement: Requirement,
        context: PlacementContext,
        *,
        node_id: str | None = None,
        node_name: str | None = None,
        tier: ComputeTier | None = None,
        node_tier: ComputeTier | None = None,
        reason: str = "",
        pool: str | None = None,
        pool_tier: str | None = None,
        shape: NodeShape | None = None,
        allocation: Allocation | None = None,
        resilience_violations: tuple[str, ...] = (),
        trace: PlacementTrace | None = None,
    ) -> None:
        self.status = status
        """``placed``, ``provision`` or ``deferred``."""
        self.requirement = requirement
        self.context = context
        self.node_id = node_id
        self.node_name = node_name
        self.tier = tier
        """The compute level the decision was made at."""
        self.node_tier = node_tier
        """The chosen node's (or shape's) own tier, at or above ``tier``."""
        self.fallback_levels = (requirement.min_tier.rank - tier.rank) if tier is not None else 0
        """How many levels below ``min_tier`` the decision was made."""
        self.reason = reason
        self.pool = pool
        self.pool_tier = pool_tier
        self.shape = shape
        self.allocation = allocation
        self.gpu_index = allocation.gpu_index if allocation is not None else None
        self.resilience_violations = resilience_violations
        """``forbid`` domains the node shares with the other replica (best-effort rule broken)."""
        self.trace = trace

    @property
    def placed(self) -> bool:
        return self.status == "placed"

    def same_outcome(self, other: "Decision") -> bool:
        """Same status, node, level, pool tier, shape, GPU devices, violations and reason."""
        def facts(d: Decision) -> tuple:
            a = d.allocation
            return (d.status, d.node_id, d.tier, d.node_tier, d.pool, d.pool_tier, d.shape.name if d.shape else None,
                    a.gpu_positions if a else None, d.resilience_violations, d.reason, d.fallback_levels)
        return facts(self) == facts(other)

    def summary(self) -> str:
        """One line."""
        if self.status == "placed":
            where = f"{self.node_id}" + (f" ({self.node_name})" if self.node_name and self.node_name != self.node_id else "")
            s = f"placed on {where} at level {self.tier}"
        elif self.status == "provision":
            s = f"provision a {self.shape.name if self.shape else '?'} node ({self.node_tier}) at level {self.tier}"
        else:
            return f"deferred: {self.reason}"
        if self.fallback_levels:
            s += f", {self.fallback_levels} level{'s' if self.fallback_levels > 1 else ''} below {self.requirement.min_tier}"
        s += f", pool {self.pool} / pool tier {self.pool_tier}"
        if self.gpu_index is not None:
            s += f", gpu {self.gpu_index}"
        if self.resilience_violations:
            s += f"; resilience degraded: {', '.join(self.resilience_violations)}"
        return s

    def explain(self, verbose: bool = False, top: int = 5) -> str:
        """A report for a person (think ``nomad alloc status -verbose``)."""
        return explain(self.summary(), self.requirement, self.context, self.trace, self.node_id, verbose=verbose, top=top)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no trace)."""
        return {
            "status": self.status, "node_id": self.node_id, "tier": self.tier.value if self.tier else None,
            "node_tier": self.node_tier.value if self.node_tier else None, "fallback_levels": self.fallback_levels,
            "reason": self.reason, "pool": self.pool, "pool_tier": self.pool_tier,
            "shape": self.shape.name if self.shape else None, "gpu_index": self.gpu_index,
            "resilience_violations": list(self.resilience_violations),
        }

    def __repr__(self) -> str:
        return f"<Decision {self.summary()}>"

_ALLOC_IDS = ALLOC_IDS  # the name it had (kept for callers that still use it)

"""The registry's record of a node, and a node's load: pure pydantic models, no I/O.

``fabric.store`` keeps them in SQLite; the registry, the health monitor and the scheduler's feed
read and write them; the wire messages (``fabric.core.messages``) validate against them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fabric.core.capabilities import NodeCapabilities
from fabric.core.lifecycle import NodeStatus
from fabric.core.names import POOL_LABEL, POOL_TIER_LABEL, TIER_LABEL, ZONE_LABEL


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuUtilization(_Model):
    """One GPU's load, as NVML reports it."""

    index: int = Field(default=0, ge=0)
    gpu_percent: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    memory_used_mib: int = Field(default=0, ge=0)
    memory_total_mib: int = Field(default=0, ge=0)
    encoder_percent: float | None = Field(default=None, ge=0, allow_inf_nan=False)


class Utilization(_Model):
    """A node's load at one heartbeat."""

    cpu_percent: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    memory_percent: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    gpus: tuple[GpuUtilization, ...] = ()

    @property
    def fraction(self) -> float:
        """One number in [0, 1] for ranking: the busiest of CPU and any GPU."""
        vals = [self.cpu_percent] + [g.gpu_percent for g in self.gpus]
        return max(0.0, min(1.0, max(vals) / 100.0))


class RegistryRecord(_Model):
    """One node in the registry (seed 002 § 2's data model, keyed by Ray's node id)."""

    node_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    capabilities: NodeCapabilities
    """What the node's probe reports now (a degraded node reports less than it joined with)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """The Ray labels the node joined with (fixed for its lifetime)."""
    status: NodeStatus = NodeStatus.ACTIVE
    status_since: float = 0.0
    registered_at: float = 0.0
    last_seen: float = 0.0
    """Latest heartbeat (epoch seconds)."""
    utilization: Utilization = Field(default_factory=Utilization)
    degraded: tuple[str, ...] = ()
    """What the node lost since it joined (a GPU that vanished, an encoder that stopped)."""
    held_until: float | None = None
    """Flap damping: held off placement until then."""
    profile: str | None = None
    """The recording the node's probe reads (``live`` when none)."""
    cordoned: bool = False
    """No new placements (operator cordon or drain)."""
    drained: bool = False
    """An operator drain is in force: a node that comes back from ``offline`` (a partition) returns
    to ``draining``, not ``active``. Only an uncordon withdraws it."""

    @property
    def limitations(self) -> tuple[str, ...]:
        """Seed 002's ``limitations``: the probe's notes plus what the node lost."""
        return tuple(self.capabilities.limitations.notes) + self.degraded

    def flap_held(self, now: float) -> bool:
        return self.held_until is not None and now < self.held_until

    def to_node_record(self, now: float, *, running: int = 0, max_concurrent_tasks: int | None = None) -> Any:
        """The placement engine's view of this record (``fabric.core.placement.NodeRecord``): what the
        scheduler places on and what ``handle.nodes()`` returns."""
        from fabric.core.placement import NodeRecord

        labels = self.labels
        return NodeRecord(
            node_id=self.node_id, name=self.name, capabilities=self.capabilities, status=self.status,
            tier=self.capabilities.tier, utilization=self.utilization.fraction, running=running, last_seen=self.last_seen,
            cordoned=self.cordoned, flap_held=self.flap_held(now), max_concurrent_tasks=max_concurrent_tasks,
            zone=labels.get(ZONE_LABEL), pool=labels.get(POOL_LABEL), pool_tier=labels.get(POOL_TIER_LABEL),
            label_tier=_label_tier(labels.get(TIER_LABEL)),
        )


def _label_tier(value: str | None) -> Any:
    """The compute tier a ``fabric.io/tier`` label names, or None (no label, or not a tier)."""
    from fabric.core.tiers import ComputeTier

    if not value:
        return None
    try:
        return ComputeTier.parse(value)
    except ValueError:
        return None

"""``RayNodeView``: one row of Ray's node table, reduced to what the health rules read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from fabric.core.names import NAME_LABEL, PROFILE_LABEL, TIER_LABEL, TIER_RESOURCE_PREFIX


@dataclass(frozen=True)
class RayNodeView:
    """One row of Ray's node table, reduced to what the policy reads."""

    node_id: str
    alive: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, float] = field(default_factory=dict)
    hostname: str = ""
    address: str = ""

    @classmethod
    def from_ray(cls, row: Mapping[str, Any]) -> "RayNodeView":
        """From one dict of ``ray.nodes()`` (``NodeID``, ``Alive``, ``Labels``, ``Resources``...)."""
        return cls(
            node_id=str(row.get("NodeID", "")),
            alive=bool(row.get("Alive", False)),
            labels=dict(row.get("Labels") or {}),
            resources=dict(row.get("Resources") or {}),
            hostname=str(row.get("NodeManagerHostname", "") or ""),
            address=str(row.get("NodeManagerAddress", "") or ""),
        )

    @property
    def is_fabric_node(self) -> bool:
        """Joined through the fabric (``fabric join``/``start-head``/``LocalFabric``): has a tier label."""
        return TIER_LABEL in self.labels

    @property
    def name(self) -> str:
        """The stable name: the ``fabric.io/name`` label, else the hostname, else a short id."""
        return self.labels.get(NAME_LABEL) or self.hostname or self.node_id[:12]

    @property
    def profile(self) -> str | None:
        """The bundled profile this node was started from, when it was."""
        return self.labels.get(PROFILE_LABEL)

    @property
    def joined_tiers(self) -> frozenset[str]:
        """The tiers the node joined Ray serving: its ``fabric.tier.<name>`` resources
        (``NodeCapabilities.to_ray_resources``). Fixed for the raylet's lifetime."""
        return frozenset(k[len(TIER_RESOURCE_PREFIX):] for k, v in self.resources.items()
                         if k.startswith(TIER_RESOURCE_PREFIX) and v > 0)

"""The node-provider protocol: what creates and terminates nodes for an elastic pool tier.

A *provider* turns a ``provision`` decision into a node. It is handed a
``NodeShape`` (for the ``local`` provider a shape names a probe profile) and the pool and pool
tier the node is for, starts the node, and answers a ``ProvisionedNode``: the instance it made,
with the labels the node joins Ray with (pool, pool tier, instance id, spare tag). Until that
node registers with the fabric it is *prospective*; matching the two is the scheduler's work
(by the instance-id label), not the provider's. A provider terminates only instances it made.

The providers themselves are ``local`` (``fabric.providers.local``), ``ray-autoscaler``
(``fabric.providers.autoscaler``: Ray's autoscaler launches the nodes; its nodes cannot carry
an instance-id label, so its ``claim(node_id, labels)`` does that matching instead) and ``command``
(``fabric.providers.command``: the operator's own scripts; their machines run ``fabric join
--instance ID``); they import
this module, and this module imports none of them: ``fabric.providers.factory.providers_for``
builds them from the settings.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Protocol, runtime_checkable

from fabric.core.errors import FabricError
from fabric.core.jobs.rows import ROW_SCHEMA, RowError
from fabric.core.settings import NodeShape

__all__ = ["NodeProvider", "ProvisionedNode", "ProviderError", "PROVIDER_NAMES", "NO_TAGS"]

PROVIDER_NAMES = ("local", "ray-autoscaler", "command")
"""Provider names a pool tier may give (``PoolTier.provider``, ``static`` aside: it provisions nothing)."""

NO_TAGS: Mapping[str, str] = MappingProxyType({})


class ProviderError(FabricError):
    """A provider could not do what it was asked: a provision that failed (``reason`` says how:
    ``unknown_profile``, ``invalid_tag``, ``start_failed``, ``start_timeout``...), an instance it
    does not know, a provider that does not exist yet. ``log_tail``: the last lines the node's
    process wrote, when there was one."""

    def __init__(self, message: str, *, reason: str, provider: str = "", shape: str | None = None, profile: str | None = None,
                 instance_id: str | None = None, field: str | None = None, log_tail: str = "") -> None:
        super().__init__(message, reason=reason, provider=provider, shape=shape, profile=profile, instance_id=instance_id,
                         field=field, log_tail=log_tail)


@dataclass(frozen=True)
class ProvisionedNode:
    """One node a provider made (and has not seen end). ``started_at``: wall-clock seconds when
    its process was started. ``labels``: every label the node joins Ray with. ``pid`` and
    ``log_path``: the local provider's handle on it (its ``ray start`` process, its output)."""

    instance_id: str
    provider: str
    pool: str
    pool_tier: str
    shape: NodeShape
    spare: bool
    started_at: float
    name: str
    profile: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    pid: int | None = None
    log_path: str | None = None

    def as_row(self) -> dict[str, object]:
        """Plain JSON types: the job store's ``instance`` row (a restarted scheduler adopts it again)."""
        return {"schema": ROW_SCHEMA, "instance_id": self.instance_id, "provider": self.provider, "pool": self.pool,
                "pool_tier": self.pool_tier, "shape": self.shape.model_dump(mode="json"), "spare": self.spare,
                "started_at": self.started_at, "name": self.name, "profile": self.profile, "labels": dict(self.labels),
                "pid": self.pid, "log_path": self.log_path}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "ProvisionedNode":
        """The node again from ``as_row``'s form; ``RowError`` (kind ``instance``) when it cannot be read."""
        schema = row.get("schema")
        if not isinstance(schema, int) or schema > ROW_SCHEMA:
            raise RowError(f"an instance row of an unknown schema ({schema!r})", kind="instance")
        try:
            labels = row["labels"]
            return cls(instance_id=str(row["instance_id"]), provider=str(row["provider"]), pool=str(row["pool"]),
                       pool_tier=str(row["pool_tier"]), shape=NodeShape.model_validate(row["shape"]),
                       spare=bool(row["spare"]), started_at=float(row["started_at"]),
                       name=str(row["name"]), profile=None if row["profile"] is None else str(row["profile"]),
                       labels=dict(labels) if isinstance(labels, Mapping) else {},
                       pid=None if row["pid"] is None else int(row["pid"]),
                       log_path=None if row["log_path"] is None else str(row["log_path"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise RowError(f"an instance row cannot be read: {type(exc).__name__}: {exc}", kind="instance",
                           key=str(row.get("instance_id"))) from exc


@runtime_checkable
class NodeProvider(Protocol):
    """What every provider does. Calls block until done (an actor calls them in a thread)."""

    name: str
    """The provider's name, as a pool tier's ``provider`` gives it."""

    def provision(self, shape: NodeShape, *, pool: str, pool_tier: str, spare: bool = False,
                  tags: Mapping[str, str] = NO_TAGS) -> ProvisionedNode:
        """Start one node of ``shape`` for ``pool`` / ``pool_tier`` (tagged a spare when ``spare``;
        ``tags`` become extra labels); ``ProviderError`` with the reason when it cannot."""
        ...

    def terminate(self, instance_id: str) -> None:
        """Stop the node ``instance_id`` this provider made; ``ProviderError`` for one it never made."""
        ...

    def list(self) -> builtins.list[ProvisionedNode]:
        """The nodes this provider made that are still running."""
        ...

"""The node-provider protocol: what creates and terminates nodes for an elastic pool tier.

DESIGN.md § Words: a *provider* turns a ``provision`` decision into a node. It is handed a
``NodeShape`` (for the ``local`` provider a shape names a probe profile) and the pool and pool
tier the node is for, starts the node, and answers a ``ProvisionedNode``: the instance it made,
with the labels the node joins Ray with (pool, pool tier, instance id, spare tag). Until that
node registers with the fabric it is *prospective*; matching the two is the scheduler's work
(by the instance-id label), not the provider's. A provider terminates only instances it made.

``providers_for(settings, address=...)`` builds one provider per provider name the settings'
pool tiers use: ``local`` (``fabric.providers.local``) and ``ray-autoscaler``
(``fabric.providers.autoscaler``: Ray's autoscaler launches the nodes; its nodes cannot carry
an instance-id label, so its ``claim(node_id, labels)`` does that matching instead).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, Protocol, runtime_checkable

from fabric.core.errors import FabricError
from fabric.core.settings import FabricSettings, NodeShape

if TYPE_CHECKING:
    from fabric.providers.autoscaler import RayAutoscalerProvider
    from fabric.providers.local import LocalProvider

__all__ = ["NodeProvider", "ProvisionedNode", "ProviderError", "providers_for", "PROVIDER_NAMES", "NO_TAGS"]

PROVIDER_NAMES = ("local", "ray-autoscaler")
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


def providers_for(settings: FabricSettings | Mapping[str, Any] | None, *, address: str | None = None,
                  autoscaler_options: Mapping[str, Any] | None = None, **local_options: Any) -> dict[str, NodeProvider]:
    """One provider per provider name the settings' pool tiers use, keyed by that name (``static``
    pool tiers need none). ``address``: the cluster's GCS address, which the ``local`` provider's
    nodes join; ``local_options``: ``LocalProvider``'s keyword arguments (``node_ip_address``,
    ``max_slots``, ``env``...). ``ray-autoscaler`` is a ``RayAutoscalerProvider`` over these
    settings (``autoscaler_options``: its keyword arguments, e.g. ``request_resources``; it writes
    through the connected driver, so it needs no address). A provider name no builder knows is
    refused naming it and the pool tiers that ask for it."""
    settings = FabricSettings.load(settings if settings is None or isinstance(settings, FabricSettings) else dict(settings))
    wanted: dict[str, list[str]] = {}
    for pool in settings.pools:
        for pt in pool.tiers:
            if pt.provider != "static":
                wanted.setdefault(pt.provider, []).append(f"{pool.name}/{pt.name}")
    out: dict[str, NodeProvider] = {}
    for name, users in wanted.items():
        if name == "local":
            if not address:
                raise ProviderError(f"provider 'local' (pool tiers {', '.join(users)}) needs the cluster address its nodes join",
                                    reason="no_address", provider=name, field="address")
            out[name] = _local(address, local_options)
        elif name == "ray-autoscaler":
            out[name] = _autoscaler(settings, autoscaler_options or {})
        else:
            raise ProviderError(f"provider {name!r} (pool tiers {', '.join(users)}) is not implemented; "
                                f"implemented: {', '.join(PROVIDER_NAMES)}", reason="unsupported_provider", provider=name)
    return out


def _local(address: str, options: Mapping[str, Any]) -> "LocalProvider":
    from fabric.providers.local import LocalProvider

    return LocalProvider(address, **options)


def _autoscaler(settings: FabricSettings, options: Mapping[str, Any]) -> "RayAutoscalerProvider":
    from fabric.providers.autoscaler import RayAutoscalerProvider

    return RayAutoscalerProvider(settings, **options)

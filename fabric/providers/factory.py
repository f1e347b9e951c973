"""Builds the providers a fabric's settings ask for: ``providers_for(settings, address=...)`` makes
one provider per provider name the settings' pool tiers use.

It is the one module that knows every implementation (``local``, ``ray-autoscaler``, ``command``), so the
protocol module ``fabric.providers.base`` imports none of them: the implementations import the
protocol, this factory imports the implementations, and nothing imports back.
"""

from __future__ import annotations

from typing import Any, Mapping

from fabric.core.settings import FabricSettings
from fabric.providers.autoscaler import RayAutoscalerProvider
from fabric.providers.base import PROVIDER_NAMES, NodeProvider, ProviderError
from fabric.providers.command import CommandProvider, command_tiers
from fabric.providers.local import LocalProvider

__all__ = ["providers_for"]


def providers_for(settings: FabricSettings | Mapping[str, Any] | None, *, address: str | None = None,
                  autoscaler_options: Mapping[str, Any] | None = None, command_options: Mapping[str, Any] | None = None,
                  **local_options: Any) -> dict[str, NodeProvider]:
    """One provider per provider name the settings' pool tiers use, keyed by that name (``static``
    pool tiers need none). ``address``: the cluster's GCS address, which the ``local`` provider's
    nodes join; ``local_options``: ``LocalProvider``'s keyword arguments (``node_ip_address``,
    ``max_slots``, ``env``...). ``ray-autoscaler`` is a ``RayAutoscalerProvider`` over these
    settings (``autoscaler_options``: its keyword arguments, e.g. ``request_resources``; it writes
    through the connected driver, so it needs no address). ``command`` is a ``CommandProvider`` over
    the settings' ``command`` pool tiers (``command_options``: its keyword arguments), its machines
    joining ``address`` unless a tier gives ``join_address``. A provider name no builder knows is
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
        elif name == "command":
            tiers = command_tiers(settings)
            if not address and any(t.command is not None and not t.command.join_address for t in tiers.values()):
                raise ProviderError(f"provider 'command' (pool tiers {', '.join(users)}) needs the cluster address its machines "
                                    f"join (or each tier's command.join_address)", reason="no_address", provider=name,
                                    field="address")
            out[name] = CommandProvider(tiers, address=address or "", **dict(command_options or {}))
        else:
            raise ProviderError(f"provider {name!r} (pool tiers {', '.join(users)}) is not implemented; "
                                f"implemented: {', '.join(PROVIDER_NAMES)}", reason="unsupported_provider", provider=name)
    return out


def _local(address: str, options: Mapping[str, Any]) -> LocalProvider:
    return LocalProvider(address, **options)


def _autoscaler(settings: FabricSettings, options: Mapping[str, Any]) -> RayAutoscalerProvider:
    return RayAutoscalerProvider(settings, **options)

"""Node providers (the layer beside ``fabric.api``, above ``fabric.rayio``):
what creates and terminates nodes for an elastic pool tier. ``base`` holds the protocol, the
``ProvisionedNode`` record and ``ProviderError``; ``factory`` holds ``providers_for``; ``local`` starts real
``ray start --block`` worker processes on this machine, and holds the ``ray start`` argument
builders (``node_args``, ``ray_start_args``) the fabric's other node starters share;
``autoscaler`` drives Ray's autoscaler (``RayAutoscalerProvider``, ``node_types_for``: the
autoscaler config's node types, one per ``ray-autoscaler`` pool tier and candidate shape);
``command`` runs the operator's own provision, terminate and list executables (``CommandProvider``;
``command_run`` runs one of them)."""

from fabric.providers.autoscaler import Demand, RayAutoscalerProvider, node_type_name, node_types_for
from fabric.providers.base import NO_TAGS, PROVIDER_NAMES, NodeProvider, ProviderError, ProvisionedNode
from fabric.providers.command import CommandProvider
from fabric.providers.factory import providers_for
from fabric.providers.local import (
    INSTANCE_LABEL,
    PROVIDER_LABEL,
    SHAPE_LABEL,
    SPARE_LABEL,
    LocalProvider,
    NodeArgs,
    node_args,
    profile_for,
    ray_start_args,
)

__all__ = ["NodeProvider", "ProvisionedNode", "ProviderError", "providers_for", "PROVIDER_NAMES", "NO_TAGS", "LocalProvider",
           "NodeArgs", "node_args", "ray_start_args", "profile_for", "INSTANCE_LABEL", "SPARE_LABEL", "PROVIDER_LABEL", "SHAPE_LABEL",
           "RayAutoscalerProvider", "Demand", "node_types_for", "node_type_name", "CommandProvider"]

"""adaptive-fabric: a Ray-native compute fabric for fleets that keep changing.

The names below are the public contract (see the README and docs/). The pure core (tiers, capabilities,
settings, errors, placement) is imported eagerly and needs no Ray; the runtime names
(``adaptive``, ``up``, ``down``) import Ray only when first used.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from fabric.core.capabilities import (
    FfmpegInfo,
    FramebufferInfo,
    GpuInfo,
    GpuVendor,
    Limitations,
    NodeCapabilities,
    StorageInfo,
    StorageKind,
    TailnetInfo,
)
from fabric.core.errors import (
    CapacityError,
    FabricError,
    InvalidSpecError,
    JobNotFoundError,
    JobUnavailableError,
    MessageError,
    MigrationError,
    NodeNotFoundError,
    ProbeError,
    RegistrationError,
    RequirementError,
    SchedulerUnavailableError,
    SettingsConflictError,
    SettingsError,
    SettingsProblem,
    TransitionError,
)
from fabric.core.settings import FabricSettings
from fabric.core.tiers import ComputeTier

__version__ = "0.1.0"

# name -> module that defines it; imported on first attribute access (PEP 562) so that
# ``import fabric`` stays pure and fast.
_LAZY: dict[str, str] = {
    "Requirement": "fabric.core.placement",
    "FleetView": "fabric.core.placement",
    "NodeRecord": "fabric.core.placement",
    "Decision": "fabric.core.placement",
    "PlacementTrace": "fabric.core.placement",
    "place": "fabric.core.placement",
    "place_many": "fabric.core.placement",
    "adaptive": "fabric.runtime.client",
    "up": "fabric.runtime.control",
    "down": "fabric.runtime.control",
    "FabricHandle": "fabric.runtime.control",
    "NodeAssignment": "fabric.core.scheduling",
    "JobSpec": "fabric.core.jobs",
    "JobState": "fabric.core.jobs",
    "BundleState": "fabric.core.jobs",
    "JobStatus": "fabric.core.jobs.book",
    "JobHandle": "fabric.runtime.jobs",
    "Bundle": "fabric.core.jobs.bundles",
    "BundleJob": "fabric.core.jobs.bundles",
    "ResiliencePolicy": "fabric.core.jobs.bundles",
    "BundleStatus": "fabric.core.jobs.bundles",
    "ValidationReport": "fabric.core.jobs.validation",
    "Admission": "fabric.core.jobs.validation",
    "MigrationStrategy": "fabric.core.jobs.migration",
    "MigrationPhase": "fabric.core.jobs.migration",
    "MigrationState": "fabric.core.jobs.migration",
    "DrainState": "fabric.core.jobs.drains",
    "NodeInterruptionState": "fabric.core.jobs.drains",
    "NodeDrainPhase": "fabric.core.jobs.drains",
    "JobDrainStatus": "fabric.core.jobs.drains",
    "instance_info": "fabric.rayio.instances",
    "on": "fabric.runtime.events",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fabric' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CapacityError", "ComputeTier", "FabricError", "InvalidSpecError", "JobNotFoundError", "JobUnavailableError", "MessageError", "MigrationError", "FabricSettings", "FfmpegInfo", "FramebufferInfo",
    "GpuInfo", "GpuVendor", "Limitations", "NodeCapabilities", "NodeNotFoundError", "ProbeError",
    "RegistrationError", "RequirementError", "SchedulerUnavailableError", "SettingsConflictError", "SettingsError", "SettingsProblem", "StorageInfo",
    "StorageKind", "TailnetInfo", "TransitionError", *_LAZY,
]

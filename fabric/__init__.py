"""adaptive-fabric: a Ray-native compute fabric for fleets that keep changing.

The names below are the public contract (see the README and docs/). The pure core (tiers, capabilities,
settings, errors, placement) is imported eagerly and needs no Ray; the runtime names
(``adaptive``, ``up``, ``down``) import Ray only when first used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:  # what type checkers see of the names above (``name as name``: re-exported); nothing runs
    from fabric.core.jobs import BundleState as BundleState, JobSpec as JobSpec, JobState as JobState
    from fabric.core.jobs.book import JobStatus as JobStatus
    from fabric.core.jobs.bundles import (
        Bundle as Bundle, BundleJob as BundleJob, BundleStatus as BundleStatus, ResiliencePolicy as ResiliencePolicy,
    )
    from fabric.core.jobs.drains import (
        DrainState as DrainState, JobDrainStatus as JobDrainStatus, NodeDrainPhase as NodeDrainPhase,
        NodeInterruptionState as NodeInterruptionState,
    )
    from fabric.core.jobs.migration import (
        MigrationPhase as MigrationPhase, MigrationState as MigrationState, MigrationStrategy as MigrationStrategy,
    )
    from fabric.core.jobs.validation import Admission as Admission, ValidationReport as ValidationReport
    from fabric.core.placement import (
        Decision as Decision, FleetView as FleetView, NodeRecord as NodeRecord, PlacementTrace as PlacementTrace,
        Requirement as Requirement, place as place, place_many as place_many,
    )
    from fabric.core.scheduling import NodeAssignment as NodeAssignment
    from fabric.rayio.instances import instance_info as instance_info
    from fabric.runtime.client import adaptive as adaptive
    from fabric.runtime.control import FabricHandle as FabricHandle, down as down, up as up
    from fabric.runtime.events import on as on
    from fabric.runtime.jobs import JobHandle as JobHandle


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

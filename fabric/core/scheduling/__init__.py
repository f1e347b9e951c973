"""The scheduler's decision core (pure): ``SchedulerCore.handle(stimulus) -> instructions``.

Parts, one module each: ``stimuli`` (what the core reacts to), ``instructions`` (what it asks the
actor to do), ``replies`` (what callers wait for), ``queue`` (the deferred queue), ``leases`` (the
lease book), ``lease_desk`` (a lease's reservations, and the slots expired leases' calls may
still hold), ``ledger`` (every reservation), ``drain`` (the drain saga), ``provisions`` and
``cascade`` (provisioning and prospective nodes), ``provision_rows`` (provisions in flight as
durable rows), ``spill`` (where spilled calls go), ``invariants`` (``validate_state``), ``readout``
(metrics and explain), ``messages`` (the actor's wire validation) and ``core`` (``SchedulerCore``,
composing them; its call-style entry points wrap ``handle``)."""

from fabric.core.scheduling.core import STIMULUS_LOG_SIZE, Clock, SchedulerCore
from fabric.core.scheduling.drain import DRAIN_LIFECYCLE, DrainPhase
from fabric.core.scheduling.instructions import (
    Answer, Expired, Instruction, MarkDraining, Placed, ProvisionNode, Refused, SetCordoned, TerminateNode, reply,
)
from fabric.core.scheduling.invariants import InvalidStateError
from fabric.core.scheduling.replies import LeaseGrant, LeaseSlot, NodeAssignment
from fabric.core.scheduling.stimuli import (
    Cancelled, CallsReported, Cordoned, DrainRequested, LeaseEnded, LeaseRequested, NodeChanged, NodeJoined,
    NodeLost, OutsidersSeen, PlacementUnclaimed, PlaceRequested, ProvisionFailed, ProvisionRequested, ProvisionStarted,
    ProvisionsAdopted, SelectRequested,
    SlotsObserved, SlotsReleased, Stimulus, Tick,
    Uncordoned, new_stimulus_id,
)

__all__ = [
    "Answer", "CallsReported", "Cancelled", "Clock", "Cordoned", "DRAIN_LIFECYCLE", "DrainPhase", "DrainRequested",
    "Expired", "Instruction", "InvalidStateError", "LeaseEnded", "LeaseGrant", "LeaseRequested", "LeaseSlot",
    "MarkDraining", "NodeAssignment", "NodeChanged", "NodeJoined", "NodeLost", "OutsidersSeen", "Placed",
    "PlacementUnclaimed", "PlaceRequested", "ProvisionFailed", "ProvisionNode", "ProvisionRequested",
    "ProvisionStarted", "ProvisionsAdopted", "Refused", "STIMULUS_LOG_SIZE", "SchedulerCore", "SelectRequested",
    "SetCordoned", "SlotsObserved", "SlotsReleased", "Stimulus", "TerminateNode", "Tick", "Uncordoned", "new_stimulus_id", "reply",
]

"""What the scheduler's core reacts to: every fact and request is one small frozen stimulus.

The ``SchedulerActor`` turns each call it receives and each change its fleet feed reports into one
of these and hands it to ``SchedulerCore.handle``; what comes back are instructions
(``fabric.core.scheduling.instructions``), each carrying the ``stimulus_id`` of the stimulus that
produced it (Dask's ``worker_state_machine`` habit). A stimulus made without an id gets a fresh
one (``<kind>-<n>``); one that continues a chain (a registry change the feed relays) keeps the
id of what caused it, so a drain can be followed from the operator's command to the registry.

Arguments are already read (``fabric.core.scheduling.messages``) when a stimulus is built; the
core still refuses a requirement the settings in force do not know (a ``Refused`` instruction).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from fabric.core.placement import NodeRecord, PlacementContext, Requirement
from fabric.core.scheduling.provisions import PendingProvision
from fabric.core.tiers import ComputeTier

_IDS: Iterator[int] = itertools.count(1)


def new_stimulus_id(prefix: str = "stimulus") -> str:
    """A fresh id, ``<prefix>-<n>`` (unique within this process)."""
    return f"{prefix}-{next(_IDS)}"


@dataclass(frozen=True)
class Stimulus:
    """Base of every stimulus: its ``stimulus_id`` (fresh when not given)."""

    stimulus_id: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if not self.stimulus_id:
            object.__setattr__(self, "stimulus_id", new_stimulus_id(self.kind))

    @property
    def kind(self) -> str:
        """The stimulus's name in the log: ``node-joined``, ``lease-requested``..."""
        return _KINDS.get(type(self)) or type(self).__name__.lower()


# -- the fleet (from the feed) -------------------------------------------------------------------
@dataclass(frozen=True)
class NodeJoined(Stimulus):
    """A node entered the fleet (or came back): new capacity."""

    record: NodeRecord
    cause: str = ""
    """Why, as the registry recorded it (``registered``, ``recovered``...); empty when unknown."""


@dataclass(frozen=True)
class NodeChanged(Stimulus):
    """A node's facts changed (re-probe, demotion, status, flap hold, cordon...)."""

    node_id: str
    changes: Mapping[str, Any]
    """``NodeRecord`` fields and their new values."""
    cause: str = ""


@dataclass(frozen=True)
class NodeLost(Stimulus):
    """A node left the fleet (offline, dead, Ray lost its raylet)."""

    node_id: str
    cause: str = ""


@dataclass(frozen=True)
class OutsidersSeen(Stimulus):
    """Ray's alive raylets with a fabric tier label that the fleet does not hold, and their tier."""

    nodes: Mapping[str, ComputeTier]


# -- work (from clients and workers) -------------------------------------------------------------
@dataclass(frozen=True)
class PlaceRequested(Stimulus):
    """Place one call now and reserve its slot; with ``queue``, a deferred call waits in the
    deferred queue under ``request_id`` until a node takes it or ``timeout_s`` (default: the
    settings' queue timeout) runs out. ``release``: the caller's idle leases, given back first."""

    requirement: Requirement
    context: PlacementContext | None = None
    request_id: str | None = None
    queue: bool = False
    priority: int = 0
    timeout_s: float | None = None
    release: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.queue and self.request_id is None:
            raise ValueError("queued placement needs a request_id")


@dataclass(frozen=True)
class SelectRequested(Stimulus):
    """``select_worker``: where would this run now (nothing reserved)."""

    requirement: Requirement


@dataclass(frozen=True)
class LeaseRequested(Stimulus):
    """A client asks to grant or renew lease ``lease_id`` for ``requirement``'s class: ``holding``
    (node -> calls) still run under it, up to ``want`` more slots are wanted, and the client's idle
    leases (``release``) are given back first."""

    lease_id: str
    requirement: Requirement
    holding: Mapping[str, int] = field(default_factory=dict)
    want: int = 64
    release: tuple[str, ...] = ()


@dataclass(frozen=True)
class LeaseEnded(Stimulus):
    """A client gave a lease back (nothing of it runs any more)."""

    lease_id: str


@dataclass(frozen=True)
class CallsReported(Stimulus):
    """Workers report calls that ran under leases, and how many ran below their ``min_tier``."""

    placed: int = 0
    fallbacks: int = 0


@dataclass(frozen=True)
class SlotsReleased(Stimulus):
    """Work ended: its reservations are free again."""

    allocation_ids: tuple[int, ...]


@dataclass(frozen=True)
class PlacementUnclaimed(Stimulus):
    """A queued request was placed after its caller stopped waiting: nobody will run it there."""

    request_id: str
    allocation_id: int | None


@dataclass(frozen=True)
class Cancelled(Stimulus):
    """A queued request's caller went away."""

    request_id: str


# -- the operator ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cordoned(Stimulus):
    """No new work on the node; running work is left alone."""

    node_id: str


@dataclass(frozen=True)
class Uncordoned(Stimulus):
    """The node takes work again; a drain in progress is withdrawn."""

    node_id: str


@dataclass(frozen=True)
class DrainRequested(Stimulus):
    """Cordon the node; once its fabric work has ended, or ``grace_s`` (default: the settings'
    drain grace) has passed, hand it to the registry as draining."""

    node_id: str
    grace_s: float | None = None


@dataclass(frozen=True)
class SlotsObserved(Stimulus):
    """Ray's count of ``fabric.slots`` in use per node (every fabric call holds one while it runs):
    the slots of a lease that expired while its calls ran stay reserved until Ray counts them free."""

    used: Mapping[str, int]


# -- provisions (the provider's answers) ----------------------------------------------------------
@dataclass(frozen=True)
class ProvisionStarted(Stimulus):
    """The provider started the node of ``provision_id`` as ``instance_id``; it registers next."""

    provision_id: str
    instance_id: str
    provider: str = ""


@dataclass(frozen=True)
class ProvisionRequested(Stimulus):
    """Open ``count`` provisions in ``pool`` / ``pool_tier`` of ``shape`` (the burst scaler's
    worker group): prospective nodes the queue may wait on, each a ``ProvisionNode``."""

    pool: str
    pool_tier: str
    shape: Any
    count: int = 1
    reason: str = ""


@dataclass(frozen=True)
class ProvisionFailed(Stimulus):
    """The provider could not start the node of ``provision_id`` (``error``: its words)."""

    provision_id: str
    error: str = ""


@dataclass(frozen=True)
class ProvisionsAdopted(Stimulus):
    """Provisions in flight and held pool tiers a scheduler before this one kept (read back from the
    job store after a restart, each provision's instance still running): open again, each with its
    prospective node. Their times are in a clock where ``wall`` is now (the actor's wall clock when it
    read them); the core moves them into its own, so each keeps its deadline and each hold its end."""

    provisions: tuple[PendingProvision, ...] = ()
    holds: tuple[tuple[str, str, float], ...] = ()
    """``(pool, pool_tier, until)`` of the held pool tiers."""
    wall: float = 0.0


# -- time --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tick(Stimulus):
    """Time passed: expire queued work and leases, finish drains whose grace ran out. ``now``
    (the core's clock when None) is the time the tick stands for."""

    now: float | None = None


_KINDS: dict[type, str] = {
    NodeJoined: "node-joined", NodeChanged: "node-changed", NodeLost: "node-lost", OutsidersSeen: "outsiders-seen",
    PlaceRequested: "place-requested", SelectRequested: "select-requested", LeaseRequested: "lease-requested",
    LeaseEnded: "lease-ended", CallsReported: "calls-reported", SlotsReleased: "slots-released",
    PlacementUnclaimed: "placement-unclaimed", Cancelled: "cancelled", Cordoned: "cordoned",
    Uncordoned: "uncordoned", DrainRequested: "drain-requested", Tick: "tick",
    SlotsObserved: "slots-observed", ProvisionStarted: "provision-started", ProvisionFailed: "provision-failed", ProvisionRequested: "provision-requested",
    ProvisionsAdopted: "provisions-adopted",
}

STIMULI: tuple[type[Stimulus], ...] = tuple(_KINDS)
"""Every stimulus kind the core handles."""

"""A spare reconciler's provisions in flight as plain, versioned rows (pure: dicts of JSON types in and out).

A spare reconciler asks the scheduler for each spare (``provision_node(..., spare=True,
provision_id=...)``); the scheduler, which holds the job store, keeps every such provision as a
``state`` row of kind ``spare_provision`` (key: the provision id) from the moment it asks the
provider until the node registers or is terminated (``actors.provisioner``). What the row says is a
``KeptSpareProvision``: whose pool, which provider, pool tier and shape, when it was asked for, the
provider's instance id once it answered, and its phase (``asked`` or ``started``: the provision
lifecycle every provision shares, ``fabric.core.provision_phase``; a row written before the phase
was kept reads back as its instance id says). Two restarts read it:

- a restarted **scheduler** keeps a row whose instance its provider took back (and answers that node
  again when the same provision id is asked for again: Ray retries a call its restart cut short),
  and drops one whose instance is gone or that was never answered (what it started is swept);
- a restarted **reconciler** takes each row of its pool back into its ``SpareState``
  (``in_flight_of`` + ``SpareState.adopt``): the provision counts as pending, times out from when it
  was really asked for, and its node is matched by instance id when it joins; nothing is provisioned
  a second time for it.

Times in a row are wall-clock seconds (the reconciler's clock is monotonic, per process): the
callers pass ``wall_offset`` (wall clock minus their clock). Pure: no clock is read, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fabric.core.provision_phase import PROVISION_LIFECYCLE, ProvisionPhase, phase_for
from fabric.core.scheduling.provision_rows import (
    ROW_SCHEMA, ProvisionRowError, checked_row, optional_text, phase_of, seconds, shape_of, text,
)
from fabric.core.settings import NodeShape
from fabric.core.spares.state import InFlight

SPARE_PROVISION_KIND = "spare_provision"
"""The ``state`` kind of a spare provision's row (key: its provision id)."""


@dataclass(frozen=True)
class KeptSpareProvision:
    """One spare provision the scheduler asked a provider for on a reconciler's behalf (wall-clock times)."""

    pool: str
    provision_id: str
    provider: str
    pool_tier: str
    shape: NodeShape
    asked_at: float
    """When the scheduler asked the provider (wall-clock seconds)."""
    instance_id: str | None = None
    """The provider's instance id once it answered (None: the call is still running)."""
    started_at: float | None = None
    """When the provider answered (wall-clock seconds)."""
    phase: ProvisionPhase = ProvisionPhase.ASKED
    """Where it is in its life (``PROVISION_LIFECYCLE``); one built with an instance id and left
    ``asked`` is ``started``."""

    def __post_init__(self) -> None:
        if self.phase is ProvisionPhase.ASKED:
            object.__setattr__(self, "phase", phase_for(self.instance_id))

    def moved(self, to: ProvisionPhase, why: str = "") -> "KeptSpareProvision":
        """The same provision in phase ``to``; ``TransitionError`` naming it when the table forbids the move."""
        to = PROVISION_LIFECYCLE.check(f"spare provision {self.provision_id}", self.phase, to, why)
        return replace(self, phase=to)

    def answered(self, instance_id: str, at: float) -> "KeptSpareProvision":
        """The same provision, its provider having answered ``instance_id`` at ``at`` (wall clock): ``started``."""
        return replace(self.moved(ProvisionPhase.STARTED, "the provider answered"), instance_id=instance_id,
                       started_at=max(at, self.asked_at))


def spare_provision_row(k: KeptSpareProvision) -> dict[str, Any]:
    """The ``spare_provision`` row of ``k``."""
    return {"schema": ROW_SCHEMA, "pool": k.pool, "provision_id": k.provision_id, "provider": k.provider,
            "pool_tier": k.pool_tier, "shape": k.shape.model_dump(mode="json"), "asked_at": k.asked_at,
            "instance_id": k.instance_id, "started_at": k.started_at, "phase": k.phase.value}


def spare_provision_from_row(row: object) -> KeptSpareProvision:
    """The provision again from ``spare_provision_row``'s form; ``ProvisionRowError`` when it cannot be read."""
    kind = SPARE_PROVISION_KIND
    r = checked_row(row, kind, "provision_id")
    key = text(r, "provision_id", kind, None)
    instance_id = optional_text(r, "instance_id", kind, key)
    started_at = None if r.get("started_at") is None else seconds(r, "started_at", kind, key)
    if (instance_id is None) != (started_at is None):
        raise ProvisionRowError(f"a {kind} row has an instance id without its start time, or the reverse",
                                kind=kind, key=key)
    return KeptSpareProvision(pool=text(r, "pool", kind, key), provision_id=key,
                              provider=text(r, "provider", kind, key), pool_tier=text(r, "pool_tier", kind, key),
                              shape=shape_of(r, kind, key), asked_at=seconds(r, "asked_at", kind, key),
                              instance_id=instance_id, started_at=started_at,
                              phase=phase_of(r, kind, key, instance_id))


def in_flight_of(k: KeptSpareProvision, wall_offset: float) -> InFlight:
    """``k`` as the reconciler's ``InFlight`` in its own clock (wall − ``wall_offset``), in ``k``'s
    phase: ``started`` once the provider answered, else ``asked``."""
    asked = k.asked_at - wall_offset
    if k.phase is ProvisionPhase.ASKED or k.started_at is None:
        return InFlight(k.provision_id, k.pool_tier, k.shape, asked)
    return InFlight(k.provision_id, k.pool_tier, k.shape, asked, k.phase, max(asked, k.started_at - wall_offset))


__all__ = ["KeptSpareProvision", "SPARE_PROVISION_KIND", "in_flight_of", "spare_provision_from_row",
           "spare_provision_row"]

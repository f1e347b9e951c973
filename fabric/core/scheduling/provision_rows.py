"""The task core's provisions in flight as plain, versioned rows (pure: dicts of JSON types in and out).

A provision the scheduler asked a provider for must outlive the scheduler: a restarted one that
forgot it would ask again (a paid machine doubled) or never know the node it asked for. So every
change of the ``ProvisionBook`` becomes a ``state`` row of the job store, written by the scheduler
actor (``actors.provisioner.Provisioner.persist``) right after the stimulus that made it:

- kind ``provision``, key the provision id: a ``PendingProvision`` (pool, pool tier, provider,
  shape, reason, the provider's instance id once it answered, its phase — ``asked`` or
  ``started`` —, when it was asked for and its deadline); deleted when the provision ends
  (registered, failed, abandoned);
- kind ``provision_hold``, key ``<pool>/<pool tier>``: a pool tier held after a failed provision,
  until when; deleted when the hold ends.

Rows carry ``"schema": ROW_SCHEMA`` (the job store's row style, ``fabric.core.jobs.rows``) and a row
of a newer schema is refused (``ProvisionRowError``) rather than guessed at. A row written before
the phase was kept has no ``phase``: it reads back as ``phase_for`` derives it (an instance id:
``started``); a phase that is not in flight, or that its instance id contradicts, is refused. Times in a row are
wall-clock seconds: the core's clock is monotonic and starts again with the process, so each call
takes ``wall_offset`` (wall clock minus the core's clock, read by the actor) and shifts by it; a
provision read back keeps the deadline it had, in the new process's clock.

Pure: no clock is read here, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping

from fabric.core.errors import FabricError
from fabric.core.provision_phase import IN_FLIGHT, ProvisionPhase, phase_for
from fabric.core.scheduling.provisions import PendingProvision, ProvisionBook
from fabric.core.settings import NodeShape

ROW_SCHEMA = 1
"""The schema every row here is written in (the job store's, ``fabric.core.jobs.rows.ROW_SCHEMA``)."""
PROVISION_KIND = "provision"
"""The ``state`` kind of a pending provision's row (key: its provision id)."""
HOLD_KIND = "provision_hold"
"""The ``state`` kind of a held pool tier's row (key: ``hold_key``)."""

StateRow = tuple[str, str, dict[str, Any] | None]
"""``(kind, key, row)`` for the job store's ``state`` table; a None row deletes the key."""


class ProvisionRowError(FabricError):
    """A stored provision row cannot be read: a newer schema, a missing or mistyped field (``kind``, ``key``)."""

    kind: str | None
    key: str | None

    def __init__(self, message: str, *, kind: str | None = None, key: str | None = None) -> None:
        super().__init__(message, kind=kind, key=key)


def checked_row(row: object, kind: str, key_field: str) -> dict[str, Any]:
    """``row`` as a dict of a schema this fabric reads; ``ProvisionRowError`` otherwise."""
    if not isinstance(row, dict):
        raise ProvisionRowError(f"a {kind} row must be a JSON object, got {type(row).__name__}", kind=kind)
    key = row.get(key_field) if isinstance(row.get(key_field), str) else None
    schema = row.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        raise ProvisionRowError(f"a {kind} row has no valid schema version ({schema!r})", kind=kind, key=key)
    if schema > ROW_SCHEMA:
        raise ProvisionRowError(f"a {kind} row was written by a newer fabric (schema {schema}; this one reads up "
                                f"to {ROW_SCHEMA}): upgrade the fabric, the row is left as it is", kind=kind, key=key)
    return row


def text(row: Mapping[str, Any], name: str, kind: str, key: str | None) -> str:
    """A row's non-empty string field; ``ProvisionRowError`` otherwise."""
    value = row.get(name)
    if not isinstance(value, str) or not value:
        raise ProvisionRowError(f"a {kind} row's {name} must be a non-empty string, got {value!r}", kind=kind, key=key)
    return value


def optional_text(row: Mapping[str, Any], name: str, kind: str, key: str | None) -> str | None:
    """A row's string field that may be null (an instance id not answered yet)."""
    return None if row.get(name) is None else text(row, name, kind, key)


def seconds(row: Mapping[str, Any], name: str, kind: str, key: str | None) -> float:
    """A row's time field, a finite number; ``ProvisionRowError`` otherwise."""
    value = row.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProvisionRowError(f"a {kind} row's {name} must be a finite number, got {value!r}", kind=kind, key=key)
    return float(value)


def shape_of(row: Mapping[str, Any], kind: str, key: str | None) -> NodeShape:
    """A row's ``shape`` (a ``NodeShape`` as JSON) read back."""
    try:
        return NodeShape.model_validate(row.get("shape"))
    except ValueError as exc:
        raise ProvisionRowError(f"a {kind} row's shape cannot be read: {exc}", kind=kind, key=key) from exc


def phase_of(row: Mapping[str, Any], kind: str, key: str | None, instance_id: str | None) -> ProvisionPhase:
    """A row's in-flight ``phase``, derived from ``instance_id`` when the row has none (written before
    phases were kept); ``ProvisionRowError`` for an unknown or ended phase, or one its instance id
    contradicts (``started`` without one, ``asked`` with one)."""
    value = row.get("phase")
    if value is None:
        return phase_for(instance_id)
    phase = next((p for p in ProvisionPhase if p.value == value), None) if isinstance(value, str) else None
    if phase is None:
        raise ProvisionRowError(f"a {kind} row's phase must be one of {', '.join(p.value for p in ProvisionPhase)}, "
                                f"got {value!r}", kind=kind, key=key)
    if phase not in IN_FLIGHT:
        raise ProvisionRowError(f"a {kind} row's phase is {phase.value}: an ended provision's row is deleted, "
                                "not kept", kind=kind, key=key)
    if phase is not phase_for(instance_id):
        raise ProvisionRowError(f"a {kind} row's phase {phase.value} does not fit its instance id {instance_id!r}",
                                kind=kind, key=key)
    return phase


# -- pending provisions -----------------------------------------------------------------------------
def provision_row(p: PendingProvision, wall_offset: float) -> dict[str, Any]:
    """The ``provision`` row of ``p``; its times as wall-clock seconds (core time + ``wall_offset``)."""
    return {"schema": ROW_SCHEMA, "provision_id": p.provision_id, "pool": p.pool, "pool_tier": p.pool_tier,
            "provider": p.provider, "shape": p.shape.model_dump(mode="json"), "instance_id": p.instance_id,
            "reason": p.reason, "requested_at": p.requested_at + wall_offset, "deadline": p.deadline + wall_offset,
            "phase": p.phase.value, "job_id": p.job_id}


def provision_from_row(row: object, wall_offset: float) -> PendingProvision:
    """The provision again from ``provision_row``'s form, its times in the core's clock (wall − ``wall_offset``);
    ``ProvisionRowError`` when it cannot be read."""
    kind = PROVISION_KIND
    r = checked_row(row, kind, "provision_id")
    key = text(r, "provision_id", kind, None)
    reason = r.get("reason", "")
    job_id = r.get("job_id")  # a row written before provisions named their job: None
    instance_id = optional_text(r, "instance_id", kind, key)
    return PendingProvision(
        provision_id=key, pool=text(r, "pool", kind, key), pool_tier=text(r, "pool_tier", kind, key),
        provider=text(r, "provider", kind, key), shape=shape_of(r, kind, key),
        requested_at=seconds(r, "requested_at", kind, key) - wall_offset,
        deadline=seconds(r, "deadline", kind, key) - wall_offset,
        instance_id=instance_id, reason=reason if isinstance(reason, str) else "",
        job_id=job_id if isinstance(job_id, str) else None, phase=phase_of(r, kind, key, instance_id))


def shifted(p: PendingProvision, by: float) -> PendingProvision:
    """A copy of ``p`` with its times moved by ``by`` seconds (from one clock to another)."""
    return replace(p, requested_at=p.requested_at + by, deadline=p.deadline + by)


# -- held pool tiers --------------------------------------------------------------------------------
def hold_key(pool: str, pool_tier: str) -> str:
    return f"{pool}/{pool_tier}"


def hold_row(pool: str, pool_tier: str, until: float, wall_offset: float) -> dict[str, Any]:
    """The ``provision_hold`` row of a pool tier held until ``until`` (core time)."""
    return {"schema": ROW_SCHEMA, "pool": pool, "pool_tier": pool_tier, "until": until + wall_offset}


def hold_from_row(row: object, wall_offset: float) -> tuple[str, str, float]:
    """``(pool, pool_tier, until)`` again, ``until`` in the core's clock."""
    r = checked_row(row, HOLD_KIND, "pool")
    pool, pool_tier = text(r, "pool", HOLD_KIND, None), text(r, "pool_tier", HOLD_KIND, None)
    return pool, pool_tier, seconds(r, "until", HOLD_KIND, hold_key(pool, pool_tier)) - wall_offset


# -- what to write ----------------------------------------------------------------------------------
def book_changes(book: ProvisionBook, wall_offset: float) -> list[StateRow]:
    """The ``state`` rows that bring the store up to ``book`` for what changed since the last call
    (``ProvisionBook.take_changes``): each changed provision's row, or its deletion once it ended;
    each changed hold's row, or its deletion once it ended. Empty when nothing changed."""
    ids, holds = book.take_changes()
    out: list[StateRow] = []
    for pid in sorted(ids):
        p = book.get(pid)
        out.append((PROVISION_KIND, pid, None if p is None else provision_row(p, wall_offset)))
    held = book.held_until()
    for pool, pool_tier in sorted(holds):
        until = held.get((pool, pool_tier))
        row = None if until is None else hold_row(pool, pool_tier, until, wall_offset)
        out.append((HOLD_KIND, hold_key(pool, pool_tier), row))
    return out


__all__ = ["HOLD_KIND", "PROVISION_KIND", "ProvisionRowError", "ROW_SCHEMA", "StateRow", "book_changes", "checked_row",
           "hold_from_row", "hold_key", "hold_row", "optional_text", "phase_of", "provision_from_row", "provision_row",
           "seconds", "shape_of", "shifted", "text"]

"""Moving work on purpose, on the driver's side: the ``FabricHandle`` methods for drain, eviction,
spot interruption and migration (API.md § Drain, eviction, interruption, migration).

Each method checks its arguments first (``RequirementError`` naming the field, nothing sent), then
calls the scheduler actor through the handle's ``SchedulerApi`` and answers what it answered: a ``DrainState``, a
``NodeInterruptionState``, a ``MigrationState`` or a migration id. A fabric error the scheduler
raised (``NodeNotFoundError``, ``JobNotFoundError``, ``MigrationError``...) is raised as itself,
not wrapped in Ray's ``RayTaskError``.

- ``h.drain(node, timeout_s=None, force=False, strategy=None)``: cordon, migrate each job, then ask
  Ray to drain the node (the scheduler's ``drain_jobs``); ``None`` takes the settings' defaults.
- ``h.drain_status(node)``: that node's drain (``None`` when it has none).
- ``h.evict(node)``: stop the node's jobs now (each recovers by its policy); the job ids stopped.
- ``h.handle_node_interruption(node, kind, deadline)``: a forced drain sized to the deadline
  (``deadline``: a ``datetime``, epoch seconds, or ``None``; sent as epoch seconds).
- ``h.migrate_job(job_id, strategy, target_node, override_reservation)`` -> the migration id;
  ``h.migration(mid)``, ``h.migrations()``, ``h.abort_migration(mid, reason)``.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from fabric.core.errors import RequirementError
from fabric.core.jobs.drains import DrainState, NodeInterruptionState
from fabric.core.jobs.migration import MigrationState
from fabric.core.scheduler_api import SchedulerApi

STRATEGIES = ("stop_then_start", "overlap", "handover")
"""The migration strategies, when the core's ``MigrationStrategy`` is not importable."""
INTERRUPTION_KINDS = ("spot-interruption", "rebalance")


def strategies() -> tuple[str, ...]:
    """The strategy names the core knows (``fabric.core.jobs.migration.MigrationStrategy``)."""
    try:
        from fabric.core.jobs.migration import MigrationStrategy
    except ImportError:  # pragma: no cover - before the saga module exists
        return STRATEGIES
    return tuple(s.value for s in MigrationStrategy)


def interruption_kinds() -> tuple[str, ...]:
    try:
        from fabric.core.jobs.drains import INTERRUPTION_KINDS as kinds
    except ImportError:  # pragma: no cover - before the drain models exist
        return INTERRUPTION_KINDS
    return tuple(kinds)


def _name(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RequirementError(field, "must be a non-empty string", value)
    return value


def _optional_name(field: str, value: Any) -> str | None:
    return None if value is None else _name(field, value)


def _flag(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise RequirementError(field, "must be True or False", value)
    return value


def _seconds(field: str, value: Any, *, positive: bool = True) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequirementError(field, "must be a finite number of seconds", value)
    if value < 0 or (positive and value == 0):
        raise RequirementError(field, "must be more than 0 seconds" if positive else "must not be negative", value)
    return float(value)


def _strategy(value: Any) -> str | None:
    if value is None:
        return None
    value = getattr(value, "value", value)  # a MigrationStrategy member
    known = strategies()
    if value not in known:
        raise RequirementError("strategy", f"must be one of {', '.join(known)}", value)
    return str(value)


def _kind(value: Any) -> str:
    known = interruption_kinds()
    if value not in known:
        raise RequirementError("kind", f"must be one of {', '.join(known)}", value)
    return str(value)


def epoch_deadline(value: Any) -> float | None:
    """``deadline`` as epoch seconds (``time.time()``'s base): a ``datetime`` (a naive one is local
    time, as ``datetime.timestamp`` reads it), a number of epoch seconds, or ``None``."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise RequirementError("deadline", "must be a datetime, epoch seconds (time.time()) or None", value)
    return float(value)


class MovesSurface:
    """Mixed into ``FabricHandle``: each method checks its arguments (the edge where they enter),
    then calls the scheduler through the handle's typed client (``fabric.core.scheduler_api``)."""

    def _scheduler_api(self) -> SchedulerApi:  # pragma: no cover - FabricHandle's
        raise NotImplementedError

    # -- drain, eviction, interruption ------------------------------------------------------------
    def drain(self, node: str, timeout_s: float | None = None, force: bool = False, strategy: Any = None) -> DrainState:
        """Cordon ``node``, migrate each of its jobs by ``strategy`` (default: the settings'), then
        ask Ray to drain it; with ``force``, what has not moved by ``timeout_s`` is stopped and
        recovered by its policy. The ``DrainState``."""
        node = _name("node", node)
        timeout = _seconds("timeout_s", timeout_s, positive=False)  # 0: stop (with force) or give up at once
        force = _flag("force", force)
        chosen = _strategy(strategy)
        return self._scheduler_api().drain_jobs(node, timeout, force, chosen)  # waited on past timeout_s

    def drain_status(self, node: str) -> DrainState | None:
        """``node``'s drain (``DrainState``), or ``None`` when it has none."""
        return self._scheduler_api().drain_status(_name("node", node))

    def evict(self, node: str) -> list[str]:
        """Stop ``node``'s jobs now; each recovers by its policy. The job ids stopped."""
        return list(self._scheduler_api().evict(_name("node", node)))

    def handle_node_interruption(self, node: str, kind: str = "spot-interruption", deadline: Any = None) -> NodeInterruptionState:
        """A provider's notice that ``node`` goes at ``deadline`` (a ``datetime``, epoch seconds or
        ``None``): a forced drain sized to it (``NodeInterruptionState``); a second notice tightens it."""
        node = _name("node", node)
        kind = _kind(kind)
        return self._scheduler_api().handle_node_interruption(node, kind, epoch_deadline(deadline))  # waited on to it

    # -- migration ----------------------------------------------------------------------------------
    def migrate_job(self, job_id: str, strategy: Any = None, target_node: str | None = None,
                    override_reservation: bool = False) -> str:
        """Start moving ``job_id`` (to ``target_node``, else where placement puts it, its node
        excluded) by ``strategy`` (default: the settings'); the migration id."""
        job_id = _name("job_id", job_id)
        chosen = _strategy(strategy)
        target = _optional_name("target_node", target_node)
        override = _flag("override_reservation", override_reservation)
        return self._scheduler_api().migrate_job(job_id, chosen, target, override)  # None: the scheduler's default

    def migration(self, migration_id: str) -> MigrationState:
        """One migration's ``MigrationState`` (``MigrationError`` for an unknown id)."""
        return self._scheduler_api().migration(_name("migration_id", migration_id))

    def migrations(self) -> list[MigrationState]:
        """Every migration the scheduler keeps (in flight and recent), oldest first."""
        return list(self._scheduler_api().migrations())

    def abort_migration(self, migration_id: str, reason: str = "") -> MigrationState:
        """Roll ``migration_id`` back (the source keeps running); ``MigrationError`` past its point of
        no return. Its ``MigrationState``."""
        migration_id = _name("migration_id", migration_id)
        if not isinstance(reason, str):
            raise RequirementError("reason", "must be a string", reason)
        return self._scheduler_api().abort_migration(migration_id, reason)


__all__ = ["INTERRUPTION_KINDS", "MovesSurface", "STRATEGIES", "epoch_deadline", "interruption_kinds", "strategies"]

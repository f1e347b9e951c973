"""Moving work on purpose, on the driver's side: the ``FabricHandle`` methods for drain, eviction,
spot interruption and migration (docs/operations.md).

Each method calls the scheduler actor through the handle's ``SchedulerApi`` and answers what it
answered: a ``DrainState``, a ``NodeInterruptionState``, a ``MigrationState`` or a migration id. The
scheduler reads every argument on arrival (``fabric.core.scheduler_args``); a drain, an interruption
and a migration are read here first with the same readers, so a bad one fails before anything is
sent (``MessageError``, a ``RequirementError``, naming the field: the error the actor would raise),
and the wait on a drain or an interruption is sized from its checked ``timeout_s`` or deadline. A
fabric error the scheduler raised (``NodeNotFoundError``, ``JobNotFoundError``, ``MigrationError``,
``MessageError``...) is raised as itself, not wrapped in Ray's ``RayTaskError``.

- ``h.drain(node, timeout_s=None, force=False, strategy=None)``: cordon, migrate each job, then ask
  Ray to drain the node (the scheduler's ``drain_jobs``); ``None`` takes the settings' defaults.
- ``h.drain_status(node)``: that node's drain (``None`` when it has none).
- ``h.evict(node)``: stop the node's jobs now (each recovers by its policy); the job ids stopped.
- ``h.terminate_node(node)``: evict it, then have the provider that made it end it (``NodeTermination``;
  ``TransitionError`` for a node joined by hand, which no provider can end).
- ``h.handle_node_interruption(node, kind, deadline)``: a forced drain sized to the deadline
  (``deadline``: a ``datetime``, epoch seconds, or ``None``; sent as epoch seconds).
- ``h.migrate_job(job_id, strategy, target_node, override_reservation)`` -> the migration id;
  ``h.migration(mid)``, ``h.migrations()``, ``h.abort_migration(mid, reason)``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fabric.core import scheduler_args as args
from fabric.core.jobs.drains import DrainState, NodeInterruptionState
from fabric.core.jobs.migration import MigrationState, MigrationStrategy
from fabric.core.scheduler_api import NodeTermination, SchedulerApi
from fabric.core.scheduling.messages import read_id

STRATEGIES = args.STRATEGY_NAMES
"""The migration strategies (the core's ``MigrationStrategy``, by name)."""
INTERRUPTION_KINDS = args.INTERRUPTION_KINDS
Strategy = str | MigrationStrategy | None
"""A migration strategy: its name, the core's enum member, or None (the settings' default)."""
Deadline = datetime | float | None
"""When a reclaimed node goes: a ``datetime``, epoch seconds, or None (the settings' grace)."""


def strategies() -> tuple[str, ...]:
    """The strategy names the core knows (``fabric.core.jobs.migration.MigrationStrategy``)."""
    return STRATEGIES


def interruption_kinds() -> tuple[str, ...]:
    return tuple(INTERRUPTION_KINDS)


def _as_epoch(value: Any) -> Any:
    """A ``datetime`` as epoch seconds, converted here: a naive one is this process's local time (as
    ``datetime.timestamp`` reads it), which the scheduler's process cannot know. Anything else as given."""
    return value.timestamp() if isinstance(value, datetime) else value


def epoch_deadline(value: Any) -> float | None:
    """``deadline`` as epoch seconds (``time.time()``'s base): a ``datetime``, a number of epoch
    seconds, or ``None``, read as the scheduler reads it (``fabric.core.scheduler_args.read_deadline``)."""
    return args.read_deadline(_as_epoch(value))


class MovesSurface:
    """Mixed into ``FabricHandle``: each method calls the scheduler through the handle's typed client
    (``fabric.core.scheduler_api``), a drain, an interruption or a migration read first with the
    scheduler's own readers (``fabric.core.scheduler_args``)."""

    def _scheduler_api(self) -> SchedulerApi:  # pragma: no cover - FabricHandle's
        raise NotImplementedError

    # -- drain, eviction, interruption ------------------------------------------------------------
    def drain(self, node: str, timeout_s: float | None = None, force: bool = False,
              strategy: Strategy = None) -> DrainState:
        """Cordon ``node``, migrate each of its jobs by ``strategy`` (default: each job's
        ``drain_strategy``, else the settings'), then ask Ray to drain it; with ``force``, what has
        not moved by ``timeout_s`` is stopped and recovered by its policy. The ``DrainState``."""
        # timeout_s 0: stop (with force) or give up at once
        node, timeout, force, chosen = args.read_drain_request(node, timeout_s, force, strategy)
        return self._scheduler_api().drain_jobs(node, timeout, force, chosen)  # waited on past timeout_s

    def drain_status(self, node: str) -> DrainState | None:
        """``node``'s drain (``DrainState``), or ``None`` when it has none."""
        return self._scheduler_api().drain_status(node)

    def evict(self, node: str) -> list[str]:
        """Stop ``node``'s jobs now; each recovers by its policy. The job ids stopped."""
        return list(self._scheduler_api().evict(node))

    def terminate_node(self, node: str) -> NodeTermination:
        """End ``node`` for good: its jobs stopped (each recovers elsewhere by its policy), then the
        provider that made it ends its instance. A node joined by hand: ``TransitionError``, nothing
        stopped. What was ended (``NodeTermination``: node, provider, instance, the jobs stopped)."""
        return self._scheduler_api().terminate_node(read_id("node", node))

    def handle_node_interruption(self, node: str, kind: str = "spot-interruption",
                                 deadline: Deadline = None) -> NodeInterruptionState:
        """A provider's notice that ``node`` goes at ``deadline`` (a ``datetime``, epoch seconds or
        ``None``): a forced drain sized to it (``NodeInterruptionState``); a second notice tightens it."""
        node, kind, when = args.read_interruption(node, kind, _as_epoch(deadline))
        return self._scheduler_api().handle_node_interruption(node, kind, when)  # waited on to it

    # -- migration ----------------------------------------------------------------------------------
    def migrate_job(self, job_id: str, strategy: Strategy = None, target_node: str | None = None,
                    override_reservation: bool = False) -> str:
        """Start moving ``job_id`` (to ``target_node``, else where placement puts it, its node
        excluded) by ``strategy`` (default: the settings'); the migration id."""
        job_id, chosen, target, override = args.read_migrate_request(job_id, strategy, target_node,
                                                                     override_reservation)
        return self._scheduler_api().migrate_job(job_id, chosen, target, override)  # None: the scheduler's default

    def migration(self, migration_id: str) -> MigrationState:
        """One migration's ``MigrationState`` (``MigrationError`` for an unknown id)."""
        return self._scheduler_api().migration(read_id("migration_id", migration_id))

    def migrations(self) -> list[MigrationState]:
        """Every migration the scheduler keeps (in flight and recent), oldest first."""
        return list(self._scheduler_api().migrations())

    def abort_migration(self, migration_id: str, reason: str = "") -> MigrationState:
        """Roll ``migration_id`` back (the source keeps running); ``MigrationError`` past its point of
        no return. Its ``MigrationState``."""
        return self._scheduler_api().abort_migration(*args.read_abort(migration_id, reason))


__all__ = ["Deadline", "INTERRUPTION_KINDS", "MovesSurface", "STRATEGIES", "Strategy", "epoch_deadline", "interruption_kinds", "strategies"]

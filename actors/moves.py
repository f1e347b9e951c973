"""The scheduler's methods for moving work on purpose: migrations, drains, evictions, reclaim
notices and rebalancing (API.md § Drain, eviction, interruption, migration).

A mixin of ``actors.scheduler.Scheduler``: the sagas are ``actors.migrations.MigrationRunner``'s
(inside the job runner), the drains ``actors.drains.DrainRunner``'s; these methods check what
arrives over the wire and hand it on.
"""

from __future__ import annotations

from typing import Any

from fabric.core.errors import MessageError, MigrationError
from fabric.core.scheduling import messages as msg


class SchedulerMoves:
    """Migrations, drains, evictions and interruptions, as scheduler actor methods."""

    jobs: Any
    core: Any

    def _moves(self) -> Any:
        runner = self._runner()  # type: ignore[attr-defined]
        return runner.moves

    # -- migrations ------------------------------------------------------------------------------------
    async def migrate_job(self, job_id: str, strategy: str | None = None, target_node: str | None = None,
                          override_reservation: bool = False) -> str:
        """Open a migration for a running job; its id once the target is placed and being created."""
        job_id = msg.read_id("job_id", job_id)
        if strategy is not None:
            strategy = msg.read_id("strategy", strategy)
        if target_node is not None:
            target_node = msg.read_id("target_node", target_node)
        if not isinstance(override_reservation, bool):
            raise MessageError("override_reservation", "must be true or false", type(override_reservation).__name__)
        return self._moves().migrate(job_id, strategy, target_node, override_reservation).migration_id

    def migration(self, migration_id: str) -> Any:
        return self._moves().state(msg.read_id("migration_id", migration_id))

    def migrations(self) -> list:
        return self._moves().states()

    def abort_migration(self, migration_id: str, reason: str = "") -> Any:
        if not isinstance(reason, str) or len(reason) > 1000:
            raise MessageError("reason", "must be text, at most 1000 characters", type(reason).__name__)
        return self._moves().abort(msg.read_id("migration_id", migration_id), reason)

    async def close_migrations(self, grace_s: float = 5.0) -> int:
        """``fabric.down``: roll back or mark lost every saga in flight, within ``grace_s``."""
        if self.jobs is None:
            return 0
        return await self._moves().close(msg.read_seconds("grace_s", grace_s, allow_zero=True))


__all__ = ["SchedulerMoves", "MigrationError"]

"""Requests to move work on purpose: migrations, drains, evictions, reclaim notices (the operator's
side of the scheduler actor; docs/operations.md).

``MoveRequests`` is one object of ``actors.scheduler.Scheduler``, whose remote methods of the same
names hand every such call to it: it reads what arrives over the wire with the scheduler's readers
(``fabric.core.scheduler_args``, ``fabric.core.scheduling.messages``: the ones ``FabricHandle``
reads with too) and hands it on to the job runner's sagas (``actors.migrations.MigrationRunner``)
and drains (``actors.drains.DrainRunner``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable

from fabric.core import scheduler_args as args
from fabric.core.errors import MessageError, MigrationError, NodeNotFoundError, TransitionError
from fabric.core.scheduling import SchedulerCore
from fabric.core.scheduling import messages as msg

if TYPE_CHECKING:  # the runner's types only (actors.jobs imports nothing of this module)
    from actors.drains import DrainRunner
    from actors.jobs import JobRunner
    from actors.migrations import MigrationRunner


class MoveRequests:
    """Migrations, drains, evictions, terminations and interruptions, checked and handed on. ``core``
    resolves node names; ``runner`` answers the scheduler's job runner (it raises when the scheduler
    runs none); ``terminate(provider, instance_id, reason, node_id)`` has a provider end a node."""

    def __init__(self, core: SchedulerCore, runner: "Callable[[], JobRunner]",
                 terminate: Callable[[str, str, str, str], Awaitable[None]] | None = None) -> None:
        self.core = core
        self.job_runner = runner
        self.terminate = terminate

    def _moves(self) -> "MigrationRunner":
        return self.job_runner().moves

    # -- migrations ------------------------------------------------------------------------------------
    async def migrate_job(self, job_id: str, strategy: str | None = None, target_node: str | None = None,
                          override_reservation: bool = False) -> str:
        """Open a migration for a running job; its id once the target is placed and being created."""
        job_id, strategy, target_node, override = args.read_migrate_request(job_id, strategy, target_node,
                                                                            override_reservation)
        return self._moves().migrate(job_id, strategy, target_node, override).migration_id

    def migration(self, migration_id: str) -> Any:
        return self._moves().state(msg.read_id("migration_id", migration_id))

    def migrations(self) -> list:
        return self._moves().states()

    def abort_migration(self, migration_id: str, reason: str = "") -> Any:
        return self._moves().abort(*args.read_abort(migration_id, reason))

    # -- drains, evictions, reclaim notices (actors.drains.DrainRunner) ---------------------------------
    def _drains(self) -> "DrainRunner":
        return self.job_runner().drains

    def _node(self, node: Any) -> str:
        return self.core.resolve_node(msg.read_id("node", node))

    async def drain_jobs(self, node: str, timeout_s: float | None = None, force: bool = False,
                         strategy: str | None = None) -> Any:
        """Cordon the node, migrate its jobs by ``strategy``, then have Ray drain it (``DrainState``)."""
        node, timeout_s, force, strategy = args.read_drain_request(node, timeout_s, force, strategy)
        return await self._drains().drain(self.core.resolve_node(node), timeout_s, force, strategy)

    def drain_status(self, node: str) -> Any:
        """The drain of ``node`` (by id or name), in progress or the latest ended. A node Ray drained
        has left the fleet by the time its drain is read back: by id, its drain still answers."""
        node_id = msg.read_id("node", node)
        try:
            node_id = self.core.resolve_node(node_id)
        except NodeNotFoundError:
            if self._drains().status(node_id) is None:
                raise
        return self._drains().status(node_id)

    def evict(self, node: str) -> list[str]:
        """Stop the node's jobs now; each recovers by its policy. The ids stopped."""
        return self._drains().evict(self._node(node))

    async def terminate_node(self, node: str) -> dict:
        """End a node for good: evict it (its jobs stopped, each recovering elsewhere by its policy),
        then have the provider that made it end its instance. A node joined by hand (no provider
        made it) cannot be ended from here: ``TransitionError``, and nothing is stopped."""
        node_id = self._node(node)
        rec = self.core.fleet.get(node_id)
        provider, instance_id = getattr(rec, "provider", None), getattr(rec, "instance_id", None)
        if not provider or not instance_id or self.terminate is None:
            raise TransitionError(f"node {node_id[:12]}", "joined by hand", "terminated",
                                  "no provider made it, so none can end it: stop its machine, or evict it "
                                  "(`fabric evict`) and leave it cordoned")
        try:
            stopped = self._drains().evict(node_id)
        except MessageError:  # a scheduler that runs no jobs has none to stop
            stopped = []
        await self.terminate(provider, instance_id, "terminated on request", node_id)
        return {"node_id": node_id, "provider": provider, "instance_id": instance_id, "jobs_stopped": list(stopped)}

    async def handle_node_interruption(self, node: str, kind: str = "spot-interruption", deadline: float | None = None) -> Any:
        """A provider's reclaim notice: a forced drain sized to ``deadline`` (epoch seconds)."""
        node, kind, deadline = args.read_interruption(node, kind, deadline)
        return await self._drains().interrupt(self.core.resolve_node(node), kind, deadline)

    async def close_migrations(self, grace_s: float = 5.0) -> int:
        """``fabric.down``: roll back or mark lost every saga in flight, within ``grace_s``."""
        try:
            moves = self._moves()
        except MessageError:  # a scheduler that runs no jobs has no saga
            return 0
        return await moves.close(msg.read_seconds("grace_s", grace_s, allow_zero=True))


__all__ = ["MoveRequests", "MigrationError"]

"""The scheduler's requests to move work on purpose, read once (issue 21, item 3: one rule, one place).

``SchedulerApi``'s drain, interruption and migration methods take names the jobs core defines (the
migration strategies, the interruption kinds), so their readers sit here, beside the API, rather
than in ``fabric.core.scheduling.messages`` (the jobs core imports the scheduling core, not the
other way round); every other rule they apply is one of ``messages``' readers. One reader per
request, each answering the arguments as the scheduler uses them or raising ``MessageError`` naming
the first bad field:

- the scheduler actor's endpoints (``actors.moves.MoveRequests``) read every request with them on
  arrival, whoever sent it (a ``FabricHandle``, the gRPC servicer, a ``ray job`` script calling the
  actor raw);
- ``FabricHandle`` reads a drain, an interruption and a migration with the same reader before it
  sends anything (it sizes its wait from ``timeout_s`` and ``deadline``, and a bad request fails
  before any Ray call); the CLI's ``--strategy`` and ``--kind`` choices are these names.

Pure: no Ray.
"""

from __future__ import annotations

import math
from typing import Any

from fabric.core.errors import MessageError
from fabric.core.jobs.drains import INTERRUPTION_KINDS
from fabric.core.jobs.migration import MigrationStrategy
from fabric.core.scheduling.messages import read_flag, read_id, read_optional_id, read_seconds, read_text

__all__ = ["INTERRUPTION_KINDS", "STRATEGY_NAMES", "read_abort", "read_deadline", "read_drain_request",
           "read_interruption", "read_interruption_kind", "read_migrate_request", "read_strategy"]

STRATEGY_NAMES: tuple[str, ...] = tuple(s.value for s in MigrationStrategy)
"""The migration strategies, by the names the wire carries."""


def read_strategy(value: Any) -> str | None:
    """None (the settings' default), or a migration strategy: its name, or a ``MigrationStrategy``."""
    if value is None:
        return None
    name = value.value if isinstance(value, MigrationStrategy) else value
    if not isinstance(name, str) or name not in STRATEGY_NAMES:
        raise MessageError("strategy", f"must be one of {', '.join(STRATEGY_NAMES)}", value)
    return str(name)


def read_interruption_kind(value: Any) -> str:
    if not isinstance(value, str) or value not in INTERRUPTION_KINDS:
        raise MessageError("kind", f"must be one of {', '.join(INTERRUPTION_KINDS)}", value)
    return value


def read_deadline(value: Any) -> float | None:
    """None, or epoch seconds (``time.time()``'s base): a finite number above 0. A ``datetime`` is
    the driver's to convert (``fabric.runtime.moves.epoch_deadline``: a naive one is its local time)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise MessageError("deadline", "must be a datetime, epoch seconds (time.time()) or None", value)
    return float(value)


def read_drain_request(node: Any, timeout_s: Any, force: Any, strategy: Any
                       ) -> tuple[str, float | None, bool, str | None]:
    """``drain_jobs``' arguments: a node (id or name), how long its jobs have to move (None: the
    settings'; 0: at once), whether to stop what has not moved, and the strategy."""
    return (read_id("node", node), read_seconds("timeout_s", timeout_s, allow_zero=True), read_flag("force", force),
            read_strategy(strategy))


def read_interruption(node: Any, kind: Any, deadline: Any) -> tuple[str, str, float | None]:
    """``handle_node_interruption``'s arguments: a node, the notice's kind, when the node goes."""
    return read_id("node", node), read_interruption_kind(kind), read_deadline(deadline)


def read_migrate_request(job_id: Any, strategy: Any, target_node: Any, override_reservation: Any
                         ) -> tuple[str, str | None, str | None, bool]:
    """``migrate_job``'s arguments: the job, the strategy (None: the settings'), the target node
    (None: where placement puts it) and whether it may be a node reserved for other work."""
    return (read_id("job_id", job_id), read_strategy(strategy), read_optional_id("target_node", target_node),
            read_flag("override_reservation", override_reservation))


def read_abort(migration_id: Any, reason: Any) -> tuple[str, str]:
    """``abort_migration``'s arguments: the migration and why."""
    return read_id("migration_id", migration_id), read_text("reason", reason)

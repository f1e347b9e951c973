"""The states of a job and of a bundle, each a ``str`` enum with its transition table.

A job: ``scheduled`` (a ``start_at`` not reached yet: nothing is placed) -> ``pending`` (waiting for a node) -> ``starting`` (its instance is being created on the node
the engine chose) -> ``running``. An instance or node that dies moves it to ``recovering`` (its
policy re-places it: back to ``starting``), or ends it: ``dropped`` (policy ``drop``, or a
non-essential job past its restart ceiling or refused as an invalid spec) or ``failed`` (an
essential one: its bundle is broken). ``stopping`` -> ``stopped`` is a stop asked for (or the rest
of a broken bundle). ``migrating`` is a move on purpose (drain, migration). ``stopped``,
``dropped`` and ``failed`` are terminal.

A bundle: ``live`` -> ``broken`` (an essential job was lost: nothing of it is placed any more) ->
``live`` again when it is updated; ``deleting`` while its jobs stop.
"""

from __future__ import annotations

from enum import Enum

from fabric.core.lifecycle import Lifecycle


class JobState(str, Enum):
    SCHEDULED = "scheduled"
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    RECOVERING = "recovering"
    MIGRATING = "migrating"
    STOPPING = "stopping"
    STOPPED = "stopped"
    DROPPED = "dropped"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


J = JobState
_ENDS = (J.STOPPING, J.DROPPED, J.FAILED)
JOB_LIFECYCLE: Lifecycle[JobState] = Lifecycle(JobState, [
    *((J.SCHEDULED, to) for to in (J.PENDING, *_ENDS)),
    *((J.PENDING, to) for to in (J.STARTING, *_ENDS)),
    *((J.STARTING, to) for to in (J.RUNNING, J.RECOVERING, J.PENDING, *_ENDS)),
    *((J.RUNNING, to) for to in (J.RECOVERING, J.MIGRATING, *_ENDS)),
    *((J.RECOVERING, to) for to in (J.STARTING, *_ENDS)),
    *((J.MIGRATING, to) for to in (J.RUNNING, J.RECOVERING, *_ENDS)),
    (J.STOPPING, J.STOPPED),
])
"""Every move a job may make (``JOB_LIFECYCLE.table()`` for the table)."""

LIVE_STATES = frozenset({J.STARTING, J.RUNNING, J.MIGRATING})
"""States in which a job has an instance (or one being created) bound to a node."""


class BundleState(str, Enum):
    LIVE = "live"
    BROKEN = "broken"
    DELETING = "deleting"

    def __str__(self) -> str:
        return self.value


B = BundleState
BUNDLE_LIFECYCLE: Lifecycle[BundleState] = Lifecycle(BundleState, [
    (B.LIVE, B.BROKEN), (B.BROKEN, B.LIVE), (B.LIVE, B.DELETING), (B.BROKEN, B.DELETING),
])

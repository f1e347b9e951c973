"""A node's drain of its jobs, and a provider's interruption notice as a forced drain
(cordons and drains, spot interruptions; issue 16). Pure: time comes in as ``now``.

A node has one drain, its ``NodeDrain`` here, whoever asks (``fabric drain``, a reclaim notice, the
scheduler's ``drain``). It cordons the node (the caller's part: the task core cordons it and counts
its calls; ``fabric.core.scheduling.drain`` is that tasks part), migrates every job on it, and once
every job is off *and* the running tasks ended (``step``'s ``tasks_done``) asks Ray to drain it.
Phases (``NodeDrainPhase``): ``migrating`` -> ``waiting`` (jobs leave, tasks finish:
``tasks_finishing`` once only tasks are left) -> ``draining`` (Ray was asked: ``AskRayToDrain``)
-> ``done`` (Ray accepted) or ``failed`` (Ray refused: its message). At the timeout a forced drain
stops what has not moved (``ForceStop``: ``terminated``, recovered by policy) and asks Ray; one
without ends ``partial``, the jobs still there ``stuck``. An uncordon withdraws a drain Ray
was not yet asked about (``cancelled``); migrations in flight run to their end.

Each job's ``JobDrainStatus``: ``migrating`` -> ``migrated`` (its migration completed), ``moved``
(it left the node another way: died and recovered elsewhere, stopped), ``stuck`` (refused, no
target, its migration aborted: it stays, and may be retried) or ``terminated`` (stopped at a
forced timeout). ``migrated``, ``moved`` and ``terminated`` are final.

An interruption (``spot-interruption``, ``rebalance``) is a forced drain whose timeout fits the
provider's deadline (``interruption_timeout``); Ray is told with ``PREEMPTION``. A second notice
for a node already draining tightens that drain (``NodeDrain.tighten``) instead of starting one.

``NodeDrain`` is one node's drain, ``NodeDrains`` holds at most one in progress per node and the
last ``FINISHED_KEPT`` that ended; ``DrainState`` and ``NodeInterruptionState`` are the frozen
snapshots the operator sees (and ``drain_progress`` / ``node_interrupted`` events carry)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterable, Literal

from fabric.core.errors import JobNotFoundError, NodeNotFoundError, RequirementError
from fabric.core.lifecycle import Lifecycle
from fabric.core.settings_moves import STRATEGIES, DrainSettings

INTERRUPTION_KINDS = ("spot-interruption", "rebalance")
"""What a provider's notice may say: the node is reclaimed (spot), or likely to be (rebalance)."""

FINISHED_KEPT = 32
"""Ended drains kept for ``NodeDrains.recent``."""


class NodeDrainPhase(str, Enum):
    MIGRATING = "migrating"
    """Migrations of the node's jobs are being started."""
    WAITING = "waiting"
    """Every migration was started; waiting for the jobs to leave."""
    DRAINING = "draining"
    """Every job is off the node and Ray was asked to drain it."""
    DONE = "done"
    """Ray accepted the drain."""
    PARTIAL = "partial"
    """The timeout passed without force with jobs still on the node (``stuck``); it stays cordoned."""
    FAILED = "failed"
    """Ray refused the drain (its message is the reason), or the drain could not go on."""
    CANCELLED = "cancelled"
    """Withdrawn by an uncordon before Ray was asked."""

    def __str__(self) -> str:
        return self.value


P = NodeDrainPhase
NODE_DRAIN_LIFECYCLE: Lifecycle[NodeDrainPhase] = Lifecycle(NodeDrainPhase, [
    *((P.MIGRATING, to) for to in (P.WAITING, P.DRAINING, P.PARTIAL, P.FAILED, P.CANCELLED)),
    *((P.WAITING, to) for to in (P.DRAINING, P.PARTIAL, P.FAILED, P.CANCELLED)),
    (P.DRAINING, P.DONE), (P.DRAINING, P.FAILED),
], reasons={P.DRAINING: "Ray was asked to drain the node: only its answer (done or failed) ends the drain"})
"""Every move a node drain may make (``NODE_DRAIN_LIFECYCLE.table()`` for the table)."""


class JobDrainStatus(str, Enum):
    MIGRATING = "migrating"
    """Its migration is being started or is in flight."""
    MIGRATED = "migrated"
    """Its migration completed: it runs elsewhere."""
    MOVED = "moved"
    """It left the node another way (died and recovered elsewhere, stopped)."""
    STUCK = "stuck"
    """Refused, no target, or its migration aborted: it stays on the node (a retry may move it)."""
    TERMINATED = "terminated"
    """Stopped at a forced drain's timeout; its policy recovers it."""

    def __str__(self) -> str:
        return self.value


S = JobDrainStatus
JOB_DRAIN_LIFECYCLE: Lifecycle[JobDrainStatus] = Lifecycle(JobDrainStatus, [
    *((S.MIGRATING, to) for to in (S.MIGRATED, S.MOVED, S.STUCK, S.TERMINATED)),
    *((S.STUCK, to) for to in (S.MIGRATING, S.MOVED, S.TERMINATED)),
])
"""Every move a job's status within a drain may make."""

FINAL_JOB_STATUSES = frozenset({S.MIGRATED, S.MOVED, S.TERMINATED})
"""A job in one of these is off the node for good."""


# -- snapshots ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DrainJob:
    """One job's place in a drain."""

    job_id: str
    status: JobDrainStatus
    migration_id: str | None = None
    """Its latest migration, once one was started."""
    reason: str = ""
    """Why it is stuck (or terminated, moved)."""

    def as_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "status": self.status.value, "migration_id": self.migration_id,
                "reason": self.reason}


@dataclass(frozen=True)
class DrainState:
    """A snapshot of one node's drain, as the operator sees it (``drain_status``, ``drain_progress``)."""

    node_id: str
    phase: NodeDrainPhase
    started: float
    timeout_s: float
    """From ``started`` to the deadline (a tightened drain's is shorter than it was asked)."""
    force: bool
    strategy: str | None
    """The migration strategy asked for; None: per job (the settings' default, or by its hooks)."""
    jobs: dict[str, DrainJob]
    reason: str = ""
    ray_drain: str | None = None
    """Ray's answer: None (none yet: ``phase`` says whether it was asked), ``"accepted"``,
    ``"refused: <message>"``."""
    interruption: str | None = None
    """The interruption's kind when the drain is one (``spot-interruption``, ``rebalance``)."""
    tasks_finishing: bool = False
    """``waiting`` with every job off the node: its running tasks finish before Ray is asked."""

    @property
    def deadline(self) -> float:
        """When the timeout passes (``started + timeout_s``)."""
        return self.started + self.timeout_s

    @property
    def terminal(self) -> bool:
        return NODE_DRAIN_LIFECYCLE.is_terminal(self.phase)

    def job_ids(self, *statuses: JobDrainStatus) -> list[str]:
        """The ids of the jobs in one of ``statuses`` (every job when none given), in order."""
        return [j.job_id for j in self.jobs.values() if not statuses or j.status in statuses]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON types (the ``drain_progress`` event's data)."""
        return {"node_id": self.node_id, "phase": self.phase.value, "started": self.started,
                "timeout_s": self.timeout_s, "deadline": self.deadline, "force": self.force,
                "strategy": self.strategy, "jobs": {k: j.as_dict() for k, j in self.jobs.items()},
                "reason": self.reason, "ray_drain": self.ray_drain, "interruption": self.interruption,
                "tasks_finishing": self.tasks_finishing, "terminal": self.terminal}


@dataclass(frozen=True)
class NodeInterruptionState:
    """One interruption notice and the (forced) drain it started or tightened (``node_interrupted``)."""

    node_id: str
    kind: str
    deadline: float | None
    """When the provider reclaims the node (epoch seconds), when the notice says."""
    noticed_at: float
    drain: DrainState

    def as_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "kind": self.kind, "deadline": self.deadline,
                "noticed_at": self.noticed_at, "drain": self.drain.as_dict()}


# -- what the caller carries out ------------------------------------------------------------------
@dataclass(frozen=True)
class AskRayToDrain:
    """Ask Ray to drain the node (``drain_node``); answer with ``ray_answered``."""

    node_id: str
    reason: Literal["IDLE_TERMINATION", "PREEMPTION"]
    """``PREEMPTION`` for an interruption, else ``IDLE_TERMINATION``."""
    deadline: float | None
    """An interruption's deadline (epoch seconds), when it has one: Ray's ``deadline_timestamp_ms``."""
    message: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True)
class ForceStop:
    """Stop these jobs' instances on the node now (a forced drain's timeout); each recovers by its policy."""

    node_id: str
    job_ids: tuple[str, ...]
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


DrainAction = AskRayToDrain | ForceStop


# -- one node's drain ----------------------------------------------------------------------------------
def _seconds(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise RequirementError(field, "must be a finite number of seconds, 0 or more", value)
    return float(value)


def _instant(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequirementError(field, "must be a finite time (epoch seconds)", value)
    return float(value)


def _kind(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in INTERRUPTION_KINDS:
        raise RequirementError("interruption", f"an interruption is one of {list(INTERRUPTION_KINDS)}", value)
    return value


class NodeDrain:
    """One node's drain: the jobs' statuses, the deadline, the phase. ``step(now)`` says what to do next."""

    def __init__(self, node_id: str, job_ids: Iterable[str], now: float, *, timeout_s: float, force: bool,
                 strategy: str | None, interruption: str | None = None,
                 interruption_deadline: float | None = None) -> None:
        if not isinstance(node_id, str) or not node_id:
            raise RequirementError("node_id", "must be a non-empty string", node_id)
        if strategy is not None and strategy not in STRATEGIES:
            raise RequirementError("strategy", f"a migration strategy is one of {list(STRATEGIES)} (or None)", strategy)
        ids = list(job_ids)
        if any(not isinstance(j, str) or not j for j in ids) or len(set(ids)) != len(ids):
            raise RequirementError("job_ids", "must be distinct non-empty strings", ids)
        self.node_id = node_id
        self.started = _instant("now", now)
        self.timeout_s = _seconds("timeout_s", timeout_s)
        self.interruption = _kind(interruption)
        self.interruption_deadline = None if interruption_deadline is None else _instant("interruption_deadline", interruption_deadline)
        self.force = bool(force) or self.interruption is not None  # an interruption is a forced drain
        self.strategy = strategy
        self.phase = NodeDrainPhase.MIGRATING
        self.reason = ""
        self.ray_drain: str | None = None
        self.ended_at: float | None = None
        self.tasks_finishing = False  # every job off, its running tasks finishing: Ray is asked once they end
        self.history: list[tuple[NodeDrainPhase, float, str]] = [(NodeDrainPhase.MIGRATING, self.started, "")]
        self._jobs: dict[str, DrainJob] = {j: DrainJob(j, JobDrainStatus.MIGRATING) for j in ids}

    # -- reading ----------------------------------------------------------------------------------
    @property
    def deadline(self) -> float:
        return self.started + self.timeout_s

    @property
    def terminal(self) -> bool:
        return NODE_DRAIN_LIFECYCLE.is_terminal(self.phase)

    def job(self, job_id: str) -> DrainJob:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise JobNotFoundError(f"job {job_id!r} is not in the drain of {self.node_id}", job_id=job_id) from None

    def remaining(self) -> list[str]:
        """The jobs still on the node (not migrated, moved or terminated), in order."""
        return [j for j, dj in self._jobs.items() if dj.status not in FINAL_JOB_STATUSES]

    def snapshot(self) -> DrainState:
        return DrainState(node_id=self.node_id, phase=self.phase, started=self.started, timeout_s=self.timeout_s,
                          force=self.force, strategy=self.strategy, jobs=dict(self._jobs), reason=self.reason,
                          ray_drain=self.ray_drain, interruption=self.interruption,
                          tasks_finishing=self.tasks_finishing and not self.terminal)

    # -- what the caller reports ------------------------------------------------------------------
    def set_job(self, job_id: str, status: JobDrainStatus | str, *, migration_id: str | None = None, reason: str = "") -> bool:
        """Record a job's new status (and its migration, and why); True when something changed.
        A move the table refuses raises ``TransitionError``; a job not in the drain
        ``JobNotFoundError``. An ended drain takes no more reports (False): a migration it left
        in flight may still end after it."""
        old = self.job(job_id)
        try:
            new_status = JobDrainStatus(status)
        except ValueError:
            raise RequirementError("status", f"a job's drain status is one of {[s.value for s in JobDrainStatus]}", status) from None
        if self.terminal:
            return False
        JOB_DRAIN_LIFECYCLE.check(f"job {job_id} in the drain of {self.node_id}", old.status, new_status)
        if not reason and new_status is old.status:
            reason = old.reason
        new = DrainJob(job_id, new_status, migration_id if migration_id is not None else old.migration_id, reason)
        self._jobs[job_id] = new
        return new != old

    def started_all(self, now: float) -> bool:
        """Every migration was started: ``migrating`` -> ``waiting``. True when the phase moved."""
        if self.phase is not NodeDrainPhase.MIGRATING:
            return False
        self._move(NodeDrainPhase.WAITING, now)
        return True

    def tighten(self, timeout_s: float, now: float, *, force: bool = True, interruption: str | None = None,
                interruption_deadline: float | None = None) -> bool:
        """A second notice (or a sterner drain): the deadline becomes ``min(old, now + timeout_s)``;
        ``force`` and ``interruption`` stay once set (a later kind replaces an earlier one), the
        interruption deadline is the earliest given. True when something changed; an ended drain
        is not changed (False)."""
        timeout_s = _seconds("timeout_s", timeout_s)
        now = _instant("now", now)
        interruption = _kind(interruption)
        if interruption_deadline is not None:
            interruption_deadline = _instant("interruption_deadline", interruption_deadline)
        if self.terminal:
            return False
        before = (self.timeout_s, self.force, self.interruption, self.interruption_deadline)
        deadline = min(self.deadline, now + timeout_s)
        self.timeout_s = max(0.0, deadline - self.started)
        if interruption is not None:
            self.interruption = interruption
        self.force = self.force or bool(force) or self.interruption is not None
        if interruption_deadline is not None:
            self.interruption_deadline = min(interruption_deadline, self.interruption_deadline or math.inf)
        return before != (self.timeout_s, self.force, self.interruption, self.interruption_deadline)

    def step(self, now: float, tasks_done: bool = True) -> list[DrainAction]:
        """What to do now. Every job off the node and its running tasks finished (``tasks_done``:
        the task core handed the node off): ask Ray (phase ``draining``); jobs off but tasks still
        running: ``waiting`` (``tasks_finishing``) until they end or the deadline passes. At the
        deadline with jobs still there: with force, stop them (``terminated``) and then ask Ray;
        without, the drain ends ``partial`` and they are ``stuck``."""
        if self.terminal or self.phase is NodeDrainPhase.DRAINING:
            return []
        out: list[DrainAction] = []
        left = self.remaining()
        if left and now >= self.deadline:
            if not self.force:
                for j in left:
                    if self._jobs[j].status is JobDrainStatus.MIGRATING:
                        self.set_job(j, JobDrainStatus.STUCK, reason="still on the node at the drain's timeout")
                self._move(NodeDrainPhase.PARTIAL, now, f"the timeout passed with {len(left)} job(s) still on the node: {', '.join(left)}")
                return out
            for j in left:
                self.set_job(j, JobDrainStatus.TERMINATED, reason="stopped at the forced drain's timeout")
            out.append(ForceStop(self.node_id, tuple(left)))
            left = []
        if not left and not tasks_done and now < self.deadline:  # running tasks finish first
            self.tasks_finishing = True
            if self.phase is NodeDrainPhase.MIGRATING:
                self._move(NodeDrainPhase.WAITING, now)
        elif not left:
            self.tasks_finishing = False
            self._move(NodeDrainPhase.DRAINING, now)
            out.append(self._ask_ray())
        return out

    def ray_answered(self, accepted: bool, message: str, now: float) -> DrainState:
        """Ray's answer to ``AskRayToDrain``: ``done``, or ``failed`` with its message as the reason."""
        if accepted:
            self._move(NodeDrainPhase.DONE, now, message)
            self.ray_drain = "accepted"
        else:
            self._move(NodeDrainPhase.FAILED, now, message or "Ray refused to drain the node")
            self.ray_drain = f"refused: {message}"
        return self.snapshot()

    def withdraw(self, now: float) -> bool:
        """An uncordon: ``cancelled`` (True), or False when it already was. Once Ray was asked the
        table refuses (``TransitionError``)."""
        if self.phase is NodeDrainPhase.CANCELLED:
            return False
        self._move(NodeDrainPhase.CANCELLED, now, "withdrawn by an uncordon")
        return True

    def fail(self, reason: str, now: float) -> bool:
        """The drain cannot go on (the node left the fleet): ``failed`` with ``reason``. False when
        it already ended (``failed`` or otherwise)."""
        if self.terminal:
            return False
        self._move(NodeDrainPhase.FAILED, now, reason)
        return True

    def restore(self, *, phase: NodeDrainPhase, reason: str, ray_drain: str | None, ended_at: float | None,
                history: list[tuple[NodeDrainPhase, float, str]], jobs: list[DrainJob]) -> None:
        """Put back what a stored drain had reached (a scheduler restart): its phase, history, Ray's
        answer and each job's status. ``RequirementError`` when the result breaks the drain's rules
        (a history the table does not allow, jobs that are not the drain's)."""
        if [j.job_id for j in jobs] != list(self._jobs):
            raise RequirementError("jobs", "must be the drain's jobs, in order", [j.job_id for j in jobs])
        self.phase, self.reason, self.ray_drain, self.ended_at = phase, reason, ray_drain, ended_at
        self.history = list(history)
        self._jobs = {j.job_id: j for j in jobs}
        problems = _drain_problems(self)
        if problems:
            raise RequirementError("history", "; ".join(problems), [p.value for p, _, _ in history])

    def ray_ask(self) -> AskRayToDrain:
        """What Ray is (or was) asked once every job is off the node: asked again when a restarted
        scheduler finds the drain ``draining`` with no answer recorded."""
        return self._ask_ray()

    def _ask_ray(self) -> AskRayToDrain:
        if self.interruption is not None:
            return AskRayToDrain(self.node_id, "PREEMPTION", self.interruption_deadline,
                                 f"fabric: {self.interruption} notice; every job is off the node")
        return AskRayToDrain(self.node_id, "IDLE_TERMINATION", None, "fabric drain: every job is off the node")

    def _move(self, target: NodeDrainPhase, now: float, reason: str = "") -> None:
        self.phase = NODE_DRAIN_LIFECYCLE.check(f"drain of {self.node_id}", self.phase, target)
        self.history.append((target, now, reason))
        if reason:
            self.reason = reason
        if self.terminal:
            self.ended_at = now


# -- every node's drain --------------------------------------------------------------------------------
class NodeDrains:
    """The drains in progress, at most one per node, and the last ``FINISHED_KEPT`` that ended.

    Moves made through ``NodeDrains`` (``step``, ``ray_answered``, ``withdraw``, ``fail``) file an
    ended drain away at once; after moving a ``NodeDrain`` directly, call ``sweep``."""

    def __init__(self) -> None:
        self._active: dict[str, NodeDrain] = {}
        self._ended: deque[NodeDrain] = deque(maxlen=FINISHED_KEPT)

    def __len__(self) -> int:
        return len(self._active)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._active

    def start(self, node_id: str, job_ids: Iterable[str], now: float, *, timeout_s: float, force: bool,
              strategy: str | None, interruption: str | None = None,
              interruption_deadline: float | None = None) -> NodeDrain:
        """A new drain of ``node_id``; or, when one is in progress there, that one unchanged (an
        interruption then tightens it)."""
        running = self._active.get(node_id)
        if running is not None:
            return running
        d = NodeDrain(node_id, job_ids, now, timeout_s=timeout_s, force=force, strategy=strategy,
                      interruption=interruption, interruption_deadline=interruption_deadline)
        self._active[node_id] = d
        return d

    def adopt(self, d: NodeDrain) -> None:
        """A drain read back from the store (a scheduler restart): in progress, or filed as ended."""
        if d.terminal:
            self._ended.append(d)
        else:
            self._active[d.node_id] = d

    def every(self) -> list[NodeDrain]:
        """Every drain kept: those that ended (oldest first), then those in progress."""
        return list(self._ended) + list(self._active.values())

    def get(self, node_id: str) -> NodeDrain | None:
        """The drain in progress on ``node_id``, if any."""
        return self._active.get(node_id)

    def active(self) -> list[NodeDrain]:
        return list(self._active.values())

    def recent(self) -> list[DrainState]:
        """Drains that ended, oldest first."""
        return [d.snapshot() for d in self._ended]

    def status(self, node_id: str) -> DrainState | None:
        """The drain in progress on ``node_id``, else the latest that ended there, else None."""
        d = self._active.get(node_id)
        if d is None:
            d = next((e for e in reversed(self._ended) if e.node_id == node_id), None)
        return None if d is None else d.snapshot()

    def step(self, now: float, tasks_done: Callable[[str], bool] | None = None) -> list[DrainAction]:
        """Every drain in progress steps (``tasks_done(node_id)``: whether the node's running tasks
        have finished; default: they have); those that ended are filed away."""
        out: list[DrainAction] = []
        for d in list(self._active.values()):
            out += d.step(now, True if tasks_done is None else tasks_done(d.node_id))
        self.sweep()
        return out

    def ray_answered(self, node_id: str, accepted: bool, message: str, now: float) -> DrainState:
        d = self._active.get(node_id)
        if d is None:
            raise NodeNotFoundError(node_id)
        state = d.ray_answered(accepted, message, now)
        self.sweep()
        return state

    def withdraw(self, node_id: str, now: float) -> DrainState | None:
        """An uncordon: the drain in progress (if any) is cancelled; its snapshot, or None when
        there was none. Once Ray was asked the table refuses (``TransitionError``)."""
        d = self._active.get(node_id)
        if d is None:
            return None
        d.withdraw(now)
        self.sweep()
        return d.snapshot()

    def fail(self, node_id: str, reason: str, now: float) -> DrainState | None:
        """The node's drain cannot go on (it left the fleet): ``failed``; None when none was in progress."""
        d = self._active.get(node_id)
        if d is None:
            return None
        d.fail(reason, now)
        self.sweep()
        return d.snapshot()

    def sweep(self) -> list[DrainState]:
        """File away the drains that ended; their snapshots."""
        out = []
        for node_id, d in list(self._active.items()):
            if d.terminal:
                del self._active[node_id]
                self._ended.append(d)
                out.append(d.snapshot())
        return out

    def problems(self) -> list[str]:
        """What is inconsistent (empty when nothing): a drain in progress is filed under its node
        and has not ended, an ended one has; histories follow the table from ``migrating``; a
        drain asking or answered by Ray has every job off the node; a partial one has only stuck
        jobs left; an interruption is forced; Ray's answer matches the phase."""
        out: list[str] = []
        for node_id, d in self._active.items():
            if d.node_id != node_id:
                out.append(f"node drains: the drain of {d.node_id} is filed under {node_id}")
            if d.terminal:
                out.append(f"node drains: {node_id}'s drain ended {d.phase.value} but is still in progress")
        for d in self._ended:
            if not d.terminal:
                out.append(f"node drains: {d.node_id}'s drain is filed as ended in phase {d.phase.value}")
        for d in list(self._active.values()) + list(self._ended):
            out += _drain_problems(d)
        return out


def _drain_problems(d: NodeDrain) -> list[str]:
    out: list[str] = []
    name = f"node drains: {d.node_id}"
    phases = [p for p, _, _ in d.history]
    if phases[0] is not NodeDrainPhase.MIGRATING or phases[-1] is not d.phase:
        out.append(f"{name}'s history {[p.value for p in phases]} does not run from migrating to {d.phase.value}")
    for a, b in zip(phases, phases[1:]):
        if a is b or not NODE_DRAIN_LIFECYCLE.allows(a, b):
            out.append(f"{name} went {a.value} -> {b.value}, which the table does not allow")
    times = [at for _, at, _ in d.history]
    if times != sorted(times):
        out.append(f"{name}'s history goes back in time")
    if not (math.isfinite(d.timeout_s) and d.timeout_s >= 0):
        out.append(f"{name} has timeout {d.timeout_s}")
    if d.interruption is not None and not d.force:
        out.append(f"{name} is a {d.interruption} drain without force")
    for job_id, j in d._jobs.items():
        if j.job_id != job_id:
            out.append(f"{name}: job {j.job_id} is filed under {job_id}")
    left = d.remaining()
    if d.phase in (NodeDrainPhase.DRAINING, NodeDrainPhase.DONE) and left:
        out.append(f"{name} is {d.phase.value} with jobs on the node: {left}")
    if d.ray_drain is not None and NodeDrainPhase.DRAINING not in phases:
        out.append(f"{name} has Ray's answer {d.ray_drain!r} but never asked Ray")
    if d.phase is NodeDrainPhase.PARTIAL:
        if not left or any(d._jobs[j].status is not JobDrainStatus.STUCK for j in left):
            out.append(f"{name} is partial but its jobs left are {[d._jobs[j].status.value for j in left]} (only stuck ones)")
        if d.force:
            out.append(f"{name} is forced but ended partial")
    if (d.phase is NodeDrainPhase.DONE) != (d.ray_drain == "accepted"):
        out.append(f"{name} is {d.phase.value} with Ray's answer {d.ray_drain!r}")
    if d.ray_drain is not None and d.ray_drain != "accepted" and (
            not d.ray_drain.startswith("refused: ") or d.phase is not NodeDrainPhase.FAILED):
        out.append(f"{name} is {d.phase.value} with Ray's answer {d.ray_drain!r}")
    if d.terminal != (d.ended_at is not None):
        out.append(f"{name} is {d.phase.value} with ended_at {d.ended_at}")
    return out


def interruption_timeout(kind: str, deadline: float | None, now: float, settings: DrainSettings) -> float:
    """The forced drain's timeout for an interruption notice: ``deadline - now - margin`` (never
    below 0) when the notice has a deadline, else the kind's default (``spot_drain_s`` for a spot
    interruption, ``rebalance_drain_s`` for a rebalance). An unknown kind: ``RequirementError("kind")``."""
    if kind not in INTERRUPTION_KINDS:
        raise RequirementError("kind", f"an interruption is one of {list(INTERRUPTION_KINDS)}", kind)
    if deadline is not None:
        deadline = _instant("deadline", deadline)
        return max(0.0, deadline - _instant("now", now) - settings.interruption_margin_s)
    return settings.spot_drain_s if kind == "spot-interruption" else settings.rebalance_drain_s


__all__ = ["AskRayToDrain", "DrainAction", "DrainJob", "DrainState", "FINAL_JOB_STATUSES", "FINISHED_KEPT",
           "ForceStop", "INTERRUPTION_KINDS", "JOB_DRAIN_LIFECYCLE", "JobDrainStatus", "NODE_DRAIN_LIFECYCLE",
           "NodeDrain", "NodeDrainPhase", "NodeDrains", "NodeInterruptionState", "interruption_timeout"]

"""Migration sagas: moving a running job to another node on purpose.

Ray has no live migration for actors; the sagas are the fabric's. One ``Migration`` per job at a
time walks its strategy's path through ``MigrationPhase``; each step is a reported fact (the target
was placed, created, answered a hook; the source stopped) and returns the instructions for the
scheduler's ``MigrationRunner`` to carry out. Nothing here waits or reads a clock.

The three paths (``PATHS``) and their point of no return (``POINT_OF_NO_RETURN``):

- ``stop_then_start``: placing -> preparing (the target actor allocated, its constructor *not*
  run) -> ready -> **stopping_source** -> starting_target (the constructor runs now) -> done.
  Never two instances running; a gap of one constructor.
- ``overlap``: placing -> preparing (the target created and started) -> ready ->
  **stopping_source** -> done. Both run for a moment; the job holds a slot on both nodes.
- ``handover``: placing -> preparing (created and started, told it is a handover target: it holds
  its output) -> ready (``__fabric_ready__() -> payload``) -> **cutting** (the source's
  ``__fabric_cut__(payload) -> position``) -> resuming (the target's ``__fabric_resume__(position)``)
  -> stopping_source -> done. The payload is an ObjectRef the saga's runner owns, not the source.

Before the point of no return an expired deadline, a failed target, a dead source or an operator's
abort rolls back (``aborted``: the target is stopped and its slot given back; the source keeps
running). From it on there is no rollback: a stop that takes too long is finished by a kill, and a
target that fails or a hook past its deadline ends the saga ``lost`` -- the target is left carrying
the job when it lives, else the job recovers by its policy. ``abort`` after it is refused
(``MigrationError``). ``done`` moves the job's binding to the target's instance key.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable

from fabric.core.errors import MigrationError
from fabric.core.lifecycle import Lifecycle


class MigrationStrategy(str, Enum):
    STOP_THEN_START = "stop_then_start"
    OVERLAP = "overlap"
    HANDOVER = "handover"

    def __str__(self) -> str:
        return self.value


class MigrationPhase(str, Enum):
    PLACING = "placing"
    PREPARING = "preparing"
    READY = "ready"
    CUTTING = "cutting"
    RESUMING = "resuming"
    STOPPING_SOURCE = "stopping_source"
    STARTING_TARGET = "starting_target"
    DONE = "done"
    ABORTED = "aborted"
    LOST = "lost"

    def __str__(self) -> str:
        return self.value


S, P = MigrationStrategy, MigrationPhase
PATHS: dict[MigrationStrategy, tuple[MigrationPhase, ...]] = {
    S.STOP_THEN_START: (P.PLACING, P.PREPARING, P.READY, P.STOPPING_SOURCE, P.STARTING_TARGET, P.DONE),
    S.OVERLAP: (P.PLACING, P.PREPARING, P.READY, P.STOPPING_SOURCE, P.DONE),
    S.HANDOVER: (P.PLACING, P.PREPARING, P.READY, P.CUTTING, P.RESUMING, P.STOPPING_SOURCE, P.DONE),
}
POINT_OF_NO_RETURN: dict[MigrationStrategy, MigrationPhase] = {
    S.STOP_THEN_START: P.STOPPING_SOURCE,  # the source is told to stop
    S.OVERLAP: P.STOPPING_SOURCE,
    S.HANDOVER: P.CUTTING,  # the source is told to stop its output at the payload
}
DEADLINE_SETTING: dict[MigrationPhase, str] = {
    P.PLACING: "place_s", P.PREPARING: "prepare_s", P.READY: "ready_s", P.CUTTING: "cut_s",
    P.RESUMING: "resume_s", P.STOPPING_SOURCE: "stop_source_s", P.STARTING_TARGET: "start_target_s",
}
"""The ``migration:`` setting that bounds each phase a saga rests in."""
DEFAULT_DEADLINES: dict[str, float] = {"place_s": 30.0, "prepare_s": 120.0, "ready_s": 30.0, "cut_s": 30.0,
                                       "resume_s": 30.0, "stop_source_s": 30.0, "start_target_s": 120.0}


def _table(strategy: MigrationStrategy) -> Lifecycle[MigrationPhase]:
    path = PATHS[strategy]
    ponr = path.index(POINT_OF_NO_RETURN[strategy])
    moves = list(zip(path, path[1:]))
    moves += [(p, P.ABORTED) for p in path[:ponr]]
    moves += [(p, P.LOST) for p in path[ponr:-1]]
    return Lifecycle(MigrationPhase, moves)


LIFECYCLES: dict[MigrationStrategy, Lifecycle[MigrationPhase]] = {s: _table(s) for s in MigrationStrategy}
"""Each strategy's transition table (``LIFECYCLES[s].table()``)."""
TERMINAL = frozenset({P.DONE, P.ABORTED, P.LOST})


def past_point_of_no_return(strategy: MigrationStrategy, phase: MigrationPhase) -> bool:
    """Whether a saga in ``phase`` can no longer roll back."""
    if phase in (P.DONE, P.LOST):
        return True
    if phase is P.ABORTED:
        return False
    path = PATHS[strategy]
    return path.index(phase) >= path.index(POINT_OF_NO_RETURN[strategy])


# -- instructions (the MigrationRunner carries them out) --------------------------------------------
@dataclass(frozen=True, slots=True)
class PlaceTarget:
    migration_id: str
    job_id: str
    source_node: str
    target_node: str | None
    override_reservation: bool
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class CreateTarget:
    """Create the target instance on its node: ``deferred`` (stop_then_start: the constructor waits
    for ``BeginTarget``), ``handover`` (the target holds its output until resumed)."""

    migration_id: str
    job_id: str
    node_id: str
    instance_key: str
    deferred: bool
    handover: bool
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class AskReady:
    migration_id: str
    job_id: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class Cut:
    migration_id: str
    job_id: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class Resume:
    migration_id: str
    job_id: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class StopSource:
    """Stop the source instance (``__fabric_stop__`` first unless ``kill``)."""

    migration_id: str
    job_id: str
    instance_key: str
    kill: bool = False
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class BeginTarget:
    """Run the deferred target's constructor (stop_then_start, after the source stopped)."""

    migration_id: str
    job_id: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class StopTarget:
    """Roll back: stop the target instance (if created) and give its slot back."""

    migration_id: str
    job_id: str
    instance_key: str | None
    allocation_id: int | None
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class Complete:
    """The job lives on the target now: its binding moves there, the source's slot goes back."""

    migration_id: str
    job_id: str
    node_id: str
    instance_key: str
    allocation_id: int | None
    reason: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class RollBack:
    """The saga aborted: the job (still on its source) is running again."""

    migration_id: str
    job_id: str
    reason: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class Orphaned:
    """Lost with no live target and no source: the job recovers by its policy; the target's slot
    (if any) goes back."""

    migration_id: str
    job_id: str
    source_key: str
    allocation_id: int | None
    reason: str
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


@dataclass(frozen=True, slots=True)
class PhaseEvent:
    """A ``migration_phase`` event (and ``migration_completed`` / ``migration_aborted`` at the end)."""

    state: "MigrationState"
    stimulus_id: str = field(default="", compare=False, kw_only=True)
    """What caused it (stamped by ``JobsCore.handle``)."""


Instruction = (PlaceTarget | CreateTarget | AskReady | Cut | Resume | StopSource | BeginTarget | StopTarget
               | Complete | RollBack | Orphaned | PhaseEvent)


@dataclass(frozen=True)
class MigrationState:
    """One migration as the operator sees it (``h.migration(id)``)."""

    migration_id: str
    job_id: str
    strategy: MigrationStrategy
    phase: MigrationPhase
    source_node: str
    source_key: str
    target_node: str | None
    target_key: str | None
    reason: str
    started_at: float
    phase_deadline: float | None
    past_point_of_no_return: bool
    history: tuple[tuple[str, float, str], ...] = ()

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL

    def as_dict(self) -> dict[str, Any]:
        return {"migration_id": self.migration_id, "job_id": self.job_id, "strategy": self.strategy.value,
                "phase": self.phase.value, "source_node": self.source_node, "source_key": self.source_key,
                "target_node": self.target_node, "target_key": self.target_key, "reason": self.reason,
                "started_at": self.started_at, "phase_deadline": self.phase_deadline,
                "past_point_of_no_return": self.past_point_of_no_return,
                "history": [list(h) for h in self.history]}


@dataclass
class Migration:
    """One saga (see the module docstring). Every method takes ``now`` and returns instructions."""

    migration_id: str
    job_id: str
    strategy: MigrationStrategy
    source_node: str
    source_key: str
    source_allocation: int | None
    started_at: float
    deadlines: dict[str, float]
    target_pin: str | None = None
    override_reservation: bool = False
    phase: MigrationPhase = MigrationPhase.PLACING
    phase_deadline: float | None = None
    target_node: str | None = None
    target_key: str | None = None
    target_allocation: int | None = None
    target_created: bool = False
    target_alive: bool = False
    source_stopped: bool = False
    reason: str = ""
    history: list[tuple[str, float, str]] = field(default_factory=list)

    # -- reading -----------------------------------------------------------------------------------
    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL

    @property
    def past_point_of_no_return(self) -> bool:
        return past_point_of_no_return(self.strategy, self.phase)

    def state(self) -> MigrationState:
        return MigrationState(self.migration_id, self.job_id, self.strategy, self.phase, self.source_node,
                              self.source_key, self.target_node, self.target_key, self.reason, self.started_at,
                              None if self.terminal else self.phase_deadline, self.past_point_of_no_return,
                              tuple(self.history))

    # -- moving ------------------------------------------------------------------------------------
    def _go(self, to: MigrationPhase, now: float, reason: str = "") -> list[Instruction]:
        LIFECYCLES[self.strategy].check(f"migration {self.migration_id}", self.phase, to, reason)
        self.phase = to
        if reason:
            self.reason = reason
        setting = DEADLINE_SETTING.get(to)
        self.phase_deadline = None if setting is None else now + self.deadlines.get(setting, DEFAULT_DEADLINES[setting])
        self.history.append((to.value, now, reason))
        return [PhaseEvent(self.state())]

    def begin(self, now: float) -> list[Instruction]:
        """The saga starts: find a target."""
        self.history.append((self.phase.value, now, "requested"))
        self.phase_deadline = now + self.deadlines.get("place_s", DEFAULT_DEADLINES["place_s"])
        return [PhaseEvent(self.state()), PlaceTarget(self.migration_id, self.job_id, self.source_node,
                                                      self.target_pin, self.override_reservation)]

    def target_placed(self, node_id: str, allocation_id: int | None, instance_key: str, now: float) -> list[Instruction]:
        """The engine chose the target: create its instance."""
        if self.phase is not P.PLACING:
            return [StopTarget(self.migration_id, self.job_id, None, allocation_id)]  # aborted meanwhile
        self.target_node, self.target_allocation, self.target_key = node_id, allocation_id, instance_key
        out = self._go(P.PREPARING, now, f"target {node_id[:12]}")
        return out + [CreateTarget(self.migration_id, self.job_id, node_id, instance_key,
                                   deferred=self.strategy is S.STOP_THEN_START, handover=self.strategy is S.HANDOVER)]

    def target_unplaced(self, reason: str, now: float) -> list[Instruction]:
        return self._abort(f"no target: {reason}", now) if self.phase is P.PLACING else []

    def target_prepared(self, now: float) -> list[Instruction]:
        """The target instance exists (stop_then_start: allocated; otherwise its constructor ran)."""
        if self.phase is not P.PREPARING:
            return []
        self.target_created = self.target_alive = True
        out = self._go(P.READY, now, "target prepared")
        if self.strategy is S.HANDOVER:
            return out + [AskReady(self.migration_id, self.job_id)]
        return out + self._stop_source(now)

    def ready(self, now: float) -> list[Instruction]:
        """handover: the target answered ``__fabric_ready__`` (its payload is held by the runner)."""
        if self.phase is not P.READY or self.strategy is not S.HANDOVER:
            return []
        return self._go(P.CUTTING, now, "target ready") + [Cut(self.migration_id, self.job_id)]

    def cut(self, now: float) -> list[Instruction]:
        """handover: the source cut its output and said where."""
        if self.phase is not P.CUTTING:
            return []
        return self._go(P.RESUMING, now, "source cut") + [Resume(self.migration_id, self.job_id)]

    def resumed(self, now: float) -> list[Instruction]:
        """handover: the target took over from the position."""
        if self.phase is not P.RESUMING:
            return []
        return self._stop_source(now)

    def _stop_source(self, now: float) -> list[Instruction]:
        return self._go(P.STOPPING_SOURCE, now, "stopping the source") + [
            StopSource(self.migration_id, self.job_id, self.source_key)]

    def source_ended(self, now: float) -> list[Instruction]:
        """The source instance is gone. Stopped on purpose: go on. Died before the point of no
        return: roll back (the job recovers by its policy, as for any death). Told twice (a
        graceful stop and the kill that finished it), the second changes nothing."""
        if self.source_stopped or self.terminal:
            self.source_stopped = True
            return []
        self.source_stopped = True
        if self.phase is P.STOPPING_SOURCE:
            if self.strategy is S.STOP_THEN_START:
                return self._go(P.STARTING_TARGET, now, "source stopped") + [BeginTarget(self.migration_id, self.job_id)]
            return self._complete(now, "source stopped")
        if not self.past_point_of_no_return:
            return self._abort("the source died", now, recover=True)
        return self._lose("the source died before the handover finished", now)

    def target_began(self, now: float) -> list[Instruction]:
        """stop_then_start: the deferred constructor ran."""
        if self.phase is not P.STARTING_TARGET:
            return []
        return self._complete(now, "target started")

    def target_failed(self, reason: str, now: float) -> list[Instruction]:
        """The target could not be created, refused its spec, or died."""
        self.target_alive = False
        if self.terminal:
            return []
        if not self.past_point_of_no_return:
            return self._abort(f"target failed: {reason}", now)
        return self._lose(f"target failed: {reason}", now)

    def abort(self, reason: str, now: float) -> list[Instruction]:
        """An operator's (or ``fabric.down``'s) abort: a clean rollback before the point of no
        return; refused after it."""
        if self.terminal:
            raise MigrationError(f"migration {self.migration_id} already ended ({self.phase.value})",
                                 migration_id=self.migration_id, job_id=self.job_id, phase=self.phase.value)
        if self.past_point_of_no_return:
            raise MigrationError(f"migration {self.migration_id} is past its point of no return ({self.phase.value}): "
                                 "it fails forward", migration_id=self.migration_id, job_id=self.job_id,
                                 phase=self.phase.value)
        return self._abort(f"aborted: {reason or 'by request'}", now)

    def expire(self, now: float) -> list[Instruction]:
        """The phase's deadline passed (call when ``now >= phase_deadline``)."""
        if self.terminal or self.phase_deadline is None or now < self.phase_deadline:
            return []
        what = f"{self.phase.value} took longer than its deadline"
        if not self.past_point_of_no_return:
            return self._abort(what, now)
        if self.phase is P.STOPPING_SOURCE:  # finish the stop by a kill; the saga goes on when it ends
            self.phase_deadline = now + self.deadlines.get("stop_source_s", DEFAULT_DEADLINES["stop_source_s"])
            self.history.append((self.phase.value, now, "stop took too long: killed"))
            return [StopSource(self.migration_id, self.job_id, self.source_key, kill=True)]
        return self._lose(what, now)

    def restarted(self, now: float) -> list[Instruction]:
        """A restarted scheduler read this saga back (its refs, handles and slots are gone: the
        caller finds the instances again by name and reserves their slots anew). Before the point of
        no return it rolls back (the source keeps running). From it on it goes on: the step in flight
        is asked again with a fresh deadline (a stop, the deferred constructor, the cut, the resume:
        each may be asked twice, and answers the same), and a stop that already ended moves it on."""
        if self.terminal:
            return []
        self.source_allocation = self.target_allocation = None  # the old process's ledger ids mean nothing now
        if not self.past_point_of_no_return:
            return self._abort("the scheduler restarted before the point of no return: rolled back", now)
        setting = DEADLINE_SETTING.get(self.phase)
        self.phase_deadline = None if setting is None else now + self.deadlines.get(setting, DEFAULT_DEADLINES[setting])
        self.history.append((self.phase.value, now, "resumed after a scheduler restart"))
        if self.phase is P.STOPPING_SOURCE:
            if self.source_stopped:  # the stop ended; the step after it was not taken yet
                self.source_stopped = False
                return self.source_ended(now)
            return [StopSource(self.migration_id, self.job_id, self.source_key)]
        if self.phase is P.STARTING_TARGET:
            return [BeginTarget(self.migration_id, self.job_id)]
        if self.phase is P.CUTTING:
            return [Cut(self.migration_id, self.job_id)]
        if self.phase is P.RESUMING:
            return [Resume(self.migration_id, self.job_id)]
        return []

    def lose(self, reason: str, now: float) -> list[Instruction]:
        """Past the point of no return, the saga cannot finish (``fabric.down``): marked lost."""
        return [] if self.terminal else self._lose(reason, now)

    # -- endings -----------------------------------------------------------------------------------
    def _complete(self, now: float, reason: str) -> list[Instruction]:
        assert self.target_node is not None and self.target_key is not None
        out = self._go(P.DONE, now, reason)
        return out + [Complete(self.migration_id, self.job_id, self.target_node, self.target_key,
                               self.target_allocation, reason)]

    def _abort(self, reason: str, now: float, recover: bool = False) -> list[Instruction]:
        out = self._go(P.ABORTED, now, reason)
        out.append(StopTarget(self.migration_id, self.job_id, self.target_key if self.target_node else None,
                              self.target_allocation))
        if not recover:
            out.append(RollBack(self.migration_id, self.job_id, reason))
        return out

    def _lose(self, reason: str, now: float) -> list[Instruction]:
        out = self._go(P.LOST, now, reason)
        if self.target_alive and self.target_node is not None and self.target_key is not None:
            if not self.source_stopped:
                out.append(StopSource(self.migration_id, self.job_id, self.source_key, kill=True))
            return out + [Complete(self.migration_id, self.job_id, self.target_node, self.target_key,
                                   self.target_allocation, f"lost: {reason}; the target carries the job")]
        if not self.source_stopped:
            out.append(StopSource(self.migration_id, self.job_id, self.source_key, kill=True))
        out.append(StopTarget(self.migration_id, self.job_id, self.target_key if self.target_created else None, None))
        return out + [Orphaned(self.migration_id, self.job_id, self.source_key, self.target_allocation, reason)]


FINISHED_KEPT = 256


class MigrationBook:
    """The sagas in flight (one per job) and the last ``FINISHED_KEPT`` that ended."""

    def __init__(self, deadlines: dict[str, float] | None = None) -> None:
        self.deadlines = dict(DEFAULT_DEADLINES, **(deadlines or {}))
        self.active: dict[str, Migration] = {}
        """By migration id."""
        self.by_job: dict[str, str] = {}
        self.finished: deque[Migration] = deque(maxlen=FINISHED_KEPT)
        self._count = 0

    def get(self, migration_id: str) -> Migration | None:
        m = self.active.get(migration_id)
        if m is not None:
            return m
        return next((f for f in reversed(self.finished) if f.migration_id == migration_id), None)

    def for_job(self, job_id: str) -> Migration | None:
        mid = self.by_job.get(job_id)
        return None if mid is None else self.active.get(mid)

    def for_key(self, instance_key: str) -> Migration | None:
        """The saga in flight whose source or target is ``instance_key``."""
        return next((m for m in self.active.values() if instance_key in (m.source_key, m.target_key)), None)

    def start(self, job_id: str, strategy: MigrationStrategy | str, source_node: str, source_key: str,
              source_allocation: int | None, now: float, token: str, *, target_node: str | None = None,
              override_reservation: bool = False) -> tuple[Migration, list[Instruction]]:
        """Open a saga for ``job_id`` (refused while one is in flight for it)."""
        strategy = MigrationStrategy(strategy)
        if job_id in self.by_job:
            raise MigrationError(f"job {job_id} is already migrating ({self.by_job[job_id]})",
                                 migration_id=self.by_job[job_id], job_id=job_id)
        if target_node is not None and target_node == source_node:
            raise MigrationError(f"job {job_id} already runs on {source_node[:12]}: pick another target", job_id=job_id)
        self._count += 1
        m = Migration(f"mig-{token}", job_id, strategy, source_node, source_key, source_allocation, now,
                      self.deadlines, target_pin=target_node, override_reservation=override_reservation)
        self.active[m.migration_id] = m
        self.by_job[job_id] = m.migration_id
        return m, m.begin(now)

    def adopt(self, m: Migration) -> None:
        """A saga read back from the store (a scheduler restart): in flight, or filed as finished."""
        if m.terminal:
            self.finished.append(m)
        else:
            self.active[m.migration_id] = m
            self.by_job[m.job_id] = m.migration_id

    def settle(self, m: Migration) -> None:
        """File a saga that ended with the finished ones."""
        if m.terminal and self.active.pop(m.migration_id, None) is not None:
            self.by_job.pop(m.job_id, None)
            self.finished.append(m)

    def due(self, now: float) -> list[Migration]:
        """Sagas whose phase deadline has passed."""
        return [m for m in self.active.values() if m.phase_deadline is not None and now >= m.phase_deadline]

    def states(self) -> list[MigrationState]:
        """Every saga, finished ones first (oldest first), then those in flight."""
        return [m.state() for m in list(self.finished) + list(self.active.values())]

    def in_flight(self, job_ids: Iterable[str] | None = None) -> int:
        if job_ids is None:
            return len(self.active)
        wanted = set(job_ids)
        return sum(1 for m in self.active.values() if m.job_id in wanted)

    def validate_state(self) -> list[str]:
        """What is inconsistent: one saga per job, every saga in flight non-terminal and indexed,
        every history a walk of its strategy's table."""
        out = []
        for mid, m in self.active.items():
            if m.terminal:
                out.append(f"migration {mid} is {m.phase.value} but still in flight")
            if self.by_job.get(m.job_id) != mid:
                out.append(f"migration {mid} is not the one filed for job {m.job_id}")
        for m in list(self.active.values()) + list(self.finished):
            phases = [MigrationPhase(p) for p, _, _ in m.history]
            steps = [(a, b) for a, b in zip(phases, phases[1:]) if a is not b]
            for a, b in steps:
                if not LIFECYCLES[m.strategy].allows(a, b):
                    out.append(f"migration {m.migration_id} went {a.value} -> {b.value}")
        return out

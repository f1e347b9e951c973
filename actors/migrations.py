"""MigrationRunner: the migration sagas, carried out inside the scheduler (seed 000 § Migration).

The decisions are ``fabric.core.jobs.migration``'s (one ``Migration`` per job); this class does
what a saga asks, on the scheduler's event loop, through the job runner's Ray seam
(``InstanceLauncher``): the target is placed by the scheduler's own core (the job's context, its
source node excluded, an explicit target as a pin, spares allowed as for any later placement), its
instance created (deferred for ``stop_then_start``, told it is a handover target for
``handover``), watched until the saga ends, and then handed to the job runner's ordinary watch.
The handover payload is the ObjectRef of the target's ``__fabric_ready__`` call, owned by this
scheduler (the saga), never by the source, and passed on to the source's ``__fabric_cut__``; the
source's answer (the position) goes on to the target's ``__fabric_resume__``.

An instance the saga stops on purpose (the source at the end, a rolled-back target) is
``ignored``: its death reaches nobody's recovery. Every saga is a row of the job store, written
with the jobs whenever it moves (before the step it asks for runs). A scheduler that restarts reads
them back (``load``) and ``resume`` carries each on by its phase (``Migration.restarted``): before
the point of no return it rolls back to the source; from it on the instances are found again by
name, their slots reserved anew, and the step in flight is asked again. A handover's payload and
position were ObjectRefs of the old process: they are asked for again (``__fabric_ready__``, then
``__fabric_cut__``, which answers the position it gave the first time).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from dataclasses import replace
from typing import Any

from fabric.core.errors import JobNotFoundError, MigrationError
from fabric.core.jobs import JobState
from fabric.core.jobs.migration import (
    AskReady, BeginTarget, Complete, CreateTarget, Cut, Migration, MigrationBook, MigrationPhase, MigrationState,
    MigrationStrategy, Orphaned, PhaseEvent, PlaceTarget, Resume, RollBack, StopSource, StopTarget,
)
from fabric.core.jobs.migration import FINISHED_KEPT
from fabric.core.scheduling import SlotsReleased
from fabric.store.job_rows import decode_migration, encode_migration, read_rows

HANDOVER_HOOKS = ("__fabric_ready__", "__fabric_cut__", "__fabric_resume__")
STOP_GRACE_S = 10.0


class MigrationRunner:
    """The sagas of one scheduler's job runner (see the module docstring)."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        settings = getattr(runner.scheduler.settings, "migration", None)
        deadlines = {k: getattr(settings, k) for k in ("place_s", "prepare_s", "ready_s", "cut_s", "resume_s",
                                                        "stop_source_s", "start_target_s") if hasattr(settings, k)}
        self.book = MigrationBook(deadlines)
        self.default_strategy = str(getattr(settings, "default_strategy", "stop_then_start"))
        self.targets: dict[str, Any] = {}
        """Per migration id: the target instance's handle, once created."""
        self.refs: dict[str, Any] = {}
        """Per migration id: the handover's payload, then position, ObjectRef."""
        self.tasks: dict[str, asyncio.Task] = {}
        self.ignored: set[str] = set()
        """Instance keys stopped on purpose: their deaths are nobody's recovery."""
        self.last_moved: dict[str, float] = {}
        """Per job: when its last migration completed (the rebalance cool-down)."""
        self.dirty: set[str] = set()
        """Sagas changed since the job store last wrote them (by migration id)."""
        self._stale: list[str] = []
        """Rows read back beyond the finished sagas kept: deleted with the next write."""

    # -- the store --------------------------------------------------------------------------------------
    def load(self, store: Any) -> None:
        """Read back the sagas a scheduler before this one kept (a restart): those in flight, and
        the newest ``FINISHED_KEPT`` that ended. ``resume`` carries the ones in flight on."""
        finished = []
        for _key, _blob, m in read_rows(store, "migration", decode_migration, "migrations"):
            if m.terminal:
                finished.append(m)
            else:
                self.book.adopt(m)
        finished.sort(key=lambda m: (m.history[-1][1] if m.history else m.started_at, m.migration_id))
        for m in finished[:-FINISHED_KEPT] if len(finished) > FINISHED_KEPT else []:
            self._stale.append(m.migration_id)
        for m in finished[-FINISHED_KEPT:]:
            self.book.adopt(m)
            if m.phase is MigrationPhase.DONE:
                self.last_moved[m.job_id] = max(self.last_moved.get(m.job_id, 0.0), m.history[-1][1] if m.history else 0.0)

    def changed_rows(self) -> list[tuple[str, str, bytes | None]]:
        """The ``state`` rows of the sagas changed since the last call (None: delete)."""
        out: list[tuple[str, str, bytes | None]] = [("migration", mid, None) for mid in self._stale]
        self._stale = []
        for mid in sorted(self.dirty):
            m = self.book.get(mid)
            out.append(("migration", mid, None if m is None else encode_migration(m)))
        self.dirty.clear()
        return out

    # -- requests ---------------------------------------------------------------------------------------
    def migrate(self, job_id: str, strategy: str | None = None, target_node: str | None = None,
                override_reservation: bool = False, reason: str = "requested") -> MigrationState:
        """Open a saga for the running job and place its target now; ``MigrationError`` when it
        cannot move (not running, already moving, no handover hooks, no target)."""
        r = self.runner
        rec = r.book.jobs.get(job_id)
        if rec is None:
            raise JobNotFoundError(f"no job {job_id!r}", job_id=job_id)
        try:
            strat = MigrationStrategy(strategy or self.default_strategy)
        except ValueError:
            raise MigrationError(f"unknown strategy {strategy!r}: one of {', '.join(s.value for s in MigrationStrategy)}",
                                 job_id=job_id) from None
        if rec.state != JobState.RUNNING or rec.binding is None:
            raise MigrationError(f"job {job_id} is {rec.state.value}: only a running job moves", job_id=job_id,
                                 phase=rec.state.value)
        if strat is MigrationStrategy.HANDOVER and not self.can_hand_over(job_id):
            raise MigrationError(f"job {job_id}'s class has no handover hooks ({', '.join(HANDOVER_HOOKS)})", job_id=job_id)
        if target_node is not None:
            target_node = r.scheduler.core.resolve_node(target_node)
        b = rec.binding
        m, out = self.book.start(job_id, strat, b.node_id, b.instance_key, b.allocation_id, r.clock(),
                                 uuid.uuid4().hex[:8], target_node=target_node, override_reservation=override_reservation)
        r.carry_out(r.book.migrating(job_id, r.clock(), f"migrating ({strat.value}, {reason})"))
        self.carry_out(m, out)
        r.persist()
        if m.phase is MigrationPhase.ABORTED:
            raise MigrationError(f"job {job_id} cannot move: {m.reason}", migration_id=m.migration_id, job_id=job_id,
                                 phase=m.phase.value)
        return m.state()

    def can_hand_over(self, job_id: str) -> bool:
        payload = self.runner.payload_of(job_id)
        if payload is None:
            return False
        try:
            cls = self.runner.launcher.loaded(payload[0])[0]
        except Exception:
            return False
        return all(callable(getattr(cls, h, None)) for h in HANDOVER_HOOKS)

    def abort(self, migration_id: str, reason: str = "") -> MigrationState:
        m = self.book.get(migration_id)
        if m is None:
            raise MigrationError(f"no migration {migration_id!r}", migration_id=migration_id)
        self.carry_out(m, m.abort(reason, self.runner.clock()))
        self.runner.persist()
        return m.state()

    def state(self, migration_id: str) -> MigrationState:
        m = self.book.get(migration_id)
        if m is None:
            raise MigrationError(f"no migration {migration_id!r}", migration_id=migration_id)
        return m.state()

    def states(self) -> list[MigrationState]:
        return self.book.states()

    async def close(self, grace_s: float = 5.0) -> int:
        """``fabric.down``: roll back every saga before its point of no return, mark the rest lost
        (their targets carry the jobs), and give the stops up to ``grace_s`` to go out."""
        active = list(self.book.active.values())
        now = self.runner.clock()
        for m in active:
            self.carry_out(m, m.lose("the fabric went down", now) if m.past_point_of_no_return
                           else m.abort("the fabric went down", now))
        pending = [t for t in self.tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=grace_s)
        self.runner.persist()
        return len(active)

    # -- the loop ---------------------------------------------------------------------------------------
    def tick(self) -> None:
        now = self.runner.clock()
        for m in self.book.due(now):
            self.carry_out(m, m.expire(now))

    def source_died(self, job_id: str, key: str) -> bool:
        """The job's instance ``key`` died. True when a saga owns that death (past its point of no
        return the source going is the saga's business); False when the job recovers as usual
        (a saga before its point of no return is rolled back first)."""
        if key in self.ignored:
            return True
        m = self.book.for_job(job_id)
        if m is None or m.source_key != key:
            return False
        owned = m.past_point_of_no_return
        self.carry_out(m, m.source_ended(self.runner.clock()))
        return owned

    def node_lost(self, node_id: str) -> set[str]:
        """A node left: sagas with their target there fail, sagas with their source there learn it.
        Returns the jobs whose loss the sagas own (the job runner does not recover them)."""
        now = self.runner.clock()
        owned = set()
        for m in list(self.book.active.values()):
            if m.target_node == node_id:
                self.carry_out(m, m.target_failed(f"node {node_id[:12]} lost", now))
            if m.source_node == node_id and not m.terminal:
                if m.past_point_of_no_return:
                    owned.add(m.job_id)
                    self.ignored.add(m.source_key)
                self.carry_out(m, m.source_ended(now))
        return owned

    # -- carrying out -----------------------------------------------------------------------------------
    def carry_out(self, m: Migration, instructions: list[Any]) -> None:
        r = self.runner
        self.dirty.add(m.migration_id)
        for ins in instructions:
            if isinstance(ins, PhaseEvent):
                r.emit("migration_phase", ins.state.as_dict())
            elif isinstance(ins, PlaceTarget):
                self.carry_out(m, self._place(m, ins))
            elif isinstance(ins, CreateTarget):
                self._spawn(m, self._create(m, ins), "create")
            elif isinstance(ins, AskReady):
                self._spawn(m, self._ready(m), "ready")
            elif isinstance(ins, Cut):
                self._spawn(m, self._cut(m), "cut")
            elif isinstance(ins, Resume):
                self._spawn(m, self._resume(m), "resume")
            elif isinstance(ins, StopSource):
                self.ignored.add(ins.instance_key)
                self._spawn(m, self._stop_source(m, ins), "stop-kill" if ins.kill else "stop")
            elif isinstance(ins, BeginTarget):
                self._spawn(m, self._begin(m), "begin")
            elif isinstance(ins, StopTarget):
                self._stop_target(m, ins)
            elif isinstance(ins, Complete):
                self._complete(m, ins)
            elif isinstance(ins, RollBack):
                r.carry_out(r.book.migration_rolled_back(ins.job_id, r.clock(), ins.reason))
            elif isinstance(ins, Orphaned):
                if ins.allocation_id is not None:
                    r.scheduler.handle_stimulus(SlotsReleased((ins.allocation_id,)))
                self.ignored.discard(ins.source_key)
                r.carry_out(r.book.died(ins.job_id, ins.source_key, r.clock(), reason=f"migration lost: {ins.reason}"))
                r.soon()
        if m.terminal and m.migration_id in self.book.active:
            if len(self.book.finished) == self.book.finished.maxlen:  # the oldest kept leaves the store too
                self._stale.append(self.book.finished[0].migration_id)
            self.book.settle(m)
            kind = "migration_completed" if m.phase is MigrationPhase.DONE else "migration_aborted"
            r.emit(kind, m.state().as_dict())
            self.refs.pop(m.migration_id, None)
        r.persist()

    def _place(self, m: Migration, ins: PlaceTarget) -> list[Any]:
        r = self.runner
        now = r.clock()
        rec = r.book.jobs.get(m.job_id)
        if rec is None:
            return m.target_unplaced("the job is gone", now)
        ctx = r.book.context(rec, r.where, target_node=ins.target_node, exclude=[ins.source_node])
        ctx = replace(ctx, recovering=False, on_runtime_failure="avoid_spare", launch_policy="allow_spare",
                      override_reservation=ctx.override_reservation or ins.override_reservation)
        got = r.engine_place(rec, rec.spec.requirement, ctx, {"migration_id": m.migration_id})
        if isinstance(got, str):
            return m.target_unplaced(got, now)
        a, key = got
        return m.target_placed(a.node_id, a.allocation_id, key, now)

    def _spawn(self, m: Migration, coro: Any, step: str) -> None:
        """Run one step of the saga on the event loop (kept until it ends, for ``close``)."""
        key = f"{m.migration_id}:{step}"
        task = asyncio.get_event_loop().create_task(coro)
        self.tasks[key] = task

        def done(t: asyncio.Task, key: str = key) -> None:
            if self.tasks.get(key) is t:
                del self.tasks[key]
            if not t.cancelled() and t.exception() is not None:
                exc = t.exception()
                print(f"[fabric.migrations] {key}: {type(exc).__name__}: {exc}")
        task.add_done_callback(done)

    async def _create(self, m: Migration, ins: CreateTarget) -> None:
        r = self.runner
        rec = r.book.jobs.get(m.job_id)
        payload = r.payload_of(m.job_id)
        if rec is None or payload is None:
            return self.carry_out(m, m.target_failed("nothing to start it from", r.clock()))
        loop = asyncio.get_event_loop()
        try:
            handle = await loop.run_in_executor(None, functools.partial(
                r.launcher.start, m.job_id, ins.instance_key, ins.node_id, payload[0], payload[1], rec.spec.requirement,
                r.gpus.pop(ins.instance_key, 0.0), deferred=ins.deferred, handover_target=ins.handover))
        except Exception as exc:
            return self.carry_out(m, m.target_failed(f"cannot start: {type(exc).__name__}: {exc}", r.clock()))
        if m.terminal:  # rolled back while it was being created
            r.launcher.kill(handle)
            return
        self.targets[m.migration_id] = handle
        try:
            err = await handle.__fabric_started__.remote()
        except Exception as exc:
            fate = r.launcher.death(exc)
            return self.carry_out(m, m.target_failed(fate[2] if fate else str(exc), r.clock()))
        if err is not None:
            kind, message = err
            return self.carry_out(m, m.target_failed(("invalid spec: " if kind == "invalid_spec" else "") + message, r.clock()))
        self.carry_out(m, m.target_prepared(r.clock()))
        await self._watch_target(m, handle)

    async def _watch_target(self, m: Migration, handle: Any) -> None:
        """Until the saga ends: the target's death fails it."""
        while not m.terminal:
            try:
                await handle.__fabric_watch__.remote(5.0)
            except Exception as exc:
                fate = self.runner.launcher.death(exc)
                if fate is None:
                    await asyncio.sleep(0.5)
                    continue
                if not m.terminal:
                    self.carry_out(m, m.target_failed(fate[2], self.runner.clock()))
                return

    async def _call(self, m: Migration, what: str, ref: Any) -> Any:
        """Await a hook's answer; a failure fails the target (or, for the source's cut, the saga)."""
        try:
            return True, await ref
        except Exception as exc:
            return False, f"{what} raised {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"

    async def _ready(self, m: Migration) -> None:
        target = self.targets.get(m.migration_id)
        if target is None:
            return
        ref = target.__fabric_ready__.remote()
        self.refs[m.migration_id] = ref  # the payload, owned here
        ok, why = await self._call(m, "__fabric_ready__", ref)
        self.carry_out(m, m.ready(self.runner.clock()) if ok else m.target_failed(why, self.runner.clock()))

    async def _cut(self, m: Migration) -> None:
        r = self.runner
        source = r.handles.get(m.source_key) or r.launcher.find(m.job_id, m.source_key)
        payload = self.refs.get(m.migration_id)
        if source is None:
            return self.carry_out(m, m.source_ended(r.clock()))
        target = self.targets.get(m.migration_id)
        if payload is None and target is not None:  # a restart lost the payload's ref: asked for again
            payload = self.refs[m.migration_id] = target.__fabric_ready__.remote()
        ref = source.__fabric_cut__.remote(payload)
        ok, why = await self._call(m, "__fabric_cut__", ref)
        self.refs[m.migration_id] = ref if ok else None  # now the position (None: the target takes over where it is)
        self.carry_out(m, m.cut(r.clock()) if ok else m.lose(why, r.clock()))

    async def _resume(self, m: Migration) -> None:
        target = self.targets.get(m.migration_id)
        if target is None:
            return
        if m.migration_id not in self.refs:  # a restart lost the position's ref: the source gives it again
            r = self.runner
            source = r.handles.get(m.source_key) or r.launcher.find(m.job_id, m.source_key)
            if source is not None:
                ready = target.__fabric_ready__.remote()
                ok, position = await self._call(m, "__fabric_cut__", source.__fabric_cut__.remote(ready))
                self.refs[m.migration_id] = position if ok else None
        ok, why = await self._call(m, "__fabric_resume__", target.__fabric_resume__.remote(self.refs.get(m.migration_id)))
        self.carry_out(m, m.resumed(self.runner.clock()) if ok else m.target_failed(why, self.runner.clock()))

    async def _begin(self, m: Migration) -> None:
        target = self.targets.get(m.migration_id)
        if target is None:
            return
        ok, answer = await self._call(m, "the constructor", target.__fabric_begin__.remote())
        if ok and answer is not None:
            kind, message = answer
            ok, answer = False, ("invalid spec: " if kind == "invalid_spec" else "") + message
        self.carry_out(m, m.target_began(self.runner.clock()) if ok else m.target_failed(str(answer), self.runner.clock()))

    async def _stop_source(self, m: Migration, ins: StopSource) -> None:
        r = self.runner
        handle = r.handles.get(ins.instance_key) or r.launcher.find(m.job_id, ins.instance_key)
        if handle is not None:
            if not ins.kill:
                try:
                    await asyncio.wait_for(handle.__fabric_shutdown__.remote(), STOP_GRACE_S)
                except Exception:
                    pass
            r.launcher.kill(handle)
        r.handles.pop(ins.instance_key, None)
        rec = r.book.jobs.get(m.job_id)
        if rec is not None and rec.state == JobState.STOPPING and rec.binding is not None \
                and rec.binding.instance_key == ins.instance_key:  # a stop asked meanwhile ends here too
            r.apply(r.book.died(m.job_id, ins.instance_key, r.clock(), reason="stopped"))
        self.carry_out(m, m.source_ended(r.clock()))

    def _stop_target(self, m: Migration, ins: StopTarget) -> None:
        r = self.runner
        if ins.allocation_id is not None:
            r.scheduler.handle_stimulus(SlotsReleased((ins.allocation_id,)))
        handle = self.targets.pop(m.migration_id, None)
        if ins.instance_key is not None:
            self.ignored.add(ins.instance_key)
            if handle is None:
                handle = r.launcher.find(m.job_id, ins.instance_key)
        if handle is not None:
            r.launcher.kill(handle)

    def _complete(self, m: Migration, ins: Complete) -> None:
        r = self.runner
        rec = r.book.jobs.get(ins.job_id)
        if rec is None or rec.state != JobState.MIGRATING:  # stopped meanwhile: the target goes too
            self._stop_target(m, StopTarget(m.migration_id, ins.job_id, ins.instance_key, ins.allocation_id))
            return
        r.carry_out(r.book.migrated(ins.job_id, ins.node_id, ins.instance_key, ins.allocation_id, r.clock(), ins.reason))
        self.last_moved[ins.job_id] = r.clock()
        handle = self.targets.pop(m.migration_id, None)
        if handle is not None:
            if m.phase is MigrationPhase.LOST and m.strategy is MigrationStrategy.HANDOVER:
                handle.__fabric_resume__.remote(self.refs.get(m.migration_id))  # it must not hold its output forever
            r.handles[ins.instance_key] = handle
            r.spawn(r.watch(ins.job_id, ins.instance_key, handle, starting=False), ins.instance_key)

    # -- after a restart --------------------------------------------------------------------------------
    def resume(self) -> set[str]:
        """After a restart, each saga read back goes on by its phase (``Migration.restarted``): before
        its point of no return it rolls back (the job runs on at its source); from it on its target
        is found by name (gone: the saga fails forward), watched again and its slot reserved anew,
        the source's death is the saga's, and the step in flight is asked again. Returns the jobs
        whose sagas go on (the job runner leaves their instances to them)."""
        r = self.runner
        now = r.clock()
        owned: set[str] = set()
        for m in list(self.book.active.values()):
            out = m.restarted(now)
            if m.terminal:  # rolled back
                self.carry_out(m, out)
                continue
            owned.add(m.job_id)
            self.ignored.add(m.source_key)
            rec = r.book.jobs.get(m.job_id)
            source = r.launcher.find(m.job_id, m.source_key)
            if rec is not None and rec.binding is not None and source is not None:
                r.reserve_again(rec)  # its slot until the saga gives it back (the runner dropped the old id)
                r.handles[m.source_key] = source
            target = r.launcher.find(m.job_id, m.target_key) if m.target_key else None
            if target is None:
                out = m.target_failed("the target is gone after a scheduler restart", now)
            else:
                self.targets[m.migration_id] = target
                m.target_allocation = None if rec is None or m.target_node is None else r.reserve_on(rec, m.target_node)
                self._spawn(m, self._watch_target(m, target), "watch")
            self.carry_out(m, out)
        for rec in list(r.book.jobs.values()):  # migrating with no saga kept (a store older than sagas)
            if rec.state == JobState.MIGRATING and self.book.for_job(rec.job_id) is None:
                r.carry_out(r.book.migration_rolled_back(rec.job_id, now, "the scheduler restarted mid-migration"))
        return owned

    def kept_targets(self) -> set[tuple[str, str]]:
        """The ``(job id, instance key)`` of every saga's target in flight (a restart's sweep spares them)."""
        return {(m.job_id, m.target_key) for m in self.book.active.values() if m.target_key is not None}


__all__ = ["MigrationRunner"]

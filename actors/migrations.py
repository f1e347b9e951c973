"""MigrationRunner: the saga steps of the jobs core, carried out inside the scheduler.

The decisions are the jobs core's (``fabric.core.jobs.sagas`` over ``fabric.core.jobs.migration``);
this class carries out the saga family of instructions, on the scheduler's event loop, through the
job runner's Ray seam (``InstanceLauncher``), and answers each with ``SagaStepAnswered``: the
target is placed by the scheduler's own core (the job's context, its source node excluded, an
explicit target as a pin, spares allowed as for any later placement), its instance created
(deferred for ``stop_then_start``, told it is a handover target for ``handover``) and watched until
the saga ends, then handed to the job runner's ordinary watch (``take_target``). The handover
payload is the ObjectRef of the target's ``__fabric_ready__`` call, owned by this scheduler (the
saga), never by the source, and passed on to the source's ``__fabric_cut__``; the source's answer
(the position) goes on to the target's ``__fabric_resume__``.

After a restart the core resumes each saga by its phase; a handover's payload and position were
ObjectRefs of the old process: they are asked for again (``__fabric_ready__``, then
``__fabric_cut__``, which answers the position it gave the first time).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import replace
from typing import Any

from fabric.core.errors import MigrationError
from fabric.core.jobs.migration import (
    FINISHED_KEPT, AskReady, BeginTarget, CreateTarget, Cut, Migration, MigrationBook, MigrationPhase, MigrationState,
    MigrationStrategy, PlaceTarget, Resume, StopSource, StopTarget,
)
from fabric.core.jobs.sagas import HANDOVER_HOOKS
from fabric.core.jobs.state import WatchTarget
from fabric.core.jobs.stimuli import AbortRequested, Closing, MigrateRequested, SagaAnswer, SagaStepAnswered
from fabric.store.job_rows import decode_migration, encode_migration, read_rows

STOP_GRACE_S = 10.0
SAGA_STEPS = (PlaceTarget, CreateTarget, AskReady, Cut, Resume, StopSource, BeginTarget, StopTarget, WatchTarget)
"""The instructions this runner carries out."""


class MigrationRunner:
    """The saga steps of one scheduler's job runner (see the module docstring)."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.targets: dict[str, Any] = {}
        """Per migration id: the target instance's handle, once created."""
        self.refs: dict[str, Any] = {}
        """Per migration id: the handover's payload, then position, ObjectRef."""
        self.tasks: dict[str, asyncio.Task] = {}

    @property
    def book(self) -> MigrationBook:
        return self.runner.core.migrations

    @property
    def ignored(self) -> set[str]:
        return self.runner.core.ignored

    @property
    def last_moved(self) -> dict[str, float]:
        return self.runner.core.last_moved

    # -- the store --------------------------------------------------------------------------------------
    def load(self, store: Any) -> None:
        """Read back the sagas a scheduler before this one kept (a restart): those in flight, and
        the newest ``FINISHED_KEPT`` that ended. The core resumes the ones in flight."""
        core = self.runner.core
        finished = []
        for _key, _blob, m in read_rows(store, "migration", decode_migration, "migrations"):
            if m.terminal:
                finished.append(m)
            else:
                self.book.adopt(m)
        finished.sort(key=lambda m: (m.history[-1][1] if m.history else m.started_at, m.migration_id))
        for m in finished[:-FINISHED_KEPT] if len(finished) > FINISHED_KEPT else []:
            core.stale_sagas.append(m.migration_id)
        for m in finished[-FINISHED_KEPT:]:
            self.book.adopt(m)
            if m.phase is MigrationPhase.DONE:
                core.last_moved[m.job_id] = max(core.last_moved.get(m.job_id, 0.0), m.history[-1][1] if m.history else 0.0)

    def changed_rows(self) -> list[tuple[str, str, bytes | None]]:
        """The ``state`` rows of the sagas changed since the last call (None: delete)."""
        core = self.runner.core
        out: list[tuple[str, str, bytes | None]] = [("migration", mid, None) for mid in core.stale_sagas]
        core.stale_sagas = []
        for mid in sorted(core.dirty_sagas):
            m = self.book.get(mid)
            out.append(("migration", mid, None if m is None else encode_migration(m)))
        core.dirty_sagas.clear()
        return out

    # -- requests ---------------------------------------------------------------------------------------
    def migrate(self, job_id: str, strategy: str | None = None, target_node: str | None = None,
                override_reservation: bool = False, reason: str = "requested") -> MigrationState:
        """Open a saga for the running job and place its target now; ``MigrationError`` when it
        cannot move (not running, already moving, no handover hooks, no target)."""
        if target_node is not None:
            target_node = self.runner.tasks.resolve_node(target_node)
        mid = self.runner.handle(MigrateRequested(job_id, strategy, target_node, override_reservation, reason))
        m = self.book.get(mid)
        assert m is not None
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
        return self.state(self.runner.handle(AbortRequested(migration_id, reason)))

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
        n = len(self.book.active)
        self.runner.handle(Closing())
        pending = [t for t in self.tasks.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=grace_s)
        self.runner.persist()
        return n

    # -- carrying out -----------------------------------------------------------------------------------
    def carry_out(self, ins: Any) -> list[Any]:
        """One saga instruction; what a placement answers at once comes back (the core's answer to it)."""
        m = self.book.get(ins.migration_id)
        if m is None:
            return []
        if isinstance(ins, PlaceTarget):
            return self._place(m, ins)
        if isinstance(ins, CreateTarget):
            self._spawn(m, self._create(m, ins), "create")
        elif isinstance(ins, AskReady):
            self._spawn(m, self._ready(m), "ready")
        elif isinstance(ins, Cut):
            self._spawn(m, self._cut(m), "cut")
        elif isinstance(ins, Resume):
            self._spawn(m, self._resume(m), "resume")
        elif isinstance(ins, StopSource):
            self._spawn(m, self._stop_source(m, ins), "stop-kill" if ins.kill else "stop")
        elif isinstance(ins, BeginTarget):
            self._spawn(m, self._begin(m), "begin")
        elif isinstance(ins, StopTarget):
            handle = self.targets.pop(m.migration_id, None)
            if handle is None and ins.instance_key is not None:
                handle = self.runner.launcher.find(m.job_id, ins.instance_key)
            if handle is not None:
                self.runner.launcher.kill(handle)
        elif isinstance(ins, WatchTarget):
            target = self.runner.launcher.find(ins.job_id, ins.instance_key)
            if target is None:
                return self._answered(m, "target_failed", "the target is gone after a scheduler restart")
            self.targets[m.migration_id] = target
            self._spawn(m, self._watch_target(m, target), "watch")
        return []

    def _answered(self, m: Migration, answer: SagaAnswer, reason: str = "", **placed: Any) -> list[Any]:
        """The core's instructions for what came of a step (carried out by the caller)."""
        return self.runner.core.handle(SagaStepAnswered(m.migration_id, answer, reason, **placed))

    def _answer(self, m: Migration, answer: SagaAnswer, reason: str = "", *, confirmed: bool = True) -> None:
        """Tell the core what came of a step that ran on its own, and carry its answer out."""
        self.runner.handle(SagaStepAnswered(m.migration_id, answer, reason, confirmed=confirmed))

    def take_target(self, migration_id: str) -> Any:
        """The target's handle, for the job runner's watch once it carries the job (a lost handover's
        target is told to resume, so it does not hold its output forever)."""
        handle = self.targets.pop(migration_id, None)
        m = self.book.get(migration_id)
        if handle is not None and m is not None and m.phase is MigrationPhase.LOST \
                and m.strategy is MigrationStrategy.HANDOVER:
            handle.__fabric_resume__.remote(self.refs.get(migration_id))
        return handle

    def ended(self, migration_id: str) -> None:
        self.refs.pop(migration_id, None)

    def _place(self, m: Migration, ins: PlaceTarget) -> list[Any]:
        r = self.runner
        rec = r.book.jobs.get(m.job_id)
        if rec is None:
            return self._answered(m, "unplaced", "the job is gone")
        ctx = r.book.context(rec, r.where, target_node=ins.target_node, exclude=[ins.source_node])
        ctx = replace(ctx, recovering=False, on_runtime_failure="avoid_spare", launch_policy="allow_spare",
                      override_reservation=ctx.override_reservation or ins.override_reservation)
        got = r.engine_place(rec, rec.spec.requirement, ctx, {"migration_id": m.migration_id})
        if isinstance(got, str):
            return self._answered(m, "unplaced", got)
        a, key = got
        return self._answered(m, "placed", node_id=a.node_id, allocation_id=a.allocation_id, instance_key=key)

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
            return self._answer(m, "target_failed", "nothing to start it from")
        loop = asyncio.get_event_loop()
        try:
            handle = await loop.run_in_executor(None, functools.partial(
                r.launcher.start, m.job_id, ins.instance_key, ins.node_id, payload[0], payload[1], rec.spec.requirement,
                r.gpus.pop(ins.instance_key, 0.0), deferred=ins.deferred, handover_target=ins.handover))
        except Exception as exc:
            return self._answer(m, "target_failed", f"cannot start: {type(exc).__name__}: {exc}")
        if m.terminal:  # rolled back while it was being created
            r.launcher.kill(handle)
            return
        self.targets[m.migration_id] = handle
        try:
            err = await handle.__fabric_started__.remote()
        except Exception as exc:
            fate = r.launcher.death(exc)
            return self._answer(m, "target_failed", fate[2] if fate else str(exc))
        if err is not None:
            kind, message = err
            return self._answer(m, "target_failed", ("invalid spec: " if kind == "invalid_spec" else "") + message)
        self._answer(m, "prepared")
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
                    self._answer(m, "target_failed", fate[2])
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
        self._answer(m, "ready") if ok else self._answer(m, "target_failed", why)

    async def _cut(self, m: Migration) -> None:
        r = self.runner
        source = r.handles.get(m.source_key) or r.launcher.find(m.job_id, m.source_key)
        payload = self.refs.get(m.migration_id)
        if source is None:
            return self._answer(m, "source_ended")
        target = self.targets.get(m.migration_id)
        if payload is None and target is not None:  # a restart lost the payload's ref: asked for again
            payload = self.refs[m.migration_id] = target.__fabric_ready__.remote()
        ref = source.__fabric_cut__.remote(payload)
        ok, why = await self._call(m, "__fabric_cut__", ref)
        self.refs[m.migration_id] = ref if ok else None  # now the position (None: the target takes over where it is)
        self._answer(m, "cut") if ok else self._answer(m, "cut_failed", why)

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
        self._answer(m, "resumed") if ok else self._answer(m, "target_failed", why)

    async def _begin(self, m: Migration) -> None:
        target = self.targets.get(m.migration_id)
        if target is None:
            return
        ok, answer = await self._call(m, "the constructor", target.__fabric_begin__.remote())
        if ok and answer is not None:
            kind, message = answer
            ok, answer = False, ("invalid spec: " if kind == "invalid_spec" else "") + message
        self._answer(m, "began") if ok else self._answer(m, "target_failed", str(answer))

    async def _stop_source(self, m: Migration, ins: StopSource) -> None:
        r = self.runner
        handle = r.handles.get(ins.instance_key) or r.launcher.find(m.job_id, ins.instance_key)
        confirmed = False  # not found by name, or only killed: its node may be cut off and run it on
        if handle is not None:
            if not ins.kill:
                try:
                    await asyncio.wait_for(handle.__fabric_shutdown__.remote(), STOP_GRACE_S)
                    confirmed = True  # it ends its own process (SELF_STOP_S), kill or no kill
                except Exception:
                    pass
            r.launcher.kill(handle)
        r.handles.pop(ins.instance_key, None)
        self._answer(m, "source_stopped", confirmed=confirmed)


__all__ = ["MigrationRunner", "SAGA_STEPS"]

"""DrainRunner: drains, evictions, reclaim notices and rebalancing, carried out in the scheduler
(seed 000 § Drain / cordon, § Spot interruption; seed 002's reconfiguration engine).

The decisions are ``fabric.core.jobs.drains``'s (one ``NodeDrain`` per node) and
``fabric.core.jobs.rebalance``'s; this class does what they ask, on the scheduler's event loop:

- ``drain``: the scheduler's core cordons the node (its own ``DrainRequested``: running tasks
  finish, nothing new lands), every job there is migrated by the strategy (the saga of
  ``actors.migrations``), each job's status follows its saga on every tick (a ``drain_progress``
  event on every change), a job that could not move is retried while time is left, and once no
  job is left and the core has seen the node's tasks end, Ray is asked to drain it: for an
  ordinary drain with IDLE_TERMINATION after the fabric's probe left the node (Ray refuses an
  idle termination while any actor runs there; accepted, the raylet exits), for a reclaim notice
  with PREEMPTION and its deadline. Ray's answer, a refusal too, is in the ``DrainState``. At the
  timeout, ``force`` stops what has not moved (each job recovers by its policy); without it the
  drain ends ``partial``.
- ``evict``: cordon, then stop every job there at once; each recovers by its policy.
- ``interrupt``: a forced drain sized to the notice's deadline (``interruption_timeout``); a
  second notice tightens the drain in progress; what dies with the node is not counted against
  the restart ceiling.
- ``rebalance``: when capacity joins, jobs running below their ``min_tier`` move up by the
  strategy, at most ``rebalance.max_concurrent`` at a time, none within its cool-down.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from fabric.core.errors import FabricError, TransitionError
from fabric.core.jobs import JobState
from fabric.core.jobs.drains import (
    FINAL_JOB_STATUSES, AskRayToDrain, DrainState, ForceStop, JobDrainStatus, NodeDrainPhase, NodeDrains, NodeInterruptionState, interruption_timeout,
)
from fabric.core.jobs.migration import MigrationPhase
from fabric.core.names import HEALTH
from fabric.core.jobs.rebalance import Candidate, choose
from fabric.core.placement import dry_run
from fabric.core.scheduling import Cordoned, DrainRequested
from fabric.store.job_rows import decode_drain, decode_notice, encode_drain, encode_notice, read_rows

RETRY_S = 2.0
"""How often a job that could not move is tried again while its drain has time left."""
IDLE_RETRIES = 10
"""Tries of Ray's idle termination while the probe's worker is still going away (0.5 s apart)."""


class DrainRunner:
    """One scheduler's drains (see the module docstring)."""

    def __init__(self, scheduler: Any, jobs: Any) -> None:
        self.scheduler = scheduler
        self.jobs = jobs
        self.drains = NodeDrains()
        self.interruptions: dict[str, NodeInterruptionState] = {}
        self.asks: dict[str, AskRayToDrain] = {}
        """Per node: Ray's drain, asked once the core has handed the node off (its tasks ended)."""
        self._retry_at: dict[tuple[str, str], float] = {}
        self._rebalance_after: float | None = None
        self.rebalancing: dict[str, str] = {}
        """Job id -> migration id of the rebalance moves in flight."""
        self._written: dict[tuple[str, str], bytes] = {}
        """The ``state`` rows last written (drains, notices), by kind and key: only changes are written."""
        self._final: set[tuple[str, str]] = set()
        """Keys of drains whose row was written after they ended (final: not encoded again)."""

    # -- the store --------------------------------------------------------------------------------------
    def load(self, store: Any) -> None:
        """Read back the drains and reclaim notices a scheduler before this one kept (a restart):
        every drain, in progress or ended; every notice, its node again under notice (what dies with
        it is not counted). ``resume`` carries the drains in progress on once the fleet is known."""
        for key, blob, d in read_rows(store, "drain", decode_drain, "drains"):
            self.drains.adopt(d)
            self._written[("drain", key)] = blob
        for node_id, blob in store.state("notice"):
            try:
                latest = next((d for d in reversed(self.drains.every()) if d.node_id == node_id), None)
                notice = decode_notice(blob, latest)
            except Exception as exc:
                print(f"[fabric.drains] notice for {node_id!r} could not be read back: {type(exc).__name__}: {exc}")
                continue
            self._written[("notice", node_id)] = blob
            if notice is not None:
                self.interruptions[node_id] = notice
                self.jobs.preempting.add(node_id)

    def changed_rows(self) -> list[tuple[str, str, bytes | None]]:
        """The ``state`` rows that changed since the last call (None: delete), for the job store's
        next write; every drain kept (in progress, and the last ended ones) and every notice."""
        rows: dict[tuple[str, str], bytes] = {}
        for d in self.drains.every():
            key = ("drain", f"{d.node_id}@{d.started!r}")
            if key in self._final:  # written once it had ended: it no longer changes, its row is not built again
                rows[key] = self._written[key]
                continue
            rows[key] = encode_drain(d)
            if d.terminal:
                self._final.add(key)
        for node_id, notice in self.interruptions.items():
            rows[("notice", node_id)] = encode_notice(notice)
        out: list[tuple[str, str, bytes | None]] = [(k, key, blob) for (k, key), blob in rows.items()
                                                    if self._written.get((k, key)) != blob]
        out += [(k, key, None) for (k, key) in self._written if (k, key) not in rows]
        self._written = rows
        self._final &= set(rows)
        return out

    def resume(self) -> None:
        """After a restart (the fleet known): every drain in progress goes on. Its node is cordoned
        again through the core (its running tasks finish), a job whose migration the restart forgot
        is tried again, a drain Ray was asked about is asked again; a node that left meanwhile ends
        its drain (``done`` when Ray had been asked, else ``failed``). Deadlines are the stored ones."""
        now = self._now()
        moves = self.jobs.moves
        for d in self.drains.active():
            if self.scheduler.core.fleet.get(d.node_id) is None:
                if d.phase is NodeDrainPhase.DRAINING:
                    self.drains.ray_answered(d.node_id, True, "the node left after Ray was asked to drain it "
                                             "(its answer was not seen: the scheduler restarted)", now)
                else:
                    self.drains.fail(d.node_id, "the node left the fleet while the scheduler was away", now)
                self._progress(d)
                continue
            if d.phase is NodeDrainPhase.DRAINING:
                self.asks[d.node_id] = d.ray_ask()
            else:
                self.scheduler.handle_stimulus(DrainRequested(d.node_id, max(0.0, d.deadline - now)))
            for job_id in d.remaining():
                entry = d.job(job_id)
                if entry.status is JobDrainStatus.MIGRATING and (
                        entry.migration_id is None or moves.book.get(entry.migration_id) is None):
                    d.set_job(job_id, JobDrainStatus.STUCK,
                              reason="its migration was forgotten in a scheduler restart: tried again")
            self._progress(d)

    @property
    def settings(self) -> Any:
        return self.scheduler.settings

    def _now(self) -> float:
        return self.jobs.clock()

    # -- requests ---------------------------------------------------------------------------------------
    async def drain(self, node_id: str, timeout_s: float | None = None, force: bool = False, strategy: str | None = None,
                    interruption: str | None = None, deadline: float | None = None) -> DrainState:
        now = self._now()
        ds = self.settings.drain
        timeout = ds.timeout_s if timeout_s is None else float(timeout_s)
        if interruption is not None:
            timeout = interruption_timeout(interruption, deadline, now, ds)
        d = self.drains.get(node_id)
        if d is not None:  # one drain per node: a second notice (or a sterner call) tightens it
            if interruption is not None or force or timeout_s is not None:
                if d.tighten(timeout, now, force=force or interruption is not None, interruption=interruption,
                             interruption_deadline=deadline):
                    self._progress(d)
            return d.snapshot()
        strategy = strategy or self.settings.migration.default_strategy
        ids = [r.job_id for r in self.jobs.book.on_node(node_id) if r.state in (JobState.STARTING, JobState.RUNNING,
                                                                               JobState.MIGRATING)]
        d = self.drains.start(node_id, ids, now, timeout_s=timeout, force=force, strategy=strategy,
                              interruption=interruption, interruption_deadline=deadline)
        await self.scheduler.answered(DrainRequested(node_id, timeout))  # cordon; running tasks finish
        for job_id in ids:
            self._move(d, job_id)
        d.started_all(now)
        self._progress(d)
        self.step()
        self.jobs.persist()
        return d.snapshot()

    async def interrupt(self, node_id: str, kind: str, deadline: float | None) -> NodeInterruptionState:
        self.jobs.preempting.add(node_id)
        now = self._now()
        state = await self.drain(node_id, interruption=kind, deadline=deadline)
        notice = NodeInterruptionState(node_id=node_id, kind=kind, deadline=deadline, noticed_at=now, drain=state)
        self.interruptions[node_id] = notice
        self.jobs.emit("node_interrupted", notice.as_dict())
        self.jobs.persist()
        return notice

    def evict(self, node_id: str) -> list[str]:
        """Stop the node's jobs now (cordoned first); each recovers by its policy."""
        self.scheduler.handle_stimulus(Cordoned(node_id))
        stopped = []
        for rec in self.jobs.book.on_node(node_id):
            self._stop_on_node(rec.job_id, node_id, reason=f"evicted from {node_id[:12]}")
            stopped.append(rec.job_id)
        self.jobs.persist()
        self.jobs.soon()
        return stopped

    def withdraw(self, node_id: str) -> DrainState | None:
        """An uncordon: the drain (and a notice) is withdrawn; its migrations in flight run on. Once
        Ray accepted to drain the node there is no undrain: ``TransitionError``."""
        last = self.drains.status(node_id)
        if last is not None and last.ray_drain == "accepted":
            raise TransitionError(f"node {node_id[:12]}", "drained", "active",
                                  "Ray drained it (there is no undrain): it stays cordoned until it goes")
        self.interruptions.pop(node_id, None)
        self.jobs.preempting.discard(node_id)
        self.asks.pop(node_id, None)
        try:
            state = self.drains.withdraw(node_id, self._now())
        except TransitionError:  # Ray was asked already: there is no undrain
            self.jobs.persist()
            return self.drains.status(node_id)
        if state is not None:
            self.jobs.emit("drain_progress", state.as_dict())
        self.jobs.persist()
        return state

    def status(self, node_id: str) -> DrainState | None:
        return self.drains.status(node_id)

    # -- the loop ---------------------------------------------------------------------------------------
    def step(self) -> None:
        """Every tick: follow each job's saga, retry what could not move, act on the drains'
        deadlines, ask Ray once a node is empty; then rebalance."""
        now = self._now()
        for d in self.drains.active():
            before = d.snapshot()
            self._follow(d, now)
            if d.snapshot() != before:
                self._progress(d)
        for action in self.drains.step(now):
            d_state = self.drains.status(action.node_id)
            if isinstance(action, ForceStop):
                for job_id in action.job_ids:
                    self._stop_on_node(job_id, action.node_id, reason=f"still on {action.node_id[:12]} at the drain's timeout")
                self.jobs.persist()
                self.jobs.soon()
            elif isinstance(action, AskRayToDrain) and not self.settings.drain.ask_ray and action.reason != "PREEMPTION":
                d = self.drains.get(action.node_id)
                if d is not None:  # the operator keeps drains reversible: Ray is not asked
                    d.ray_answered(True, "Ray not asked (drain.ask_ray is false)", now)
                    d.ray_drain = "not asked"
                    self.drains.sweep()
                    d_state = d.snapshot()
            elif isinstance(action, AskRayToDrain):
                self.asks[action.node_id] = action
            if d_state is not None:
                self.jobs.emit("drain_progress", d_state.as_dict())
        for node_id, ask in list(self.asks.items()):
            if node_id not in self.scheduler.core.drains:  # the core handed it off: its tasks ended (or its grace)
                del self.asks[node_id]
                asyncio.get_event_loop().create_task(self._ask_ray(ask))
        self._rebalance(now)

    def _follow(self, d: Any, now: float) -> None:
        for job_id in d.remaining():
            rec = self.jobs.book.jobs.get(job_id)
            entry = d.job(job_id)
            if rec is None or rec.binding is None or rec.binding.node_id != d.node_id:
                m = self.jobs.moves.book.get(entry.migration_id) if entry.migration_id else None
                done = m is not None and m.phase is MigrationPhase.DONE and entry.status is JobDrainStatus.MIGRATING
                why = "migrated" if done else (f"left the node ({rec.state.value})" if rec is not None else "gone")
                d.set_job(job_id, JobDrainStatus.MIGRATED if done else JobDrainStatus.MOVED, reason=why)
                continue
            m = self.jobs.moves.book.get(entry.migration_id) if entry.migration_id else None
            if entry.status is JobDrainStatus.MIGRATING and m is not None and m.terminal:
                d.set_job(job_id, JobDrainStatus.STUCK, reason=f"migration {m.phase.value}: {m.reason}")
            elif entry.status is JobDrainStatus.STUCK and now >= self._retry_at.get((d.node_id, job_id), 0.0):
                self._move(d, job_id)

    def _move(self, d: Any, job_id: str) -> None:
        if d.terminal or d.job(job_id).status in FINAL_JOB_STATUSES:  # a tick moved it on meanwhile
            return
        self._retry_at[(d.node_id, job_id)] = self._now() + RETRY_S
        rec = self.jobs.book.jobs.get(job_id)
        running = self.jobs.moves.book.for_job(job_id)
        if running is not None:
            d.set_job(job_id, JobDrainStatus.MIGRATING, migration_id=running.migration_id, reason="migrating")
            return
        if rec is None or rec.state != JobState.RUNNING:
            if d.job(job_id).status is not JobDrainStatus.STUCK:
                d.set_job(job_id, JobDrainStatus.STUCK, reason=f"not running ({rec.state.value if rec else 'gone'}): tried again")
            return
        try:
            st = self.jobs.moves.migrate(job_id, d.strategy, reason=f"drain of {d.node_id[:12]}")
        except FabricError as exc:
            if d.job(job_id).status is not JobDrainStatus.STUCK or d.job(job_id).reason != str(exc):
                d.set_job(job_id, JobDrainStatus.STUCK, reason=str(exc))
            return
        d.set_job(job_id, JobDrainStatus.MIGRATING, migration_id=st.migration_id, reason="migrating")

    def _stop_on_node(self, job_id: str, node_id: str, reason: str) -> None:
        """Stop the job's instance there now; it recovers by its policy (not counted under a notice)."""
        jobs = self.jobs
        m = jobs.moves.book.for_job(job_id)
        if m is not None and m.past_point_of_no_return:  # the saga is taking it off the node: evicting it
            return                                       # too would start a second instance elsewhere
        if m is not None:
            jobs.moves.carry_out(m, m.abort(reason, self._now()))
        rec = jobs.book.jobs.get(job_id)
        if rec is None or rec.binding is None or rec.binding.node_id != node_id:
            return
        key = rec.binding.instance_key
        jobs.moves.ignored.add(key)
        handle = jobs.handles.pop(key, None) or jobs.launcher.find(job_id, key)
        if handle is not None:
            jobs.launcher.kill(handle)
        jobs.carry_out(jobs.book.evicted(job_id, self._now(), reason=reason, preempted=node_id in jobs.preempting))

    async def _ask_ray(self, ask: AskRayToDrain) -> None:
        adapter = self.scheduler.ray_adapter()
        loop = asyncio.get_event_loop()
        accepted, message = False, "no Ray seam"
        try:
            if ask.reason == "IDLE_TERMINATION":  # Ray counts the probe actor as work: it leaves first
                health = adapter.get_actor(HEALTH)
                if health is not None:
                    await health.release_node.remote(ask.node_id)
            for attempt in range(IDLE_RETRIES if ask.reason == "IDLE_TERMINATION" else 1):
                accepted, message = await loop.run_in_executor(None, adapter.drain_node, ask.node_id, ask.reason,
                                                               ask.message, ask.deadline)
                if accepted or "no longer idle" not in message:
                    break
                await asyncio.sleep(0.5)
        except Exception as exc:
            accepted, message = False, f"{type(exc).__name__}: {exc}"
        if self.drains.get(ask.node_id) is None:
            return
        state = self.drains.ray_answered(ask.node_id, accepted, message, self._now())
        self.jobs.emit("drain_progress", state.as_dict())
        if not accepted:
            self.jobs.emit("drain_refused", {"node_id": ask.node_id, "reason": ask.reason, "message": message})
        self.jobs.persist()

    def _progress(self, d: Any) -> None:
        self.jobs.emit("drain_progress", d.snapshot().as_dict())

    def node_lost(self, node_id: str) -> None:
        d = self.drains.get(node_id)
        if d is not None and d.phase is not NodeDrainPhase.DRAINING:  # once Ray was asked, its answer ends it
            state = self.drains.fail(node_id, "the node left the fleet", self._now())
            if state is not None:
                self.jobs.emit("drain_progress", state.as_dict())
        self.interruptions.pop(node_id, None)

    # -- rebalance ----------------------------------------------------------------------------------------
    def capacity_joined(self) -> None:
        self._rebalance_after = self._now() + self.settings.rebalance.settle_s

    def _rebalance(self, now: float) -> None:
        rs = self.settings.rebalance
        for job_id, mid in list(self.rebalancing.items()):
            m = self.jobs.moves.book.get(mid)
            if m is None or m.terminal:
                del self.rebalancing[job_id]
        if not rs.enabled or self._rebalance_after is None or now < self._rebalance_after:
            return
        self._rebalance_after = None
        core, book, moves = self.scheduler.core, self.jobs.book, self.jobs.moves
        candidates = []
        for rec in book.jobs.values():
            if rec.state != JobState.RUNNING or rec.binding is None or moves.book.for_job(rec.job_id) is not None:
                continue
            node = core.fleet.get(rec.binding.node_id)
            if node is None or node.tier is None or rec.binding.node_id in self.drains:
                continue
            since = next((at for at, state, _ in reversed(rec.history) if state == "running"), rec.created_at)
            candidates.append(Candidate(rec.job_id, node.tier, rec.spec.requirement.min_tier,
                                        moves.last_moved.get(rec.job_id), since))
        for job_id in choose(candidates, in_flight=len(self.rebalancing), now=now, settings=rs):
            rec = book.jobs[job_id]
            assert rec.binding is not None
            ctx = replace(book.context(rec, self.jobs.where, exclude=[rec.binding.node_id]), recovering=False,
                          launch_policy="allow_spare")
            try:
                d = dry_run(core.fleet, core.check_requirement(rec.spec.requirement), ctx)
            except Exception:
                continue
            tier = d.node_tier or d.tier
            if d.status != "placed" or d.node_id is None or tier is None or tier < rec.spec.requirement.min_tier:
                continue  # nothing better has room: it stays
            strategy = rs.strategy or ("handover" if moves.can_hand_over(job_id) else "stop_then_start")
            old = core.fleet.get(rec.binding.node_id)
            try:
                st = moves.migrate(job_id, strategy, target_node=d.node_id, reason="rebalance")
            except FabricError as exc:
                self.jobs.emit("rebalance_skipped", {"job_id": job_id, "reason": str(exc)})
                continue
            self.rebalancing[job_id] = st.migration_id
            self.jobs.emit("job_rebalanced", {"job_id": job_id, "migration_id": st.migration_id, "strategy": strategy,
                                              "from_node": rec.binding.node_id, "from_tier": str(old.tier if old else None),
                                              "to_node": d.node_id, "to_tier": str(tier),
                                              "min_tier": str(rec.spec.requirement.min_tier)})


__all__ = ["DrainRunner"]

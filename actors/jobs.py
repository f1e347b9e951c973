"""JobRunner: the scheduler's long-running work, carried out (seed 000's jobs and bundles on Ray).

The decisions are ``fabric.core.jobs.JobBook``'s; this class does what they ask, inside the
scheduler actor (one event loop, no locks): a placement goes to the scheduler's own core (the
same engine, filters and key as a task, with the job's context), an instance is started through
``fabric.rayio.instances.InstanceLauncher`` and watched by one asyncio task (an outstanding
``__fabric_watch__`` call, and ``__fabric_health__`` pings when the class has the hook), slots go
back to the core, events go to the job event log. Every change is written to the ``JobStore``
before the next tick.

Restart: a scheduler that comes back (SIGKILL, node loss) reads every job and bundle back from
the store; after its fleet's first sync (``resume``) it looks each bound instance up by name: a
live one is watched again and its slot reserved again in the core, a missing one died while
nobody watched and is recovered by its policy. No job runs twice (instances are named, one per
key, and looked up before anything is started), none is forgotten (the store has them all).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import pickle
import time
import uuid
from typing import Any, Callable

from actors.bundle_ops import BundleOps
from actors.drains import DrainRunner
from actors.migrations import MigrationRunner
from fabric.core.errors import InvalidSpecError, JobNotFoundError, MessageError
from fabric.core.jobs import JobBook, JobRecord, JobSpec, JobState
from fabric.core.jobs.book import (
    Instruction, JobEvent, JobStatus, PlaceJob, ReleaseSlot, StartInstance, StopInstance, instance_key, summarize,
)
from fabric.core.scheduling import PlaceRequested, SlotsReleased, reply
from fabric.core.scheduling.stimuli import new_stimulus_id
from fabric.store.job_rows import decode_bundle, decode_event, decode_job, encode_bundle, encode_event, encode_job
from fabric.store.jobs import JobStore

WATCH_S = 30.0
"""How long one watch call waits before it returns ``alive`` and is asked again."""
START_TIMEOUT_S = 120.0
"""How long an instance may take to come up (Ray's placement and the constructor) before it is
counted as failed to start."""
STOP_GRACE_S = 10.0
"""How long ``__fabric_stop__`` may take before the instance is killed."""
MAX_EVENTS = 10_000


class JobRunner:
    """The jobs of one scheduler (see the module docstring). ``scheduler`` is the ``Scheduler``
    whose core places them; ``launcher`` the Ray seam; ``clock`` wall time (restart histories
    outlive a process, so they are kept in wall-clock seconds)."""

    def __init__(self, scheduler: Any, store: JobStore, launcher: Any, clock: Callable[[], float] = time.time) -> None:
        self.scheduler = scheduler
        self.store = store
        self.launcher = launcher
        self.clock = clock
        self.book = JobBook(scheduler.settings.failure, scheduler.settings)
        self.book.interruptible = self._interruptible
        self.payloads: dict[str, tuple[bytes, bytes]] = {}
        """Per job: the pickled class and the pickled constructor arguments."""
        self.watches: dict[str, asyncio.Task] = {}
        """Per instance key: the task that watches it."""
        self.handles: dict[str, Any] = {}
        self.events: collections.deque = collections.deque(maxlen=MAX_EVENTS)
        self.seq = store.last_event()
        self._new_events: list[tuple[int, bytes]] = []
        self.resumed = False
        self.counters: collections.Counter = collections.Counter()
        self.gpus: dict[str, float] = {}
        """Per instance key about to start: the GPUs to ask Ray for (the core's ``ray_gpus``)."""
        self.moves = MigrationRunner(self)
        self.bundles = BundleOps(self)
        """The bundles whose jobs this runner files (``actors.bundle_ops``)."""
        self.drains = DrainRunner(scheduler, self)
        self.preempting: set[str] = set()
        """Nodes under a provider's reclaim notice: what dies with them is not counted."""
        self._load()

    @classmethod
    def for_scheduler(cls, scheduler: Any) -> "JobRunner":
        """The job runner of a scheduler actor: its store where the settings say (``store.url``, else
        beside the registry's store), its instances launched on Ray."""
        from fabric.rayio.adapter import RayAdapter
        from fabric.rayio.instances import InstanceLauncher
        from fabric.store.paths import configured_store_paths, store_paths

        paths = configured_store_paths(scheduler.settings) or store_paths(scheduler.settings, RayAdapter().gcs_address())
        return cls(scheduler, JobStore(paths.jobs), InstanceLauncher())

    # -- the store ------------------------------------------------------------------------------------
    def _load(self) -> None:
        for bundle_id, blob in self.store.bundles():
            try:
                got = decode_bundle(blob, self.store.bundle_payload(bundle_id))
                rec = self.book.add_bundle(bundle_id, got.bundle)
                rec.state, rec.reasons, rec.jobs = got.state, list(got.reasons), dict(got.jobs)
            except Exception as exc:  # an unreadable row: say so, keep the rest
                print(f"[fabric.jobs] bundle {bundle_id!r} could not be read back: {type(exc).__name__}: {exc}")
        for job_id, blob in self.store.jobs():
            try:
                self.book.adopt(decode_job(blob))
            except Exception as exc:
                print(f"[fabric.jobs] job {job_id!r} could not be read back: {type(exc).__name__}: {exc}")
        for seq, blob in self.store.events(max(0, self.seq - MAX_EVENTS)):
            try:
                self.events.append(decode_event(blob))
            except Exception:
                pass
        self.book.dirty.clear()
        self.book.dirty_bundles.clear()
        self.moves.load(self.store)
        self.drains.load(self.store)

    def payload_of(self, job_id: str) -> tuple[bytes, bytes] | None:
        p = self.payloads.get(job_id)
        if p is None:
            raw = self.store.payload(job_id)
            if raw is not None:
                p = self.payloads[job_id] = pickle.loads(raw)
        return p

    def persist(self, new_payloads: dict[str, tuple[bytes, bytes]] | None = None) -> None:
        """Write what changed (jobs, bundles, events) in one transaction each."""
        new_payloads = new_payloads or {}
        jobs = []
        for job_id in sorted(self.book.dirty):
            rec = self.book.jobs.get(job_id)
            payload = new_payloads.get(job_id)
            jobs.append((job_id, None if rec is None else encode_job(rec),
                         None if payload is None else pickle.dumps(payload)))
        bundles: list[tuple[str, bytes | None, bytes | None]] = []
        for bundle_id in sorted(self.book.dirty_bundles):
            b = self.book.bundles.get(bundle_id)
            bundles.append((bundle_id, None, None) if b is None else (bundle_id, *encode_bundle(b)))
        self.book.dirty.clear()
        self.book.dirty_bundles.clear()
        state = self.moves.changed_rows() + self.drains.changed_rows()
        if jobs or bundles or state:
            self.store.write(jobs, bundles, state)
        if self._new_events:
            self.store.append_events(self._new_events)
            self._new_events = []

    # -- carrying out ---------------------------------------------------------------------------------
    def carry_out(self, instructions: list[Instruction]) -> None:
        """Do what the book asked, in order; what comes of a placement goes back to the book now."""
        queue = collections.deque(instructions)
        while queue:
            ins = queue.popleft()
            if isinstance(ins, PlaceJob):
                queue.extend(self._place(ins))
            elif isinstance(ins, StartInstance):
                self._start(ins)
            elif isinstance(ins, StopInstance):
                self.spawn(self._stop(ins), ins.binding.instance_key + ":stop")
            elif isinstance(ins, ReleaseSlot):
                self.scheduler.handle_stimulus(SlotsReleased((ins.allocation_id,)))
            elif isinstance(ins, JobEvent):
                self.emit(ins.kind, ins.data)

    def _place(self, ins: PlaceJob) -> list[Instruction]:
        now = self.clock()
        rec = self.book.jobs.get(ins.job_id)
        if rec is None:
            return []
        ctx = ins.context if ins.context is not None else self.book.context(rec, self.where)
        got = self.engine_place(rec, ins.requirement, ctx, {"recovering": rec.recovering})
        if isinstance(got, str):
            return self.book.unplaced(ins.job_id, got, now)
        a, key = got
        return self.book.placed(ins.job_id, a.node_id, a.allocation_id, key, now, self.where)

    def engine_place(self, rec: JobRecord, req: Any, ctx: Any, event: dict) -> tuple[Any, str] | str:
        """Place one instance of ``rec``'s job through the scheduler's core (carrying out what the
        placement opened: a provision, queued calls it placed). The assignment and a fresh instance
        key, with a ``placement_decision`` event (plus ``event``'s fields); or why it was not placed."""
        s = PlaceRequested(req, ctx)
        try:
            out = self.scheduler.core.handle(s)
            carry_out = getattr(self.scheduler, "_carry_out", None)
            if carry_out is not None:
                carry_out(out)
            a = reply(out, s.stimulus_id)
        except Exception as exc:  # a requirement the settings refuse, a hard one nobody serves
            self.counters["placements_failed"] += 1
            return f"{type(exc).__name__}: {exc}"
        if a is None or a.status != "assigned":
            return getattr(a, "reason", "no capacity") or "no capacity"
        key = instance_key(rec.replica, uuid.uuid4().hex[:8])
        self.gpus[key] = a.ray_gpus
        self.emit("placement_decision", {"job_id": rec.job_id, "bundle_id": rec.bundle_id, "replica": rec.replica,
                                         "node_id": a.node_id, "node": a.node_name, "tier": str(a.tier),
                                         "fallback_levels": a.fallback_levels, "reason": a.reason, **event})
        return a, key

    def where(self, node_id: str) -> tuple[str | None, str | None] | None:
        rec = self.scheduler.core.fleet.get(node_id)
        return None if rec is None else (rec.zone, rec.cloud)

    def _interruptible(self, node_id: str) -> bool:
        """A node of a pool tier whose capacity may be taken back (``launch_mode: spot``)."""
        rec = self.scheduler.core.fleet.get(node_id)
        if rec is None:
            return False
        try:
            tiers = self.scheduler.settings.pool(rec.pool).tiers
        except KeyError:
            return False
        tier = next((t for t in tiers if t.name == rec.pool_tier), None)
        return tier is not None and tier.effective_reliability == "interruptible"

    def _start(self, ins: StartInstance) -> None:
        rec = self.book.jobs.get(ins.job_id)
        payload = self.payload_of(ins.job_id)
        b = ins.binding
        if rec is None or payload is None:
            self.carry_out(self.book.died(ins.job_id, b.instance_key, self.clock(), reason="nothing to start it from",
                                          invalid_spec="the job's class and arguments are not in the store"))
            return
        self.spawn(self._launch(ins.job_id, b, payload, rec.spec.requirement, self.gpus.pop(b.instance_key, 0.0)),
                    b.instance_key)

    async def _launch(self, job_id: str, b: Any, payload: tuple[bytes, bytes], req: Any, gpus: float) -> None:
        """Create the instance off the event loop (Ray registers a named actor with its GCS
        synchronously: hundreds of starts would stall every caller), then watch it."""
        loop = asyncio.get_event_loop()
        try:
            handle = await loop.run_in_executor(None, functools.partial(
                self.launcher.start, job_id, b.instance_key, b.node_id, payload[0], payload[1], req, gpus))
        except Exception as exc:  # the class cannot be loaded here, or Ray refused the options
            self.counters["dispatch_failed"] += 1  # placed, but no instance could be created
            self.apply(self.book.died(job_id, b.instance_key, self.clock(),
                                       invalid_spec=f"cannot start: {type(exc).__name__}: {exc}"))
            return
        rec = self.book.jobs.get(job_id)
        if rec is None or rec.binding is None or rec.binding.instance_key != b.instance_key:
            self.launcher.kill(handle)  # stopped, or placed again, while it was being created
            return
        self.handles[b.instance_key] = handle
        await self.watch(job_id, b.instance_key, handle, starting=True)

    def spawn(self, coro: Any, key: str) -> None:
        task = asyncio.get_event_loop().create_task(coro)
        if not key.endswith(":stop"):
            old = self.watches.pop(key, None)
            if old is not None:
                old.cancel()
            self.watches[key] = task
        task.add_done_callback(lambda t, key=key: self._done(t, key))

    def _done(self, task: asyncio.Task, key: str) -> None:
        if self.watches.get(key) is task:
            del self.watches[key]
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            print(f"[fabric.jobs] {key}: {type(exc).__name__}: {exc}")

    async def watch(self, job_id: str, key: str, handle: Any, starting: bool) -> None:
        """Watch one instance until it ends; tell the book what happened."""
        if starting:
            try:
                err = await asyncio.wait_for(handle.__fabric_started__.remote(), START_TIMEOUT_S)
            except asyncio.TimeoutError:  # the cluster's trouble, not the job's: not counted against its ceiling
                self.counters["dispatch_failed"] += 1
                self.launcher.kill(handle)
                return self._died(job_id, key, True, f"did not come up within {START_TIMEOUT_S:g} s (not counted)")
            except Exception as exc:  # the instance died before it came up
                self.counters["dispatch_failed"] += 1
                fate = self.launcher.death(exc)
                return self._died(job_id, key, fate[1] if fate else False, fate[2] if fate else str(exc))
            if err is not None:
                kind, message = err
                self.launcher.kill(handle)
                return self._died(job_id, key, False, message, invalid=message if kind == "invalid_spec" else None)
            self.apply(self.book.started(job_id, key, self.clock()))
        rec = self.book.jobs.get(job_id)
        spec = rec.spec if rec is not None else JobSpec("job")
        payload = self.payload_of(job_id)
        has_health = payload is not None and self.launcher.has_health(payload[0])
        failures = 0
        while True:
            watch = handle.__fabric_watch__.remote(min(WATCH_S, spec.health_period_s) if has_health else WATCH_S)
            try:
                answer = await watch
            except Exception as exc:
                fate = self.launcher.death(exc)
                if fate is None:  # unavailable for a moment: look again
                    await asyncio.sleep(0.5)
                    continue
                return self._died(job_id, key, fate[1], fate[2])
            if answer == "stopped":
                self.launcher.kill(handle)
                return self._died(job_id, key, False, "stopped")
            if has_health:
                try:
                    await asyncio.wait_for(handle.__fabric_ping__.remote(), spec.health_timeout_s)
                    failures = 0
                except Exception:
                    failures += 1
                    if failures >= spec.health_failures:
                        self.launcher.kill(handle)
                        return self._died(job_id, key, False, f"unhealthy: {failures} health checks failed")

    def _died(self, job_id: str, key: str, preempted: bool, reason: str, invalid: str | None = None) -> None:
        self.handles.pop(key, None)
        rec = self.book.jobs.get(job_id)
        stopping = rec is not None and rec.state == JobState.STOPPING and rec.binding is not None \
            and rec.binding.instance_key == key
        if self.moves.source_died(job_id, key) and not stopping:  # stopped on purpose, or a saga owns its end
            return
        if rec is not None and rec.binding is not None and rec.binding.node_id in self.preempting:
            preempted = True
        self.apply(self.book.died(job_id, key, self.clock(), reason=reason, preempted=preempted, invalid_spec=invalid))
        self.soon()

    def soon(self) -> None:
        """Place what is due right after this step, not at the next tick (a recovery waits for
        nothing but its own ``not_before``)."""
        try:
            asyncio.get_event_loop().call_soon(self._place_due)
        except RuntimeError:  # no loop (a unit test driving the runner by hand): the next tick places it
            pass

    async def _stop(self, ins: StopInstance) -> None:
        handle = self.handles.get(ins.binding.instance_key) or self.launcher.find(ins.job_id, ins.binding.instance_key)
        if handle is not None:
            if ins.graceful:
                try:
                    await asyncio.wait_for(handle.__fabric_shutdown__.remote(), STOP_GRACE_S)
                except Exception:
                    pass
            self.launcher.kill(handle)
        # its watch (or its launch, which kills what it created for a job no longer bound to it)
        # sees the end and finds the book has moved on
        self._died(ins.job_id, ins.binding.instance_key, False, "stopped")

    def apply(self, instructions: list[Instruction]) -> None:
        self.carry_out(instructions)
        self.persist()

    # -- events -----------------------------------------------------------------------------------------
    def emit(self, kind: str, data: dict, stimulus_id: str | None = None) -> None:
        """Append one event to the fabric's log (``seq``, ``kind``, ``at``, ``stimulus_id``, ``data``):
        ``stimulus_id`` names what caused it (a fresh one when not given)."""
        self.seq += 1
        event = {"seq": self.seq, "kind": kind, "at": self.clock(), "stimulus_id": stimulus_id or new_stimulus_id(),
                 "data": dict(data)}
        self.events.append(event)
        self._new_events.append((self.seq, encode_event(event)))
        self.counters[f"events_{kind}"] += 1
        if kind == "job_state" and data.get("to") == "recovering":
            self.counters["job_restarts"] += 1
        if kind == "job_dropped":
            self.counters["jobs_dropped"] += 1
        elif kind == "bundle_broken":
            self.counters["bundles_broken"] += 1
        elif kind == "job_rejected":
            self.counters["jobs_rejected"] += 1

    def metrics(self) -> dict[str, Any]:
        """Seed 000's job and bundle counters, and jobs per state."""
        states = collections.Counter(r.state.value for r in self.book.jobs.values())
        return {"jobs_rejected": self.counters["jobs_rejected"], "jobs_dropped": self.counters["jobs_dropped"],
                "bundles_broken": self.counters["bundles_broken"],
                "broken_bundle_ids": sorted(b.bundle_id for b in self.book.bundles.values() if b.state == "broken"),
                "job_restarts": self.counters["job_restarts"], "jobs": dict(states)}

    def events_since(self, since: int = 0, kinds: list[str] | None = None) -> list[dict]:
        """Events numbered after ``since``, oldest first. The log is in seq order, so only its tail
        newer than ``since`` is walked (a watcher that keeps up reads a few events, not the log)."""
        newer: list[dict] = []
        for e in reversed(self.events):
            if e["seq"] <= since:
                break
            if not kinds or e["kind"] in kinds:
                newer.append(e)
        newer.reverse()
        return newer

    # -- the loop ---------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Called every scheduler tick (after the fleet sync): resume once, then place what is due."""
        if not self.resumed:
            self.resume()
        self.moves.tick()
        self.drains.step()
        self.apply(self.book.due(self.clock(), self.where))
        self.bundles.reap_deleted()

    def resume(self) -> None:
        """After a restart: sagas go on (or roll back) by their phase first; then live instances are
        watched again and the ones that died meanwhile recovered (a job a saga carries on is the
        saga's); instances bound to no job and no saga are swept."""
        self.resumed = True
        for rec in self.book.bound():  # the old process's allocation ids mean nothing in this core's ledger:
            b = rec.binding          # a live instance reserves its slot anew, a dead one gives none back
            if b is not None and b.allocation_id is not None:
                rec.binding = type(b)(b.node_id, b.instance_key, None)
                self.book.dirty.add(rec.job_id)
        owned = self.moves.resume()
        now = self.clock()
        out: list[Instruction] = []
        self._sweep_strays(self.moves.kept_targets())
        for rec in self.book.bound():
            b = rec.binding
            assert b is not None
            if rec.job_id in owned:
                continue
            handle = self.launcher.find(rec.job_id, b.instance_key)
            if rec.state == JobState.STOPPING:
                out.append(StopInstance(rec.job_id, b, graceful=False))
                continue
            if handle is None:  # under a reclaim notice the scheduler kept, it is not counted
                out += self.book.died(rec.job_id, b.instance_key, now, reason="instance gone while the scheduler was away",
                                      preempted=b.node_id in self.preempting)
                continue
            self.reserve_again(rec)
            self.handles[b.instance_key] = handle
            self.spawn(self.watch(rec.job_id, b.instance_key, handle, starting=rec.state == JobState.STARTING),
                        b.instance_key)
        self.apply(out)
        self.drains.resume()
        self.persist()

    def _sweep_strays(self, spare: set[tuple[str, str]] = frozenset()) -> None:  # type: ignore[assignment]
        """After a restart: instances no job is bound to (a migration's target, a start the old
        scheduler abandoned) are killed, so no job ever runs twice."""
        listing = getattr(self.launcher, "instances", None)
        if listing is None:
            return
        try:
            live = listing()
        except Exception as exc:
            print(f"[fabric.jobs] listing instances failed: {type(exc).__name__}: {exc}")
            return
        for job_id, keys in live.items():
            rec = self.book.jobs.get(job_id)
            keep = rec.binding.instance_key if rec is not None and rec.binding is not None else None
            for key in keys:
                if key != keep and (job_id, key) not in spare:
                    handle = self.launcher.find(job_id, key)
                    if handle is not None:
                        self.launcher.kill(handle)
                        self.emit("instance_swept", {"job_id": job_id, "instance_key": key,
                                                     "reason": "bound to no job after a scheduler restart"})

    def reserve_again(self, rec: JobRecord) -> None:
        """A live instance found after a restart holds its slot again in the core (pinned)."""
        b = rec.binding
        assert b is not None
        rec.binding = type(b)(b.node_id, b.instance_key, self.reserve_on(rec, b.node_id))
        self.book.dirty.add(rec.job_id)

    def reserve_on(self, rec: JobRecord, node_id: str) -> int | None:
        """A slot for ``rec``'s job on ``node_id`` in the core (a pinned placement): its allocation
        id, or None when the core would not give one (a live instance, or a saga's target, found
        again after a restart)."""
        s = PlaceRequested(rec.spec.requirement, self.book.context(rec, self.where, target_node=node_id))
        try:
            a = reply(self.scheduler.core.handle(s), s.stimulus_id)
        except Exception:
            return None
        return a.allocation_id if a is not None and a.status == "assigned" else None

    def node_lost(self, node_id: str) -> None:
        owned = self.moves.node_lost(node_id)
        self.apply(self.book.node_lost(node_id, self.clock(), skip=owned, preempted=node_id in self.preempting))
        self.preempting.discard(node_id)
        self.drains.node_lost(node_id)
        self.persist()
        self.soon()

    def waiting_by_pool(self, default_pool: str) -> dict[str, int]:
        """Jobs waiting to be placed (pending or recovering, not dormant), per pool."""
        out: dict[str, int] = {}
        for rec in self.book.jobs.values():
            if rec.state in (JobState.PENDING, JobState.RECOVERING) and not rec.dormant:
                pool = rec.spec.requirement.pool or default_pool
                out[pool] = out.get(pool, 0) + 1
        return out

    def node_joined(self) -> None:
        """New capacity: jobs waiting for a node are placed right after this step."""
        self.drains.capacity_joined()
        if self.book.capacity_joined(self.clock()):
            self.soon()

    # -- requests -----------------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, cls_blob: bytes, args_blob: bytes, job_id: str | None = None,
               bundle_id: str | None = None, replica: int = 0, dormant: bool = False, place: bool = True) -> str:
        if not isinstance(spec, JobSpec):
            raise MessageError("spec", "must be a fabric JobSpec", type(spec).__name__)
        for name, blob in (("cls_blob", cls_blob), ("args_blob", args_blob)):
            if not isinstance(blob, bytes) or len(blob) > 64 * 1024 * 1024:
                raise MessageError(name, "must be bytes, at most 64 MiB", type(blob).__name__)
        self.scheduler.core.check_requirement(spec.requirement)
        job_id = job_id or f"job-{uuid.uuid4().hex[:12]}"
        known = self.book.jobs.get(job_id)
        if known is not None:  # a caller's retry of a submit whose answer it did not get: the same job
            if known.spec != spec or known.bundle_id != bundle_id:
                raise InvalidSpecError(f"a different job {job_id!r} exists already", field="job_id")
            return job_id
        self.payloads[job_id] = (cls_blob, args_blob)
        self.book.add(job_id, spec, self.clock(), bundle_id=bundle_id, replica=replica, dormant=dormant)
        self.persist({job_id: (cls_blob, args_blob)})
        if self.resumed and place:  # placed right after this answer, not before it: a submit is quick
            self.soon()
        return job_id

    def _place_due(self) -> None:
        if not self.resumed:
            return
        try:
            self.apply(self.book.due(self.clock(), self.where))
        except Exception as exc:  # the next tick tries again
            print(f"[fabric.jobs] placing failed: {type(exc).__name__}: {exc}")

    def stop(self, job_id: str) -> str:
        self.apply(self.book.stop(job_id, self.clock()))
        return self.book.job(job_id).state.value

    def status(self, job_id: str) -> JobStatus:
        return summarize(self.book.job(job_id), self.clock())

    def statuses(self) -> list[JobStatus]:
        now = self.clock()
        return [summarize(r, now) for r in sorted(self.book.jobs.values(), key=lambda r: (r.created_at, r.job_id))]

    def instance(self, job_id: str) -> dict:
        """What a handle needs to call the job: its state, and its instance's actor name when running."""
        from fabric.core.names import job_actor_name

        rec = self.book.jobs.get(job_id)
        if rec is None:
            raise JobNotFoundError(f"no job {job_id!r}", job_id=job_id)
        b = rec.binding
        running = rec.state in (JobState.RUNNING, JobState.MIGRATING) and b is not None  # the source serves until done
        return {"state": rec.state.value, "terminal": rec.terminal, "reason": rec.reason,
                "actor": job_actor_name(job_id, b.instance_key) if running and b else None,
                "instance_key": b.instance_key if b else None, "node_id": b.node_id if b else None,
                "call_timeout_s": rec.spec.call_timeout_s}

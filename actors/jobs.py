"""JobRunner: the executor of the jobs core, inside the scheduler actor (jobs and bundles on Ray).

The decisions are ``fabric.core.jobs.core.JobsCore``'s: every request, fact and answer becomes one
stimulus, ``JobsCore.handle`` answers with instructions, and this class carries them out through
its ports, on the scheduler's event loop (no locks):

- **placement** over the task core: a job's or a saga target's placement goes to the scheduler's
  own core (the same engine, filters and key as a task, with the job's context), its answer back
  to the jobs core as ``JobPlaced`` / ``JobUnplaced`` (or the saga's ``SagaStepAnswered``);
- **the instance launcher** (``fabric.rayio.instances.InstanceLauncher``): an instance is started,
  watched by one asyncio task (an outstanding ``__fabric_watch__`` call, and ``__fabric_health__``
  pings when the class has the hook), stopped or killed; what comes of it goes back as
  ``InstanceStarted`` / ``InstanceEnded``; the saga steps are ``actors.migrations``';
- **Ray's drain** (``actors.drains``), **the event log** (``emit``, kept by ``actors.job_events``),
  **the store** (``persist``: a request's changes are written before it is answered; what the
  instances' watches and launches see is written once per turn of the event loop,
  ``persist_soon``), slots back to the task core, a single-use job's node ended (``end_node``).

Restart: a scheduler that comes back (SIGKILL, node loss) reads the jobs core's whole state back
from the store; after its fleet's first sync it lists the live instances by name and hands them to
the core (``Restarted``), which resumes the sagas by their phase, watches what lives, recovers what
died and sweeps what no job owns. No job runs twice (instances are named, one per key, and looked
up before anything is started), none is forgotten (the store has them all). A store another Ray
cluster wrote (a cold start where a cluster that is gone kept it) is not resumed: its jobs are held
until asked for (``actors.inherited``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import pickle
import time
import uuid
from typing import Any, Callable, Iterator

from actors.bundle_ops import BundleOps, new_job_id
from actors.drains import DrainRunner
from actors.inherited import StoreCluster
from actors.job_events import MAX_EVENTS, JobEventLog
from actors.job_watch import watch_instance
from actors.job_ports import CoreWorld, RayDrainPort, SchedulerRayDrain, SchedulerTaskCore, TaskCorePort
from actors.migrations import SAGA_STEPS, MigrationRunner
from fabric.core.errors import InvalidSpecError, JobNotFoundError, MessageError
from fabric.core.jobs import JobBook, JobRecord, JobSpec, JobState
from fabric.core.jobs.book import (
    EndNode, JobEvent, JobStatus, PlaceJob, ReleaseSlot, StartInstance, StopInstance, instance_key, summarize,
)
from fabric.core.jobs.core import JobsCore
from fabric.core.jobs.drains import AskRayToDrain
from fabric.core.jobs.state import (
    Cordon, DropPayload, KillInstance, PlaceSoon, Reply, ReserveSlot, SagaEnded, StorePayload, WatchInstance,
)
from fabric.core.jobs.stimuli import (
    InstanceEnded, JobPlaced, JobsNodeLost, JobsTick, JobSubmitted, JobUnplaced, LeaseAsked, PlacementsDue,
    CapacityJoined, Restarted, SlotReserved, StopRequested,
)
from fabric.store.job_rows import decode_bundle, decode_job, encode_bundle, encode_job
from fabric.store.jobs import JobStore

STOP_GRACE_S = 10.0
"""How long ``__fabric_stop__`` may take before the instance is killed."""
RESUME_WAIT_S = 30.0
"""How long a job's state is held back after a restart, until the jobs read back are checked
against what lives (``JobRunner.resumed_by``); past it the book is answered as it stands."""


class JobRunner:
    """The executor of one scheduler's jobs core (see the module docstring). ``scheduler`` is the
    ``Scheduler`` whose task core and Ray seam the ports are made over (``tasks`` and ``ray_drain``
    given instead, it is not used); ``launcher`` the instance launcher; ``clock`` wall time (restart
    histories outlive a process, so they are kept in wall-clock seconds)."""

    def __init__(self, scheduler: Any, store: JobStore, launcher: Any, clock: Callable[[], float] = time.time, *,
                 tasks: TaskCorePort | None = None, ray_drain: RayDrainPort | None = None,
                 cluster: tuple[str | None, str] | None = None) -> None:
        self.tasks: TaskCorePort = tasks or SchedulerTaskCore(scheduler)
        """The task core: placements, slots, cordons, the fleet."""
        self.store = store
        self.launcher = launcher
        self.clock = clock
        self.moves = MigrationRunner(self)
        self.core = JobsCore(self.tasks.settings, CoreWorld(self.tasks, self.moves.can_hand_over), clock,
                             lambda: uuid.uuid4().hex[:8])
        self.payloads: dict[str, tuple[bytes, bytes]] = {}
        """Per job: the pickled class and the pickled constructor arguments."""
        self.staged: dict[tuple[int, str], tuple[bytes, bytes]] = {}
        """A bundle's payloads by ``(replica, name)``, until the core says which job ids take them."""
        self._unwritten: dict[str, tuple[bytes, bytes]] = {}
        self.watches: dict[str, asyncio.Task] = {}
        """Per instance key: the task that watches it."""
        self.handles: dict[str, Any] = {}
        self.counters: collections.Counter = collections.Counter()
        self.event_log = JobEventLog(store.last_event(), clock, self.counters)
        """The fabric's event log (``actors.job_events``)."""
        self.gpus: dict[str, float] = {}
        """Per instance key about to start: the GPUs to ask Ray for (the core's ``ray_gpus``)."""
        self.cordons: list[asyncio.Task] = []
        """The task core's registry writes of cordons asked, for a caller that answers once they are in."""
        self.bundles = BundleOps(self)
        """The bundles whose jobs this runner files (``actors.bundle_ops``)."""
        self.drains = DrainRunner(ray_drain or SchedulerRayDrain(scheduler), self)
        self._batched = 0
        self._flush_due = False
        """A write is due at the end of this loop turn (``persist_soon``)."""
        """Open ``batch`` blocks: writes wait for the outermost one's end."""
        self.cluster = StoreCluster(self, cluster, clock)
        """The running Ray cluster's stamp on the store; another cluster's jobs held (``actors.inherited``)."""
        self._load()
        self.cluster.loaded(resume=self.tasks.settings.store.resume_inherited)

    @property
    def book(self) -> JobBook:
        return self.core.book

    @property
    def seq(self) -> int:
        """The last event's number."""
        return self.event_log.seq

    @property
    def events(self) -> collections.deque:
        """The events kept in memory, oldest first."""
        return self.event_log.events

    @property
    def preempting(self) -> set[str]:
        """Nodes under a provider's reclaim notice: what dies with them is not counted."""
        return self.core.preempting

    @property
    def resumed(self) -> bool:
        return self.core.resumed

    def _interruptible(self, node_id: str) -> bool:
        return self.core.interruptible(node_id)

    def where(self, node_id: str) -> tuple[str | None, str | None] | None:
        return self.core.where(node_id)

    @classmethod
    def for_scheduler(cls, scheduler: Any) -> "JobRunner":
        """The job runner of a scheduler actor: its store where the settings say (``store.url``, else
        beside the registry's store), its instances launched on Ray."""
        from fabric.rayio.adapter import RayAdapter
        from fabric.rayio.cluster_id import running_cluster
        from fabric.rayio.instances import InstanceLauncher
        from fabric.store.paths import configured_store_paths, store_paths

        paths = configured_store_paths(scheduler.settings) or store_paths(scheduler.settings, RayAdapter().gcs_address())
        fence = scheduler.settings.fence
        return cls(scheduler, JobStore(paths.jobs), InstanceLauncher(lease=(fence.lease_ttl_s, fence.renew_every_s)),
                   cluster=running_cluster())

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
        self.event_log.load(self.store.events(max(0, self.event_log.seq - MAX_EVENTS)))
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

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Write once, at the end, what the stimuli handled inside change (the scheduler's poll of
        the fleet: a page of joins and losses, each once a transaction). The block holds no await,
        so nobody reads the log or the books before the write."""
        self._batched += 1
        try:
            yield
        finally:
            self._batched -= 1
            if not self._batched:
                self.persist()

    def persist(self, new_payloads: dict[str, tuple[bytes, bytes]] | None = None) -> None:
        """Write what changed (jobs, bundles, sagas, drains, notices, events) in one transaction each
        (inside ``batch``: at its end)."""
        if self._batched:
            self._unwritten.update(new_payloads or {})
            return
        new_payloads = {**self._unwritten, **(new_payloads or {})}
        self._unwritten = {}
        jobs = []
        for job_id in sorted(self.book.dirty | set(new_payloads)):
            rec = self.book.jobs.get(job_id)
            payload = new_payloads.get(job_id)
            jobs.append((job_id, None if rec is None else encode_job(rec),
                         None if payload is None or rec is None else pickle.dumps(payload)))
        bundles: list[tuple[str, bytes | None, bytes | None]] = []
        for bundle_id in sorted(self.book.dirty_bundles):
            b = self.book.bundles.get(bundle_id)
            bundles.append((bundle_id, None, None) if b is None else (bundle_id, *encode_bundle(b)))
        self.book.dirty.clear()
        self.book.dirty_bundles.clear()
        state = self.moves.changed_rows() + self.drains.changed_rows()
        if jobs or bundles or state:
            self.store.write(jobs, bundles, state)
        events = self.event_log.take_unwritten()
        if events:
            self.store.append_events(events)

    # -- the one way in: a stimulus handled, its instructions carried out ------------------------------
    def handle(self, stimulus: Any, *, answered: bool = True) -> Any:
        """Hand ``stimulus`` to the jobs core, carry out what it answers, write the changes (in one
        go); the stimulus's reply (its error, once the changes stand, is raised). ``answered=False``
        (what an instance's watch or launch saw: nobody waits for a reply): the write is left to
        ``persist_soon``, one for every such stimulus of the same loop turn."""
        try:
            replies = self.carry_out(self.core.handle(stimulus))
        finally:
            self.persist() if answered else self.persist_soon()
        return _reply(replies, stimulus.stimulus_id)

    def persist_soon(self) -> None:
        """Write the changes at the end of this turn of the event loop, once for all the stimuli
        handled in it (at once where no loop runs)."""
        if self._flush_due:
            return
        try:
            asyncio.get_running_loop().call_soon(self._flush)
        except RuntimeError:  # no loop (a unit test driving the runner by hand)
            self.persist()
            return
        self._flush_due = True

    def _flush(self) -> None:
        self._flush_due = False
        self.counters["coalesced_writes"] += 1
        self.persist()

    def apply(self, instructions: list[Any], stimulus_id: str | None = None) -> Any:
        """Carry ``instructions`` out and write the changes; the reply to ``stimulus_id``, if any."""
        replies = self.carry_out(instructions)
        self.persist()
        return _reply(replies, stimulus_id)

    def carry_out(self, instructions: list[Any]) -> list[Reply]:
        """Do what the core asked, in order; what comes of a placement (or a reservation) goes back
        to the core at once and its answer is carried out too. The replies met on the way."""
        queue = collections.deque(instructions)
        replies: list[Reply] = []
        while queue:
            ins = queue.popleft()
            if isinstance(ins, Reply):
                replies.append(ins)
            elif isinstance(ins, JobEvent):
                self.emit(ins.kind, ins.data, ins.stimulus_id or None)
            elif isinstance(ins, PlaceJob):
                queue.extend(self._place(ins))
            elif isinstance(ins, StartInstance):
                self._start(ins)
            elif isinstance(ins, StopInstance):
                self.spawn(self._stop(ins), ins.binding.instance_key + ":stop")
            elif isinstance(ins, ReleaseSlot):
                self.tasks.release(ins.allocation_id)
            elif isinstance(ins, EndNode):
                self._end_node(ins)
            elif isinstance(ins, PlaceSoon):
                self.soon()
            elif isinstance(ins, WatchInstance):
                self._watch_again(ins)
            elif isinstance(ins, KillInstance):
                handle = self.handles.pop(ins.instance_key, None) or self.launcher.find(ins.job_id, ins.instance_key)
                if handle is not None:
                    self.launcher.kill(handle)
            elif isinstance(ins, ReserveSlot):
                queue.extend(self.core.handle(SlotReserved(ins.job_id, self.reserve_on(ins.job_id, ins.node_id),
                                                           ins.migration_id, stimulus_id=ins.stimulus_id)))
            elif isinstance(ins, Cordon):
                self._cordon(ins)
            elif isinstance(ins, AskRayToDrain):
                self.drains.ask_ray(ins)
            elif isinstance(ins, StorePayload):
                payload = self.staged.get((ins.replica, ins.name))
                if payload is not None:
                    self.payloads[ins.job_id] = self._unwritten[ins.job_id] = payload
            elif isinstance(ins, DropPayload):
                self.payloads.pop(ins.job_id, None)
            elif isinstance(ins, SagaEnded):
                self.moves.ended(ins.migration_id)
            elif isinstance(ins, SAGA_STEPS):
                queue.extend(self.moves.carry_out(ins))
            else:
                raise TypeError(f"not a jobs instruction: {type(ins).__name__}")
        return replies

    def _end_node(self, ins: EndNode) -> None:
        """A single-use job ended for good: its provider ends its node (a hand-joined one stays)."""
        ended = self.tasks.end_node(ins.node_id)
        self.emit("single_use_ended", {"job_id": ins.job_id, "node_id": ins.node_id, "node_terminated": ended},
                  ins.stimulus_id or None)

    def _cordon(self, ins: Cordon) -> None:
        writes = self.tasks.cordon(ins.node_id, ins.timeout_s)
        if writes is not None:
            self.cordons.append(writes)

    async def cordoned(self) -> None:
        """Once the registry has every cordon asked so far (a drain answers after its cordon is in)."""
        pending, self.cordons = self.cordons, []
        for writes in pending:
            await writes

    def _place(self, ins: PlaceJob) -> list[Any]:
        rec = self.book.jobs.get(ins.job_id)
        if rec is None:
            return []
        ctx = ins.context if ins.context is not None else self.book.context(rec, self.where)
        got = self.engine_place(rec, ins.requirement, ctx, {"recovering": rec.recovering})
        if isinstance(got, str):
            return self.core.handle(JobUnplaced(ins.job_id, got, stimulus_id=ins.stimulus_id))
        a, key = got
        return self.core.handle(JobPlaced(ins.job_id, a.node_id, a.allocation_id, key, stimulus_id=ins.stimulus_id))

    def engine_place(self, rec: JobRecord, req: Any, ctx: Any, event: dict) -> tuple[Any, str] | str:
        """Place one instance of ``rec``'s job through the scheduler's core (carrying out what the
        placement opened: a provision, queued calls it placed). The assignment and a fresh instance
        key, with a ``placement_decision`` event (plus ``event``'s fields); or why it was not placed."""
        try:
            a = self.tasks.place(req, ctx)
        except Exception as exc:  # a requirement the settings refuse, a hard one nobody serves
            self.counters["placements_failed"] += 1
            return f"{type(exc).__name__}: {exc}"
        if a is None or a.status != "assigned":
            return getattr(a, "reason", "no capacity") or "no capacity"
        key = instance_key(rec.replica, uuid.uuid4().hex[:8])
        self.gpus[key] = a.ray_gpus
        placed = self.emit("placement_decision", {"job_id": rec.job_id, "bundle_id": rec.bundle_id, "replica": rec.replica,
                                                  "node_id": a.node_id, "node": a.node_name, "tier": str(a.tier),
                                                  "fallback_levels": a.fallback_levels, "reason": a.reason, **event})
        self.tasks.decided(rec.job_id, placed["seq"])  # what decided it, on the record under this event
        return a, key

    def reserve_on(self, job_id: str, node_id: str) -> int | None:
        """A slot for the job on ``node_id`` in the task core (a pinned placement): its allocation
        id, or None when the core would not give one (a live instance, or a saga's target, found
        again after a restart)."""
        rec = self.book.jobs.get(job_id)
        if rec is None:
            return None
        try:
            a = self.tasks.reserve(rec.spec.requirement, self.book.context(rec, self.where, target_node=node_id))
        except Exception:
            return None
        return a.allocation_id if a is not None and a.status == "assigned" else None

    # -- instances -------------------------------------------------------------------------------------
    def _start(self, ins: StartInstance) -> None:
        rec = self.book.jobs.get(ins.job_id)
        payload = self.payload_of(ins.job_id)
        b = ins.binding
        if rec is None or payload is None:
            self.carry_out(self.core.handle(InstanceEnded(
                ins.job_id, b.instance_key, "nothing to start it from",
                invalid="the job's class and arguments are not in the store")))
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
            self.handle(InstanceEnded(job_id, b.instance_key, "cannot start",
                                      invalid=f"cannot start: {type(exc).__name__}: {exc}"), answered=False)
            return
        rec = self.book.jobs.get(job_id)
        if rec is None or rec.binding is None or rec.binding.instance_key != b.instance_key:
            self.launcher.kill(handle)  # stopped, or placed again, while it was being created
            return
        self.handles[b.instance_key] = handle
        await self.watch(job_id, b.instance_key, handle, starting=True)

    def _watch_again(self, ins: WatchInstance) -> None:
        """Watch a live instance: a saga's target now carrying the job, or one found after a restart."""
        handle = self.moves.take_target(ins.migration_id) if ins.migration_id is not None else None
        handle = handle or self.handles.get(ins.instance_key) or self.launcher.find(ins.job_id, ins.instance_key)
        if handle is None:
            self.carry_out(self.core.handle(InstanceEnded(ins.job_id, ins.instance_key, "instance gone")))
            return
        self.handles[ins.instance_key] = handle
        self.spawn(self.watch(ins.job_id, ins.instance_key, handle, starting=ins.starting), ins.instance_key)

    def spawn(self, coro: Any, key: str) -> None:
        task = asyncio.get_event_loop().create_task(coro)
        if not key.endswith(":stop"):
            old = self.watches.pop(key, None)
            if old is not None:
                old.cancel()
            self.watches[key] = task
        task.add_done_callback(functools.partial(self._done, key=key))

    def _done(self, task: asyncio.Task, key: str) -> None:
        if self.watches.get(key) is task:
            del self.watches[key]
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            print(f"[fabric.jobs] {key}: {type(exc).__name__}: {exc}")

    async def watch(self, job_id: str, key: str, handle: Any, starting: bool) -> None:
        """Watch one instance until it ends; tell the core what happened (``actors.job_watch``)."""
        await watch_instance(self, job_id, key, handle, starting)

    def instance_died(self, job_id: str, key: str, preempted: bool, reason: str, invalid: str | None = None,
                      node_died: bool = False) -> None:
        self.handles.pop(key, None)
        self.handle(InstanceEnded(job_id, key, reason, preempted=preempted, invalid=invalid, node_died=node_died),
                    answered=False)

    def soon(self) -> None:
        """Place what is due right after this step, not at the next tick (a recovery waits for
        nothing but its own ``not_before``)."""
        try:
            asyncio.get_event_loop().call_soon(self._place_due)
        except RuntimeError:  # no loop (a unit test driving the runner by hand): the next tick places it
            pass

    def _place_due(self) -> None:
        try:
            self.handle(PlacementsDue(), answered=False)
        except Exception as exc:  # the next tick tries again
            print(f"[fabric.jobs] placing failed: {type(exc).__name__}: {exc}")

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
        # sees the end and finds the core has moved on
        self.instance_died(ins.job_id, ins.binding.instance_key, False, "stopped")

    # -- events -----------------------------------------------------------------------------------------
    def emit(self, kind: str, data: dict, stimulus_id: str | None = None) -> dict[str, Any]:
        """Append one event to the fabric's log (``seq``, ``kind``, ``at``, ``stimulus_id``, ``data``):
        ``stimulus_id`` names what caused it (a fresh one when not given). The event."""
        return self.event_log.emit(kind, data, stimulus_id)

    def metrics(self) -> dict[str, Any]:
        """The job and bundle counters, and jobs per state."""
        states = collections.Counter(r.state.value for r in self.book.jobs.values())
        return {"jobs_rejected": self.counters["jobs_rejected"], "jobs_dropped": self.counters["jobs_dropped"],
                "bundles_broken": self.counters["bundles_broken"],
                "broken_bundle_ids": sorted(b.bundle_id for b in self.book.bundles.values() if b.state == "broken"),
                "job_restarts": self.counters["job_restarts"], "jobs": dict(states),
                "job_starts": {r.job_id: {"started_at": r.started_at, "first_started_at": r.first_started_at}
                               for r in self.book.jobs.values() if r.first_started_at is not None and not r.terminal}}

    def events_since(self, since: int = 0, kinds: list[str] | None = None) -> list[dict]:
        """Events numbered after ``since``, oldest first (``JobEventLog.since``)."""
        return self.event_log.since(since, kinds)

    # -- the loop ---------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Called every scheduler tick (after the fleet sync): resume once, then the core's tick."""
        if not self.resumed:
            self.resume()
        self.cluster.touch()
        self.handle(JobsTick())

    def resume(self) -> None:
        """After a restart: the live instances are listed by name and handed to the core, which
        resumes the sagas by their phase, watches what lives, recovers what died and sweeps what no
        job or saga owns."""
        listed: frozenset[tuple[str, str]] | None = None
        listing = getattr(self.launcher, "instances", None)
        if listing is not None:
            try:
                listed = frozenset((job_id, key) for job_id, keys in listing().items() for key in keys)
            except Exception as exc:
                print(f"[fabric.jobs] listing instances failed: {type(exc).__name__}: {exc}")
        wanted = {(r.job_id, r.binding.instance_key) for r in self.book.bound() if r.binding is not None}
        wanted |= {(m.job_id, k) for m in self.core.migrations.active.values() for k in (m.source_key, m.target_key)
                   if k is not None}
        alive = frozenset(jk for jk in wanted if self.launcher.find(*jk) is not None)  # by name, one by one
        heads: frozenset[str] = frozenset()
        head_nodes = getattr(self.launcher, "head_nodes", None)
        if head_nodes is not None and any(jk not in alive for jk in wanted):
            try:
                heads = frozenset(head_nodes())
            except Exception as exc:  # counted as any other death then
                print(f"[fabric.jobs] reading the head nodes failed: {type(exc).__name__}: {exc}")
        self.handle(Restarted(alive, listed, heads))

    def node_lost(self, node_id: str) -> None:
        self.handle(JobsNodeLost(node_id))

    def waiting_by_pool(self, default_pool: str) -> dict[str, int]:
        """Jobs waiting to be placed (pending or recovering, not dormant), per pool."""
        out: dict[str, int] = {}
        for rec in self.book.jobs.values():
            if rec.state in (JobState.PENDING, JobState.RECOVERING) and not rec.dormant:
                pool = rec.spec.requirement.pool or default_pool
                out[pool] = out.get(pool, 0) + 1
        return out

    def node_joined(self, provisioned_for: list[tuple[str, str]] | None = None) -> None:
        """New capacity: jobs waiting for a node are placed right after this step; ``(job id, node
        id)`` of nodes provisioned for a job clear that job's restart history."""
        self.handle(CapacityJoined(tuple(provisioned_for or ())))

    # -- requests -----------------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, cls_blob: bytes, args_blob: bytes, job_id: str | None = None) -> str:
        if not isinstance(spec, JobSpec):
            raise MessageError("spec", "must be a fabric JobSpec", type(spec).__name__)
        for name, blob in (("cls_blob", cls_blob), ("args_blob", args_blob)):
            if not isinstance(blob, bytes) or len(blob) > 64 * 1024 * 1024:
                raise MessageError(name, "must be bytes, at most 64 MiB", type(blob).__name__)
        self.tasks.check_requirement(spec.requirement)
        job_id = job_id or new_job_id()
        if job_id not in self.book.jobs:
            self.payloads[job_id] = self._unwritten[job_id] = (cls_blob, args_blob)
        return self.handle(JobSubmitted(job_id, spec))

    def stop(self, job_id: str) -> str:
        return self.handle(StopRequested(job_id))

    def renew(self, job_id: str, instance_key: str) -> str:
        """An instance's lease renewal (``granted`` or ``refused``): nothing to write at once."""
        return self.handle(LeaseAsked(job_id, instance_key), answered=False)

    async def resumed_by(self, timeout_s: float) -> None:
        """Wait, ``timeout_s`` at most, until the state read back after a restart was resumed: until
        then a job's state is the old process's word (an instance that died meanwhile still says running)."""
        deadline = time.monotonic() + timeout_s
        while not self.resumed and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

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


def _reply(replies: list[Reply], stimulus_id: str | None) -> Any:
    """The value of the reply to ``stimulus_id`` among ``replies`` (its error raised); None when none."""
    for r in replies:
        if stimulus_id is None or r.stimulus_id == stimulus_id:
            if r.error is not None:
                raise r.error
            return r.value
    return None

"""SchedulerActor: the fabric's detached, named placement service (placement and reconfiguration).

A thin actor around ``SchedulerCore`` (pure: fleet view, reservations, deferred queue, leases, drains). It turns
each call it receives and each change its fleet feed reports into a stimulus, hands it to ``core.handle`` and
carries out the instructions that come back: reply to the caller, wake or fail a waiting call, write a cordon or a
drain to the registry. Everything that decides, the core decides; ``Scheduler`` holds no rule of its own.

``Scheduler`` is the plain class (unit tests drive it with a fake feed and metrics sink); ``SchedulerActor`` is it
as the Ray actor. Restart: a detached actor with ``max_restarts=-1`` re-runs ``__init__``; the fleet comes back from
the feed's first poll, work already dispatched runs on (its result goes straight to the caller), Ray's
``fabric.slots`` refuses oversubscription meanwhile, and a job's state is answered once the jobs read back were
checked against what lives (``resumed_by``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from typing import Any, Callable

import ray

from actors.decisions import DecisionRecorder
from actors.feed_stimuli import stimulus_for
from actors.fleet_feed import FleetFeed
from actors.job_ports import say_if_failed
from actors.jobs import RESUME_WAIT_S, JobRunner
from actors.moves import MoveRequests
from actors.node_strikes import NodeStrikes
from actors.provisioner import Provisioner
from actors.scaling_ops import ScalingOps
from fabric.core.errors import CapacityError, MessageError
from fabric.core.placement import PlacementContext, Requirement
from fabric.core.scheduling import messages as msg
from fabric.core.scheduling import (
    CallsReported, Cancelled, Cordoned, DrainRequested, Expired, Instruction, LeaseEnded, LeaseGrant, LeaseRequested,
    MarkDraining, NodeAssignment, NodeChanged, NodeJoined, OutsidersSeen, Placed, PlacementUnclaimed,
    PlaceRequested, ProvisionNode, SchedulerCore, TerminateNode, SelectRequested, SetCordoned, SlotsReleased, Stimulus, Tick, Uncordoned, reply,
)
from fabric.core.scheduling.loop_timing import TickTimes
from fabric.core.scheduling.reports import SpillTally
from fabric.core.scheduling.node_events import fleet_events
from fabric.core.settings import FabricSettings
from fabric.rayio.metrics import MetricsExporter, MetricsSink, RayMetrics


class Scheduler:
    """The scheduler's actor logic: stimuli in, ``core.handle``, instructions out. ``feed`` (default: a
    ``FleetFeed``) reports fleet changes and writes cordons and drains to the registry; ``metrics`` (default:
    ``RayMetrics``) takes the exported counters and gauges; ``clock`` is the core's time. ``run_loop=False``
    starts no sync loop (unit tests call ``_sync``)."""

    def __init__(self, settings: dict | None = None, tick_s: float | None = None, *, feed: Any = None,
                 metrics: MetricsSink | None = None, clock: Callable[[], float] = time.monotonic,
                 run_loop: bool = True, jobs: Any = None, providers: Any = None) -> None:
        self.settings = FabricSettings.load(settings or {})
        self.core = SchedulerCore(self.settings, clock=clock)
        self.feed = feed if feed is not None else FleetFeed(self.settings)
        self.metrics_sink: MetricsSink = metrics if metrics is not None else RayMetrics()
        self.exporter = MetricsExporter(self.metrics_sink)
        """``metrics()`` through the sink, every tick (counters as deltas)."""
        self.spill_tally = SpillTally()
        self.tasks_dispatch_failed = 0
        """Queued calls placed for a caller that had stopped waiting (placed, never started)."""
        self.tick_s = tick_s if tick_s is not None else min(self.settings.health.monitor_interval_s, 0.5)
        self._waiters: dict[str, asyncio.Future] = {}
        self._outsiders_sent: dict[str, Any] | None = None
        self._started = time.time()
        self._ready = asyncio.Event()
        self.jobs: JobRunner | None = jobs(self) if callable(jobs) else (  # None: unit tests that drive no jobs
            JobRunner.for_scheduler(self) if jobs is None and run_loop else jobs)
        self.moves = MoveRequests(self.core, self._runner, self.terminate_instance)  # moves: checked, handed on
        self.provisioner = Provisioner(self, providers)
        """Provider calls (``actors.provisioner``): the core's ``ProvisionNode`` / ``TerminateNode``."""
        if self.jobs is not None and run_loop:  # the providers' instances are kept beside the jobs
            try:
                self.provisioner.attach(self.jobs.store)
            except Exception as exc:  # a provider that cannot be built here: its instances wait for the next start
                print(f"[fabric.scheduler] provider instances not adopted: {type(exc).__name__}: {exc}")
        self.scaling = ScalingOps(self)
        """Burst and utilisation scaling, every tick; the slot caps it wrote (start caps, raises)."""
        self.spare_tags: dict[str, dict[str, Any]] = {}
        """Node id -> spare tags the reconcilers wrote (the fabric's view; Ray labels cannot change)."""
        self.strikes = NodeStrikes(self)  # nodes that keep failing to start jobs: unhealthy for a while
        self.decisions = DecisionRecorder(self.core.decision_tap, self.settings, self._log_event, time.time,
                                          getattr(self.jobs, "store", None))
        """Placement decisions on the record (``explain_event``)."""
        self.tick_times = TickTimes()
        """The loop's latest ticks, timed (``loop_stats``)."""
        self._loop_task = asyncio.get_event_loop().create_task(self._run()) if run_loop else None

    # -- the loop ------------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            try:
                t0 = time.perf_counter()
                await self._step()
                self.tick_times.record((time.perf_counter() - t0) * 1e3)
            except Exception as exc:  # keep serving; the next tick retries
                print(f"[fabric.scheduler] tick failed: {type(exc).__name__}: {exc}")
            self._ready.set()
            await asyncio.sleep(self.tick_s)

    async def _step(self) -> None:
        """One tick of the loop: follow the feed, then let time pass in the core."""
        await self._sync()
        self._observe_slots()
        self._handle(Tick())
        self.scaling.tick()
        self.strikes.tick()
        self._sync_demand()
        if self.jobs is not None:
            self.jobs.tick()
        self.decisions.flush()
        self._export_gauges()

    async def _sync(self) -> None:
        """One poll of the feed, each change handed to the core as a stimulus."""
        changes = await self.feed.poll()
        outsiders = dict(self.feed.outsiders)
        if outsiders != self._outsiders_sent:
            self._carry_out(self.core.handle(OutsidersSeen(outsiders)))
            self._outsiders_sent = outsiders
        with self.jobs.batch() if self.jobs is not None else contextlib.nullcontext():  # written once, before any await
            for change in changes:
                stimulus = stimulus_for(change)
                if stimulus is not None and self.jobs is not None:  # the fleet's node events, in the one log
                    for kind, data in fleet_events(change, self.core.fleet.get(change.node_id)):
                        self.jobs.emit(kind, data, stimulus.stimulus_id)
                if isinstance(stimulus, NodeJoined):
                    stimulus = self._claimed(stimulus)
                    self.provisioner.registered(stimulus.record.instance_id)
                    nid = stimulus.record.node_id
                    tags = {**self.spare_tags.get(nid, {}), **self.scaling.joined(stimulus.record), **self.strikes.tags(nid)}
                    if tags:  # a node that comes back keeps the tags written for it
                        stimulus = NodeJoined(stimulus.record.evolve(**tags), stimulus.cause, stimulus_id=stimulus.stimulus_id)
                elif change.kind == "lost":
                    self.spare_tags.pop(change.node_id, None)
                    self.scaling.forget(change.node_id)
                    self.strikes.forget(change.node_id)
                if stimulus is not None:
                    self._carry_out(self.core.handle(stimulus))
                if change.kind == "lost" and self.jobs is not None:
                    self.jobs.node_lost(change.node_id)
            served = self.core.take_served()  # nodes provisioned for a job: its restart history is cleared
            if self.jobs is not None and (served or any(c.kind == "joined" for c in changes)):
                self.jobs.node_joined(served)  # new capacity: the waiting jobs are placed once for the whole poll
        if changes:
            self._export_gauges()
        self._ready.set()

    def handle_stimulus(self, stimulus: Stimulus) -> tuple[list[Instruction], asyncio.Task | None]:
        """The core's answer to ``stimulus``, carried out (the job runner, drains, sagas and the
        provisioner hand their stimuli to the task core through this)."""
        out = self.core.handle(stimulus)
        self.decisions.collect()
        return out, self._carry_out(out)

    _handle = handle_stimulus

    def _carry_out(self, instructions: list[Instruction]) -> asyncio.Task | None:
        """Wake or fail the waiting callers now; write to the registry in order, in one task
        (returned, for a caller that answers only once the registry has it)."""
        self.provisioner.persist(self.core.provisions, self.core.clock)  # provisions that changed: durable first
        writes: list[Instruction] = []
        for ins in instructions:
            if isinstance(ins, Placed):
                fut = self._waiters.pop(ins.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(ins.assignment)
                else:  # its caller stopped waiting: the core frees the slot
                    self.tasks_dispatch_failed += 1
                    self._carry_out(self.core.handle(PlacementUnclaimed(
                        ins.request_id, ins.assignment.allocation_id, stimulus_id=ins.stimulus_id)))
            elif isinstance(ins, Expired):
                fut = self._waiters.pop(ins.request_id, None)
                if fut is not None and not fut.done():
                    fut.set_exception(ins.error)
            elif isinstance(ins, (MarkDraining, SetCordoned)):
                writes.append(ins)
            elif isinstance(ins, (ProvisionNode, TerminateNode)):
                self.provisioner.carry_out(ins)
        if not writes:
            return None
        task = asyncio.get_event_loop().create_task(self._write(writes))
        task.add_done_callback(functools.partial(say_if_failed, what="registry write", who="fabric.scheduler"))
        return task

    async def _write(self, writes: list[Instruction]) -> None:
        for ins in writes:
            if isinstance(ins, MarkDraining):
                await self.feed.mark_draining(ins.node_id, stimulus_id=ins.stimulus_id, reason=ins.reason)
            elif isinstance(ins, SetCordoned):
                await self.feed.set_cordoned(ins.node_id, ins.cordoned, stimulus_id=ins.stimulus_id, reason=ins.reason)

    async def _until_ready(self) -> None:
        if not self._ready.is_set():
            await self._ready.wait()

    # -- placement ------------------------------------------------------------------------------------
    async def place_task(self, req: Requirement, release: list[str] = ()) -> NodeAssignment:
        """Place one call now (reserving a slot), or say it is deferred. ``CapacityError`` for a
        hard requirement that no node serves. ``release``: the caller's idle leases, given back first."""
        req, idle = msg.read_requirement(req), msg.read_ids("release", release)
        await self._until_ready()
        s = PlaceRequested(req, release=idle)
        out, _ = self._handle(s)
        return reply(out, s.stimulus_id)

    async def wait_for_placement(self, request_id: str, req: Requirement, priority: int = 0,
                                 timeout_s: float | None = None) -> NodeAssignment:
        """Queue a call until a node can take it; ``CapacityError`` at the deadline."""
        request_id, req = msg.read_id("request_id", request_id), msg.read_requirement(req)
        timeout_s, priority = msg.read_timeout("timeout_s", timeout_s), msg.read_priority("priority", priority)
        await self._until_ready()
        s = PlaceRequested(req, request_id=request_id, queue=True, priority=priority, timeout_s=timeout_s)
        out, _ = self._handle(s)
        a: NodeAssignment = reply(out, s.stimulus_id)
        if a.status == "assigned":
            return a
        fut = asyncio.get_event_loop().create_future()
        self._waiters[request_id] = fut
        try:
            return await fut
        except asyncio.CancelledError:
            self._handle(Cancelled(request_id))
            raise

    async def lease(self, lease_id: str, req: Requirement, holding: dict[str, int] | None = None, want: int = 64,
                    release: list[str] = ()) -> LeaseGrant:
        """Grant or renew a client's placement lease for ``req``'s class (the fast path), after giving
        back the client's idle leases (``release``)."""
        lease_id, req, holding, want, idle = msg.read_lease_request(lease_id, req, holding, want, release)
        await self._until_ready()
        s = LeaseRequested(lease_id, req, holding, want, idle)
        out, _ = self._handle(s)
        return reply(out, s.stimulus_id)

    def end_lease(self, lease_id: str) -> None:
        self._handle(LeaseEnded(msg.read_id("lease_id", lease_id)))

    def report_calls(self, placed: int = 0, fallbacks: int = 0, job_id: str | None = None, refused: int = 0) -> None:
        """Calls run under leases; a worker's spilled calls (and refused ones) name their Ray job: ``spilled_seen``."""
        placed, fallbacks = msg.read_call_report(placed, fallbacks)
        if job_id is not None:
            self.spill_tally.add(msg.read_id("job_id", job_id), placed + msg.read_count("refused", refused))
        if placed or job_id is None:
            self._handle(CallsReported(placed, fallbacks))

    def spilled_seen(self, job_id: str) -> int:
        """How many spilled calls of Ray job ``job_id`` its workers have reported, run or refused."""
        return self.spill_tally.of(msg.read_id("job_id", job_id))

    def queue_timeout_s(self) -> float:
        return self.settings.queue_timeout_s

    def release(self, allocation_ids: list[int]) -> None:
        """Work ended on its node: its slot is free again."""
        self._handle(SlotsReleased(msg.read_allocations(allocation_ids)))

    async def select_worker(self, req: Requirement) -> NodeAssignment:
        """``select_worker``: where would this go now (no reservation kept)."""
        req = msg.read_requirement(req)
        await self._until_ready()
        s = SelectRequested(req)
        out, _ = self._handle(s)
        return reply(out, s.stimulus_id)

    async def explain(self, req: Requirement, ctx: PlacementContext | None = None, verbose: bool = False) -> dict:
        """A dry-run placement against the live fleet, with its trace: the decision, each node's
        first failing filter, each survivor's key, and the text a person reads."""
        req, ctx = msg.read_requirement(req), msg.read_context(ctx)
        await self._until_ready()
        return self.core.explain(req, ctx, verbose=bool(verbose))

    def explain_event(self, seq: int, replay: bool = False, settings_now: bool = False, verbose: bool = False) -> dict:
        """Why the decision on the record under event ``seq`` was made; with ``replay`` (or ``settings_now``:
        with today's settings) whether the engine decides the same on its recorded inputs (``DecisionRecorder``)."""
        return self.decisions.explain(msg.read_count("event_seq", seq, msg.MAX_SEQ), bool(replay), bool(settings_now), bool(verbose))

    def decision_recording(self, enabled: bool | None = None) -> bool:
        """Turn decision recording on or off (None: leave it); whether it is on."""
        return self.decisions.set_enabled(enabled)

    # -- operator surface ---------------------------------------------------------------------------------
    def fallback_count(self) -> int:
        return self.core.fallback_count

    def metrics(self) -> dict[str, Any]:
        """The counters and per-pool gauges, per-tier figures (``metrics_view``); ``decisions``: the record's size."""
        from fabric.core.scheduling.metrics_view import scheduler_metrics

        m = scheduler_metrics(self.core, self.settings, self.jobs, tasks_dispatch_failed=self.tasks_dispatch_failed,
                              uptime_s=time.time() - self._started)
        m["decisions"] = self.decisions.figures()  # the record: kept, bytes, fleet versions, forgotten
        return m

    # -- moving work on purpose (actors.moves.MoveRequests: checked there, carried out by the runner) ----
    async def migrate_job(self, job_id: str, strategy: str | None = None, target_node: str | None = None,
                          override_reservation: bool = False) -> str:
        return await self.moves.migrate_job(job_id, strategy, target_node, override_reservation)

    def migration(self, migration_id: str) -> Any:
        return self.moves.migration(migration_id)

    def migrations(self) -> list:
        return self.moves.migrations()

    def abort_migration(self, migration_id: str, reason: str = "") -> Any:
        return self.moves.abort_migration(migration_id, reason)

    async def drain_jobs(self, node: str, timeout_s: float | None = None, force: bool = False,
                         strategy: str | None = None) -> Any:
        return await self.moves.drain_jobs(node, timeout_s, force, strategy)

    def drain_status(self, node: str) -> Any:
        return self.moves.drain_status(node)

    def evict(self, node: str) -> list[str]:
        return self.moves.evict(node)

    async def terminate_node(self, node: str) -> dict:
        return await self.moves.terminate_node(node)

    async def handle_node_interruption(self, node: str, kind: str = "spot-interruption", deadline: float | None = None) -> Any:
        return await self.moves.handle_node_interruption(node, kind, deadline)

    async def close_migrations(self, grace_s: float = 5.0) -> int:
        return await self.moves.close_migrations(grace_s)

    def ray_adapter(self) -> Any:
        """The Ray seam (the fleet feed's adapter, else a fresh one)."""
        from fabric.rayio.adapter import RayAdapter

        adapter = getattr(self.feed, "adapter", None)
        return adapter if adapter is not None else RayAdapter()

    # -- long-running jobs (actors.jobs.JobRunner) --------------------------------------------------------
    def _runner(self) -> JobRunner:
        if self.jobs is None:
            raise MessageError("jobs", "this scheduler runs no jobs", None)
        return self.jobs

    async def submit_job(self, spec: Any, cls_blob: bytes, args_blob: bytes, job_id: str | None = None) -> str:
        """Add a job (a decorated class's instance): placed by the engine now, started on its node."""
        await self._until_ready()
        if job_id is not None:
            job_id = msg.read_id("job_id", job_id)
        return self._runner().submit(spec, cls_blob, args_blob, job_id)

    def stop_job(self, job_id: str) -> str:
        return self._runner().stop(msg.read_id("job_id", job_id))

    def renew_lease(self, job_id: str, instance_key: str) -> str:
        return self._runner().renew(msg.read_id("job_id", job_id), msg.read_id("instance_key", instance_key))

    async def job_status(self, job_id: str) -> Any:
        job_id = msg.read_id("job_id", job_id)
        await self._runner().resumed_by(RESUME_WAIT_S)
        return self._runner().status(job_id)

    async def job_statuses(self) -> list[Any]:
        await self._runner().resumed_by(RESUME_WAIT_S)
        return self._runner().statuses()

    def inherited_store(self, resume: bool = False) -> dict[str, Any] | None:
        """What this scheduler found of another Ray cluster's jobs in its store (``actors.inherited``;
        None: nothing), those jobs resumed first when ``resume``."""
        return self._runner().cluster.report(bool(resume))

    def job_instance(self, job_id: str) -> dict:
        return self._runner().instance(msg.read_id("job_id", job_id))

    async def create_bundle(self, blob: bytes) -> Any:
        await self._until_ready()
        return self._runner().bundles.create_bundle(blob)

    async def update_bundle(self, blob: bytes) -> Any:
        await self._until_ready()
        return self._runner().bundles.update_bundle(blob)

    def delete_bundle(self, bundle_id: str) -> Any:
        return self._runner().bundles.delete_bundle(msg.read_id("bundle_id", bundle_id))

    def bundle_status(self, bundle_id: str) -> Any:
        return self._runner().bundles.bundle_status(msg.read_id("bundle_id", bundle_id))

    def bundle_statuses(self) -> list[Any]:
        return self._runner().bundles.bundle_statuses()

    async def validate_bundle(self, blob: bytes) -> Any:
        await self._until_ready()
        return self._runner().bundles.validate(blob)

    async def validate_bundle_admission(self, blob: bytes) -> Any:
        await self._until_ready()
        return self._runner().bundles.admission(blob)

    async def place_dry_run(self, blob: bytes, replica: int, job: str) -> Any:
        await self._until_ready()
        return self._runner().bundles.dry_run(blob, msg.read_count("replica", replica, 1), msg.read_id("job", job))

    def start_bundle_job(self, bundle_id: str, replica: int, job: str) -> str:
        return self._runner().bundles.set_dormant(msg.read_id("bundle_id", bundle_id), msg.read_count("replica", replica, 1),
                                          msg.read_id("job", job), False)

    def stop_bundle_job(self, bundle_id: str, replica: int, job: str) -> str:
        return self._runner().bundles.set_dormant(msg.read_id("bundle_id", bundle_id), msg.read_count("replica", replica, 1),
                                          msg.read_id("job", job), True)

    def events(self, since: int = 0, kinds: list[str] | None = None, limit: int = 1000) -> list[dict]:
        """The fabric's event log after number ``since``, oldest first: the first ``limit`` events
        (a negative ``limit``: the newest ``-limit``), of ``kinds`` only when given."""
        since, kinds, limit = msg.read_since(since), msg.read_kinds(kinds), msg.read_event_limit(limit)
        found = self._runner().events_since(since, kinds)
        return found[:limit] if limit > 0 else found[limit:]

    def job_events(self, since: int = 0, kinds: list[str] | None = None) -> list[dict]:
        return self._runner().events_since(msg.read_since(since), msg.read_kinds(kinds))

    def _claimed(self, s: NodeJoined) -> NodeJoined:
        """A node the autoscaler brought up carries no instance label: its provider says which
        provision it fulfils, and the record carries that instance id from then on."""
        rec = s.record
        if rec.provider != "ray-autoscaler" or rec.instance_id:
            return s
        row = getattr(getattr(self.feed, "adapter", None), "alive_node", lambda _n: None)(rec.node_id)
        iid = self.provisioner.claim(rec.node_id, dict(getattr(row, "labels", None) or {}))
        return NodeJoined(rec.evolve(instance_id=iid), s.cause, stimulus_id=s.stimulus_id) if iid else s

    def _sync_demand(self) -> None:
        """Once a second, the autoscaler's request is written whole again: held instances plus the
        busy ``ray-autoscaler`` nodes (the fabric is the only writer of ``request_resources``)."""
        now = time.monotonic()
        if now < getattr(self, "_demand_due", 0.0):
            return
        self._demand_due = now + 1.0
        alive = getattr(getattr(self.feed, "adapter", None), "alive_node", None)

        def busy() -> list:  # the whole fleet is read only while the ray-autoscaler provider is in use
            rows = [alive(r.node_id) for r in self.core.fleet.records() if r.provider == "ray-autoscaler" and r.running] if alive else []
            return [dict(row.labels) for row in rows if row is not None]
        self.provisioner.sync_demand(busy)

    def _observe_slots(self) -> None:
        """Tell the core what Ray counts in use per node (``SlotsObserved``), when the feed's Ray seam can."""
        from fabric.core.scheduling import SlotsObserved

        count = getattr(getattr(self.feed, "adapter", None), "slots_in_use", None)
        if count is not None:
            used = count()
            if used:
                self._handle(SlotsObserved(used))

    # -- providers and spares (actors.provisioner, actors.spares) -------------------------------------------
    async def provision_node(self, provider: str, shape: Any, pool: str, pool_tier: str, spare: bool = False,
                             provision_id: str | None = None) -> dict:
        """Have ``provider`` start one node (a spare reconciler's provision); its ``ProvisionedNode``
        as a dict. ``ProviderError`` when it cannot. ``provision_id``: kept in the job store until the
        node registers; asked again (a retried call, a restarted reconciler) it answers the same node."""
        from fabric.core.settings import NodeShape

        pid = None if provision_id is None else msg.read_id("provision_id", provision_id)
        node = await self.provisioner.provision(msg.read_id("provider", provider), NodeShape.model_validate(shape),
                                                msg.read_id("pool", pool), msg.read_id("pool_tier", pool_tier),
                                                spare=bool(spare), provision_id=pid)
        return {"instance_id": node.instance_id, "provider": node.provider, "pool": node.pool, "pool_tier": node.pool_tier,
                "shape": node.shape.name, "spare": node.spare, "name": node.name}

    async def terminate_instance(self, provider: str, instance_id: str, reason: str = "", node_id: str | None = None) -> None:
        await self.provisioner.terminate(msg.read_id("provider", provider), msg.read_id("instance_id", instance_id), str(reason),
                                         None if node_id is None else msg.read_id("node_id", node_id))

    def set_spare_tags(self, node_id: str, spare: bool, reserved_for: list[str] = (), exclusive: bool = False,
                       reason: str = "") -> bool:
        """Write a node's spare tags into the fabric's view (False: no such node)."""
        node_id = msg.read_id("node_id", node_id)
        if node_id not in self.core.fleet:
            return False
        tags = {"spare": bool(spare), "spare_reserved_for": frozenset(reserved_for) if spare else frozenset(),
                "spare_exclusive": bool(exclusive) and bool(spare)}
        self.spare_tags[node_id] = tags
        self._handle(NodeChanged(node_id, tags, f"spare tags: {reason}"))
        self.record_event("spare_tagged", {"node_id": node_id, "spare": bool(spare), "reserved_for": list(reserved_for),
                                           "exclusive": bool(exclusive), "reason": str(reason)})
        return True

    def _log_event(self, kind: str, data: dict, stimulus_id: str | None) -> dict | None:
        return self.jobs.emit(kind, data, stimulus_id) if self.jobs is not None else None

    def record_event(self, kind: str, data: dict) -> None:
        """Add an event to the fabric's log (``h.job_events`` reads it)."""
        if self.jobs is not None:
            self.jobs.emit(msg.read_id("kind", kind), dict(data))

    def provisions(self) -> dict:
        """Open provisions, held pool tiers, the nodes providers made, provision-to-serving times, the
        provider notes and the spare provisions kept for the reconcilers (``Provisioner.view``)."""
        return {**self.core.provisions_view(), **self.provisioner.view()}

    def reservations(self) -> dict[str, dict[str, int]]:
        """Per node: reservations by owner kind (``task``, ``lease``, ``observed``): what the engine counts."""
        out: dict[str, dict[str, int]] = {}
        for e in self.core.ledger.entries():
            kind = e.owner if e.owner in ("task", "observed") else "lease"
            node = out.setdefault(e.allocation.node_id, {})
            node[kind] = node.get(kind, 0) + 1
        return out

    def close_providers(self) -> int:
        """Terminate every node this fabric's providers made (``fabric.down``)."""
        return self.provisioner.close()

    def stimulus_log(self) -> list[dict[str, Any]]:
        """The core's last stimuli (kind, id, time), oldest first: what the scheduler reacted to."""
        return self.core.stimulus_log()

    def nodes(self) -> list:
        return self.core.fleet.records()

    def fleet_node(self, node: str) -> Any:
        return self.core.fleet.get(node) or next((r for r in self.core.fleet.records() if r.name == node), None)

    def loop_stats(self, reset: bool = False) -> dict[str, Any]:
        out = {**self.tick_times.figures(), "fleet": len(self.core.fleet), "feed_resyncs": getattr(self.feed, "resyncs", 0)}
        if reset:
            self.tick_times.reset()
        return out

    async def cordon(self, node: str) -> str:
        return await self._operator(Cordoned, node)

    async def uncordon(self, node: str) -> str:
        if self.jobs is not None:  # a drain (and a reclaim notice) in progress is withdrawn with the cordon
            self.jobs.drains.withdraw(self.core.resolve_node(msg.read_id("node", node)))
        return await self._operator(Uncordoned, node)

    async def drain(self, node: str, grace_s: float | None = None) -> str:
        node_id = self.core.resolve_node(msg.read_id("node", node))
        grace_s = msg.read_seconds("grace_s", grace_s, allow_zero=True)
        if self.jobs is not None:  # the node's one drain, its jobs' too (grace_s: its timeout)
            return str((await self.moves.drain_jobs(node_id, grace_s)).node_id)
        return await self.answered(DrainRequested(node_id, grace_s))

    async def sync_now(self) -> int:
        """Refresh the fleet at once (tests and the CLI use it instead of waiting a tick)."""
        await self._sync()
        return len(self.core.fleet)

    def ping(self) -> str:
        return "ok"

    def pid(self) -> int:
        return os.getpid()

    # -- internals ------------------------------------------------------------------------------------------
    async def _operator(self, kind: type, node: str) -> str:
        return await self.answered(kind(self.core.resolve_node(msg.read_id("node", node))))

    async def answered(self, s: Any) -> str:
        """Handle an operator stimulus; answer once the registry has what it wrote."""
        out, writes = self._handle(s)
        reply(out, s.stimulus_id)
        if writes is not None:
            await writes
        return s.node_id

    def _export_gauges(self) -> None:
        """``metrics()`` through the sink (every tick, and when the fleet changed): Ray's Prometheus endpoint."""
        self.exporter.export(self.metrics())


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=100_000)
class SchedulerActor(Scheduler):
    """``Scheduler`` as the detached, named Ray actor (``fabric.scheduler``)."""


__all__ = ["Scheduler", "SchedulerActor", "CapacityError", "stimulus_for"]

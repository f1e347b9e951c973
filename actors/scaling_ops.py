"""Burst and utilisation scaling, carried out: the scheduler's side of ``fabric.core.scheduling.scaling``.

``ScalingOps`` is one object of ``actors.scheduler.Scheduler``. Every tick (``tick``) it hands the pure
``Scaler`` the fleet's changes, each pool's queue depth (queued calls plus jobs waiting for a node) and
the provisions in flight, and carries out what comes back:

- a raise becomes the node's slot cap (``NodeChanged(max_concurrent_tasks)``) and a
  ``concurrency_raised`` event;
- a worker group becomes a ``ProvisionRequested`` for the core (its provisions, then the provider's
  calls) and a ``scale_out`` event;
- a scale-down cordons the node and has its provider terminate it (``scale_down``), only for a node
  this fabric's providers made and still hold.

It keeps the slot caps it wrote (``caps``), the scheduler's tags: Ray's ``fabric.slots`` of a live node
cannot change, so the fabric's view is where a cap lives. A node joined again while in the fleet keeps
its cap; a node that leaves the fleet (lost: offline, dead) takes it along and starts afresh when it
comes back. With ``scaling.vertical_start_share`` a node that joins without a cap gets its start cap
(``start_cap``) here, which the high-utilisation rule then raises."""

from __future__ import annotations

from typing import Any, Protocol

from fabric.core.placement import NodeRecord
from fabric.core.scheduling import Cordoned, NodeChanged, ProvisionRequested, SchedulerCore, Stimulus, TerminateNode
from fabric.core.scheduling.scaling import ProvisionGroup, RaiseConcurrency, ScaleDown, Scaler, start_cap
from fabric.core.settings import FabricSettings


class WaitingJobs(Protocol):
    """The job side as the scaler reads it (``actors.jobs.JobRunner``)."""

    def waiting_by_pool(self, default_pool: str) -> dict[str, int]: ...


class ProviderInstances(Protocol):
    """The provider calls a scale-down needs (``actors.provisioner.Provisioner``)."""

    def knows(self, provider: str | None, instance_id: str) -> bool: ...
    def carry_out(self, ins: Any) -> None: ...


class ScalingHost(Protocol):
    """The port ``ScalingOps`` is handed: what it reads of the scheduler it lives in
    (``actors.scheduler.Scheduler`` is one; unit tests pass a small fake)."""

    @property
    def settings(self) -> FabricSettings: ...
    @property
    def core(self) -> SchedulerCore: ...
    @property
    def jobs(self) -> WaitingJobs | None: ...
    @property
    def provisioner(self) -> ProviderInstances: ...
    def handle_stimulus(self, stimulus: Stimulus) -> object: ...
    def record_event(self, kind: str, data: dict) -> None: ...


class ScalingOps:
    """The scaler's windows (``scaler``) and the slot caps written (``caps``) of one scheduler."""

    def __init__(self, host: ScalingHost) -> None:
        self.host = host
        self.scaler = Scaler()
        """Burst and utilisation windows, observed every tick."""
        self.caps: dict[str, int] = {}
        """Node id -> the slot cap written for it (a start cap or a raise)."""

    # -- the fleet's changes --------------------------------------------------------------------------------
    def joined(self, record: NodeRecord) -> dict[str, Any]:
        """The tags a joining node gets: the cap written for it before, else its start cap (a
        ``vertical_start_share`` below its limit), else none."""
        cap = self.caps.get(record.node_id)
        if cap is None:
            cap = start_cap(record, self.host.settings)
            if cap is None:
                return {}
            self.caps[record.node_id] = cap
        return {"max_concurrent_tasks": cap}

    def forget(self, node_id: str) -> None:
        """The node was lost: it starts afresh if it joins again."""
        self.caps.pop(node_id, None)

    # -- the tick ---------------------------------------------------------------------------------------------
    def queue_depth(self) -> dict[str, int]:
        """Per pool: the calls queued in the core plus the jobs waiting for a node (never scaled down under)."""
        default = self.host.core.fleet.default_pool
        depth: dict[str, int] = {}
        for q in self.host.core.queue:
            pool = q.requirement.pool or default
            depth[pool] = depth.get(pool, 0) + 1
        jobs = self.host.jobs
        if jobs is not None:
            for pool, n in jobs.waiting_by_pool(default).items():
                depth[pool] = depth.get(pool, 0) + n
        return depth

    def tick(self) -> None:
        """One observation of the burst and utilisation windows; their actions carried out."""
        host = self.host
        if not host.settings.scaling.enabled:
            return
        core = host.core
        fleet, now = core.fleet, core.clock()
        actions = self.scaler.observe_changes(now, fleet, fleet.take_changed("scaler"), self.queue_depth(),
                                              core.provisions.by_tier(), host.settings)
        for a in actions:
            if isinstance(a, RaiseConcurrency):
                self._raise(a)
            elif isinstance(a, ProvisionGroup):
                host.handle_stimulus(ProvisionRequested(a.pool, a.pool_tier, a.shape, a.count, f"scaling: {a.reason}"))
                host.record_event("scale_out", {"pool": a.pool, "pool_tier": a.pool_tier, "shape": a.shape.name,
                                                "count": a.count, "reason": a.reason})
            elif isinstance(a, ScaleDown):
                self._scale_down(a)

    def _raise(self, a: RaiseConcurrency) -> None:
        if a.node_id not in self.host.core.fleet:
            return
        self.caps[a.node_id] = a.slots
        self.host.handle_stimulus(NodeChanged(a.node_id, {"max_concurrent_tasks": a.slots}, f"scaling: {a.reason}"))
        self.host.record_event("concurrency_raised", {"node_id": a.node_id, "slots": a.slots, "reason": a.reason})

    def _scale_down(self, a: ScaleDown) -> None:
        host = self.host
        rec = host.core.fleet.get(a.node_id)
        if rec is None or not rec.instance_id or not host.provisioner.knows(rec.provider, rec.instance_id):
            return  # not a node this fabric's providers made (and still hold): never terminated
        host.handle_stimulus(Cordoned(a.node_id))  # nothing new lands there while it goes
        host.provisioner.carry_out(TerminateNode(rec.provider, rec.instance_id, a.node_id, reason=f"scaling: {a.reason}"))
        host.record_event("scale_down", {"node_id": a.node_id, "pool": a.pool, "pool_tier": a.pool_tier,
                                         "instance_id": rec.instance_id, "reason": a.reason})

"""RegistryActor: the fabric's capability registry, durable, on the head node.

One record per Ray node id (``fabric.store.RegistryRecord``): capabilities, Ray labels, status
``active | draining | offline | dead``, ``last_seen``, utilisation, limitations, flap hold,
cordon. The records live in SQLite (``fabric.store``), so a registry that restarts (a detached
actor re-runs ``__init__``) re-reads them; the health monitor reconciles them with Ray's node
table on its next tick.

What it refuses, with a ``RegistrationError`` and nothing stored: a registration for a node id
Ray does not have alive (a probe cannot invent a node), one whose name contradicts the node's
``fabric.io/name`` label, one for a node already collected (dead is terminal), and any report
that does not validate (the error names the field). ``Registry`` is the logic, testable with a
fake ``RayAdapter``; ``RegistryActor`` is the thin async Ray actor around it, and receives its
``RayAdapter`` through its constructor.

One writer for status: every status change (the health monitor's events, the operator's cordon,
uncordon and drain, the reconciliation on start) goes through ``Registry.apply(events)``, all or
nothing. Every write that changes a record gets the next number of the registry's change feed
(``fabric.store.changes.ChangeLog``), with its cause and stimulus id: ``changes(since_seq, epoch)``
answers a follower with what changed since (cost: the changes, not the fleet), ``snapshot()``
with everything, to start or resync from. A heartbeat is numbered only when it brings a new load
(``last_seen`` alone is no change a follower needs); the log lives in memory with a random epoch
per incarnation, so a restarted registry sends its followers back to a snapshot.

Heartbeats are the bulk of the traffic (a 5,000-node fleet beating every 5 s sends 1,000 a second),
so the actor's store writes them behind (``HEARTBEAT_FLUSH_S``): a heartbeat changes the record in
memory, and every ``HEARTBEAT_FLUSH_S`` the records touched since are written in one transaction.
A registry that crashes loses at most that much of ``last_seen`` and load; every other write
(a registration, a status change, a cordon, a drain) is written before its call returns.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

import ray

from fabric.core.names import HEAD_RESOURCE, NAME_LABEL, PROFILE_LABEL
from fabric.rayio.adapter import RayAdapter
from fabric.core.errors import NodeNotFoundError, RegistrationError
from fabric.core.events import (NodeAdded, NodeCollected, NodeCordoned, NodeDegraded, NodeDrainRequested, NodeFlapHeld,
                                NodeFlapReleased, NodeLost, NodeUncordoned, event_cause)
from fabric.core.lifecycle import NodeStatus, check_transition
from fabric.core.messages import check_joined_tiers, read_events, read_heartbeat, read_registration, read_report
from fabric.core.records import ChangePage, FeedSnapshot, RegistryRecord, Utilization
from fabric.store import FabricStore
from fabric.store.paths import default_store_path  # noqa: F401 - re-exported where it always was
from fabric.store.changes import ChangeLog
from actors.registry_channel import HeartbeatChannelHost

MAX_WARM = 10_000
"""Most artifact URIs one warmth report may list."""
HEARTBEAT_FLUSH_S = 0.5
"""How often the actor writes the heartbeats its store holds in memory (``FabricStore.flush``): what
a registry that crashes may lose of ``last_seen`` and load, and nothing else."""
_HOLDS_KEY = "registry.pending_holds"
"""Flap holds the monitor decided for a node Ray has alive but whose probe has not registered yet
(node id -> until); the record takes its hold when it registers."""


class Registry:
    """The registry's logic over a store and a Ray adapter (real or fake) and a clock.

    Every message is read whole (``fabric.core.messages``) before anything is looked up or stored, so
    a refused one changes nothing: not a record, not a pending hold, not a row of the store."""

    def __init__(self, store: FabricStore, adapter: Any, clock: Callable[[], float] = time.time, *,
                 log: ChangeLog | None = None) -> None:
        self.store = store
        self.adapter = adapter
        self.clock = clock
        self.log = log if log is not None else ChangeLog()
        """The change feed of this incarnation (a new registry: a new epoch)."""

    # -- what probes send ------------------------------------------------------------------------
    def register(self, node_id: Any, capabilities: Any, *, utilization: Any = None) -> RegistryRecord:
        """Register (or re-register, after a probe restart) the node ``node_id``. Refused when Ray
        does not have the node alive, when its name contradicts the node's label, and when its
        capabilities serve a tier the node did not join Ray with."""
        msg = read_registration(node_id, capabilities, utilization)
        node_id, caps, util = msg.node_id, msg.capabilities, msg.utilization
        if self.store.was_collected(node_id):
            raise RegistrationError(f"node {node_id} was collected (dead is terminal): a rejoining node registers under its new Ray node id",
                                    node_id=node_id, field="node_id")
        ray_node = self.adapter.alive_node(node_id)
        if ray_node is None:
            raise RegistrationError(f"node {node_id} is not an alive node in Ray's node table: a probe cannot invent a node",
                                    node_id=node_id, field="node_id")
        label_name = ray_node.labels.get(NAME_LABEL)
        if label_name and label_name != caps.name:
            raise RegistrationError(f"node {node_id} joined as {label_name!r} but registers as {caps.name!r}",
                                    node_id=node_id, field="capabilities.name")
        check_joined_tiers(caps, ray_node.joined_tiers, node_id, "registration")
        now = self.clock()
        existing = self.store.get(node_id)
        pending = self.store.get_json(_HOLDS_KEY, {})
        hold = pending.pop(node_id, None)
        held_until = hold if hold is not None and hold > now else None
        if existing is not None:
            # the Ray resources the node joined with, read again: a record stored before they were kept has none
            update: dict[str, Any] = {"capabilities": caps, "last_seen": max(existing.last_seen, now),
                                      "ray_resources": {k: float(v) for k, v in ray_node.resources.items()}}
            if util is not None:
                update["utilization"] = util
            if held_until is not None and (existing.held_until or 0.0) < held_until:
                update["held_until"] = held_until
            record = existing.model_copy(update=update)
        else:
            record = RegistryRecord(
                node_id=node_id, name=caps.name, capabilities=caps, labels=dict(ray_node.labels),
                ray_resources={k: float(v) for k, v in ray_node.resources.items()},
                status=NodeStatus.ACTIVE, status_since=now, registered_at=now, last_seen=now,
                utilization=util or Utilization(), held_until=held_until,
                profile=ray_node.labels.get(PROFILE_LABEL) or (caps.source if caps.source != "live" else None),
            )
        self.store.write([record], documents={_HOLDS_KEY: pending} if hold is not None else None)
        self.log.record(record, "registered" if existing is None else "re-registered",
                        identity=existing is None or _identity_changed(existing, record))
        return record

    def heartbeat(self, node_id: Any, utilization: Any = None) -> float:
        """A heartbeat (with utilisation); the recorded ``last_seen``. Numbered in the change feed
        only when it brings a load other than the one last published."""
        msg = read_heartbeat(node_id, utilization)
        record = self.store.touch(msg.node_id, self.clock(), msg.utilization)
        if record is None:
            raise RegistrationError(f"heartbeat from unregistered node {msg.node_id}", node_id=msg.node_id, field="node_id")
        if msg.utilization is not None:
            published = self.log.published_live(record.node_id)
            if published is None or published["utilization"] != record.utilization:
                self.log.record(record, "heartbeat load")
        return record.last_seen

    def report(self, node_id: Any, capabilities: Any, degraded: Any = (), utilization: Any = None) -> RegistryRecord:
        """A re-probe: the node's current capabilities and what it lost since it joined. Refused
        when it claims a tier the node did not join Ray with (to gain a tier a node rejoins)."""
        msg = read_report(node_id, capabilities, degraded, utilization)
        node_id, caps = msg.node_id, msg.capabilities
        record = self.store.get(node_id)
        if record is None:
            raise RegistrationError(f"report from unregistered node {node_id}", node_id=node_id, field="node_id")
        if caps.name != record.name:
            raise RegistrationError(f"node {node_id} is {record.name!r} but reports as {caps.name!r}", node_id=node_id, field="capabilities.name")
        ray_node = self.adapter.alive_node(node_id)
        if ray_node is None:
            raise RegistrationError(f"report from node {node_id}, which is not an alive node in Ray's node table",
                                    node_id=node_id, field="node_id")
        check_joined_tiers(caps, ray_node.joined_tiers, node_id, "report")
        update: dict[str, Any] = {"capabilities": caps, "degraded": msg.degraded, "last_seen": max(record.last_seen, self.clock())}
        if msg.utilization is not None:
            update["utilization"] = msg.utilization
        before, record = record, record.model_copy(update=update)
        self.store.upsert(record)
        self.log.record(record, "re-probed" + (f", degraded: {'; '.join(msg.degraded)}" if msg.degraded else ""),
                        identity=_identity_changed(before, record))
        return record

    # -- what the health monitor sends ---------------------------------------------------------------
    def report_warmth(self, node_id: Any, warm: Any) -> RegistryRecord:
        """The artifact URIs the node's cache holds (its probe reports them when they change, and
        after a prefetch): stored sorted in ``RegistryRecord.warm``, and the whole record numbered
        in the change feed when they changed (placement's warmth reads them). Refused with a
        ``RegistrationError`` naming ``warm`` (or ``node_id``) when malformed or unregistered."""
        if not isinstance(node_id, str) or not node_id:
            raise RegistrationError("a warmth report needs a node id", node_id=None, field="node_id")
        if isinstance(warm, (str, bytes)) or not isinstance(warm, (list, tuple, set, frozenset)):
            raise RegistrationError(f"warm is a list of artifact URIs, got {type(warm).__name__}", node_id=node_id, field="warm")
        if len(warm) > MAX_WARM:
            raise RegistrationError(f"warm lists {len(warm)} artifacts; at most {MAX_WARM}", node_id=node_id, field="warm")
        for i, uri in enumerate(warm):
            if not isinstance(uri, str) or not uri or len(uri) > 4096:
                raise RegistrationError("an artifact URI is a non-empty string of at most 4096 characters",
                                        node_id=node_id, field=f"warm[{i}]")
        record = self.store.get(node_id)
        if record is None:
            raise RegistrationError(f"warmth report from unregistered node {node_id}", node_id=node_id, field="node_id")
        held = tuple(sorted(set(warm)))
        if held == record.warm:
            return record
        record = record.model_copy(update={"warm": held})
        self.store.upsert(record)
        self.log.record(record, "warmth reported", identity=True)
        return record

    def apply(self, events: Iterable[Any]) -> int:
        """Apply fleet events: status changes, flap holds, collection, cordons and drains. Returns
        how many changed a record.

        All or nothing: the whole batch is read first (a malformed event refuses it with a
        ``RegistrationError`` naming ``events[i].<field>``), then planned in memory (an illegal
        status change refuses it with a ``TransitionError``), then written in one transaction, and
        only then numbered in the change feed (one number per event that changed a record, with
        the event's cause and stimulus id). Events about a node the store does not hold change
        nothing; the one exception is a flap hold for a node Ray has alive under that name whose
        probe has not registered yet, kept aside by node id (at most ``MAX_HOLD_S`` ahead) until
        it registers. A ``NodeAdded`` for such a node is published as ``seen`` (no record)."""
        return self._apply(events)[0]

    def _apply(self, events: Iterable[Any]) -> tuple[int, dict[str, RegistryRecord]]:
        now = self.clock()
        batch = read_events(events, now)
        known: dict[str, RegistryRecord | None] = {}
        upserts: dict[str, RegistryRecord] = {}
        collect: list[tuple[str, float]] = []
        pending: dict[str, float] | None = None
        feed: list[tuple[str, str, Any]] = []  # (what, node id, event), numbered once written
        changed = 0
        for event in batch:
            if event.node_id not in known:
                known[event.node_id] = self.store.get(event.node_id)
            record = known[event.node_id]
            if isinstance(event, NodeCollected):
                if record is not None:
                    known[event.node_id] = None  # collected after its changes so far (the trail keeps them)
                    collect.append((event.node_id, event.at))
                    feed.append(("collected", event.node_id, event))
                    changed += 1
                continue
            if record is None:
                if isinstance(event, NodeFlapHeld) and self._may_hold_unregistered(event, now):
                    pending = pending if pending is not None else dict(self.store.get_json(_HOLDS_KEY, {}))
                    pending[event.node_id] = max(event.until, pending.get(event.node_id, 0.0))
                elif isinstance(event, NodeAdded) and not self.store.was_collected(event.node_id):
                    feed.append(("seen", event.node_id, event))
                continue  # not registered yet (or already collected): nothing to update
            update = _planned_update(event, record)
            if update:
                known[event.node_id] = upserts[event.node_id] = record.model_copy(update=update)
                feed.append(("record", event.node_id, event))
                changed += 1
        documents = None if pending is None else {_HOLDS_KEY: {k: v for k, v in pending.items() if v > now}}
        if upserts or collect or documents:
            self.store.write(upserts.values(), collect, documents)
        for what, node_id, event in feed:
            cause = event_cause(event)
            if what == "record":
                self.log.record(upserts[node_id], cause, event.stimulus_id)
            elif what == "collected":
                self.log.collected(node_id, cause, event.stimulus_id)
            else:
                self.log.seen(node_id, cause, event.stimulus_id)
        return changed, upserts

    def _may_hold_unregistered(self, event: NodeFlapHeld, now: float) -> bool:
        """A hold for a node id the store does not hold is kept only for a node Ray has alive under
        the event's name, never collected: a hold forged for an unknown id (issue 12: it held a
        real node off for 10^6 s) changes nothing."""
        if event.until <= now or self.store.was_collected(event.node_id):
            return False
        ray_node = self.adapter.alive_node(event.node_id)
        return ray_node is not None and ray_node.name == event.name

    def reconcile_with_ray(self) -> list[str]:
        """On start (a new head on the same store, a restarted registry): a record Ray does not
        know alive becomes ``offline``, never stays ``active``/``draining``; the health monitor
        then times its drain grace. Written through ``apply`` (a ``NodeLost`` each, stimulus
        ``registry-start-<epoch>``). Returns the node ids changed."""
        alive = {n.node_id for n in self.adapter.list_nodes() if n.alive}
        now = self.clock()
        sid = f"registry-start-{self.log.epoch[:12]}"
        events = [NodeLost(node_id=r.node_id, name=r.name, at=now, stimulus_id=sid, ray_dead=True,
                           reason="not alive in Ray's node table when the registry started")
                  for r in self.store.list([NodeStatus.ACTIVE, NodeStatus.DRAINING]) if r.node_id not in alive]
        if not events:
            return []
        try:
            return list(self._apply(events)[1])
        except RegistrationError:  # a record no registration could have written: leave it, move the rest
            changed: list[str] = []
            for event in events:
                try:
                    changed += list(self._apply([event])[1])
                except RegistrationError:
                    continue
            return changed

    def health_inputs(self) -> dict[str, dict[str, Any]]:
        """Per node id: ``last_seen`` and ``degraded`` (what the monitor feeds its policy)."""
        return {r.node_id: {"last_seen": r.last_seen, "degraded": list(r.degraded)} for r in self.store.list()}

    # -- what everybody reads ----------------------------------------------------------------------------
    def records(self, statuses: Iterable[str | NodeStatus] | None = None) -> list[RegistryRecord]:
        wanted = None if statuses is None else [NodeStatus(s) for s in statuses]
        return self.store.list(wanted)

    def record(self, node: str) -> RegistryRecord:
        """The record of a node id (or unique prefix) or name; ``NodeNotFoundError`` otherwise.
        A name held by several records (a rejoin) resolves to the newest."""
        exact = self.store.get(node)
        if exact is not None:
            return exact
        matches = [r for r in self.store.list() if r.name == node or r.node_id.startswith(node)]
        if not matches:
            raise NodeNotFoundError(node)
        return max(matches, key=lambda r: r.registered_at)

    def collected(self) -> list[RegistryRecord]:
        return self.store.collected()

    def collected_ids(self) -> list[str]:
        return sorted(self.store.collected_ids())

    # -- operator changes (events through apply, like every other status change) -------------------------
    def set_cordoned(self, node: str, cordoned: bool, stimulus_id: str | None = None, reason: str | None = None) -> RegistryRecord:
        """Cordon or uncordon (a ``NodeCordoned``/``NodeUncordoned`` through ``apply``). Uncordoning
        a draining node withdraws the drain: it is active again (an uncordon withdraws a drain)."""
        record = self.record(node)
        kind = NodeCordoned if cordoned else NodeUncordoned
        return self._operator(kind, record, stimulus_id or _stimulus("cordon" if cordoned else "uncordon"), reason)

    def mark_draining(self, node: str, stimulus_id: str | None = None, reason: str | None = None) -> RegistryRecord:
        """Drain: ``draining`` and cordoned, the drain holding across a partition (a
        ``NodeDrainRequested`` through ``apply``; ``TransitionError`` for a node that cannot drain)."""
        record = self.record(node)
        return self._operator(NodeDrainRequested, record, stimulus_id or _stimulus("drain"), reason)

    def _operator(self, kind: type, record: RegistryRecord, stimulus_id: str, reason: str | None) -> RegistryRecord:
        event: dict[str, Any] = dict(kind=kind.model_fields["kind"].default, node_id=record.node_id, name=record.name,
                                     at=self.clock(), stimulus_id=stimulus_id)
        if reason is not None:
            event["reason"] = reason
        _, upserts = self._apply([event])  # read like any event: a bad reason or stimulus id is refused, naming it
        return upserts.get(record.node_id) or self.record(record.node_id)

    # -- the change feed -----------------------------------------------------------------------------------
    def changes(self, since_seq: Any, epoch: Any = None) -> ChangePage:
        """What changed after number ``since_seq`` of incarnation ``epoch`` (one ``RecordChange`` per
        node), or ``changes=None``: resync from ``snapshot()`` (another epoch, a number older than
        the log keeps, or not a number). Costs the changes, not the fleet."""
        return self.log.page(epoch, since_seq, self.store.get)

    def snapshot(self) -> FeedSnapshot:
        """Every record, with the number and epoch a follower asks ``changes`` from next."""
        return FeedSnapshot(self.log.epoch, self.log.seq, tuple(self.store.list()))

    def get_state(self, key: str, default: Any = None) -> Any:
        return self.store.get_json(key, default)

    def put_state(self, key: str, value: Any) -> None:
        self.store.put_json(key, value)


def _planned_update(event: Any, record: RegistryRecord) -> dict[str, Any]:
    """The fields ``event`` changes in ``record`` (``TransitionError`` for an illegal status change)."""
    update: dict[str, Any] = {}
    target = event.status
    if isinstance(event, NodeUncordoned):
        update.update(cordoned=False, drained=False)  # an uncordon withdraws a drain
        target = NodeStatus.ACTIVE if record.status is NodeStatus.DRAINING else None
    elif target is NodeStatus.ACTIVE and record.drained:
        target = NodeStatus.DRAINING  # back from a partition: the operator's drain still holds
    if target is not None and target is not record.status:
        check_transition(f"node {event.node_id[:12]} ({record.name})", record.status, target)
        update.update(status=target, status_since=event.at)
    if isinstance(event, NodeFlapHeld):
        update["held_until"] = event.until
    elif isinstance(event, NodeFlapReleased):
        update["held_until"] = None
    elif isinstance(event, NodeDegraded):
        update["degraded"] = event.reasons
    elif isinstance(event, NodeCordoned):
        update["cordoned"] = True
    elif isinstance(event, NodeDrainRequested):
        update.update(cordoned=True, drained=True)
    return update


def _identity_changed(before: RegistryRecord, after: RegistryRecord) -> bool:
    """Whether a follower needs the whole record: what only a registration or a re-probe changes."""
    return (before.capabilities != after.capabilities or before.name != after.name or before.labels != after.labels
            or before.profile != after.profile or before.registered_at != after.registered_at or before.warm != after.warm)


def _stimulus(what: str) -> str:
    """A fresh stimulus id for an operator's change that came without one."""
    return f"{what}-{uuid.uuid4().hex[:12]}"


@ray.remote(num_cpus=0, resources={HEAD_RESOURCE: 0.001}, max_restarts=-1, max_task_retries=-1)
class RegistryActor:
    """The named, detached registry actor (``fabric.registry``). Every method is a few short
    SQLite statements (a heartbeat: none), so it runs them inline rather than hopping threads; a
    task writes the heartbeats behind every ``HEARTBEAT_FLUSH_S``."""

    def __init__(self, store_path: str | None = None, adapter: Any = None) -> None:
        adapter = adapter if adapter is not None else RayAdapter()
        path = Path(store_path).expanduser() if store_path else default_store_path(adapter.gcs_address())
        self.registry = Registry(FabricStore(path, heartbeat_flush_s=HEARTBEAT_FLUSH_S), adapter)
        self.reconciled = self.registry.reconcile_with_ray()
        self.started_at = time.time()
        self._flusher = asyncio.get_event_loop().create_task(self._flush_heartbeats(HEARTBEAT_FLUSH_S))
        self.channel = HeartbeatChannelHost(self.registry)
        """Heartbeats as signed datagrams (``health.heartbeat_transport: udp``)."""

    async def _flush_heartbeats(self, period_s: float) -> None:
        """Write the pending heartbeats every ``period_s``, for ever. A flush that fails is printed
        and its heartbeats stay pending: the next period writes them."""
        store = self.registry.store
        while True:
            await asyncio.sleep(period_s)
            try:
                store.flush()
            except Exception as exc:
                print(f"[fabric.registry] {store.pending_heartbeats} heartbeats not written yet, retried in {period_s} s: "
                      f"{type(exc).__name__}: {exc}")

    async def ping(self) -> dict[str, Any]:
        import os

        return {"pid": os.getpid(), "node_id": self.registry.adapter.current_node_id(), "started_at": self.started_at, "store": str(self.registry.store.path),
                "reconciled_offline": list(self.reconciled), "pending_heartbeats": self.registry.store.pending_heartbeats,
                "heartbeat_channel": self.channel.stats(),
                "recovered_from": str(self.registry.store.recovered_from) if self.registry.store.recovered_from else None}

    async def register(self, node_id: str, capabilities: Any, utilization: Any = None) -> RegistryRecord:
        return self.registry.register(node_id, capabilities, utilization=utilization)

    async def heartbeat(self, node_id: str, utilization: Any = None) -> float:
        return self.registry.heartbeat(node_id, utilization)

    async def heartbeat_channel(self, node_id: str) -> dict[str, Any] | None:
        """Where (and with which key) node ``node_id`` may send its heartbeats as datagrams; None
        when the settings keep heartbeats on Ray calls (``actors.registry_channel``)."""
        return await self.channel.offer(node_id)

    async def report(self, node_id: str, capabilities: Any, degraded: list[str] | tuple[str, ...] = (), utilization: Any = None) -> RegistryRecord:
        return self.registry.report(node_id, capabilities, degraded, utilization)

    async def report_warmth(self, node_id: str, warm: list[str]) -> RegistryRecord:
        return self.registry.report_warmth(node_id, warm)

    async def apply(self, events: list[Any]) -> int:
        return self.registry.apply(events)

    async def health_inputs(self) -> dict[str, dict[str, Any]]:
        return self.registry.health_inputs()

    async def records(self, statuses: list[str] | None = None) -> list[RegistryRecord]:
        return self.registry.records(statuses)

    async def record(self, node: str) -> RegistryRecord:
        return self.registry.record(node)

    async def collected(self) -> list[RegistryRecord]:
        return self.registry.collected()

    async def collected_ids(self) -> list[str]:
        return self.registry.collected_ids()

    async def set_cordoned(self, node: str, cordoned: bool, stimulus_id: str | None = None, reason: str | None = None) -> RegistryRecord:
        return self.registry.set_cordoned(node, cordoned, stimulus_id=stimulus_id, reason=reason)

    async def mark_draining(self, node: str, stimulus_id: str | None = None, reason: str | None = None) -> RegistryRecord:
        return self.registry.mark_draining(node, stimulus_id=stimulus_id, reason=reason)

    async def changes(self, since_seq: int, epoch: str | None = None) -> ChangePage:
        return self.registry.changes(since_seq, epoch)

    async def snapshot(self) -> FeedSnapshot:
        return self.registry.snapshot()

    async def get_state(self, key: str, default: Any = None) -> Any:
        return self.registry.get_state(key, default)

    async def put_state(self, key: str, value: Any) -> None:
        self.registry.put_state(key, value)

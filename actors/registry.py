"""RegistryActor: seed 002 § 2's capability registry, durable, on the head node.

One record per Ray node id (``fabric.store.RegistryRecord``): capabilities, Ray labels, status
``active | draining | offline | dead``, ``last_seen``, utilisation, limitations, flap hold,
cordon. The records live in SQLite (``fabric.store``), so a registry that restarts (a detached
actor re-runs ``__init__``) re-reads them; the health monitor reconciles them with Ray's node
table on its next tick.

What it refuses, with a ``RegistrationError`` and nothing stored: a registration for a node id
Ray does not have alive (a probe cannot invent a node), one whose name contradicts the node's
``fabric.io/name`` label, one for a node already collected (dead is terminal), and any report
that does not validate (the error names the field). ``Registry`` is the logic, testable with a
fake ``RayAdapter``; ``RegistryActor`` is the thin async Ray actor around it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import ray
from pydantic import ValidationError

from actors.ray_adapter import HEAD_RESOURCE, RayAdapter
from fabric.capabilities import NodeCapabilities
from fabric.errors import NodeNotFoundError, RegistrationError
from fabric.events import NodeCollected, NodeDegraded, NodeFlapHeld, NodeFlapReleased, parse_event
from fabric.health import NAME_LABEL, PROFILE_LABEL
from fabric.lifecycle import NodeStatus, check_transition
from fabric.store import FabricStore, RegistryRecord, Utilization

_HOLDS_KEY = "registry.flap_holds"


def _validation_error(exc: ValidationError, node_id: str, prefix: str) -> RegistrationError:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in (prefix, *err.get("loc", ())) if p != "")
    return RegistrationError(f"malformed report from node {node_id}: {field}: {err.get('msg', 'invalid')}", node_id=node_id, field=field)


def _as_capabilities(value: Any, node_id: str) -> NodeCapabilities:
    if isinstance(value, NodeCapabilities):
        return value
    if not isinstance(value, Mapping):
        raise RegistrationError(f"malformed report from node {node_id}: capabilities must be a mapping, got {type(value).__name__}",
                                node_id=node_id, field="capabilities")
    try:
        return NodeCapabilities.model_validate(dict(value))
    except ValidationError as exc:
        raise _validation_error(exc, node_id, "capabilities") from None


def _as_utilization(value: Any, node_id: str) -> Utilization | None:
    if value is None or isinstance(value, Utilization):
        return value
    if not isinstance(value, Mapping):
        raise RegistrationError(f"malformed report from node {node_id}: utilization must be a mapping", node_id=node_id, field="utilization")
    try:
        return Utilization.model_validate(dict(value))
    except ValidationError as exc:
        raise _validation_error(exc, node_id, "utilization") from None


class Registry:
    """The registry's logic over a store and a Ray adapter (real or fake) and a clock."""

    def __init__(self, store: FabricStore, adapter: Any, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.adapter = adapter
        self.clock = clock

    # -- what probes send ------------------------------------------------------------------------
    def register(self, node_id: Any, capabilities: Any, *, utilization: Any = None) -> RegistryRecord:
        """Register (or re-register, after a probe restart) the node ``node_id``."""
        if not isinstance(node_id, str) or not node_id:
            raise RegistrationError(f"malformed registration: node_id must be a non-empty string, got {node_id!r}",
                                    node_id=str(node_id), field="node_id")
        caps = _as_capabilities(capabilities, node_id)
        util = _as_utilization(utilization, node_id)
        if node_id in self.store.collected_ids():
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
        now = self.clock()
        existing = self.store.get(node_id)
        if existing is not None:
            record = existing.model_copy(update={"capabilities": caps, "last_seen": max(existing.last_seen, now),
                                                 **({"utilization": util} if util is not None else {})})
        else:
            hold = self.store.get_json(_HOLDS_KEY, {}).get(caps.name)
            record = RegistryRecord(
                node_id=node_id, name=caps.name, capabilities=caps, labels=dict(ray_node.labels),
                status=NodeStatus.ACTIVE, status_since=now, registered_at=now, last_seen=now,
                utilization=util or Utilization(), held_until=hold if hold and hold > now else None,
                profile=ray_node.labels.get(PROFILE_LABEL) or (caps.source if caps.source != "live" else None),
            )
        self.store.upsert(record)
        return record

    def heartbeat(self, node_id: str, utilization: Any = None) -> float:
        """A heartbeat (with utilisation); the recorded ``last_seen``."""
        util = _as_utilization(utilization, node_id)
        record = self.store.touch(node_id, self.clock(), util)
        if record is None:
            raise RegistrationError(f"heartbeat from unregistered node {node_id}", node_id=node_id, field="node_id")
        return record.last_seen

    def report(self, node_id: str, capabilities: Any, degraded: Iterable[str] = (), utilization: Any = None) -> RegistryRecord:
        """A re-probe: the node's current capabilities and what it lost since it joined."""
        caps = _as_capabilities(capabilities, node_id)
        util = _as_utilization(utilization, node_id)
        record = self.store.get(node_id)
        if record is None:
            raise RegistrationError(f"report from unregistered node {node_id}", node_id=node_id, field="node_id")
        if caps.name != record.name:
            raise RegistrationError(f"node {node_id} is {record.name!r} but reports as {caps.name!r}", node_id=node_id, field="capabilities.name")
        update: dict[str, Any] = {"capabilities": caps, "degraded": tuple(str(d) for d in degraded), "last_seen": max(record.last_seen, self.clock())}
        if util is not None:
            update["utilization"] = util
        record = record.model_copy(update=update)
        self.store.upsert(record)
        return record

    # -- what the health monitor sends ---------------------------------------------------------------
    def apply(self, events: Iterable[Any]) -> int:
        """Apply fleet events: status changes, flap holds, collection. Returns how many changed a record."""
        changed = 0
        for raw in events:
            event = parse_event(raw) if isinstance(raw, Mapping) else raw
            if isinstance(event, NodeFlapHeld):
                holds = self.store.get_json(_HOLDS_KEY, {})
                holds[event.name] = max(event.until, holds.get(event.name, 0.0))
                self.store.put_json(_HOLDS_KEY, holds)
            if isinstance(event, NodeCollected):
                changed += self.store.collect(event.node_id, event.at) is not None
                continue
            record = self.store.get(event.node_id)
            if record is None:
                continue  # not registered yet (or already collected): nothing to update
            update: dict[str, Any] = {}
            target = event.status
            if target is NodeStatus.ACTIVE and record.drained:
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
            if update:
                self.store.upsert(record.model_copy(update=update))
                changed += 1
        return changed

    def reconcile_with_ray(self) -> list[str]:
        """On start (a new head on the same store, a restarted registry): a record Ray does not
        know alive becomes ``offline``, never stays ``active``/``draining``; the health monitor
        then times its drain grace. Returns the node ids changed."""
        alive = {n.node_id for n in self.adapter.list_nodes() if n.alive}
        now = self.clock()
        changed = []
        for record in self.store.list([NodeStatus.ACTIVE, NodeStatus.DRAINING]):
            if record.node_id in alive:
                continue
            status = check_transition(f"node {record.node_id[:12]} ({record.name})", record.status, NodeStatus.OFFLINE)
            self.store.upsert(record.model_copy(update={"status": status, "status_since": now}))
            changed.append(record.node_id)
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

    # -- operator changes --------------------------------------------------------------------------------
    def set_cordoned(self, node: str, cordoned: bool) -> RegistryRecord:
        """Cordon or uncordon. Uncordoning a draining node withdraws the drain: it is active again
        (seed 000: uncordon withdraws a drain)."""
        record = self.record(node)
        update: dict[str, Any] = {"cordoned": bool(cordoned)}
        if not cordoned:
            update["drained"] = False
        if not cordoned and record.status is NodeStatus.DRAINING:
            update["status"] = check_transition(f"node {record.node_id[:12]} ({record.name})", record.status, NodeStatus.ACTIVE)
            update["status_since"] = self.clock()
        record = record.model_copy(update=update)
        self.store.upsert(record)
        return record

    def mark_draining(self, node: str) -> RegistryRecord:
        record = self.record(node)
        status = check_transition(f"node {record.node_id[:12]} ({record.name})", record.status, NodeStatus.DRAINING)
        record = record.model_copy(update={"status": status, "status_since": self.clock(), "cordoned": True, "drained": True})
        self.store.upsert(record)
        return record

    def get_state(self, key: str, default: Any = None) -> Any:
        return self.store.get_json(key, default)

    def put_state(self, key: str, value: Any) -> None:
        self.store.put_json(key, value)


def default_store_path(gcs_address: str, environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/adaptive-fabric/clusters/<head address>/fabric.db`` (``~/.local/share`` without
    ``XDG_DATA_HOME``) on the head node. Keyed by the head's GCS address, which a restarted head
    keeps (``ray start --head --port``), so the records outlive a head restart; Ray's session
    directory would not (a new head starts a new session)."""
    import os

    env = os.environ if environ is None else environ
    base = Path(env.get("XDG_DATA_HOME") or Path(env.get("HOME") or Path.home()) / ".local" / "share")
    key = "".join(c if c.isalnum() or c in ".-" else "-" for c in gcs_address) or "local"
    return base / "adaptive-fabric" / "clusters" / key / "fabric.db"


@ray.remote(num_cpus=0, resources={HEAD_RESOURCE: 0.001}, max_restarts=-1, max_task_retries=-1)
class RegistryActor:
    """The named, detached registry actor (``fabric.registry``). Every method is a few short
    SQLite statements, so it runs them inline rather than hopping threads."""

    def __init__(self, store_path: str | None = None) -> None:
        adapter = RayAdapter()
        path = Path(store_path).expanduser() if store_path else default_store_path(adapter.gcs_address())
        self.registry = Registry(FabricStore(path), adapter)
        self.reconciled = self.registry.reconcile_with_ray()
        self.started_at = time.time()

    async def ping(self) -> dict[str, Any]:
        import os

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(), "started_at": self.started_at, "store": str(self.registry.store.path),
                "reconciled_offline": list(self.reconciled),
                "recovered_from": str(self.registry.store.recovered_from) if self.registry.store.recovered_from else None}

    async def register(self, node_id: str, capabilities: Any, utilization: Any = None) -> RegistryRecord:
        return self.registry.register(node_id, capabilities, utilization=utilization)

    async def heartbeat(self, node_id: str, utilization: Any = None) -> float:
        return self.registry.heartbeat(node_id, utilization)

    async def report(self, node_id: str, capabilities: Any, degraded: list[str] | tuple[str, ...] = (), utilization: Any = None) -> RegistryRecord:
        return self.registry.report(node_id, capabilities, degraded, utilization)

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

    async def set_cordoned(self, node: str, cordoned: bool) -> RegistryRecord:
        return self.registry.set_cordoned(node, cordoned)

    async def mark_draining(self, node: str) -> RegistryRecord:
        return self.registry.mark_draining(node)

    async def get_state(self, key: str, default: Any = None) -> Any:
        return self.registry.get_state(key, default)

    async def put_state(self, key: str, value: Any) -> None:
        self.registry.put_state(key, value)

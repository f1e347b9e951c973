"""The registry's record of a node, a node's load, and the registry's change feed: pure, no I/O.

``fabric.store`` keeps the records in SQLite; the registry, the health monitor and the scheduler's
feed read and write them; the wire messages (``fabric.core.messages``) validate against them.

The change feed (``ChangePage``, ``RecordChange``, ``FeedSnapshot``) is how a follower (the
scheduler's ``FleetFeed``) keeps a copy of the records without listing them all: every write that
changes a record gets the next sequence number of the registry's incarnation (its ``epoch``), and a
follower asks for what changed after the last number it saw. Most changes touch only a record's
live fields (``LIVE_FIELDS``: status, load, holds, cordon), so those travel alone; the whole
record travels when the node is new to the follower or its capabilities or labels changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from fabric.core.capabilities import NodeCapabilities
from fabric.core.lifecycle import NodeStatus
from fabric.core.names import (CLOUD_LABEL, INSTANCE_LABEL, POOL_LABEL, POOL_TIER_LABEL, PROVIDER_LABEL, SPARE_LABEL, TIER_LABEL,
                               ZONE_LABEL)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuUtilization(_Model):
    """One GPU's load, as NVML reports it."""

    index: int = Field(default=0, ge=0)
    gpu_percent: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    memory_used_mib: int = Field(default=0, ge=0)
    memory_total_mib: int = Field(default=0, ge=0)
    encoder_percent: float | None = Field(default=None, ge=0, allow_inf_nan=False)


class Utilization(_Model):
    """A node's load at one heartbeat."""

    cpu_percent: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    memory_percent: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    gpus: tuple[GpuUtilization, ...] = ()

    @property
    def fraction(self) -> float:
        """One number in [0, 1] for ranking: the busiest of CPU and any GPU."""
        vals = [self.cpu_percent] + [g.gpu_percent for g in self.gpus]
        return max(0.0, min(1.0, max(vals) / 100.0))


class RegistryRecord(_Model):
    """One node in the registry, keyed by Ray's node id."""

    node_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    capabilities: NodeCapabilities
    """What the node's probe reports now (a degraded node reports less than it joined with)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """The Ray labels the node joined with (fixed for its lifetime)."""
    ray_resources: dict[str, float] = Field(default_factory=dict)
    """The Ray resources the node joined with (totals: CPU, GPU, memory, custom resources,
    ``accelerator_type:<T>``), fixed for its lifetime: what ``resources=`` and ``accelerator_type=``
    of a call are checked against."""
    status: NodeStatus = NodeStatus.ACTIVE
    status_since: float = 0.0
    registered_at: float = 0.0
    last_seen: float = 0.0
    """Latest heartbeat (epoch seconds)."""
    utilization: Utilization = Field(default_factory=Utilization)
    degraded: tuple[str, ...] = ()
    """What the node lost since it joined (a GPU that vanished, an encoder that stopped)."""
    held_until: float | None = None
    """Flap damping: held off placement until then."""
    profile: str | None = None
    """The recording the node's probe reads (``live`` when none)."""
    cordoned: bool = False
    """No new placements (operator cordon or drain)."""
    drained: bool = False
    """An operator drain is in force: a node that comes back from ``offline`` (a partition) returns
    to ``draining``, not ``active``. Only an uncordon withdraws it."""
    warm: tuple[str, ...] = ()
    """Artifact URIs the node's cache holds, as its probe last reported them (sorted): placement's
    warmth (``NodeRecord.warm``)."""

    @property
    def limitations(self) -> tuple[str, ...]:
        """The node's ``limitations``: the probe's notes plus what the node lost."""
        return tuple(self.capabilities.limitations.notes) + self.degraded

    def flap_held(self, now: float) -> bool:
        return self.held_until is not None and now < self.held_until

    def to_node_record(self, now: float, *, running: int = 0, max_concurrent_tasks: int | None = None,
                       previous: Any = None) -> Any:
        """The placement engine's view of this record (``fabric.core.placement.NodeRecord``): what the
        scheduler places on and what ``handle.nodes()`` returns. ``previous``: the view built from an
        earlier version of this record; when only live fields moved (same capabilities object, name,
        labels, slot cap, no usage), it is copied with those (``NodeRecord.with_live``), equal to a
        build from scratch at a fraction of its cost."""
        global _NodeRecord
        if _NodeRecord is None:  # placement imports this module: import it late, once (the feed calls this per change)
            from fabric.core.placement import NodeRecord as _NodeRecord
        labels = self.labels
        if (previous is not None and previous.capabilities is self.capabilities and previous.node_id == self.node_id
                and previous.name == self.name and previous.max_concurrent_tasks == max_concurrent_tasks
                and previous.running == running == 0 and previous.reserved_cpus == 0.0 and previous.reserved_memory_mib == 0.0
                and not any(previous.gpu_reserved) and not previous.unhealthy and previous.utilization_cap == 1.0
                and previous.zone == labels.get(ZONE_LABEL) and previous.cloud == labels.get(CLOUD_LABEL)
                and previous.pool == labels.get(POOL_LABEL)
                and previous.pool_tier == labels.get(POOL_TIER_LABEL) and previous.label_tier == _label_tier(labels.get(TIER_LABEL))
                and previous.tier == self.capabilities.tier
                and previous.ray_labels == labels and previous.ray_resources == self.ray_resources
                and (previous.warm == frozenset(self.warm) if self.warm else not previous.warm)):
            return previous.with_live(status=self.status, utilization=self.utilization.fraction, last_seen=self.last_seen,
                                      cordoned=self.cordoned, flap_held=self.flap_held(now))
        return _NodeRecord(  # tier None: the tier the capabilities serve
            node_id=self.node_id, name=self.name, capabilities=self.capabilities, status=self.status,
            tier=None, utilization=self.utilization.fraction, running=running, last_seen=self.last_seen,
            cordoned=self.cordoned, flap_held=self.flap_held(now), max_concurrent_tasks=max_concurrent_tasks,
            zone=labels.get(ZONE_LABEL), cloud=labels.get(CLOUD_LABEL), pool=labels.get(POOL_LABEL), pool_tier=labels.get(POOL_TIER_LABEL),
            label_tier=_label_tier(labels.get(TIER_LABEL)), warm=frozenset(self.warm),
            instance_id=labels.get(INSTANCE_LABEL) or None, provider=labels.get(PROVIDER_LABEL) or None,
            spare=labels.get(SPARE_LABEL) == "true", ray_labels=labels, ray_resources=self.ray_resources,
        )


_NodeRecord: Any = None


@lru_cache(maxsize=64)
def _label_tier(value: str | None) -> Any:
    """The compute tier a ``fabric.io/tier`` label names, or None (no label, or not a tier)."""
    from fabric.core.tiers import ComputeTier

    if not value:
        return None
    try:
        return ComputeTier.parse(value)
    except ValueError:
        return None


# -- the change feed ---------------------------------------------------------------------------------
LIVE_FIELDS = ("status", "status_since", "last_seen", "utilization", "degraded", "held_until", "cordoned", "drained")
"""The fields of a ``RegistryRecord`` that change while a node lives (heartbeats, health, operator).
The others (``node_id``, ``name``, ``capabilities``, ``labels``, ``ray_resources``, ``registered_at``, ``profile``,
``warm``) change only when a node registers, re-probes or reports its warmth (the whole record travels)."""

CHANGE_KINDS = ("record", "update", "collected", "seen")

LOAD_CHANGE_MIN = 0.05
"""The smallest move of a node's load (``NodeRecord.utilization``, a fraction) worth a fleet change:
the scheduler's follower drops a smaller one (small load wobble)."""


@dataclass(frozen=True, slots=True)
class RecordChange:
    """What one node's record is now, in a page of the registry's change feed.

    ``kind``: ``record`` (``record`` is the whole record: new to the follower, or its capabilities
    or labels changed), ``update`` (``live`` holds the values of ``LIVE_FIELDS``; the rest is what
    the follower already holds), ``collected`` (a tombstone: the record went to the collected
    trail, dead) or ``seen`` (Ray runs a fabric raylet the registry holds no record of yet; its
    probe has not registered). ``cause`` and ``stimulus_id`` say why it changed."""

    node_id: str
    seq: int
    """The sequence number of the newest change to this node the page includes."""
    kind: str
    cause: str = ""
    """Why, in words: ``registered``, ``missed heartbeats for 3.2 s``, ``operator drain``..."""
    stimulus_id: str | None = None
    """The id of the event that caused it (None for what a probe sent: a registration, a heartbeat)."""
    record: RegistryRecord | None = None
    live: Mapping[str, Any] | None = None

    def __reduce__(self) -> Any:
        # Pages are hot: a change crosses the actor boundary as plain values (a pickler handles
        # those natively, where each enum or model would cost it a Python call), not through
        # the slots dataclass's generic state.
        return (_unpack_change, (self.node_id, self.seq, self.kind, self.cause, self.stimulus_id, self.record,
                                 None if self.live is None else _pack_live(self.live)))

    def applied_to(self, base: RegistryRecord | None) -> RegistryRecord | None:
        """The record this change leaves, given the one the follower held (None: collected, or a
        raylet without a record). ``KeyError`` for an ``update`` to a record the follower lacks."""
        if self.kind == "record":
            return self.record
        if self.kind == "update":
            if base is None:
                raise KeyError(self.node_id)
            return _rebuilt(RegistryRecord, {**base.__dict__, **(self.live or {})})
        return None


@dataclass(frozen=True, slots=True)
class ChangePage:
    """The registry's answer to "what changed after ``since``": ``changes`` (one per node, oldest
    first) and the sequence number to ask from next (``seq``), or ``changes=None``: resync (the
    number is from another incarnation of the registry, or older than what it keeps)."""

    epoch: str
    seq: int
    changes: tuple[RecordChange, ...] | None

    def __reduce__(self) -> Any:  # the changes as rows of plain values: no pickler call per change
        rows = None if self.changes is None else tuple(c.__reduce__()[1] for c in self.changes)
        return (_unpack_page, (self.epoch, self.seq, rows))


@dataclass(frozen=True, slots=True)
class FeedSnapshot:
    """Every record the registry holds, as of sequence number ``seq`` of incarnation ``epoch``:
    what a follower starts (or resyncs) from."""

    epoch: str
    seq: int
    records: tuple[RegistryRecord, ...]

    def __reduce__(self) -> Any:
        return (FeedSnapshot, (self.epoch, self.seq, self.records))


def live_fields(record: RegistryRecord) -> dict[str, Any]:
    """The values of ``LIVE_FIELDS`` in ``record``."""
    return {f: getattr(record, f) for f in LIVE_FIELDS}


def _pack_live(live: Mapping[str, Any]) -> tuple:
    u = live["utilization"]
    return (NodeStatus(live["status"]).value, live["status_since"], live["last_seen"],
            (u.cpu_percent, u.memory_percent,
             tuple((g.index, g.gpu_percent, g.memory_used_mib, g.memory_total_mib, g.encoder_percent) for g in u.gpus)),
            tuple(live["degraded"]), live["held_until"], live["cordoned"], live["drained"])


def _unpack_change(node_id: str, seq: int, kind: str, cause: str, stimulus_id: str | None, record: RegistryRecord | None,
                   packed: tuple | None) -> RecordChange:
    live = None
    if packed is not None:
        status, since, last_seen, (cpu, memory, gpus), degraded, held_until, cordoned, drained = packed
        # Values a validated record held: rebuilt without validating again.
        util = _rebuilt(Utilization, {"cpu_percent": cpu, "memory_percent": memory, "gpus": tuple(
            _rebuilt(GpuUtilization, {"index": i, "gpu_percent": g, "memory_used_mib": mu, "memory_total_mib": mt, "encoder_percent": e})
            for i, g, mu, mt, e in gpus)})
        live = {"status": NodeStatus(status), "status_since": since, "last_seen": last_seen, "utilization": util,
                "degraded": degraded, "held_until": held_until, "cordoned": cordoned, "drained": drained}
    return RecordChange(node_id, seq, kind, cause, stimulus_id, record, live)


def _unpack_page(epoch: str, seq: int, rows: tuple | None) -> ChangePage:
    return ChangePage(epoch, seq, None if rows is None else tuple(_unpack_change(*row) for row in rows))


def _rebuilt(cls: type[BaseModel], values: dict[str, Any]) -> Any:
    """A ``cls`` holding ``values``: every field, taken from a model that was validated already, so
    none is validated again. What ``model_construct`` does, without its pass over defaults and
    aliases (several times slower, and a page rebuilds a record and a load per change)."""
    model = cls.__new__(cls)
    object.__setattr__(model, "__dict__", values)
    object.__setattr__(model, "__pydantic_fields_set__", set(values))
    object.__setattr__(model, "__pydantic_extra__", None)
    object.__setattr__(model, "__pydantic_private__", None)
    return model

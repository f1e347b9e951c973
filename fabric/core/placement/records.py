"""One node as the placement engine (and the operator API) sees it: ``NodeRecord``.

A record joins what a probe found (``capabilities``) with live state: status, cordon,
flap hold, reservations (cpu, memory, per-GPU-device fraction, concurrency slots, host ports),
bound jobs, hot-spare flags, warmth, zone/cloud, pool and pool tier, launching.

Records are immutable to everyone but their fleet. Node events replace a record (``evolve``);
reservations (commit/release, the hot path) change the usage fields of a record in place
*unless* a snapshot or a copy of the fleet was taken since the record was made, in which case
the fleet copies it first (copy-on-write). So ``fleet.snapshot()`` is a shallow dict copy that
stays consistent, and a record read from ``fleet.get()`` is the live one. Values the engine reads on every decision (tier rank, capability tags, free capacity,
load) are derived once, when the record is built, and kept in private attributes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from fabric.core.capabilities import NodeCapabilities, normalise_gpu_name
from fabric.core.lifecycle import NodeStatus
from fabric.core.tiers import ComputeTier

EPS = 1e-9
"""Float slack for capacity comparisons (reservations are sums of fractional amounts)."""

GENERATIONS = itertools.count(1)
"""Record generations: a fleet may change a record in place only if no snapshot or copy of the
fleet can have seen it (its generation is newer than the fleet's last snapshot)."""


@dataclass(frozen=True, eq=False)
class NodeRecord:
    """One node: capabilities plus live state. Build with ``node_id``, ``name``, ``capabilities``;
    every other field has a default meaning "idle, healthy, active, in the default pool"."""

    node_id: str
    """Ray's node id (the key)."""
    name: str
    """Stable name: hostname or tailnet DNS name."""
    capabilities: NodeCapabilities
    """What the probe found."""
    status: NodeStatus = NodeStatus.ACTIVE
    """Registry status; only ``active`` nodes take work."""
    tier: ComputeTier | None = None
    """Best tier served. None: derived from ``capabilities``; the scheduler may set a lower one
    for a degraded node (the fabric's own view: Ray cannot change a live node's labels)."""
    utilization: float = 0.0
    """Load the node reports (0..1), e.g. from its probe actor."""
    running: int = 0
    """Work units holding a concurrency slot on this node."""
    last_seen: float | None = None
    """Epoch seconds of the last heartbeat."""
    cordoned: bool = False
    """No new placements (operator cordon or drain)."""
    flap_held: bool = False
    """Held off placement by flap damping (by default 3 toggles in 300 s hold it 600 s)."""
    unhealthy: bool = False
    """Excluded after repeated rejections until it recovers (``onNodeUnhealthy``)."""
    max_concurrent_tasks: int | None = None
    """Slot cap; None reads ``capabilities.limitations.max_concurrent_tasks``."""
    utilization_cap: float = 1.0
    """Fraction (0, 1] of the node's CPUs the fabric may reserve; anything else is read as 1."""
    reserved_cpus: float = 0.0
    reserved_memory_mib: float = 0.0
    gpu_reserved: tuple[float, ...] = ()
    """Reserved fraction per GPU device, in ``capabilities.gpus`` order (missing entries are 0)."""
    ports: frozenset[str] = frozenset()
    """Host ports claimed on this node (``"1935/tcp"``)."""
    jobs: frozenset[str] = frozenset()
    """Long-running jobs bound to this node."""
    exclusive_job: str | None = None
    """A job that holds the node exclusively (nothing else lands here except its co-located peers)."""
    spare: bool = False
    """Tagged as a hot spare; *unconsumed* while it carries no work."""
    spare_reserved_for: frozenset[str] = frozenset()
    """Templates this spare is reserved for."""
    spare_exclusive: bool = False
    """The reservation is a guarantee: nobody else may take this spare (``override_reservation`` aside)."""
    warm: frozenset[str] = frozenset()
    """Templates/images this node already holds."""
    zone: str | None = None
    cloud: str | None = None
    pool: str | None = None
    """Pool (None: the default pool, resolved when the node joins a ``FleetView``)."""
    pool_tier: str | None = None
    """Pool tier (None: the pool's fixed tier, resolved by the ``FleetView``)."""
    launching: bool = False
    """A node still coming up (provisioned, not yet booted): placeable, ranked below booted ones."""
    instance_id: str | None = None
    """The provider's instance id of a provisioned node (its ``fabric.io/instance`` label)."""
    provider: str | None = None
    """The provider that made it (``fabric.io/provider``); None for a node that joined by hand."""
    label_tier: ComputeTier | None = None
    """The tier the node's Ray label says (``fabric.io/tier``, fixed when its raylet started).
    None: the tier its capabilities serve. A demoted node keeps its old label, so whatever routes
    by label (the spill selector) must exclude it by node id."""
    ray_labels: Mapping[str, str] = field(default_factory=dict)
    """Every Ray label the node joined with (fixed for its lifetime): what a requirement's
    ``label_selector`` is matched against."""
    ray_resources: Mapping[str, float] = field(default_factory=dict)
    """The Ray resources the node joined with (totals, custom ones and ``accelerator_type:<T>``
    included): what a requirement's ``resources`` and ``accelerator_type`` are checked against."""

    # -- derived at build time (not part of the public data) -------------------------------
    _rank: int = field(init=False, repr=False, compare=False)
    _tags: frozenset = field(init=False, repr=False, compare=False)
    _slots: int = field(init=False, repr=False, compare=False)
    _cpu_total: float = field(init=False, repr=False, compare=False)
    _cores: int = field(init=False, repr=False, compare=False)
    _mem_total: float = field(init=False, repr=False, compare=False)
    _gpu_models: tuple = field(init=False, repr=False, compare=False)
    _util: float = field(init=False, repr=False, compare=False)
    _load: float = field(init=False, repr=False, compare=False)
    _eligible: bool = field(init=False, repr=False, compare=False)
    _gen: int = field(init=False, repr=False, compare=False)
    _bk: "tuple | None" = field(init=False, repr=False, compare=False)
    _entry: "tuple | None" = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        s = object.__setattr__
        caps = self.capabilities
        hw_tier = caps.tier
        tier = hw_tier if self.tier is None else ComputeTier.parse(self.tier)
        s(self, "tier", tier)
        if self.label_tier is None:
            s(self, "label_tier", hw_tier)
        elif not isinstance(self.label_tier, ComputeTier):
            s(self, "label_tier", ComputeTier.parse(self.label_tier))
        if not isinstance(self.status, NodeStatus):
            s(self, "status", NodeStatus(self.status))
        cap = self.utilization_cap
        if not isinstance(cap, (int, float)) or isinstance(cap, bool) or math.isnan(cap) or not (0 < cap <= 1):
            s(self, "utilization_cap", 1.0)  # outside (0, 1] is read as 1
        for name in ("ports", "jobs", "spare_reserved_for", "warm"):
            v = getattr(self, name)
            if not isinstance(v, frozenset):
                s(self, name, frozenset(v))
        ng = len(caps.gpus)
        gr = tuple(float(x) for x in self.gpu_reserved[:ng])
        if len(gr) < ng:
            gr = gr + (0.0,) * (ng - len(gr))
        s(self, "gpu_reserved", gr)
        s(self, "_rank", tier.rank)
        s(self, "_tags", caps.capability_tags)
        s(self, "_slots", self.max_concurrent_tasks if self.max_concurrent_tasks is not None else caps.limitations.max_concurrent_tasks)
        s(self, "_cpu_total", caps.cpu_usable * self.utilization_cap)
        s(self, "_cores", caps.cpu_physical)
        s(self, "_mem_total", float(caps.memory_mib))
        s(self, "_gpu_models", tuple((g.label_name.lower(), g.model.lower()) for g in caps.gpus))
        util = self.utilization
        s(self, "_util", float(util) if isinstance(util, (int, float)) and not math.isnan(util) else 0.0)
        s(self, "_load", compute_load(self))
        s(self, "_eligible", self.status is NodeStatus.ACTIVE and not self.flap_held and not self.unhealthy and not self.cordoned)
        s(self, "_gen", next(GENERATIONS))
        s(self, "_bk", None)  # where a fleet indexes it: bucket key and sorted entry
        s(self, "_entry", None)

    # -- reading ----------------------------------------------------------------------------
    @property
    def slots(self) -> int:
        """Effective concurrency cap."""
        return self._slots

    @property
    def free_cpus(self) -> float:
        """``cpu_usable × utilization_cap − reserved_cpus``."""
        return self._cpu_total - self.reserved_cpus

    @property
    def free_memory_mib(self) -> float:
        return self._mem_total - self.reserved_memory_mib

    @property
    def load(self) -> float:
        """What packing ranks by: max(reported utilisation, reserved share of the capped CPUs,
        running / max_concurrent_tasks)."""
        return self._load

    @property
    def unconsumed_spare(self) -> bool:
        """A hot spare that carries no work: only these count as reserve."""
        return self.spare and self.running == 0 and not self.jobs

    @property
    def capability_tags(self) -> frozenset[str]:
        return self._tags

    @property
    def placeable(self) -> bool:
        """Passes the request-independent filters: active, not held, not cordoned, a free slot."""
        return self._eligible and self.running < self._slots

    # -- changing (returns a new record) -------------------------------------------------------
    def evolve(self, **changes: Any) -> "NodeRecord":
        """A copy with ``changes`` applied and derived values recomputed."""
        kw = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        if "capabilities" in changes and "tier" not in changes:
            kw["tier"] = None
        kw.update(changes)
        return NodeRecord(**kw)

    def with_live(self, *, status: NodeStatus, utilization: float, last_seen: float, cordoned: bool,
                  flap_held: bool) -> "NodeRecord":
        """A copy that differs only in what a heartbeat or a status change moves, with only the
        values derived from those recomputed: equal to building the record anew with them (the
        scheduler's fleet feed calls it for every changed node whose identity stayed)."""
        new = object.__new__(NodeRecord)
        d = self.__dict__.copy()
        d.update(status=status if isinstance(status, NodeStatus) else NodeStatus(status), utilization=utilization,
                 last_seen=last_seen, cordoned=cordoned, flap_held=flap_held,
                 _util=float(utilization) if isinstance(utilization, (int, float)) and not math.isnan(utilization) else 0.0,
                 _gen=next(GENERATIONS), _bk=None, _entry=None)
        object.__setattr__(new, "__dict__", d)
        d["_load"] = compute_load(new)
        d["_eligible"] = d["status"] is NodeStatus.ACTIVE and not flap_held and not d["unhealthy"] and not cordoned
        return new

    def copy(self) -> "NodeRecord":
        """Hot-path copy (copy-on-write before a reservation change): same data, new generation."""
        new = object.__new__(NodeRecord)
        d = self.__dict__.copy()
        d["_gen"] = next(GENERATIONS)
        object.__setattr__(new, "__dict__", d)
        return new

    # -- serialisation ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the operator API's ``--json``)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if not f.init:
                continue
            v = getattr(self, f.name)
            if f.name == "capabilities":
                v = v.model_dump(mode="json")
            elif isinstance(v, frozenset):
                v = sorted(v)
            elif isinstance(v, tuple):
                v = list(v)
            elif isinstance(v, (ComputeTier, NodeStatus)):
                v = v.value
            elif f.name in ("ray_labels", "ray_resources"):
                v = dict(v)
            out[f.name] = v
        out["load"] = self.load
        out["unconsumed_spare"] = self.unconsumed_spare
        out["slots"] = self.slots
        return out

    def model_dump(self, mode: str = "json") -> dict[str, Any]:
        """``to_dict()`` under pydantic's name, for code that treats records like the other models."""
        return self.to_dict()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "NodeRecord":
        """Inverse of ``to_dict``."""
        names = {f.name for f in fields(cls) if f.init}
        kw = {k: v for k, v in data.items() if k in names}
        kw["capabilities"] = NodeCapabilities.model_validate(kw["capabilities"])
        for name in ("ports", "jobs", "spare_reserved_for", "warm"):
            if name in kw:
                kw[name] = frozenset(kw[name])
        if "gpu_reserved" in kw:
            kw["gpu_reserved"] = tuple(kw["gpu_reserved"])
        return cls(**kw)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NodeRecord):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self) if f.init)

    __hash__ = None  # type: ignore[assignment]


def compute_load(rec: NodeRecord) -> float:
    """Packing load of ``rec`` (see ``NodeRecord.load``): the one place the formula lives. A record
    computes it when built, its fleet again after every reservation change."""
    d = rec.__dict__
    cpu_total = d["_cpu_total"]
    cpu_share = d["reserved_cpus"] / cpu_total if cpu_total > 0 else 1.0
    slot_share = d["running"] / d["_slots"]
    return max(d["_util"], cpu_share, slot_share)


def gpu_model_matches(rec: NodeRecord, position: int, wanted: str) -> bool:
    """Whether GPU device ``position`` of ``rec`` is model ``wanted`` (normalised, case-insensitive)."""
    label, raw = rec._gpu_models[position]
    w = wanted.lower()
    return w == raw or w == label or normalise_gpu_name(wanted).lower() == label

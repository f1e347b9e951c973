"""``FleetView``: the indexed snapshot of the fleet the engine places against.

The scheduler keeps one and feeds it events: node added / changed / removed, reservation made
(``commit``) / released (``release``). Records are immutable and replaced on every change, so
``snapshot()`` is a shallow copy and a trace can be replayed from it later.

Besides ``node_id -> record`` the view keeps the indexes the fast engine walks:

- ``buckets[(pool, pool tier, tier rank, launching)]``: a sorted list of ``(packing key,
  node id)`` holding only *placeable* nodes (active, not held, not cordoned, a free slot) —
  the packing key is ``load`` under spread and ``-load`` under binpack, so the list is already
  in key order for component 8 and 10 within one tier;
- ``members[(pool, pool tier, tier rank)]``: every node id of that segment (for the
  ``when_full="wait"`` check, which must see full nodes too);
- ``counts[(pool, pool tier)]``: nodes counting toward ``max_nodes`` (launching included).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import TYPE_CHECKING, Iterable, Iterator

from fabric.errors import NodeNotFoundError
from fabric.lifecycle import NodeStatus
from fabric.placement.decision import Allocation, Decision
from fabric.placement.records import NodeRecord
from fabric.settings import FabricSettings, PoolTier

if TYPE_CHECKING:  # pragma: no cover
    pass

_USAGE_FIELDS = ("running", "reserved_cpus", "reserved_memory_mib", "gpu_reserved", "ports", "jobs", "exclusive_job")


class PlacementStats:
    """Counters the scheduler reports (seed 002's ``fallback_count``)."""

    __slots__ = ("placed", "fallback_count", "released")

    def __init__(self) -> None:
        self.placed = 0
        """Decisions committed."""
        self.fallback_count = 0
        """Committed decisions placed below their ``min_tier``."""
        self.released = 0

    def as_dict(self) -> dict[str, int]:
        return {"placed": self.placed, "fallback_count": self.fallback_count, "released": self.released}


class FleetSnapshot:
    """A frozen view of the records at one moment (what a lazy trace replays against)."""

    __slots__ = ("settings", "_records")

    def __init__(self, records: dict[str, NodeRecord], settings: FabricSettings) -> None:
        self.settings = settings
        self._records = records

    def records(self) -> list[NodeRecord]:
        """Every record, in node id order."""
        return [self._records[k] for k in sorted(self._records)]

    def get(self, node_id: str) -> NodeRecord | None:
        return self._records.get(node_id)


class FleetView:
    """Every node the engine may place on, indexed, plus placement counters.

    ``FleetView(nodes, settings)``; events: ``add``, ``update``, ``remove``, ``commit``,
    ``release``. ``copy()`` gives an independent working copy (records are shared: immutable).
    """

    def __init__(self, nodes: Iterable[NodeRecord] = (), settings: FabricSettings | None = None) -> None:
        self.settings = settings if settings is not None else FabricSettings()
        self.default_pool = self.settings.default_pool.name
        self.pool_tiers: dict[str, tuple[PoolTier, ...]] = {p.name: p.tiers for p in self.settings.pools}
        self._fixed_tier: dict[str, str] = {}
        for p in self.settings.pools:
            fixed = [t.name for t in p.tiers if t.scale_out == "fixed"]
            self._fixed_tier[p.name] = fixed[0] if fixed else p.tiers[0].name
        self._binpack: dict[tuple[str, str], bool] = {
            (p.name, t.name): t.packing == "binpack" for p in self.settings.pools for t in p.tiers
        }
        self._records: dict[str, NodeRecord] = {}
        self.buckets: dict[tuple, list[tuple[float, str]]] = {}
        self.members: dict[tuple, set[str]] = {}
        self.counts: dict[tuple[str, str], int] = {}
        self.stats = PlacementStats()
        for rec in nodes:
            self.add(rec)

    # -- reading -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._records

    def __iter__(self) -> Iterator[NodeRecord]:
        return iter(self.records())

    def records(self) -> list[NodeRecord]:
        """Every record, in node id order."""
        return [self._records[k] for k in sorted(self._records)]

    def get(self, node_id: str) -> NodeRecord | None:
        return self._records.get(node_id)

    def node(self, node_id: str) -> NodeRecord:
        """The record; ``NodeNotFoundError`` when unknown."""
        rec = self._records.get(node_id)
        if rec is None:
            raise NodeNotFoundError(node_id)
        return rec

    @property
    def fallback_count(self) -> int:
        return self.stats.fallback_count

    def snapshot(self) -> FleetSnapshot:
        """The records as they are now (a shallow copy)."""
        return FleetSnapshot(dict(self._records), self.settings)

    def copy(self) -> "FleetView":
        """An independent working copy (indexes copied, records shared, counters copied)."""
        new = FleetView.__new__(FleetView)
        new.__dict__.update(self.__dict__)
        new._records = dict(self._records)
        new.buckets = {k: list(v) for k, v in self.buckets.items()}
        new.members = {k: set(v) for k, v in self.members.items()}
        new.counts = dict(self.counts)
        new.stats = PlacementStats()
        for name in PlacementStats.__slots__:
            setattr(new.stats, name, getattr(self.stats, name))
        return new

    # -- node events -------------------------------------------------------------------------------
    def add(self, rec: NodeRecord, *, keep_usage: bool = True) -> NodeRecord:
        """Add a node, or replace its record (node changed). With ``keep_usage`` the fleet's own
        reservations on an existing node survive the replacement (a re-probe does not free them)."""
        old = self._records.get(rec.node_id)
        changes = {}
        if rec.pool is None:
            changes["pool"] = self.default_pool
        pool = changes.get("pool", rec.pool)
        if rec.pool_tier is None and pool in self._fixed_tier:
            changes["pool_tier"] = self._fixed_tier[pool]
        if old is not None and keep_usage:
            changes.update({f: getattr(old, f) for f in _USAGE_FIELDS})
        if changes:
            rec = rec.evolve(**changes)
        if old is not None:
            self._unindex(old)
        self._records[rec.node_id] = rec
        self._index(rec)
        return rec

    def update(self, node_id: str, **changes) -> NodeRecord:
        """Change fields of one node (status, cordon, tier demotion, spare flags...)."""
        return self.add(self.node(node_id).evolve(**changes), keep_usage=False)

    def remove(self, node_id: str) -> NodeRecord | None:
        """Forget a node (lost); returns its last record."""
        rec = self._records.pop(node_id, None)
        if rec is not None:
            self._unindex(rec)
        return rec

    # -- reservation events --------------------------------------------------------------------
    def commit(self, decision: Decision) -> Allocation | None:
        """Apply a placed decision's allocation (no-op for provision/deferred); counts fallbacks."""
        if decision.status != "placed" or decision.allocation is None:
            return None
        self.reserve(decision.allocation)
        self.stats.placed += 1
        if decision.fallback_levels > 0:
            self.stats.fallback_count += 1
        return decision.allocation

    def reserve(self, a: Allocation) -> NodeRecord:
        """Apply an allocation to its node (also used to rebuild state after a restart)."""
        rec = self.node(a.node_id)
        usage: dict = {"running": rec.running + a.slots}
        if a.cpus:
            usage["reserved_cpus"] = round(rec.reserved_cpus + a.cpus, 9)
        if a.memory_mib:
            usage["reserved_memory_mib"] = round(rec.reserved_memory_mib + a.memory_mib, 9)
        if a.gpu_positions:
            g = list(rec.gpu_reserved)
            for i in a.gpu_positions:
                g[i] = round(g[i] + a.gpu_fraction, 9)
            usage["gpu_reserved"] = tuple(g)
        if a.ports:
            usage["ports"] = rec.ports.union(a.ports)
        if a.job_id is not None:
            usage["jobs"] = rec.jobs | {a.job_id}
            if a.exclusive:
                usage["exclusive_job"] = a.job_id
        return self._replace_usage(rec, usage)

    def release(self, a: Allocation) -> NodeRecord | None:
        """Give an allocation back (work ended). A node already removed is ignored."""
        rec = self._records.get(a.node_id)
        if rec is None:
            return None
        usage: dict = {"running": max(0, rec.running - a.slots)}
        if a.cpus:
            usage["reserved_cpus"] = max(0.0, round(rec.reserved_cpus - a.cpus, 9))
        if a.memory_mib:
            usage["reserved_memory_mib"] = max(0.0, round(rec.reserved_memory_mib - a.memory_mib, 9))
        if a.gpu_positions:
            g = list(rec.gpu_reserved)
            for i in a.gpu_positions:
                g[i] = max(0.0, round(g[i] - a.gpu_fraction, 9))
            usage["gpu_reserved"] = tuple(g)
        if a.ports:
            usage["ports"] = rec.ports.difference(a.ports)
        if a.job_id is not None:
            usage["jobs"] = rec.jobs - {a.job_id}
            if rec.exclusive_job == a.job_id:
                usage["exclusive_job"] = None
        self.stats.released += 1
        return self._replace_usage(rec, usage)

    # -- indexes -------------------------------------------------------------------------------------
    def _replace_usage(self, rec: NodeRecord, usage: dict) -> NodeRecord:
        new = rec._with_usage(**usage)
        was, now = rec.placeable, new.placeable
        if was and now and new._load == rec._load:
            self._records[rec.node_id] = new
            return new
        pool, pt = rec.pool, rec.pool_tier
        key = (pool, pt, rec._rank, rec.launching)
        binpack = self._binpack.get((pool, pt))
        if binpack is not None:
            lst = self.buckets.get(key)
            if was:
                entry = (-rec._load if binpack else rec._load, rec.node_id)
                del lst[bisect_left(lst, entry)]  # type: ignore[arg-type]
            if now:
                if lst is None:
                    lst = self.buckets[key] = []
                insort(lst, (-new._load if binpack else new._load, new.node_id))
        self._records[rec.node_id] = new
        return new

    def _index(self, rec: NodeRecord) -> None:
        seg = (rec.pool, rec.pool_tier)
        binpack = self._binpack.get(seg)  # type: ignore[arg-type]
        if rec.status is not NodeStatus.DEAD:
            self.counts[seg] = self.counts.get(seg, 0) + 1  # type: ignore[index]
        if binpack is None:
            return  # outside every configured pool tier: never placeable
        self.members.setdefault((rec.pool, rec.pool_tier, rec._rank), set()).add(rec.node_id)
        if rec.placeable:
            lst = self.buckets.setdefault((rec.pool, rec.pool_tier, rec._rank, rec.launching), [])
            insort(lst, (-rec._load if binpack else rec._load, rec.node_id))

    def _unindex(self, rec: NodeRecord) -> None:
        seg = (rec.pool, rec.pool_tier)
        binpack = self._binpack.get(seg)  # type: ignore[arg-type]
        if rec.status is not NodeStatus.DEAD:
            self.counts[seg] -= 1  # type: ignore[index]
        if binpack is None:
            return
        self.members[(rec.pool, rec.pool_tier, rec._rank)].discard(rec.node_id)
        if rec.placeable:
            lst = self.buckets[(rec.pool, rec.pool_tier, rec._rank, rec.launching)]
            del lst[bisect_left(lst, (-rec._load if binpack else rec._load, rec.node_id))]

    def validate(self) -> None:
        """Check every index against the records (tests call this after every event)."""
        buckets: dict[tuple, list] = {}
        members: dict[tuple, set] = {}
        counts: dict[tuple, int] = {}
        for rec in self._records.values():
            seg = (rec.pool, rec.pool_tier)
            if rec.status is not NodeStatus.DEAD:
                counts[seg] = counts.get(seg, 0) + 1
            binpack = self._binpack.get(seg)  # type: ignore[arg-type]
            if binpack is None:
                continue
            members.setdefault((rec.pool, rec.pool_tier, rec._rank), set()).add(rec.node_id)
            if rec.placeable:
                buckets.setdefault((rec.pool, rec.pool_tier, rec._rank, rec.launching), []).append(
                    (-rec._load if binpack else rec._load, rec.node_id))
            assert rec.running <= rec.slots, f"{rec.node_id}: {rec.running} running > {rec.slots} slots"
        for v in buckets.values():
            v.sort()
        assert {k: v for k, v in self.buckets.items() if v} == buckets, "bucket index out of step"
        assert {k: v for k, v in self.members.items() if v} == members, "member index out of step"
        assert {k: v for k, v in self.counts.items() if v} == {k: v for k, v in counts.items() if v}, "counts out of step"

"""``FleetView``: the indexed snapshot of the fleet the engine places against.

The scheduler keeps one and feeds it events: node added / changed / removed, reservation made
(``commit``) / released (``release``). Records are immutable and replaced on every change, so
``snapshot()`` is a shallow copy and a trace can be replayed from it later.

Besides ``node_id -> record`` the view keeps the indexes the fast engine walks:

- ``buckets[(pool, pool tier, tier rank, launching, unconsumed spare, free-CPU class)]``: a sorted list of
  ``(packing key, node id)`` holding only *placeable* nodes (active, not held, not cordoned, a
  free slot) — the packing key is ``load`` under spread and ``-load`` under binpack, so a list
  is already in key order for components 8 and 10; the free-CPU class lets a request skip
  nodes that cannot have its CPUs free (a GPU node whose CPUs are all reserved, say) without
  looking at them, and unconsumed spares sit apart so that "avoid spares" costs nothing;
- ``members[(pool, pool tier, tier rank)]``: every node id of that segment (for the
  ``when_full="wait"`` check, which must see full nodes too);
- ``counts[(pool, pool tier)]``: nodes counting toward ``max_nodes`` (launching included).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from typing import Iterable, Iterator

from fabric.core.errors import CapacityError, NodeNotFoundError
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement.decision import Allocation, Decision
from fabric.core.placement.records import EPS, GENERATIONS, NodeRecord, compute_load
from fabric.core.settings import FabricSettings, PoolTier

#: Free-CPU class bounds: a node is in class k when ``CPU_BOUNDS[k-1] <= free + EPS < CPU_BOUNDS[k]``.
#: A request for ``c`` CPUs can skip every class whose upper bound is ``<= c`` (``cpu_classes_for``).
CPU_BOUNDS = (0.5, 1.0, 2.0, 4.0)
CPU_CLASSES = len(CPU_BOUNDS) + 1

#: ``(pool, pool tier)``: a record's pool tier is None when its pool is not configured.
Segment = tuple[str | None, str | None]


def cpu_class(rec: NodeRecord) -> int:
    """The free-CPU class of ``rec`` (0: under half a CPU free ... 4: four or more): the one place
    it is worked out (the index and ``validate`` both call it)."""
    return bisect_right(CPU_BOUNDS, rec._cpu_total - rec.reserved_cpus + EPS)


def cpu_classes_for(num_cpus: float) -> range:
    """Free-CPU classes that may hold a node able to take ``num_cpus``."""
    return range(bisect_right(CPU_BOUNDS, num_cpus), CPU_CLASSES)


PROSPECTIVE_PREFIX = "prospective:"
"""Node ids of prospective records (a provision's placeholder: ``prospective:<provision id>``)."""

GROUP_FIELDS = ("nodes", "placeable", "running", "slots", "live_spares", "running_settled", "slots_settled",
                "working_running", "working_slots")
"""What ``FleetView.group_sums`` adds up per (tier, pool): nodes; placeable ones; running and slots;
unconsumed hot spares; running and slots of the nodes not launching (``settled``); running (at most
its slots) and slots of the nodes that take work and are not reserve (``working``: active, not held,
cordoned or unhealthy, not an unconsumed spare, a slot or more, not a prospective record)."""


def group_contribution(rec: NodeRecord) -> tuple[tuple[str, str], tuple[int, ...]]:
    """One record's share of ``FleetView.group_sums``: its (tier, pool) and its figures, in ``GROUP_FIELDS`` order."""
    d = rec.__dict__
    running, slots = d["running"], d["_slots"]
    spare = d["spare"] and running == 0 and not d["jobs"]
    settled = not d["launching"]
    working = d["_eligible"] and not spare and slots > 0 and not rec.node_id.startswith(PROSPECTIVE_PREFIX)
    tier = d["tier"]
    return ((tier.value if tier is not None else "?", d["pool"]),
            (1, int(d["_eligible"] and running < slots), running, slots, int(spare), running if settled else 0,
             slots if settled else 0, min(running, slots) if working else 0, slots if working else 0))


_SUMS = "\0group_sums"
"""``group_sums``'s own reader of the changed nodes."""
_LOAD_FIELDS = frozenset({"utilization", "last_seen"})
"""What a heartbeat moves: ``FleetView.update`` changes these in place."""
_USAGE_FIELDS = ("running", "reserved_cpus", "reserved_memory_mib", "gpu_reserved", "ports", "jobs", "exclusive_job")


class FleetSnapshot:
    """A frozen view of the records at one moment (what a lazy trace replays against).

    Taking one is O(1): it holds the fleet's last full copy (``base``) and the journal of record
    replacements since, up to its own length; the dict is rebuilt only when read."""

    __slots__ = ("settings", "_base", "_journal", "_upto", "_records", "provision_held")

    def __init__(self, records: "dict[str, NodeRecord] | None", settings: FabricSettings, *,
                 base: "dict[str, NodeRecord] | None" = None, journal: "list | None" = None, upto: int = 0,
                 provision_held: "frozenset[Segment]" = frozenset()) -> None:
        self.settings = settings
        self.provision_held = provision_held
        """The fleet's held pool tiers when the snapshot was taken (the trace replays with them)."""
        self._records = records
        self._base = base
        self._journal = journal
        self._upto = upto

    def _materialise(self) -> dict[str, NodeRecord]:
        if self._records is None:
            recs = dict(self._base or {})
            for nid, rec in (self._journal or [])[: self._upto]:
                if rec is None:
                    recs.pop(nid, None)
                else:
                    recs[nid] = rec
            self._records = recs
            self._base = self._journal = None
        return self._records

    def records(self) -> list[NodeRecord]:
        """Every record, in node id order."""
        recs = self._materialise()
        return [recs[k] for k in sorted(recs)]

    def get(self, node_id: str) -> NodeRecord | None:
        return self._materialise().get(node_id)


class FleetView:
    """Every node the engine may place on, indexed. It counts nothing: what was placed and what
    fell back is the scheduler's to count (``SchedulerCore.counters``), once.

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
        self._binpack: dict[Segment, bool] = {
            (p.name, t.name): t.packing == "binpack" for p in self.settings.pools for t in p.tiers
        }
        self._records: dict[str, NodeRecord] = {}
        self.buckets: dict[tuple, list[tuple[float, str]]] = {}
        self.members: dict[tuple, set[str]] = {}
        self.counts: dict[Segment, int] = {}
        self.provision_held: frozenset[Segment] = frozenset()
        """(pool, pool tier) segments that may not provision now (a failed provision's backoff)."""
        self._cow_gen = 0
        self._base: "dict[str, NodeRecord] | None" = None
        self._journal: "list | None" = None
        """Records of this generation or older may be shared with a snapshot/copy: copy before writing."""
        self._plans: dict = {}
        """Per-requirement search plans of the fast engine (references into ``buckets``)."""
        self._sums: dict[tuple[str, str], list[int]] = {}
        self._shares: dict[str, tuple[tuple[str, str], tuple[int, ...]]] = {}
        self._watchers: dict[str, set[str]] = {_SUMS: set()}
        """Per reader of ``take_changed`` (``group_sums`` is one): the nodes changed since it last asked."""
        for p in self.settings.pools:
            for t in p.tiers:
                for rank in range(11):
                    for launching in (False, True):
                        for spare in (False, True):
                            for c in range(CPU_CLASSES):
                                self.buckets[(p.name, t.name, rank, launching, spare, c)] = []
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

    def snapshot(self) -> FleetSnapshot:
        """The records as they are now (a shallow copy)."""
        self._cow_gen = next(GENERATIONS)  # every record that exists now is shared from here on
        if self._journal is None or len(self._journal) > max(64, len(self._records) // 4):
            self._base, self._journal = dict(self._records), []
        return FleetSnapshot(None, self.settings, base=self._base, journal=self._journal, upto=len(self._journal),
                             provision_held=self.provision_held)

    def _put(self, node_id: str, rec: "NodeRecord | None") -> None:
        """Replace (or with None remove) a record, journalling it for O(1) snapshots."""
        for changed in self._watchers.values():
            changed.add(node_id)
        if rec is None:
            self._records.pop(node_id, None)
        else:
            self._records[node_id] = rec
        j = self._journal
        if j is not None:
            if len(j) > 4 * max(64, len(self._records)):
                self._journal = self._base = None  # nobody is snapshotting: stop journalling
            else:
                j.append((node_id, rec))

    def copy(self) -> "FleetView":
        """An independent working copy (indexes copied, records shared)."""
        new = FleetView.__new__(FleetView)
        new.__dict__.update(self.__dict__)
        self._cow_gen = new._cow_gen = next(GENERATIONS)
        new._plans = {}
        new._base = new._journal = None
        new._records = dict(self._records)
        new.buckets = {k: list(v) for k, v in self.buckets.items()}
        new.members = {k: set(v) for k, v in self.members.items()}
        new.counts = dict(self.counts)
        new._sums = {k: list(v) for k, v in self._sums.items()}
        new._shares = dict(self._shares)
        new._watchers = {k: set(v) for k, v in self._watchers.items()}
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
        rec = rec.evolve(**changes) if changes else rec.copy()  # the fleet owns its records
        if old is not None:
            self._unindex(old)
        self._put(rec.node_id, rec)
        self._index(rec)
        return rec

    def update(self, node_id: str, **changes) -> NodeRecord:
        """Change fields of one node (status, cordon, tier demotion, spare flags...). A change of
        load alone (``utilization``, ``last_seen``: most of what a fleet's heartbeats bring) is
        made in place, its derived load and bucket recomputed, as a reservation's is."""
        if changes and changes.keys() <= _LOAD_FIELDS:
            rec, d = self._writable(node_id)
            d.update(changes)
            util = d["utilization"]
            d["_util"] = float(util) if isinstance(util, (int, float)) and not math.isnan(util) else 0.0
            self._usage_changed(rec, d)
            return rec
        return self.add(self.node(node_id).evolve(**changes), keep_usage=False)

    def remove(self, node_id: str) -> NodeRecord | None:
        """Forget a node (lost); returns its last record."""
        rec = self._records.get(node_id)
        if rec is not None:
            self._put(node_id, None)
            self._unindex(rec)
        return rec

    # -- reservation events --------------------------------------------------------------------
    def commit(self, decision: Decision) -> Allocation | None:
        """Apply a placed decision's allocation (no-op for provision/deferred).
        ``CapacityError`` if the node has no free slot any more (a stale decision: place again)."""
        if decision.status != "placed" or decision.allocation is None:
            return None
        rec = self._records.get(decision.node_id)  # type: ignore[arg-type]
        if rec is None or rec.running >= rec._slots:
            raise CapacityError(f"node {decision.node_id} can no longer take this placement (stale decision)",
                                requirement=decision.requirement, reason="stale decision")
        self.reserve(decision.allocation)
        return decision.allocation

    def reserve(self, a: Allocation) -> NodeRecord:
        """Apply an allocation to its node (also used to rebuild state after a restart).
        Amounts are plain float sums: drift stays far below the filters' 1e-9 slack."""
        rec, d = self._writable(a.node_id)
        d["running"] += a.slots
        if a.cpus:
            d["reserved_cpus"] += a.cpus
        if a.memory_mib:
            d["reserved_memory_mib"] += a.memory_mib
        if a.gpu_positions:
            g = list(d["gpu_reserved"])
            for i in a.gpu_positions:
                g[i] += a.gpu_fraction
            d["gpu_reserved"] = tuple(g)
        if a.ports:
            d["ports"] = d["ports"].union(a.ports)
        if a.job_id is not None:
            d["jobs"] = d["jobs"] | {a.job_id}
            if a.exclusive:
                d["exclusive_job"] = a.job_id
        self._usage_changed(rec, d)
        return rec

    def release(self, a: Allocation) -> NodeRecord | None:
        """Give an allocation back (work ended). A node already removed is ignored."""
        if a.node_id not in self._records:
            return None
        rec, d = self._writable(a.node_id)
        d["running"] = max(0, d["running"] - a.slots)
        if a.cpus:
            d["reserved_cpus"] = max(0.0, d["reserved_cpus"] - a.cpus)
        if a.memory_mib:
            d["reserved_memory_mib"] = max(0.0, d["reserved_memory_mib"] - a.memory_mib)
        if a.gpu_positions:
            g = list(d["gpu_reserved"])
            for i in a.gpu_positions:
                g[i] = max(0.0, g[i] - a.gpu_fraction)
            d["gpu_reserved"] = tuple(g)
        if a.ports:
            d["ports"] = d["ports"].difference(a.ports)
        if a.job_id is not None:
            d["jobs"] = d["jobs"] - {a.job_id}
            if d["exclusive_job"] == a.job_id:
                d["exclusive_job"] = None
        self._usage_changed(rec, d)
        return rec

    # -- indexes -------------------------------------------------------------------------------------
    def _writable(self, node_id: str):
        """(record, its __dict__), copying the record first when a snapshot or a copy of this
        fleet may hold it (copy-on-write)."""
        rec = self._records.get(node_id)
        if rec is None:
            raise NodeNotFoundError(node_id)
        d = rec.__dict__
        if d["_gen"] <= self._cow_gen:
            rec = rec.copy()
            self._put(node_id, rec)
            d = rec.__dict__
        return rec, d

    def _placement(self, rec: NodeRecord) -> "tuple[tuple, tuple] | tuple[None, None]":
        """(bucket key, sorted entry) for a record, or (None, None) when it is not placeable or
        outside every configured pool tier."""
        if not rec.placeable:
            return None, None
        binpack = self._binpack.get((rec.pool, rec.pool_tier))
        if binpack is None:
            return None, None
        key = (rec.pool, rec.pool_tier, rec._rank, rec.launching, rec.unconsumed_spare, cpu_class(rec))
        return key, (-rec._load if binpack else rec._load, rec.node_id)

    def _usage_changed(self, rec: NodeRecord, d: dict) -> None:
        for changed in self._watchers.values():
            changed.add(rec.node_id)
        d["_load"] = compute_load(rec)
        key, entry = self._placement(rec)
        old_key, old_entry = d["_bk"], d["_entry"]
        if key == old_key and entry == old_entry:
            return
        if old_key is not None:
            lst = self.buckets[old_key]
            del lst[bisect_left(lst, old_entry)]
        if key is not None:
            insort(self.bucket(key), entry)
        d["_bk"], d["_entry"] = key, entry

    def bucket(self, key: tuple) -> list:
        lst = self.buckets.get(key)
        if lst is None:
            lst = self.buckets[key] = []
        return lst

    def _index(self, rec: NodeRecord) -> None:
        d = rec.__dict__
        seg = (rec.pool, rec.pool_tier)
        if rec.status is not NodeStatus.DEAD:
            self.counts[seg] = self.counts.get(seg, 0) + 1
        if seg in self._binpack:
            self.members.setdefault((rec.pool, rec.pool_tier, rec._rank), set()).add(rec.node_id)
        key, entry = self._placement(rec)
        if key is not None:
            insort(self.bucket(key), entry)
        d["_bk"], d["_entry"] = key, entry

    def _unindex(self, rec: NodeRecord) -> None:
        d = rec.__dict__
        seg = (rec.pool, rec.pool_tier)
        if rec.status is not NodeStatus.DEAD:
            self.counts[seg] -= 1
        if seg in self._binpack:
            self.members[(rec.pool, rec.pool_tier, rec._rank)].discard(rec.node_id)
        if d["_bk"] is not None:
            lst = self.buckets[d["_bk"]]
            del lst[bisect_left(lst, d["_entry"])]

    def take_changed(self, reader: str) -> set[str]:
        """The ids of the nodes whose record changed (joined, left, updated, reserved or released
        on) since ``reader`` last asked; every node's, the first time it asks."""
        got = self._watchers.get(reader)
        self._watchers[reader] = set()
        return set(self._records) if got is None else got

    def group_sums(self) -> dict[tuple[str, str], tuple[int, ...]]:
        """Per (tier, pool) of the nodes in the fleet: the figures of ``GROUP_FIELDS``, summed. Kept
        as the records change (only the nodes changed since the last call are read again), so a
        gauge or a scaling window over a fleet of thousands costs what changed, not the fleet."""
        sums, shares = self._sums, self._shares
        for node_id in self._watchers[_SUMS]:
            old = shares.pop(node_id, None)
            if old is not None:
                acc = sums[old[0]]
                for i, v in enumerate(old[1]):
                    acc[i] -= v
                if acc[0] == 0:
                    del sums[old[0]]
            rec = self._records.get(node_id)
            if rec is not None:
                key, share = group_contribution(rec)
                now = sums.get(key)
                if now is None:
                    sums[key] = list(share)
                else:
                    for i, v in enumerate(share):
                        now[i] += v
                shares[node_id] = (key, share)
        self._watchers[_SUMS] = set()
        return {k: tuple(v) for k, v in sums.items()}

    def validate(self) -> None:
        """Check every index against the records (tests call this after every event)."""
        buckets: dict[tuple, list] = {}
        members: dict[tuple, set] = {}
        counts: dict[Segment, int] = {}
        for rec in self._records.values():
            seg = (rec.pool, rec.pool_tier)
            if rec.status is not NodeStatus.DEAD:
                counts[seg] = counts.get(seg, 0) + 1
            binpack = self._binpack.get(seg)
            if binpack is None:
                continue
            members.setdefault((rec.pool, rec.pool_tier, rec._rank), set()).add(rec.node_id)
            if rec.placeable:
                key = (rec.pool, rec.pool_tier, rec._rank, rec.launching, rec.unconsumed_spare, cpu_class(rec))
                entry = (-rec._load if binpack else rec._load, rec.node_id)
                buckets.setdefault(key, []).append(entry)
                assert (rec._bk, rec._entry) == (key, entry), f"{rec.node_id}: stale index position"
            else:
                assert rec._bk is None, f"{rec.node_id}: indexed but not placeable"
            assert rec.running <= rec.slots, f"{rec.node_id}: {rec.running} running > {rec.slots} slots"
        for v in buckets.values():
            v.sort()
        assert {k: v for k, v in self.buckets.items() if v} == buckets, "bucket index out of step"
        assert {k: v for k, v in self.members.items() if v} == members, "member index out of step"
        assert {k: v for k, v in self.counts.items() if v} == {k: v for k, v in counts.items() if v}, "counts out of step"
        want: dict[tuple[str, str], list[int]] = {}
        for rec in self._records.values():
            group, figures = group_contribution(rec)
            total = want.setdefault(group, [0] * len(figures))
            for i, x in enumerate(figures):
                total[i] += x
        assert self.group_sums() == {k: tuple(v) for k, v in want.items()}, "group sums out of step"

"""Burst and utilisation scaling. Pure.

``Scaler.observe(now, records, queue_depth, pending, settings)`` is called on the scheduler's
tick with the fleet's records, each pool's queue depth and the provisions in flight per (pool,
pool tier); it returns what to do as frozen actions, and remembers only its windows:

    RaiseConcurrency(node_id, slots, reason) -> set the node's slot cap (``NodeRecord.max_concurrent_tasks``)
    ProvisionGroup(pool, pool_tier, shape, count, reason) -> ask the pool tier's provider for ``count`` nodes
    ScaleDown(node_id, pool, pool_tier, reason) -> terminate a provisioned node that carries no work

Every window is ``settings.scaling`` (``ScalingSettings``); ``enabled: false`` asks for nothing
and forgets every window. Time is ``now`` (seconds, any epoch); nothing here reads a clock.

The rules, and the choices made where they leave room:

- **Concurrency** is a node's fabric slot cap (``NodeRecord.slots``); **utilisation** is
  ``running / slots`` (worker utilisation), per node for the vertical rule, per pool
  (``Σ running / Σ slots``) for scale-out and scale-down. A pool's utilisation counts its
  *working* nodes: active, not cordoned, not flap-held, not unhealthy, not an unconsumed hot
  spare (spares are reserve kept idle on purpose: counting them would make every pool with a
  spare target look idle), prospective records aside. A pool without working slots has no
  utilisation: neither its high nor its low window runs.
- **Headroom**: Ray's ``fabric.slots`` resource of a live node is its probed limit and cannot
  change, so a cap can be raised at most to ``capabilities.limitations.max_concurrent_tasks``
  (``concurrency_limit``). An operator override ``nodes.<name>.max_concurrent_tasks`` is a
  ceiling too: the scaler never raises a node past it (the operator lowered it on purpose). A
  raise goes straight to the ceiling (what the probe and the operator deem safe), or, with
  ``vertical_step``, that many slots up, never past it (``raise_target``). Only working nodes are
  raised.
- **Vertical start** (opt-in, ``vertical_start_share``): a node that joins starts with a slot cap
  of ``ceil(ceiling × share)``, at least 1 (``start_cap``; the scheduler writes it, as it writes a
  raise), so the high-utilisation rule has headroom to raise it into while it stays busy. None
  (the default) and ``enabled: false`` start every node at its ceiling: with nothing to raise it,
  a reduced cap would stay reduced. Nodes of pools the settings do not name start at their
  ceiling too (the scaler never looks at them).
- **Growing a pool** (``_grow``, shared by the burst and the pool's high-utilisation window):
  raise every working node of the pool with headroom (activate idle capacity first); a
  node the vertical rule raised in the same call counts as that growth. Else, while any
  provision of the pool is in flight (``pending``), nothing: the group coming up counts against
  the burst. Else one ``ProvisionGroup`` from the pool's first elastic pool tier, in cost order,
  that is neither at its ``max_nodes`` (its non-dead nodes, spares included, plus its pending
  provisions) nor inside ``group_interval_s`` of its last group (at most one new worker
  group per 60 s per tier; a rate-limited tier is skipped, so the cascade spills on). The shape
  is the pool tier's first candidate shape; ``count`` is ``group_size``, less where
  ``max_nodes`` leaves less room. Every pool tier full or rate-limited: nothing (the work stays
  queued, by priority).
- **Burst**: a pool's queue deeper than ``burst_queue_depth`` (strictly over) without a break
  for ``burst_window_s`` grows the pool. A window *resets once acted on* (an action was
  returned), so it fires again only after another full window; a window that could not act
  (pending provisions, every pool tier rate-limited or full) stays open and acts as soon as it
  can (a burst is urgent). The queue dropping to the threshold closes the window.
- **High utilisation**: a node over ``high_utilization`` for ``high_window_s`` is raised toward
  its ceiling (``raise_target``) when it has headroom (its window then resets, so a node raised
  by steps that stays busy is raised again one window later); without headroom its window stays
  open and it does nothing alone: scale-out is the pool's (one group per pool, not one per hot
  node). A pool over ``high_utilization`` for ``high_window_s`` grows (raises first, as above);
  it resets once acted on, as a burst does.
- **Low utilisation**: a pool under ``low_utilization`` for ``low_window_s``, with an empty queue
  and no provision in flight (only with the queue empty; a pool that is growing is not idle),
  scales its idle provisioned nodes down to each pool tier's ``min_nodes``. The low window
  resets whenever it fires, acted on or not: scale-down is never urgent. Candidates: nodes of
  the pool's *elastic* pool tiers (the fabric provisioned them; a fixed pool tier's nodes are
  never terminated), active, booted (not ``launching``), not a spare (the spare reconciler owns
  those), with nothing running, no job bound and no exclusive holder. Each pool tier keeps at
  least ``min_nodes`` of its active non-spare nodes (booted or launching). Order: most expensive
  pool tier first (the reverse cost order: the cascade shrinks back toward its cheap end), then
  longest idle first (``idle since`` is the first ``observe`` that saw the node idle), then node
  id; within a pool tier the ones past ``min_nodes`` in that order go, the most recently busy
  stay.
- Records: a record without a pool is the default pool's; without a pool tier, its pool's fixed
  one (as ``FleetView`` resolves them). Records of pools the settings do not name are ignored,
  and so are prospective records (node ids ``prospective:…``, the scheduler's placeholders for
  provisions in flight: ``pending`` counts those). One call raises a node at most once; a node
  or pool that leaves takes its windows with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Protocol, Union

from fabric.core.lifecycle import NodeStatus
from fabric.core.placement.records import NodeRecord
from fabric.core.settings import FabricSettings, NodeShape, Pool, PoolTier

from fabric.core.placement.fleet import PROSPECTIVE_PREFIX  # noqa: E402  (node ids of the scheduler's prospective records)


class FleetLike(Protocol):
    """What ``Scaler.observe_changes`` reads of a fleet (``FleetView`` has it)."""

    def get(self, node_id: str) -> NodeRecord | None: ...
    def records(self) -> list[NodeRecord]: ...
    def group_sums(self) -> dict[tuple[str, str], tuple[int, ...]]: ...

BURST = "burst"
HIGH_UTILIZATION = "high_utilization"
LOW_UTILIZATION = "low_utilization"


@dataclass(frozen=True)
class RaiseConcurrency:
    """Set node ``node_id``'s slot cap to ``slots`` (``raise_target``: never above ``concurrency_limit``)."""

    node_id: str
    slots: int
    reason: str
    """``burst`` or ``high_utilization``."""


@dataclass(frozen=True)
class ProvisionGroup:
    """Ask ``pool_tier``'s provider for ``count`` nodes of ``shape`` (one worker group)."""

    pool: str
    pool_tier: str
    shape: NodeShape
    count: int
    reason: str
    """``burst`` or ``high_utilization``."""


@dataclass(frozen=True)
class ScaleDown:
    """Terminate provisioned node ``node_id`` (it carries no work)."""

    node_id: str
    pool: str
    pool_tier: str
    reason: str
    """``low_utilization``."""


ScalingAction = Union[RaiseConcurrency, ProvisionGroup, ScaleDown]


def concurrency_limit(record: NodeRecord, settings: FabricSettings) -> int:
    """The highest slot cap the scaler may give ``record``: its probed limit, or the operator's
    override ``nodes.<name>.max_concurrent_tasks`` when that is lower."""
    limit = record.capabilities.limitations.max_concurrent_tasks
    override = settings.nodes.get(record.name)
    if override is not None and override.max_concurrent_tasks is not None:
        limit = min(limit, override.max_concurrent_tasks)
    return limit


def raise_target(record: NodeRecord, settings: FabricSettings) -> int:
    """The slot cap one raise gives ``record``: its ceiling (``concurrency_limit``), or with
    ``scaling.vertical_step`` its cap plus that step, never past the ceiling. Not above its cap
    when it has no headroom."""
    limit = concurrency_limit(record, settings)
    step = settings.scaling.vertical_step
    return limit if step is None else min(limit, record.slots + step)


def start_cap(record: NodeRecord, settings: FabricSettings) -> int | None:
    """The slot cap ``record`` joins with under ``scaling.vertical_start_share``: ``ceil(ceiling ×
    share)``, at least 1; None where it starts at its ceiling (no share, scaling off, a pool the
    settings do not name, or a ceiling the share does not lower)."""
    sc = settings.scaling
    share = sc.vertical_start_share
    pool = record.pool or settings.default_pool.name
    if share is None or not sc.enabled or all(p.name != pool for p in settings.pools):
        return None
    limit = concurrency_limit(record, settings)
    cap = max(1, math.ceil(limit * share - 1e-9))  # 10 × 0.3 is 3.0000000000000004: still 3
    return cap if cap < limit else None


def _working(rec: NodeRecord) -> bool:
    """Takes work and is not reserve: active, not held/cordoned/unhealthy, not an unconsumed spare."""
    return (rec.status is NodeStatus.ACTIVE and not rec.cordoned and not rec.flap_held and not rec.unhealthy
            and not rec.unconsumed_spare)


def _idle(rec: NodeRecord) -> bool:
    return rec.running == 0 and not rec.jobs and rec.exclusive_job is None


def _elastic(pool: Pool) -> list[PoolTier]:
    return [t for t in pool.tiers if t.scale_out == "elastic" and t.candidate_shapes]


@dataclass
class _PoolView:
    pool: Pool
    records: list[tuple[NodeRecord, str]] = field(default_factory=list)
    """(record, resolved pool tier name)."""

    def utilization(self) -> float | None:
        slots = running = 0
        for rec, _ in self.records:
            if _working(rec) and rec.slots > 0:
                slots += rec.slots
                running += min(rec.running, rec.slots)
        return running / slots if slots else None


@dataclass
class Scaler:
    """The scaling windows of a whole fabric (one per scheduler). Mutable; ``observe`` drives it."""

    burst_since: dict[str, float] = field(default_factory=dict)
    """Pool -> when its queue went over the burst threshold (the open burst window)."""
    pool_high_since: dict[str, float] = field(default_factory=dict)
    """Pool -> when its utilisation went over ``high_utilization``."""
    low_since: dict[str, float] = field(default_factory=dict)
    """Pool -> when its utilisation went under ``low_utilization`` (queue empty, nothing pending)."""
    node_high_since: dict[str, float] = field(default_factory=dict)
    """Node id -> when its utilisation went over ``high_utilization``."""
    idle_since: dict[str, float] = field(default_factory=dict)
    """Node id -> the first observe that saw it idle (nothing running, no job): the scale-down order."""
    last_group: dict[tuple[str, str], float] = field(default_factory=dict)
    """(pool, pool tier) -> when the last worker group was asked for there."""

    def reset(self) -> None:
        for d in (self.burst_since, self.pool_high_since, self.low_since, self.node_high_since, self.idle_since,
                  self.last_group):
            d.clear()

    def observe(self, now: float, records: Iterable[NodeRecord], queue_depth: Mapping[str, int],
                pending: Mapping[tuple[str, str], int], settings: FabricSettings) -> list[ScalingAction]:
        """The scaling actions due at ``now`` (module docstring), in order: the vertical raises,
        then per pool (settings order) its burst, its high-utilisation growth, its scale-downs."""
        sc = settings.scaling
        if not sc.enabled:
            self.reset()
            return []
        views = self._views(records, settings)
        present = {rec.node_id for v in views.values() for rec, _ in v.records}
        for d in (self.node_high_since, self.idle_since):
            for nid in [n for n in d if n not in present]:
                del d[nid]
        for d2 in (self.burst_since, self.pool_high_since, self.low_since):
            for pool_name in [p for p in d2 if p not in views]:
                del d2[pool_name]
        for key in [k for k in self.last_group if k[0] not in views]:
            del self.last_group[key]

        out: list[ScalingAction] = []
        raised: dict[str, int] = {}
        for view in views.values():
            for rec, _ in view.records:
                out += self._node_step(now, rec, settings, raised)
        return out + self._pools_step(now, {name: view.utilization() for name, view in views.items()},
                                      lambda name: views[name], queue_depth, pending, settings, raised)

    def observe_changes(self, now: float, fleet: "FleetLike", changed: Iterable[str], queue_depth: Mapping[str, int],
                        pending: Mapping[tuple[str, str], int], settings: FabricSettings) -> list[ScalingAction]:
        """``observe``, reading only what changed: ``fleet`` is the scheduler's ``FleetView`` (its
        records are resolved: a pool and a pool tier each), ``changed`` the ids of the nodes whose
        record changed, joined or left since the previous call (every node, the first time). The
        same actions and windows as ``observe(now, fleet.records(), ...)``: a node's idle and high
        state moves only with its record, a node already over the line is looked at again every
        call (its window may fire), a pool's utilisation is the fleet's running sums
        (``FleetView.group_sums``), and the pool's records are listed only when a pool window
        acts. What a call costs is what changed, not the fleet."""
        sc = settings.scaling
        if not sc.enabled:
            self.reset()
            return []
        names = [p.name for p in settings.pools]
        order = {name: i for i, name in enumerate(names)}
        for d2 in (self.burst_since, self.pool_high_since, self.low_since):
            for pool_name in [p for p in d2 if p not in order]:
                del d2[pool_name]
        for key in [k for k in self.last_group if k[0] not in order]:
            del self.last_group[key]
        looked: list[tuple[int, str, NodeRecord]] = []
        for nid in set(changed) | set(self.node_high_since):
            rec = fleet.get(nid)
            if rec is None or rec.pool not in order or nid.startswith(PROSPECTIVE_PREFIX):
                self.idle_since.pop(nid, None)
                self.node_high_since.pop(nid, None)
                continue
            looked.append((order[rec.pool], nid, rec))
        out: list[ScalingAction] = []
        raised: dict[str, int] = {}
        for _, _, rec in sorted(looked, key=lambda t: (t[0], t[1])):
            out += self._node_step(now, rec, settings, raised)
        work: dict[str, list[int]] = {name: [0, 0] for name in names}
        for (_tier, pool), figures in fleet.group_sums().items():
            if pool in work:
                work[pool][0] += figures[7]
                work[pool][1] += figures[8]
        views: dict[str, _PoolView] = {}

        def view(name: str) -> _PoolView:
            if not views:
                views.update(self._views(fleet.records(), settings))
            return views[name]

        utils = {name: (running / slots if slots else None) for name, (running, slots) in work.items()}
        return out + self._pools_step(now, utils, view, queue_depth, pending, settings, raised)

    def _node_step(self, now: float, rec: NodeRecord, settings: FabricSettings, raised: dict[str, int]) -> list[ScalingAction]:
        """One node's idle mark and vertical window."""
        if _idle(rec):
            self.idle_since.setdefault(rec.node_id, now)
        else:
            self.idle_since.pop(rec.node_id, None)
        return self._node_high(now, rec, settings, raised)

    def _pools_step(self, now: float, utils: Mapping[str, float | None], view: Callable[[str], "_PoolView"],
                    queue_depth: Mapping[str, int], pending: Mapping[tuple[str, str], int], settings: FabricSettings,
                    raised: dict[str, int]) -> list[ScalingAction]:
        """Each pool's burst, high and low windows (settings order); ``view(name)`` lists a pool's
        records, asked for only when a window acts."""
        sc = settings.scaling
        out: list[ScalingAction] = []
        pend = {name: sum(n for (p, _), n in pending.items() if p == name and n > 0) for name in utils}
        for name, util in utils.items():
            depth = queue_depth.get(name, 0)
            if depth > sc.burst_queue_depth:
                out += self._window(self.burst_since, name, now, sc.burst_window_s,
                                    lambda: self._grow(now, view(name), BURST, settings, raised, pend, pending))
            else:
                self.burst_since.pop(name, None)
            if util is not None and util > sc.high_utilization:
                out += self._window(self.pool_high_since, name, now, sc.high_window_s,
                                    lambda: self._grow(now, view(name), HIGH_UTILIZATION, settings, raised, pend, pending))
            else:
                self.pool_high_since.pop(name, None)
            if util is not None and util < sc.low_utilization and depth <= 0 and pend[name] == 0:
                start = self.low_since.setdefault(name, now)
                if now - start >= sc.low_window_s:
                    self.low_since[name] = now
                    out += self._scale_down(view(name))
            else:
                self.low_since.pop(name, None)
        return out

    # -- pieces ----------------------------------------------------------------------------------
    @staticmethod
    def _views(records: Iterable[NodeRecord], settings: FabricSettings) -> dict[str, _PoolView]:
        views = {p.name: _PoolView(p) for p in settings.pools}
        fixed = {p.name: next((t.name for t in p.tiers if t.scale_out == "fixed"), p.tiers[0].name) for p in settings.pools}
        default = settings.default_pool.name
        for rec in records:
            view = views.get(rec.pool or default)
            if view is None or rec.node_id.startswith(PROSPECTIVE_PREFIX):
                continue
            view.records.append((rec, rec.pool_tier if rec.pool_tier is not None else fixed[view.pool.name]))
        return views

    @staticmethod
    def _window(since: dict[str, float], key: str, now: float, window_s: float, act) -> list[ScalingAction]:
        """Open ``since[key]`` if closed; once it is ``window_s`` old, ``act()``; reset it when that acted."""
        start = since.setdefault(key, now)
        if now - start < window_s:
            return []
        actions, acted = act()
        if acted:
            since[key] = now
        return actions

    def _node_high(self, now: float, rec: NodeRecord, settings: FabricSettings, raised: dict[str, int]) -> list[ScalingAction]:
        sc = settings.scaling
        nid = rec.node_id
        if not (_working(rec) and rec.slots > 0 and rec.running / rec.slots > sc.high_utilization):
            self.node_high_since.pop(nid, None)
            return []
        start = self.node_high_since.setdefault(nid, now)
        target = raise_target(rec, settings)
        if now - start < sc.high_window_s or target <= rec.slots or nid in raised:
            return []
        self.node_high_since[nid] = now
        raised[nid] = target
        return [RaiseConcurrency(nid, target, HIGH_UTILIZATION)]

    def _grow(self, now: float, view: _PoolView, reason: str, settings: FabricSettings, raised: dict[str, int],
              pend: dict[str, int], pending: Mapping[tuple[str, str], int]) -> tuple[list[ScalingAction], bool]:
        """Raise the pool's headroom, else provision one group (module docstring). -> (actions, acted)."""
        raises: list[ScalingAction] = []
        already = False
        for rec, _ in sorted(view.records, key=lambda rt: rt[0].node_id):
            if not _working(rec):
                continue
            if rec.node_id in raised:
                already = True
                continue
            target = raise_target(rec, settings)
            if target > rec.slots:
                raised[rec.node_id] = target
                raises.append(RaiseConcurrency(rec.node_id, target, reason))
        if raises or already:
            return raises, True
        name = view.pool.name
        if pend[name] > 0:
            return [], False
        sc = settings.scaling
        for tier in _elastic(view.pool):
            key = (name, tier.name)
            last = self.last_group.get(key)
            if last is not None and now - last < sc.group_interval_s:
                continue
            count = sc.group_size
            if tier.max_nodes is not None:
                used = sum(1 for rec, t in view.records if t == tier.name and rec.status is not NodeStatus.DEAD)
                used += max(0, pending.get(key, 0))
                count = min(count, tier.max_nodes - used)
            if count <= 0:
                continue
            self.last_group[key] = now
            pend[name] += count
            return [ProvisionGroup(name, tier.name, tier.candidate_shapes[0], count, reason)], True
        return [], False

    def _scale_down(self, view: _PoolView) -> list[ScalingAction]:
        out: list[ScalingAction] = []
        name = view.pool.name
        for tier in reversed(_elastic(view.pool)):
            mine = [rec for rec, t in view.records if t == tier.name and not rec.spare and rec.status is NodeStatus.ACTIVE]
            idle = sorted((rec for rec in mine if not rec.launching and _idle(rec)),
                          key=lambda r: (self.idle_since.get(r.node_id, float("inf")), r.node_id))
            room = max(0, len(mine) - tier.min_nodes)
            out += [ScaleDown(rec.node_id, name, tier.name, LOW_UTILIZATION) for rec in idle[:room]]
        return out

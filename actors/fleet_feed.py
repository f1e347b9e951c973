"""FleetFeed: how the scheduler learns the fleet — by following the registry's change feed.

The registry is the one membership truth: the health monitor turns Ray's node table and the
heartbeats into events, the operator's cordons and drains are events too, and all of them reach
the registry's records through ``Registry.apply``, each write numbered in its change feed. The
feed keeps a copy of the records (``FleetMirror``) and, each tick, asks only for what changed
since the last number it saw (``RegistryActor.changes``), rebuilds the ``NodeRecord`` of each
changed node and diffs it against what it reported last time: ``joined``, ``changed`` or ``lost``,
each with the ``cause`` and ``stimulus_id`` of the change. A tick costs the changes, not the fleet.
It starts from a full listing (``RegistryActor.snapshot``) and goes back to one when the registry
says so (it restarted: a new epoch; or the feed fell further behind than its log keeps), when a
change cannot be applied, or when told to (``resync``).

Ray's node table is read at a much lower rate than the feed ticks (``ray_table_every_s``, and at
most every ``ray_table_min_s`` after a node left the fleet or the registry saw a raylet it holds no
record of): the registry, not Ray, says who is in the fleet. The table serves two promises. The
spill selector must leave out by id every raylet Ray runs with a fabric tier label that is not in
the fleet (``outsiders``: offline by missed heartbeats while Ray still runs it, not registered
yet, collected); a raylet that was alive at the last read and leaves the fleet is an outsider at
once, and a new one is read about as soon as the health monitor reports it to the registry. And a
node Ray declared dead leaves the fleet at the latest at the next read, even when the monitor
(which normally reports it within one of its ticks) is away.
"""

from __future__ import annotations

import asyncio
import heapq
import operator
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from fabric.core.lifecycle import NodeStatus
from fabric.core.names import REGISTRY, TIER_LABEL
from fabric.core.placement import NodeRecord
from fabric.core.records import LOAD_CHANGE_MIN, ChangePage, FeedSnapshot, RegistryRecord
from fabric.core.settings import FabricSettings
from fabric.core.tiers import ComputeTier
from fabric.rayio.adapter import RayAdapter

_IN_FLEET = (NodeStatus.ACTIVE, NodeStatus.DRAINING)
# Fields the feed owns; usage fields (running, reservations) belong to the scheduler's own view.
_FACT_FIELDS = ("name", "capabilities", "status", "tier", "utilization", "last_seen", "cordoned", "flap_held",
                "max_concurrent_tasks", "zone", "pool", "pool_tier", "warm")
_facts = operator.attrgetter(*_FACT_FIELDS)
RESYNC_CAUSE = "resync from the registry's snapshot"
RAY_DEAD_CAUSE = "ray: node dead (Ray's node table)"
HOLD_ENDED_CAUSE = "flap hold ended"


@dataclass(frozen=True)
class FleetChange:
    kind: str
    """``joined``, ``changed`` or ``lost``."""
    node_id: str
    record: NodeRecord | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    cause: str = ""
    """Why: ``registered``, ``missed heartbeats for 3.2 s``, ``operator drain``, ``ray: node dead``..."""
    stimulus_id: str | None = None
    """The id of the event that caused it (carried from the registry's change feed)."""


def diff_node(node_id: str, old: NodeRecord | None, new: NodeRecord | None, cause: str = "",
              stimulus_id: str | None = None) -> FleetChange | None:
    """What changed for one node between the record reported last time and the one wanted now (pure)."""
    if new is None:
        return None if old is None else FleetChange("lost", node_id, cause=cause, stimulus_id=stimulus_id)
    if old is None:
        return FleetChange("joined", node_id, new, cause=cause, stimulus_id=stimulus_id)
    # One C-level read of each record's facts; a fact held by the very same object is unchanged
    # (capabilities, mostly: comparing a model to itself would walk it).
    changed = {f: x for f, x, y in zip(_FACT_FIELDS, _facts(new), _facts(old)) if x is not y and x != y}
    if "utilization" in changed and abs(new.utilization - old.utilization) < LOAD_CHANGE_MIN:
        del changed["utilization"]  # small load wobble is not worth a fleet change
    changed.pop("last_seen", None)  # heartbeats alone are not a fleet change
    return FleetChange("changed", node_id, new, changed, cause=cause, stimulus_id=stimulus_id) if changed else None


def diff_fleet(known: dict[str, NodeRecord], wanted: dict[str, NodeRecord], cause: str = "") -> list[FleetChange]:
    """What changed between the records reported last time and the ones wanted now (pure): the
    nodes lost first, then the joined and changed ones in ``wanted``'s order."""
    out = [FleetChange("lost", node_id, cause=cause) for node_id in known.keys() - wanted.keys()]
    for node_id, rec in wanted.items():
        change = diff_node(node_id, known.get(node_id), rec, cause)
        if change is not None:
            out.append(change)
    return out


def outsiders(rows: Iterable[Any], fleet: dict[str, NodeRecord]) -> dict[str, ComputeTier]:
    """Alive Ray nodes whose ``fabric.io/tier`` label names a tier but that are not in ``fleet``
    (offline by missed heartbeats while Ray still runs them, not registered yet), with that tier
    (pure). ``rows``: ``ray.nodes()`` dicts or ``RayNodeView``s."""
    out: dict[str, ComputeTier] = {}
    for node_id, tier in _alive_labelled(rows).items():
        if node_id not in fleet:
            out[node_id] = tier
    return out


def _alive_labelled(rows: Iterable[Any]) -> dict[str, ComputeTier]:
    out: dict[str, ComputeTier] = {}
    for row in rows:
        if isinstance(row, dict):
            node_id, alive, labels = row.get("NodeID"), row.get("Alive"), row.get("Labels") or {}
        else:
            node_id, alive, labels = row.node_id, row.alive, row.labels
        label = labels.get(TIER_LABEL)
        if not node_id or not alive or not label:
            continue
        try:
            out[node_id] = ComputeTier.parse(label)
        except ValueError:
            continue
    return out


class FleetMirror:
    """The feed's copy of the registry's records and of what it last reported (pure: no Ray, no
    clock; ``now`` comes in). ``resync`` starts from a snapshot; ``apply`` takes one page of
    changes and returns the fleet changes it makes, or None when it cannot be applied (a page of
    another epoch, a resync answer, an update to a record the mirror lacks): then resync."""

    def __init__(self, settings: FabricSettings | None = None) -> None:
        self.settings = settings or FabricSettings()
        self.epoch: str | None = None
        self.seq = 0
        self.records: dict[str, RegistryRecord] = {}
        """Every record the registry holds (the base the next page's updates apply to)."""
        self.known: dict[str, NodeRecord] = {}
        """The placeable-or-draining nodes as last reported: ``NodeRecord``s (``last_seen`` as of
        the node's last change: a heartbeat that brings nothing else is not a change)."""
        self.ray_alive: dict[str, ComputeTier] = {}
        """Alive raylets with a fabric tier label at the last read of Ray's node table, and that tier."""
        self.ray_dead: set[str] = set()
        """Node ids Ray's node table lists dead (terminal: an id never comes back)."""
        self._holds: list[tuple[float, str]] = []  # (held until, node id): a hold that ends is a change
        self._held: dict[str, float] = {}  # node id -> the hold it has in _holds
        self._pins: dict[str, tuple[int, dict[str, Any]]] = {}
        """node id -> (write number, fields): what the follower wrote itself, held over pages
        asked for before that write (a page in flight must not undo it)."""

    def pin(self, node_id: str, write: int, **fields: Any) -> None:
        """The follower's own write number ``write`` set ``fields`` on the node: a page or
        snapshot asked for before it (``asked_after`` lower) does not show them yet."""
        self._pins[node_id] = (write, fields)

    def _settle(self, asked_after: int | None) -> None:
        """Pins that a page or snapshot asked for after their write shows are done with."""
        if asked_after is not None and self._pins:
            self._pins = {n: p for n, p in self._pins.items() if p[0] > asked_after}

    # -- following the registry -------------------------------------------------------------------
    def resync(self, snapshot: FeedSnapshot, now: float, asked_after: int | None = None) -> list[FleetChange]:
        """Start again from ``snapshot``: every record; the fleet changes since the last report.
        ``asked_after``: the number of the follower's last write when the snapshot was asked for."""
        self._settle(asked_after)
        self.epoch, self.seq = snapshot.epoch, snapshot.seq
        self.records = {r.node_id: r for r in snapshot.records}
        self._holds, self._held = [], {}
        wanted = {}
        for rec in snapshot.records:
            nr = self._wanted(rec, now)
            if nr is not None:
                wanted[rec.node_id] = nr
        changes = diff_fleet(self.known, wanted, RESYNC_CAUSE)
        self.known = wanted
        return changes

    def apply(self, page: ChangePage, now: float, asked_after: int | None = None) -> list[FleetChange] | None:
        """Apply one page of the change feed (and any flap hold that ended by ``now``);
        ``asked_after`` as for ``resync``."""
        if page.changes is None or page.epoch != self.epoch or page.seq < self.seq:
            return None
        for ch in page.changes:  # check first: a page is applied whole or not at all
            if ch.kind == "update" and ch.node_id not in self.records:
                return None
        touched: dict[str, tuple[str, str | None]] = {}
        for ch in page.changes:
            rec = ch.applied_to(self.records.get(ch.node_id))
            if rec is None:
                self.records.pop(ch.node_id, None)
            else:
                self.records[ch.node_id] = rec
            touched[ch.node_id] = (ch.cause, ch.stimulus_id)
        self.seq = page.seq
        self._settle(asked_after)
        self._ended_holds(now, touched)
        return self._rediff(touched, now)

    def expire_holds(self, now: float) -> list[FleetChange]:
        """The fleet changes of flap holds that ended by ``now`` (when no page came)."""
        touched: dict[str, tuple[str, str | None]] = {}
        self._ended_holds(now, touched)
        return self._rediff(touched, now)

    # -- Ray's node table ---------------------------------------------------------------------------
    def observe_ray(self, rows: Iterable[Any], now: float) -> list[FleetChange]:
        """A read of Ray's node table: which labelled raylets run (for ``outsiders``), and which
        nodes Ray declared dead (they leave the fleet now, whatever the registry says yet)."""
        rows = list(rows)
        self.ray_alive = _alive_labelled(rows)
        for row in rows:
            node_id, alive = (row.get("NodeID"), row.get("Alive")) if isinstance(row, dict) else (row.node_id, row.alive)
            if node_id and not alive:
                self.ray_dead.add(node_id)
        self.ray_dead &= self.records.keys() | self.known.keys()  # only ids that could matter stay
        dead = {n: (RAY_DEAD_CAUSE, None) for n in self.known if n in self.ray_dead}
        return self._rediff(dead, now)

    def outsiders(self) -> dict[str, ComputeTier]:
        """Raylets Ray ran with a fabric tier label at the last read that are not in the fleet now."""
        return {n: t for n, t in self.ray_alive.items() if n not in self.known}

    # -- internals -------------------------------------------------------------------------------------
    def _wanted(self, rec: RegistryRecord, now: float) -> NodeRecord | None:
        """The ``NodeRecord`` the fleet should hold for ``rec`` (None: not in the fleet)."""
        if rec.status not in _IN_FLEET or rec.node_id in self.ray_dead:
            return None
        override = self.settings.nodes.get(rec.name)
        nr = rec.to_node_record(now, max_concurrent_tasks=override.max_concurrent_tasks if override is not None else None,
                                previous=self.known.get(rec.node_id))
        pinned = self._pins.get(rec.node_id)
        if pinned is not None:
            nr = nr.evolve(**pinned[1])
        if rec.held_until is not None and rec.held_until > now and self._held.get(rec.node_id) != rec.held_until:
            self._held[rec.node_id] = rec.held_until
            heapq.heappush(self._holds, (rec.held_until, rec.node_id))
        return nr

    def _ended_holds(self, now: float, touched: dict[str, tuple[str, str | None]]) -> None:
        while self._holds and self._holds[0][0] <= now:
            until, node_id = heapq.heappop(self._holds)
            if self._held.get(node_id) == until:
                del self._held[node_id]
            touched.setdefault(node_id, (HOLD_ENDED_CAUSE, None))

    def _rediff(self, touched: dict[str, tuple[str, str | None]], now: float) -> list[FleetChange]:
        lost: list[FleetChange] = []
        rest: list[FleetChange] = []
        for node_id, (cause, sid) in touched.items():
            rec = self.records.get(node_id)
            new = self._wanted(rec, now) if rec is not None else None
            change = diff_node(node_id, self.known.get(node_id), new, cause, sid)
            if new is None:
                self.known.pop(node_id, None)
            else:
                self.known[node_id] = new
            if change is not None:
                (lost if change.kind == "lost" else rest).append(change)
        return lost + rest


class FleetFeed:
    """Follows the registry's change feed (and, now and then, Ray's node table); remembers what it
    reported. ``adapter`` is the Ray seam (``RayAdapter``: the registry's handle, the node table);
    ``clock`` gives epoch seconds (flap holds end by it)."""

    def __init__(self, settings: FabricSettings, adapter: Any = None, *, clock: Callable[[], float] = time.time,
                 ray_table_every_s: float = 10.0, ray_table_min_s: float = 1.0) -> None:
        self.settings = settings
        self.adapter = adapter if adapter is not None else RayAdapter()
        self.clock = clock
        self.mirror = FleetMirror(settings)
        self.outsiders: dict[str, ComputeTier] = {}
        """Alive raylets with a fabric tier label that are not in the fleet, and their label tier."""
        self.ray_table_every_s = ray_table_every_s
        self.ray_table_min_s = ray_table_min_s
        self.resyncs = 0
        """Full resyncs so far (the first poll is one)."""
        self._registry: Any = None
        self._resync = True
        self._ray_read_at: float | None = None
        self._ray_wanted = True
        self._writes = 0
        """The feed's own writes to the registry so far (see ``FleetMirror.pin``)."""

    @property
    def known(self) -> dict[str, NodeRecord]:
        """The placeable-or-draining nodes as last reported."""
        return self.mirror.known

    def resync(self) -> None:
        """Start again from the registry's snapshot at the next poll."""
        self._resync = True

    def _reg(self) -> Any:
        if self._registry is None:
            self._registry = self.adapter.get_actor(REGISTRY)
            if self._registry is None:
                raise ValueError(f"no actor {REGISTRY!r}")
        return self._registry

    async def poll(self) -> list[FleetChange]:
        changes: list[FleetChange] = []
        try:
            changes = await self._follow()
        except Exception as exc:
            if not self._away(exc):
                raise
            # Registry away (restarting): keep the fleet as it was; its new epoch resyncs us.
            self._registry = None
            changes = self.mirror.expire_holds(self.clock())
        now = self.clock()
        if self._ray_due(now, changes):
            self._ray_read_at, self._ray_wanted = now, False
            # O(fleet) (Ray's whole node table, read and compared): off the loop, which keeps
            # answering placements meanwhile; nothing else touches the mirror while a poll runs
            changes += await asyncio.to_thread(lambda: self.mirror.observe_ray(self.adapter.list_nodes(), now))
        self.outsiders = self.mirror.outsiders()
        return changes

    async def _follow(self) -> list[FleetChange]:
        reg = self._reg()
        if not self._resync:
            asked_after = self._writes
            page: ChangePage = await reg.changes.remote(self.mirror.seq, self.mirror.epoch)
            applied = self.mirror.apply(page, self.clock(), asked_after)
            if applied is not None:
                if any(ch.kind == "seen" for ch in page.changes or ()):
                    self._ray_wanted = True  # a raylet without a record: read whether Ray runs it
                return applied
        asked_after = self._writes
        snapshot: FeedSnapshot = await reg.snapshot.remote()
        self._resync, self._ray_wanted = False, True
        self.resyncs += 1
        return self.mirror.resync(snapshot, self.clock(), asked_after)

    def _ray_due(self, now: float, changes: list[FleetChange]) -> bool:
        """Whether to read Ray's node table now: asked for (first poll, resync, a raylet seen), a
        node left the fleet (at most every ``ray_table_min_s``), or ``ray_table_every_s`` passed."""
        if any(ch.kind == "lost" for ch in changes):
            self._ray_wanted = True
        if self._ray_read_at is None:
            return True
        since = now - self._ray_read_at
        return since >= self.ray_table_every_s or (self._ray_wanted and since >= self.ray_table_min_s)

    # -- the scheduler's writes (through the registry's one writer) ---------------------------------------
    async def set_cordoned(self, node_id: str, cordoned: bool, *, stimulus_id: str | None = None, reason: str | None = None) -> None:
        await self._call("set_cordoned", node_id, cordoned, stimulus_id, reason)
        self._writes += 1  # a page asked for while the write was on its way must not undo it
        self.mirror.pin(node_id, self._writes, cordoned=cordoned)
        rec = self.known.get(node_id)
        if rec is not None:
            self.known[node_id] = rec.evolve(cordoned=cordoned)

    async def mark_draining(self, node_id: str, *, stimulus_id: str | None = None, reason: str | None = None) -> None:
        await self._call("mark_draining", node_id, stimulus_id, reason)

    async def _call(self, method: str, *args: Any) -> Any:
        for attempt in range(20):
            try:
                return await getattr(self._reg(), method).remote(*args)
            except Exception as exc:
                if not self._away(exc):
                    raise
                self._registry = None
                await asyncio.sleep(0.25)
        return None

    def _away(self, exc: BaseException) -> bool:
        """The registry is missing or restarting (what the feed always retried: a ``ValueError``, as
        from a lookup that found no actor, or an actor Ray says is gone for now)."""
        return isinstance(exc, ValueError) or self.adapter.is_actor_gone(exc)

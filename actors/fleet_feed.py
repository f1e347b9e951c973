"""FleetFeed: how the scheduler learns the fleet — from Ray's node table and the registry.

Each poll reads Ray's node table (which raylets are alive: ~0.3 ms) and the registry's records
(capabilities, status, cordons, flap holds), builds the ``NodeRecord`` each placeable-or-draining
node should have, and diffs that against what it reported last time: ``joined``, ``changed`` or
``lost``. Polling both, rather than trusting pushed events alone, means a restarted scheduler
converges from nothing in one poll and a missed event costs one tick, not correctness.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import ray

from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import NodeRecord
from fabric.core.names import NAMESPACE, REGISTRY, TIER_LABEL
from fabric.core.settings import FabricSettings
from fabric.core.tiers import ComputeTier

_IN_FLEET = (NodeStatus.ACTIVE, NodeStatus.DRAINING)
# Fields the feed owns; usage fields (running, reservations) belong to the scheduler's own view.
_FACT_FIELDS = ("name", "capabilities", "status", "tier", "utilization", "last_seen", "cordoned", "flap_held",
                "max_concurrent_tasks", "zone", "pool", "pool_tier")


@dataclass(frozen=True)
class FleetChange:
    kind: str
    """``joined``, ``changed`` or ``lost``."""
    node_id: str
    record: NodeRecord | None = None
    fields: dict[str, Any] = field(default_factory=dict)


def diff_fleet(known: dict[str, NodeRecord], wanted: dict[str, NodeRecord]) -> list[FleetChange]:
    """What changed between the records reported last time and the ones wanted now (pure)."""
    out: list[FleetChange] = []
    for node_id in known.keys() - wanted.keys():
        out.append(FleetChange("lost", node_id))
    for node_id, rec in wanted.items():
        old = known.get(node_id)
        if old is None:
            out.append(FleetChange("joined", node_id, rec))
            continue
        changed = {f: getattr(rec, f) for f in _FACT_FIELDS if getattr(rec, f) != getattr(old, f)}
        if "utilization" in changed and abs(rec.utilization - old.utilization) < 0.05:
            del changed["utilization"]  # small load wobble is not worth a fleet change
        changed.pop("last_seen", None)  # heartbeats alone are not a fleet change
        if changed:
            out.append(FleetChange("changed", node_id, rec, changed))
    return out


def outsiders(rows: list[dict[str, Any]], fleet: dict[str, NodeRecord]) -> dict[str, ComputeTier]:
    """Alive Ray nodes whose ``fabric.io/tier`` label names a tier but that are not in ``fleet``
    (offline by missed heartbeats while Ray still runs them, not registered yet), with that tier (pure)."""
    out: dict[str, ComputeTier] = {}
    for row in rows:
        node_id = row.get("NodeID")
        label = (row.get("Labels") or {}).get(TIER_LABEL)
        if not node_id or node_id in fleet or not label:
            continue
        try:
            out[node_id] = ComputeTier.parse(label)
        except ValueError:
            continue
    return out


class FleetFeed:
    """Polls Ray and the registry; remembers what it reported."""

    def __init__(self, settings: FabricSettings) -> None:
        self.settings = settings
        self.known: dict[str, NodeRecord] = {}
        self.outsiders: dict[str, ComputeTier] = {}
        """Alive raylets with a fabric tier label that are not in the fleet, and their label tier."""
        self._registry = None

    def _reg(self):
        if self._registry is None:
            self._registry = ray.get_actor(REGISTRY, namespace=NAMESPACE)
        return self._registry

    async def poll(self) -> list[FleetChange]:
        rows = [row for row in ray.nodes() if row.get("Alive")]
        alive = {row["NodeID"] for row in rows}
        try:
            records = await self._reg().records.remote()
        except (ValueError, ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            self._registry = None
            records = None
        now = time.time()
        if records is None:
            # Registry away (restarting): only liveness is known; keep the rest as it was.
            wanted = {k: v for k, v in self.known.items() if k in alive}
        else:
            wanted = {}
            for rec in records:
                if rec.node_id in alive and rec.status in _IN_FLEET:
                    override = self.settings.nodes.get(rec.name)
                    wanted[rec.node_id] = rec.to_node_record(
                        now, max_concurrent_tasks=override.max_concurrent_tasks if override is not None else None)
        changes = diff_fleet(self.known, wanted)
        self.known = wanted
        self.outsiders = outsiders(rows, wanted)
        return changes

    async def set_cordoned(self, node_id: str, cordoned: bool) -> None:
        await self._call("set_cordoned", node_id, cordoned)
        rec = self.known.get(node_id)
        if rec is not None:
            self.known[node_id] = rec.evolve(cordoned=cordoned)

    async def mark_draining(self, node_id: str) -> None:
        await self._call("mark_draining", node_id)

    async def _call(self, method: str, *args: Any) -> Any:
        for attempt in range(20):
            try:
                return await getattr(self._reg(), method).remote(*args)
            except (ValueError, ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                self._registry = None
                await asyncio.sleep(0.25)
        return None

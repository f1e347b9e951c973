"""The allocation ledger: every reservation the scheduler holds in its fleet view, by id and by
node, with who holds it (a call the scheduler placed, or a lease) and how it got there (placed by
the engine, or held: a lease's call that was already running when the lease was renewed).

The fleet view's usage fields (``running``, ``reserved_cpus``...) are the sum of the ledger's
allocations on each node; ``problems`` checks that. A slot cap can fall under running work (a
re-probe finds less): the ledger remembers the highest cap a node had while the engine's
allocations on it were live, so "the engine never placed past a node's slots" stays checkable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from fabric.core.placement import Allocation, FleetView

TASK = "task"
"""The owner of an allocation the scheduler placed for one call (``NodeAssignment.allocation_id``)."""
OBSERVED = "observed"
"""The owner of a slot Ray says is in use that nothing the core tracks accounts for (``SlotsObserved``)."""


@dataclass(slots=True)
class Entry:
    """One reservation (treat as immutable: not frozen only because a frozen dataclass is slow to build)."""

    allocation: Allocation
    owner: str
    """``TASK`` or the id of the lease it belongs to."""
    held: bool = False
    """Reserved for a call already running (a lease renewal's ``holding``), not placed by the engine."""


class AllocationLedger:
    """Allocations by id and by node."""

    def __init__(self) -> None:
        self._entries: dict[int, Entry] = {}
        self._by_node: dict[str, set[int]] = {}
        self._placed: dict[str, int] = {}
        """Engine-placed (not held) allocations per node."""
        self._cap: dict[str, int] = {}
        """Highest slot cap per node while engine-placed allocations are live there."""

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, allocation_id: object) -> bool:
        return allocation_id in self._entries

    def __iter__(self) -> Iterator[int]:
        return iter(self._entries)

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def get(self, allocation_id: int) -> Allocation | None:
        e = self._entries.get(allocation_id)
        return e.allocation if e is not None else None

    def running_on(self, node_id: str) -> int:
        """Allocations held on the node."""
        return len(self._by_node.get(node_id, ()))

    def allocations(self) -> dict[int, Allocation]:
        """Every allocation by id (a copy)."""
        return {aid: e.allocation for aid, e in self._entries.items()}

    def track(self, a: Allocation, owner: str = TASK, *, held: bool = False, slots: int | None = None) -> None:
        """File an allocation already reserved in the fleet. ``slots``: the node's cap when the engine placed it."""
        if a.allocation_id in self._entries:
            self.pop(a.allocation_id)
        self._entries[a.allocation_id] = Entry(a, owner, held)
        self._by_node.setdefault(a.node_id, set()).add(a.allocation_id)
        if not held:
            self._placed[a.node_id] = self._placed.get(a.node_id, 0) + 1
            if slots is not None:
                self._cap[a.node_id] = max(self._cap.get(a.node_id, 0), slots)

    def note_cap(self, node_id: str, slots: int) -> None:
        """The node's slot cap changed: remember it if the engine's work there predates it."""
        if node_id in self._cap:
            self._cap[node_id] = max(self._cap[node_id], slots)

    def pop(self, allocation_id: int) -> Entry | None:
        """Take one allocation out (it is the caller's to release in the fleet)."""
        e = self._entries.pop(allocation_id, None)
        if e is None:
            return None
        node = self._by_node.get(e.allocation.node_id)
        if node is not None:
            node.discard(allocation_id)
            if not node:
                del self._by_node[e.allocation.node_id]
        if not e.held:
            left = self._placed.get(e.allocation.node_id, 1) - 1
            if left > 0:
                self._placed[e.allocation.node_id] = left
            else:
                self._placed.pop(e.allocation.node_id, None)
                self._cap.pop(e.allocation.node_id, None)
        return e

    def give_back(self, allocation_id: int, fleet: FleetView) -> Entry | None:
        """Take one allocation out and release its reservation in ``fleet`` (None: not held)."""
        e = self.pop(allocation_id)
        if e is not None:
            fleet.release(e.allocation)
        return e

    def owned_on(self, node_id: str, owner: str) -> list[int]:
        """Allocation ids ``owner`` holds on the node."""
        return [aid for aid in self._by_node.get(node_id, ()) if self._entries[aid].owner == owner]

    def drop_node(self, node_id: str) -> int:
        """Forget every allocation on a node that left; returns how many there were."""
        ids = self._by_node.pop(node_id, set())
        for aid in ids:
            self._entries.pop(aid, None)
        self._placed.pop(node_id, None)
        self._cap.pop(node_id, None)
        return len(ids)

    def problems(self, fleet: FleetView, leases: set[str]) -> list[str]:
        """What is inconsistent with the fleet and the lease book (empty when nothing)."""
        out: list[str] = []
        per_node: dict[str, list[Entry]] = {}
        for aid, e in self._entries.items():
            a = e.allocation
            if a.allocation_id != aid:
                out.append(f"ledger: allocation {a.allocation_id} filed under {aid}")
            if a.node_id not in fleet:
                out.append(f"ledger: allocation {aid} is on {a.node_id}, which is not in the fleet")
            if e.owner not in (TASK, OBSERVED) and e.owner not in leases:
                out.append(f"ledger: allocation {aid} belongs to lease {e.owner!r}, which the lease book does not hold")
            if aid not in self._by_node.get(a.node_id, ()):
                out.append(f"ledger: allocation {aid} is missing from its node's index ({a.node_id})")
            per_node.setdefault(a.node_id, []).append(e)
        for node_id, ids in self._by_node.items():
            for aid in ids:
                if aid not in self._entries or self._entries[aid].allocation.node_id != node_id:
                    out.append(f"ledger: node index of {node_id} names allocation {aid}, which is not there")
        for rec in fleet.records():
            mine = per_node.get(rec.node_id, [])
            slots = sum(e.allocation.slots for e in mine)
            if rec.running != slots:
                out.append(f"fleet: {rec.node_id} has {rec.running} running, the ledger holds {slots} slots there")
            if rec.running < 0 or rec.reserved_cpus < -1e-9 or rec.reserved_memory_mib < -1e-6:
                out.append(f"fleet: {rec.node_id} has a negative usage")
            cpus = sum(e.allocation.cpus for e in mine)
            if abs(rec.reserved_cpus - cpus) > 1e-6 * max(1.0, cpus):
                out.append(f"fleet: {rec.node_id} has {rec.reserved_cpus} CPUs reserved, the ledger {cpus}")
            placed = sum(e.allocation.slots for e in mine if not e.held)
            if sum(1 for e in mine if not e.held) != self._placed.get(rec.node_id, 0):
                out.append(f"ledger: the engine-placed count of {rec.node_id} is out of step")
            cap = max(rec.slots, self._cap.get(rec.node_id, 0))
            if placed > cap:
                out.append(f"fleet: the engine holds {placed} slots on {rec.node_id}, past its {cap} slots")
        return out

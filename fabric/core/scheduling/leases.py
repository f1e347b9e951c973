"""The lease book: placement leases (the fast path, issue 6), each a set of slots a client may
fill itself for one requirement class.

A grant reserves, in the fleet view, the calls the client says still run under the lease
(``holding``: kept whatever the node's state now) and up to ``want`` new slots placed by the
engine, best first (``reserve_slots``). A lease lives ``2 * ttl_s`` after its last grant: the
client renews it every tick while it has work, gives it back when idle, and one the scheduler
sees no renewal of is taken back (``expired``). Granting is not a call: a grant counts in
``leases_granted`` only; its calls count where they ran, from the workers' reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from fabric.core.scheduling.provisions import is_prospective
from fabric.core.placement import Allocation, Decision, FleetView, Requirement, place

from fabric.core.scheduling.replies import LeaseSlot


@dataclass
class Lease:
    lease_id: str
    allocation_ids: list[int]
    granted_at: float
    expires: float
    renewals: int = 0
    """Grants under this id before the current one (while it was never given back)."""


@dataclass
class LeaseReservation:
    """What one grant reserved in the fleet."""

    held: list[Allocation] = field(default_factory=list)
    """One per call the client still runs (reserved, not placed)."""
    placed: list[tuple[Allocation, int]] = field(default_factory=list)
    """New slots the engine placed, each with its node's slot cap at the time."""
    slots: tuple[LeaseSlot, ...] = ()


def reserve_slots(fleet: FleetView, req: Requirement, holding: Mapping[str, int], want: int,
                  ray_gpus: Callable[[str, Requirement], float],
                  first: "Callable[[Decision], None] | None" = None) -> LeaseReservation:
    """Reserve a grant's slots in ``fleet``: ``holding`` (node -> calls still running; nodes the
    fleet does not hold are skipped) and up to ``want`` placed by the engine. A node with held
    calls and no new slot gets capacity 0 (no new calls; the running ones still count). ``first`` is
    shown the engine's first decision before it is committed (the decision recorded for the grant)."""
    out = LeaseReservation()
    running: dict[str, int] = {}
    for node_id, n in holding.items():
        if node_id not in fleet or n <= 0:
            continue
        for _ in range(n):  # still running there: keep it counted, whatever the node's state
            a = Allocation(node_id=node_id, cpus=req.num_cpus, memory_mib=req.memory_mib)
            fleet.reserve(a)
            out.held.append(a)
        running[node_id] = n
    granted: dict[str, int] = {}
    levels: dict[str, Decision] = {}
    for i in range(max(0, want)):
        d = place(fleet, req)
        if i == 0 and first is not None:
            first(d)
        if d.status != "placed" or d.node_id is None or is_prospective(d.node_id):
            break  # a node still coming up takes no leased calls: they queue for it
        cap = fleet.node(d.node_id).slots
        committed = fleet.commit(d)
        if committed is None:  # pragma: no cover - a placed decision always carries its allocation
            break
        out.placed.append((committed, cap))
        granted[d.node_id] = granted.get(d.node_id, 0) + 1
        levels.setdefault(d.node_id, d)
    slots = [LeaseSlot(n, running.get(n, 0) + k, levels[n].tier, levels[n].fallback_levels, ray_gpus(n, req))
             for n, k in granted.items()]
    slots += [LeaseSlot(n, 0, ray_gpus=ray_gpus(n, req)) for n in running if n not in granted]
    out.slots = tuple(slots)
    return out


class LeaseBook:
    """Leases by id, with their reservations' allocation ids and expiry."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        """How long a grant is good for (one health tick); a lease expires ``2 * ttl_s`` after it."""
        self._leases: dict[str, Lease] = {}

    def __len__(self) -> int:
        return len(self._leases)

    def __contains__(self, lease_id: object) -> bool:
        return lease_id in self._leases

    def ids(self) -> list[str]:
        return sorted(self._leases)

    def get(self, lease_id: str) -> Lease | None:
        return self._leases.get(lease_id)

    def file(self, lease_id: str, allocation_ids: list[int], now: float, *, renewals: int = 0) -> Lease:
        """Record a grant (its previous one must have been taken out with ``pop``)."""
        lease = Lease(lease_id, allocation_ids, now, now + 2 * self.ttl_s, renewals)
        self._leases[lease_id] = lease
        return lease

    def pop(self, lease_id: str) -> Lease | None:
        return self._leases.pop(lease_id, None)

    def expired(self, now: float) -> list[str]:
        """Leases not renewed in time (expiry ``now`` or earlier)."""
        return [lid for lid, lease in self._leases.items() if lease.expires <= now]

    def problems(self, owners: Mapping[int, str]) -> list[str]:
        """What is inconsistent (empty when nothing). ``owners``: allocation id -> owner, from the ledger."""
        out: list[str] = []
        for lid, lease in self._leases.items():
            if lease.lease_id != lid:
                out.append(f"leases: {lid!r} filed under another id ({lease.lease_id!r})")
            if not lease.expires > lease.granted_at:
                out.append(f"leases: {lid!r} expires ({lease.expires}) no later than it was granted ({lease.granted_at})")
            if len(set(lease.allocation_ids)) != len(lease.allocation_ids):
                out.append(f"leases: {lid!r} lists an allocation twice")
            for aid in lease.allocation_ids:
                owner = owners.get(aid)
                if owner is not None and owner != lid:
                    out.append(f"leases: {lid!r} lists allocation {aid}, which the ledger files under {owner!r}")
        return out

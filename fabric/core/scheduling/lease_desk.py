"""The lease desk: a lease's slots from its grant to its end, and the slots an expired lease's
calls may still hold until Ray's usage says they ended.

``LeaseDesk`` is a part of ``SchedulerCore``, built over the same fleet, ledger, lease book and
counters. The core decides when (a ``LeaseRequested``, ``LeaseEnded``, ``SlotsObserved`` or
``Tick``) and what follows (a refusal, the queue placed again); the desk keeps the books: it
reserves a grant's slots (``leases.reserve_slots``) and files them under the lease in the ledger and
the lease book, gives a lease's slots back when it ends, and, while Ray's usage is observed, keeps
an expired lease's slots as ``OBSERVED`` reservations until an observation that can vouch for them
no longer counts them. A method that frees slots answers True: the core then places the queue.
"""

from __future__ import annotations

from typing import Callable, Mapping

from fabric.core.clock import Clock
from fabric.core.placement import Decision, FleetView, Requirement
from fabric.core.scheduling.leases import LeaseBook, reserve_slots
from fabric.core.scheduling.ledger import OBSERVED, AllocationLedger
from fabric.core.scheduling.replies import LeaseSlot

OBSERVATION_VALID_S = 5.0
"""A ``SlotsObserved`` vouches for Ray's usage this long: without fresher ones, an expired lease's
slots are simply given back (nothing would ever see its calls end)."""

OBSERVED_SETTLE_S = 2.0
"""How long after a lease expires before Ray's usage can vouch that one of its calls ended: a call
sent just before the expiry is not yet counted (the raylet has to take it and report it), so an
older observation, or one taken sooner, would read its slot as free and double-book the node."""

RayGpus = Callable[[str, Requirement], float]
"""GPUs a call of the requirement asks Ray for on the node (``SchedulerCore.ray_gpus``)."""


class LeaseDesk:
    """Leases' reservations and the ``OBSERVED`` slots expired leases left (see the module docstring)."""

    def __init__(self, fleet: FleetView, ledger: AllocationLedger, leases: LeaseBook, counters: dict[str, int],
                 clock: Clock, ray_gpus: RayGpus) -> None:
        self.fleet = fleet
        self.ledger = ledger
        self.leases = leases
        self.counters = counters
        """The core's counters (``leases_granted``, ``leases_expired``), shared."""
        self.clock = clock
        self.ray_gpus = ray_gpus
        self._observed_until = float("-inf")
        """Until when the last ``SlotsObserved`` stands (expired leases' slots are kept as observed then)."""
        self._observed_at = float("-inf")
        """When the last ``SlotsObserved`` was taken."""
        self._last_used: dict[str, int] = {}
        """The last ``SlotsObserved``: ``fabric.slots`` in use per node, as Ray counted them."""
        self._observed_since: dict[int, tuple[str, float]] = {}
        """The lease each ``OBSERVED`` reservation came from and when it expired (``OBSERVED_SETTLE_S``)."""

    def grant(self, lease_id: str, req: Requirement, holding: Mapping[str, int], want: int,
              now: float, first: "Callable[[Decision], None] | None" = None) -> tuple[LeaseSlot, ...]:
        """Grant (or renew) ``lease_id``: the slots it still has running stay reserved and up to
        ``want`` more are placed; the previous grant under the id is replaced. The slots granted.
        ``first``: shown the engine's first decision (``reserve_slots``)."""
        previous = self.leases.get(lease_id)
        renewals = previous.renewals + 1 if previous is not None else 0
        self.drop(lease_id)
        self._drop_observed_of(lease_id)
        res = reserve_slots(self.fleet, req, holding, want, self.ray_gpus, first)
        for a in res.held:
            self.ledger.track(a, lease_id, held=True)
        for a, cap in res.placed:
            self.ledger.track(a, lease_id, slots=cap)
        ids = [a.allocation_id for a in res.held] + [a.allocation_id for a, _ in res.placed]
        self.leases.file(lease_id, ids, now, renewals=renewals)
        self.counters["leases_granted"] += 1
        return res.slots

    def end(self, lease_id: str) -> bool:
        """A lease given back idle (none of its calls in flight): its slots go, and so do the
        ``OBSERVED`` slots an earlier expiry of it left. True when it freed any."""
        had_observed = any(owner == lease_id for owner, _ in self._observed_since.values())
        self._drop_observed_of(lease_id)
        return self.drop(lease_id) or had_observed

    def drop(self, lease_id: str, *, keep_as_observed: bool = False) -> bool:
        """Give a lease's reservations back (False: no such lease). ``keep_as_observed`` (a lease
        that expired while Ray's usage is being observed): its calls may still run, so its slots
        stay reserved as ``OBSERVED`` until ``SlotsObserved`` sees them end."""
        lease = self.leases.pop(lease_id)
        if lease is None:
            return False
        for aid in lease.allocation_ids:
            e = self.ledger.pop(aid)
            if e is None:
                continue
            if keep_as_observed:
                self.ledger.track(e.allocation, OBSERVED, held=True)
                self._observed_since[aid] = (lease_id, self.clock())
            else:
                self.fleet.release(e.allocation)
        return True

    def expire(self, now: float) -> tuple[bool, bool]:
        """Drop the leases not renewed in time: kept as ``OBSERVED`` while Ray's usage is observed,
        whether or not work waits (a call placed right after the expiry would otherwise be
        double-booked onto a node whose leased calls still run, and wait behind them there while
        another node has room). Whether any expired, and whether what Ray last counted freed some."""
        expired = self.leases.expired(now)
        observing = now < self._observed_until
        for lid in expired:
            self.drop(lid, keep_as_observed=observing)
            self.counters["leases_expired"] += 1
        return bool(expired), bool(expired) and observing and self._trim()

    def observe(self, used: Mapping[str, int], now: float) -> bool:
        """Ray's view of slots in use (``SlotsObserved``): the ``OBSERVED`` slots it no longer
        counts go (calls spilled by label were never reserved and are not: Ray queues them on its
        own). True when some went."""
        self._observed_until = now + OBSERVATION_VALID_S
        self._observed_at = now
        self._last_used = dict(used)
        return self._trim()

    def _trim(self) -> bool:
        """Give back the ``OBSERVED`` slots Ray no longer counts in use: only those the last
        observation can vouch for (taken ``OBSERVED_SETTLE_S`` after their lease expired); the
        fresher ones stay, and count toward what Ray reported on their node."""
        freed = False
        since = self._observed_since
        for rec in self.fleet.records():
            mine = self.ledger.owned_on(rec.node_id, OBSERVED)
            if not mine:
                continue
            want = max(0, self._last_used.get(rec.node_id, 0) - (self.ledger.running_on(rec.node_id) - len(mine)))
            settled = [aid for aid in mine if since.get(aid, ("", float("-inf")))[1] + OBSERVED_SETTLE_S <= self._observed_at]
            for aid in settled[max(0, want - (len(mine) - len(settled))):]:
                self.ledger.give_back(aid, self.fleet)
                since.pop(aid, None)
                freed = True
        if len(since) > len(self.ledger):  # entries released elsewhere (a node that left)
            self._observed_since = {aid: t for aid, t in since.items() if aid in self.ledger}
        return freed

    def _drop_observed_of(self, lease_id: str) -> None:
        """A lease renewed after it expired: its ``holding`` now reserves its running calls, so the
        ``OBSERVED`` slots it left go (kept, they would count those calls twice)."""
        mine = [aid for aid, (lid, _) in self._observed_since.items() if lid == lease_id]
        for aid in mine:
            del self._observed_since[aid]
            self.ledger.give_back(aid, self.fleet)


__all__ = ["LeaseDesk", "OBSERVATION_VALID_S", "OBSERVED_SETTLE_S", "RayGpus"]

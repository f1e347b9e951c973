"""A client's lease for one requirement class, as decisions: ``LeaseState``.

Which leased node the next call goes to, or Ray's queue for the floor set (``SPILL``), or the
per-call path; when to ask for the next grant and when to take it into use; when a lease has gone
idle and should be given back. Every decision is given ``now`` (``time.monotonic()``, read by the
caller); the one outside fact it needs, whether a call has finished, comes from completion
callbacks, or when one lags from a ``CallWatch`` it is handed (``fabric.rayio.driver.RayDriver``
in the driver, a fake in tests). It imports no Ray, reads no clock and sends nothing: asking the
scheduler, waiting for its answer and submitting calls are ``fabric.runtime.dispatch``'s.

See ``fabric.core.scheduling.LeaseGrant`` for what a grant holds.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Iterable, Protocol

from fabric.core.scheduling import LeaseGrant

SPILL = "spill"
"""``LeaseState.route``'s answer for "Ray's queue for the floor set" (node ids are hex, never this)."""


class CallWatch(Protocol):
    """How a lease learns that calls finished (``fabric.rayio.driver.RayDriver`` has both)."""

    def when_done(self, ref: Any, callback: Callable[[Any], None]) -> None:
        """Call ``callback(result)`` once ``ref``'s task has finished (on another thread)."""

    def all_finished(self, refs: Iterable[Any]) -> bool:
        """Whether every one of ``refs`` has finished, without waiting."""


class LeaseState:
    """This process's lease for one requirement class, and what it decides.

    Calls go to the leased nodes in the engine's order while a node has room for one more of this
    client's calls in flight; a finished call frees its room through a completion callback (no
    polling, no round trip). Past the slots, calls go to the spill selector (Ray queues them for
    every node inside the floor that may take work, see ``LeaseGrant.spill``); while spilled calls
    still queue, new ones queue behind them (see ``spill_queue_empty``).

    Renewed every health tick, so a cordoned, drained or lost node stops receiving new calls within
    one tick: the next grant is asked for at ``RENEW_AT`` of the tick, without waiting, and taken
    into use when it arrives; a call waits for it only when the tick has run out first. A grant is
    used for at most one tick from the moment it was asked for."""

    __slots__ = ("lease_id", "watch", "grant", "expires", "renew_at", "renewal", "renewal_seq", "arrived_seq", "order",
                 "capacity", "fallback", "gpus", "spill", "spill_via", "running", "finished", "in_flight", "peak",
                 "spilled", "last_spill", "spill_seq", "last_spill_at", "done_seq", "armed_seq", "next_spill_check",
                 "last_call_at")

    SPILL_CHECK_S = 0.01
    """How often, at most, a call looks whether this lease's spilled calls have all been taken."""
    RENEW_AT = 0.75
    """When, as a share of the tick, the next grant is asked for."""
    IDLE_AFTER = 0.25
    """A lease with nothing in flight and no call for this share of the tick is idle: the next
    request this client makes to the scheduler gives it back (see ``idle``)."""

    def __init__(self, lease_id: str, watch: CallWatch) -> None:
        self.lease_id = lease_id
        self.watch = watch
        self.grant: LeaseGrant | None = None
        self.expires = 0.0
        self.renew_at = 0.0
        self.renewal: Any = None
        """The next grant's answer (an ObjectRef) while it is on its way; it has arrived when
        ``arrived_seq`` (set by its completion callback) has caught up with ``renewal_seq``."""
        self.renewal_seq = 0
        self.arrived_seq = 0
        self.order: list[str] = []
        self.capacity: dict[str, int] = {}
        self.fallback: dict[str, bool] = {}
        """Per leased node: whether its slots sit below ``min_tier`` (a call there is a fallback)."""
        self.gpus: dict[str, float] = {}
        """Per leased node: the GPUs each call asks Ray for there."""
        self.spill: dict[str, str] | None = None
        """The grant's spill selector (None: no spilling), and ``spill_via`` its first node."""
        self.spill_via: str | None = None
        self.running: dict[str, int] = {}
        """This client's calls in flight per leased node (kept across renewals)."""
        self.finished: collections.deque = collections.deque()
        """Nodes whose calls finished, appended by completion callbacks on Ray's own threads (a
        deque append never blocks; taking a lock there could deadlock against a submit)."""
        self.in_flight: dict[int, Any] = {}
        """The ObjectRefs of calls on leased slots, each dropped by its completion callback (so no
        result is kept alive): what ``idle`` looks at when a callback is still on its way."""
        self.last_call_at = 0.0
        self.peak = 0
        """Most of this client's calls in flight on leased slots at once since the last renewal."""
        self.spilled = 0
        """Calls sent to the spill selector since the last renewal."""
        self.last_spill: Any = None
        """The newest spilled call's ObjectRef, let go of once a call sees it has finished."""
        self.spill_seq = 0
        """Spilled calls so far; ``done_seq``: the number of the newest one known to have finished
        (set by a completion callback); ``armed_seq``: the one that callback waits on."""
        self.done_seq = 0
        self.armed_seq = 0
        self.last_spill_at = 0.0
        self.next_spill_check = 0.0

    # -- the grant --------------------------------------------------------------------------------
    def install(self, grant: LeaseGrant, asked_at: float) -> None:
        """Take ``grant`` (asked for at ``asked_at``) into use for one tick from then."""
        self.grant = grant
        self.expires = asked_at + grant.ttl_s
        self.renew_at = asked_at + grant.ttl_s * self.RENEW_AT
        self.order = [s.node_id for s in grant.slots if s.capacity > 0]
        self.capacity = {s.node_id: s.capacity for s in grant.slots}
        self.fallback = {s.node_id: s.fallback_levels > 0 for s in grant.slots}
        self.gpus = {s.node_id: s.ray_gpus for s in grant.slots}
        self.spill = grant.spill or None
        self.spill_via = grant.spill_via if self.spill else None
        self.peak = 0
        self.spilled = 0

    def forget(self) -> None:
        """Let go of the grant (given back to the scheduler): the next call asks for a new one.
        Callbacks still on their way land in the old bookkeeping, which is dropped."""
        self.grant = self.renewal = None
        self.expires = self.renew_at = 0.0
        self.order, self.capacity, self.running, self.fallback, self.gpus = [], {}, {}, {}, {}
        self.finished, self.in_flight = collections.deque(), {}
        self.spill = self.spill_via = self.last_spill = None
        self.done_seq = self.armed_seq = self.spill_seq
        self.peak = self.spilled = 0

    # -- renewal ----------------------------------------------------------------------------------
    def wants_renewal(self, now: float) -> bool:
        """Whether to ask for the next grant now. A renewal asked for a tick ago or more and never
        taken (no call came since) is dropped first: a cordon since then would not show in it."""
        if self.renewal is not None and self.grant is not None and now >= self.renew_at + self.grant.ttl_s:
            self.renewal = None
        return self.renewal is None and now >= self.renew_at

    def asked(self, renewal: Any, now: float) -> None:
        """The next grant was asked for at ``now``; ``renewal`` is its answer on its way."""
        seq = self.renewal_seq = self.renewal_seq + 1
        self.renewal = renewal
        self.renew_at = now  # asked at: the grant will be used for one tick from here
        self.watch.when_done(renewal, lambda _result, seq=seq: setattr(self, "arrived_seq", seq))

    def renewal_arrived(self) -> bool:
        return self.renewal is not None and self.arrived_seq == self.renewal_seq

    def must_take(self, now: float) -> bool:
        """Whether to take the renewal asked for into use now: it has arrived, or the grant in
        use has run out (then the call waits for it)."""
        return self.renewal is not None and (self.renewal_arrived() or now >= self.expires)

    def took(self, grant: LeaseGrant) -> None:
        """The renewal's answer, taken into use for one tick from when it was asked for."""
        self.renewal = None
        self.install(grant, self.renew_at)

    def want(self) -> int:
        """Slots to ask for at renewal: what this client used at its peak, more when it had to
        spill, and no more than that: a lease must not hoard the fleet's free slots for a tick."""
        return max(1, min(64, self.peak + self.spilled))

    def holding(self) -> dict[str, int]:
        """This client's calls in flight per leased node (the scheduler keeps their slots)."""
        self._collect()
        return {n: k for n, k in self.running.items() if k > 0}

    # -- routing ----------------------------------------------------------------------------------
    def route(self, now: float, may_spill: bool) -> str | None:
        """Where the next call goes: a leased node with room (its id), ``SPILL`` (Ray's queue for
        the floor set), or None (no room and no spilling: the per-call path)."""
        spill = may_spill and self.spill is not None
        if not spill or self.spill_queue_empty(now):
            node = self.free_node()
            if node is not None:
                return node
        return SPILL if spill else None

    def _collect(self) -> None:
        """Count down the calls that finished since the last look (``finished``)."""
        pop = self.finished.popleft
        while self.finished:
            node = pop()
            self.running[node] = self.running.get(node, 1) - 1

    def free_node(self) -> str | None:
        self._collect()
        for node in self.order:
            if self.running.get(node, 0) < self.capacity[node]:
                return node
        return None

    def spill_queue_empty(self, now: float) -> bool:
        """No spilled call of this client waits in Ray's queue any more (its newest one finished).

        Spilled calls hold the floor set's slots, leased ones included, and the scheduler does
        not see them; while they queue, a call sent to a leased node would only wait behind them
        in a scheduling class of its own (and make Ray hand worker leases back and forth), so new
        calls queue behind them instead, in order. During a burst nothing blocks: a completion
        callback waits on the newest spilled call, moved to a newer one every ``SPILL_CHECK_S`` at
        most. Once no call has spilled for ``SPILL_CHECK_S`` (the burst is over), the newest is
        looked at directly, so the first call after a burst goes to the best leased node."""
        if self.done_seq < self.spill_seq:
            if now < self.next_spill_check:
                return False
            self.next_spill_check = now + self.SPILL_CHECK_S
            seq, ref = self.spill_seq, self.last_spill
            if self.armed_seq != seq:
                self.armed_seq = seq
                self.watch.when_done(ref, lambda _result, seq=seq: self._spill_done(seq))
            if self.done_seq < seq and now - self.last_spill_at >= self.SPILL_CHECK_S and self.watch.all_finished([ref]):
                self._spill_done(seq)
            if self.done_seq < seq:
                return False
        self.last_spill = None  # known to have finished: its result is not kept alive by us
        return True

    def started(self, node: str, ref: Any) -> None:
        """A call went to leased ``node``; ``ref`` is its ObjectRef."""
        k = self.running.get(node, 0) + 1
        self.running[node] = k
        if k > self.peak:
            self.peak = k
        key = id(ref)
        self.in_flight[key] = ref
        self.watch.when_done(ref, lambda _result, node=node, key=key, done=self.finished.append, drop=self.in_flight.pop:
                             (done(node), drop(key, None)))

    def spilled_call(self, ref: Any, now: float) -> None:
        """A call went to the spill selector; ``ref`` is its ObjectRef."""
        self.spilled += 1
        self.spill_seq += 1
        self.last_spill = ref
        self.last_spill_at = now

    # -- giving back --------------------------------------------------------------------------------
    def idle(self, now: float) -> bool:
        """Nothing of this client runs or queues under the lease and no call came for
        ``IDLE_AFTER`` of the tick: its slots only keep other classes off the best nodes. A
        completion callback may lag behind the task by a few milliseconds, so calls still counted
        in flight are looked at directly. A renewal on its way does not count: the scheduler takes
        this client's requests in order, so giving the lease back drops that grant too."""
        if self.grant is None:
            return False
        if now - self.last_call_at < self.IDLE_AFTER * self.grant.ttl_s:
            return False
        refs = list(self.in_flight.values())
        if self.done_seq < self.spill_seq and self.last_spill is not None:
            refs.append(self.last_spill)
        return not refs or self.watch.all_finished(refs)

    def _spill_done(self, seq: int) -> None:  # on Ray's thread: no lock (see ``finished``)
        if seq > self.done_seq:
            self.done_seq = seq

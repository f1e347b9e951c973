"""``SpareState``: what one pool's spare reconciler remembers between calls.

Provisions in flight (id -> when asked, pool tier, shape), the backoff-until time after a failed
or abandoned provision, nodes whose provision registered and that are not yet seen tagged, reaps
asked for, prefetches asked for, last activity per spare node, and the last underflow reported.
``reconcile`` records in it what it asks for, so calling it again with nothing changed asks for
nothing new; the actor reports what became of each request through the ``provision_*`` and
``activity`` methods. Time always comes in as an argument.

A provision moves ``asked`` (reconcile issued it) -> ``started`` (the provider accepted it) ->
``registered`` (its node joined); ``failed`` and ``abandoned`` end it early: the table every
provision of the fabric shares (``fabric.core.provision_phase.PROVISION_LIFECYCLE``; a forbidden
move raises ``TransitionError`` naming the spare provision). A report that comes after the
provision ended (a provider that says "failed" after the timeout abandoned it) changes nothing
and the method returns False.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from fabric.core.provision_phase import IN_FLIGHT, PROVISION_LIFECYCLE, ProvisionPhase
from fabric.core.settings import NodeShape

BACKOFF_S = 60.0
"""Wait after a failed spare provision before the next (``HotSpareSettings.provision_backoff_s``
defaults to it)."""
REAP_RETRY_S = 300.0
"""A reap asked for that has not taken effect after this long is asked again."""
FINISHED_KEPT = 256
"""How many ended provisions are remembered (so a late report is recognised as late)."""


P = ProvisionPhase  # the phases every provision of the fabric shares (fabric.core.provision_phase)


@dataclass(frozen=True)
class InFlight:
    """One spare provision: asked for at ``asked_at`` from ``pool_tier`` with ``shape``."""

    provision_id: str
    pool_tier: str
    shape: NodeShape
    asked_at: float
    phase: ProvisionPhase = ProvisionPhase.ASKED
    started_at: float | None = None
    """When the provider accepted it (None: not yet)."""


@dataclass
class SpareState:
    """The reconciler's memory for one pool. Build with the pool's name; ``id_prefix`` makes
    provision ids unique across pools and restarts (default ``spare-<pool>``: an actor that
    restarts over live provisions passes its own, or ``next_seq`` past the ones it knows)."""

    pool: str
    id_prefix: str = ""
    next_seq: int = 1
    in_flight: dict[str, InFlight] = field(default_factory=dict)
    """Provisions asked for or started, by id."""
    registered: dict[str, InFlight] = field(default_factory=dict)
    """Node id -> its provision, for nodes that registered and are not yet seen tagged as spares."""
    backoff_until: float | None = None
    """No provision before this time (after a failure or a timeout)."""
    reaping: dict[str, float] = field(default_factory=dict)
    """Node id -> when its reap was asked for (not counted as a live spare meanwhile)."""
    prefetched: dict[str, frozenset[str]] = field(default_factory=dict)
    """Node id -> artifacts a prefetch was asked for (asked once: a failed fetch leaves it cold)."""
    last_activity: dict[str, float] = field(default_factory=dict)
    """Node id -> last activity (first sight as a spare counts): the reap tie-break."""
    last_underflow: tuple[int, int, float] | None = None
    """(current, target, when) of the last ``Underflow`` reported; None when not short."""
    finished: "OrderedDict[str, ProvisionPhase]" = field(default_factory=OrderedDict)
    """The last ``FINISHED_KEPT`` ended provisions and how they ended."""

    def __post_init__(self) -> None:
        if not self.id_prefix:
            self.id_prefix = f"spare-{self.pool}"

    # -- what reconcile records ---------------------------------------------------------------
    def ask(self, pool_tier: str, shape: NodeShape, now: float) -> InFlight:
        """A new provision in flight (reconcile calls it for each ``Provision`` it returns)."""
        entry = InFlight(f"{self.id_prefix}-{self.next_seq}", pool_tier, shape, now)
        self.next_seq += 1
        self.in_flight[entry.provision_id] = entry
        return entry

    def adopt(self, entry: InFlight) -> bool:
        """Take back a provision in flight an earlier reconciler of the pool asked for (its row read
        back after a restart): counted pending from now on and timed out from its own ``asked_at``,
        so nothing is provisioned again for it. False for an id this state holds or saw end, or an
        entry not in flight."""
        pid = entry.provision_id
        if pid in self.in_flight or pid in self.finished or entry.phase not in IN_FLIGHT:
            return False
        self.in_flight[pid] = entry
        return True

    def abandon(self, provision_id: str, now: float, backoff_s: float | None) -> bool:
        """End a provision in flight as abandoned; with ``backoff_s`` a backoff follows."""
        if self._end(provision_id, P.ABANDONED) is None:
            return False
        if backoff_s is not None:
            self._back_off(now, backoff_s)
        return True

    def backing_off(self, now: float) -> bool:
        return self.backoff_until is not None and now < self.backoff_until

    def forget_node(self, node_id: str) -> None:
        """Drop what is remembered about a node (it went, or it is no longer a spare)."""
        for d in (self.registered, self.reaping, self.prefetched, self.last_activity):
            d.pop(node_id, None)

    # -- outcomes the actor reports ---------------------------------------------------------------
    def provision_started(self, provision_id: str, now: float, *, pool_tier: str | None = None,
                          shape: NodeShape | None = None) -> bool:
        """The provider accepted the provision. An id this state does not hold is adopted when
        ``pool_tier`` and ``shape`` are given (an actor rebuilding its state from the provider's
        list after a restart); False for a provision that already ended or an unknown one."""
        entry = self.in_flight.get(provision_id)
        if entry is None:
            if provision_id in self.finished or pool_tier is None or shape is None:
                return False
            self.in_flight[provision_id] = InFlight(provision_id, pool_tier, shape, now, P.STARTED, now)
            return True
        if entry.phase is P.ASKED:
            PROVISION_LIFECYCLE.check(f"spare provision {provision_id}", entry.phase, P.STARTED)
            self.in_flight[provision_id] = replace(entry, phase=P.STARTED, started_at=now)
        return True

    def provision_failed(self, provision_id: str, now: float, backoff_s: float = BACKOFF_S) -> bool:
        """The provider could not provision it: no new provision for ``backoff_s`` (pass the
        entry's ``provision_backoff_s``). False (and no backoff) for an ended or unknown id."""
        if self._end(provision_id, P.FAILED) is None:
            return False
        self._back_off(now, backoff_s)
        return True

    def provision_done(self, provision_id: str, node_id: str) -> bool:
        """Its node registered as ``node_id``: reconcile tags it (and counts it meanwhile)."""
        entry = self._end(provision_id, P.REGISTERED)
        if entry is None:
            return False
        self.registered[node_id] = replace(entry, phase=P.REGISTERED)
        return True

    def activity(self, node_id: str, now: float) -> None:
        """Something happened on ``node_id`` (the reap order's tie-break: least recent goes first)."""
        self.last_activity[node_id] = max(now, self.last_activity.get(node_id, now))

    # -- inside --------------------------------------------------------------------------------
    def _end(self, provision_id: str, phase: ProvisionPhase) -> InFlight | None:
        entry = self.in_flight.get(provision_id)
        if entry is None:
            return None
        PROVISION_LIFECYCLE.check(f"spare provision {provision_id}", entry.phase, phase)
        del self.in_flight[provision_id]
        self.finished[provision_id] = phase
        while len(self.finished) > FINISHED_KEPT:
            self.finished.popitem(last=False)
        return entry

    def _back_off(self, now: float, backoff_s: float) -> None:
        until = now + backoff_s
        if self.backoff_until is None or until > self.backoff_until:
            self.backoff_until = until


def validate_state(state: SpareState) -> list[str]:
    """What is inconsistent in ``state`` (empty when nothing): in-flight entries keyed by their id
    and in a flight phase, registered ones registered and not also in flight, one node per
    provision, ended provisions in an end phase and not in flight, issued ids below ``next_seq``,
    times that are numbers, a started time not before its ask, prefetches that name something,
    an underflow that was short."""
    problems: list[str] = []

    def bad_time(t: float | None) -> bool:
        return t is not None and (not isinstance(t, (int, float)) or math.isnan(t))

    prefix = f"{state.id_prefix}-"
    for pid, e in state.in_flight.items():
        if pid != e.provision_id:
            problems.append(f"in-flight key {pid} holds provision {e.provision_id}")
        if e.phase not in IN_FLIGHT:
            problems.append(f"provision {pid} is in flight but {e.phase}")
        if pid in state.finished:
            problems.append(f"provision {pid} is in flight and ended ({state.finished[pid]})")
        if (e.phase is P.STARTED) != (e.started_at is not None):
            problems.append(f"provision {pid} is {e.phase} with started_at {e.started_at}")
        if e.started_at is not None and e.started_at < e.asked_at:
            problems.append(f"provision {pid} started ({e.started_at}) before it was asked ({e.asked_at})")
        if bad_time(e.asked_at) or bad_time(e.started_at):
            problems.append(f"provision {pid} has a time that is not a number")
        if pid.startswith(prefix) and pid[len(prefix):].isdigit() and int(pid[len(prefix):]) >= state.next_seq:
            problems.append(f"provision {pid} is at or past next_seq {state.next_seq}")
    seen: dict[str, str] = {}
    for nid, e in state.registered.items():
        if e.phase is not P.REGISTERED:
            problems.append(f"node {nid} is registered through provision {e.provision_id} in phase {e.phase}")
        if e.provision_id in state.in_flight:
            problems.append(f"provision {e.provision_id} registered node {nid} and is still in flight")
        other = seen.setdefault(e.provision_id, nid)
        if other != nid:
            problems.append(f"provision {e.provision_id} registered two nodes: {other} and {nid}")
    for pid, phase in state.finished.items():
        if phase in IN_FLIGHT:
            problems.append(f"provision {pid} ended in flight phase {phase}")
    if len(state.finished) > FINISHED_KEPT:
        problems.append(f"{len(state.finished)} ended provisions kept (at most {FINISHED_KEPT})")
    for nid, arts in state.prefetched.items():
        if not arts:
            problems.append(f"node {nid} has an empty prefetch record")
    times = [("backoff_until", state.backoff_until)]
    times += [(f"reaping[{n}]", t) for n, t in state.reaping.items()]
    times += [(f"last_activity[{n}]", t) for n, t in state.last_activity.items()]
    problems += [f"{name} is not a number: {t!r}" for name, t in times if bad_time(t)]
    if state.last_underflow is not None:
        current, target, _ = state.last_underflow
        if not 0 <= current < target:
            problems.append(f"last underflow {current}/{target} was not short")
    return problems

"""Provisions the scheduler asked for: the prospective nodes of the cascade.

When nothing fits and an elastic pool tier may grow, the engine answers ``provision(shape)``. The
core then opens a ``PendingProvision`` here, asks the actor to have the pool tier's provider start
a node (``ProvisionNode``), and puts a *prospective* record of the node into its fleet: a
``NodeRecord`` built from the shape, ``launching=True`` (rank 2 of the key: every booted node
that fits wins over it), counted toward its pool tier's ``max_nodes``. Queued work placed on it
holds a reservation there, so a burst sizes the provisions it needs instead of asking for one
node per call, and the next call of a full pool tier spills to the next one.

A provision ends in one of three ways:

- **registered**: a node joins whose ``fabric.io/instance`` label is the instance id the provider
  answered (``ProvisionStarted``), or, for a provider that cannot label a node with our instance
  id (``ray-autoscaler``), the oldest open provision of the node's pool tier claims it. The
  prospective record leaves the fleet with its reservations; the queue is placed again, onto the
  booted node.
- **failed**: the provider raised (``ProvisionFailed``): the record goes, and the pool tier is
  *held* (no provision there) for ``backoff_s``, so the cascade spills on rather than retrying a
  provider that just failed.
- **abandoned**: it did not register within its pool tier's ``provision_timeout_s``: the record
  goes, what the provider started is terminated (``TerminateNode``; at once when its instance id
  is known, else when ``ProvisionStarted`` brings it), and its work is placed again.

Each provision has a ``phase`` (``ProvisionPhase``, shared with the spare reconcilers'
provisions): ``asked`` when opened, ``started`` once the provider answered, then ``registered``,
``failed`` or ``abandoned`` as it leaves the book. Every change goes through
``PROVISION_LIFECYCLE`` (``PendingProvision.move``): a forbidden move raises ``TransitionError``
naming the provision, and leaves the book as it was.

What the book holds outlives a scheduler restart: every provision it opens, answers or closes and
every hold it sets or ends is noted (``take_changes``), and the scheduler actor writes those as
``state`` rows of the job store (``provision_rows``); a restarted scheduler hands the ones it can
still use back (``adopt``, ``restore_hold``) before anything new is placed.

Pure: time comes in as ``now``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from fabric.core.capabilities import Limitations, NodeCapabilities
from fabric.core.placement import NodeRecord
from fabric.core.placement.fleet import PROSPECTIVE_PREFIX  # prospective:<provision id>, never a Ray node id
from fabric.core.provision_phase import IN_FLIGHT, PROVISION_LIFECYCLE, ProvisionPhase, phase_for
from fabric.core.settings import FabricSettings, NodeShape, PoolTier


PROVISION_BACKOFF_S = 60.0
"""How long a pool tier is held after a failed provision (the provision retry backoff)."""

MAX_PENDING = 4
"""Open provisions a pool tier may have at once: a burst provisions in waves of this many nodes
(the queue provisions again as they register) instead of one node per waiting call."""

_IDS: Iterator[int] = itertools.count(1)


def prospective_id(provision_id: str) -> str:
    return f"{PROSPECTIVE_PREFIX}{provision_id}"


def is_prospective(node_id: str) -> bool:
    return node_id.startswith(PROSPECTIVE_PREFIX)


@dataclass
class PendingProvision:
    """One provision in flight (mutable: the book moves it, through ``move``)."""

    provision_id: str
    pool: str
    pool_tier: str
    provider: str
    shape: NodeShape
    requested_at: float
    deadline: float
    """``requested_at`` + the pool tier's ``provision_timeout_s``."""
    instance_id: str | None = None
    """The provider's instance id, once it answered (``ProvisionStarted``)."""
    reason: str = ""
    """What asked for it (the placement's reason)."""
    job_id: str | None = None
    """The job whose placement opened it (None: a task's, or the burst scaler's): once its node
    registers, that job's restart history is cleared."""
    phase: ProvisionPhase = ProvisionPhase.ASKED
    """Where it is in its life (``PROVISION_LIFECYCLE``); one built with an instance id and left
    ``asked`` is ``started`` (its provider answered)."""

    def __post_init__(self) -> None:
        if self.phase is ProvisionPhase.ASKED:
            self.phase = phase_for(self.instance_id)

    @property
    def node_id(self) -> str:
        return prospective_id(self.provision_id)

    def move(self, to: ProvisionPhase, why: str = "") -> None:
        """Move to phase ``to`` if the table allows it; else ``TransitionError`` naming this provision."""
        self.phase = PROVISION_LIFECYCLE.check(f"provision {self.provision_id}", self.phase, to, why)

    def to_dict(self, now: float) -> dict:
        return {"provision_id": self.provision_id, "pool": self.pool, "pool_tier": self.pool_tier,
                "provider": self.provider, "shape": self.shape.name, "instance_id": self.instance_id,
                "age_s": round(max(0.0, now - self.requested_at), 3),
                "timeout_in_s": round(max(0.0, self.deadline - now), 3),
                "node_id": self.node_id, "reason": self.reason, "phase": self.phase.value}


def shape_record(node_id: str, shape: NodeShape, pool: str, pool_tier: str, *, name: str | None = None) -> NodeRecord:
    """The record a node of ``shape`` would have once up, marked launching (the prospective node)."""
    cpus = max(1, int(shape.num_cpus))
    caps = NodeCapabilities(name=name or f"{shape.name} (provisioning)", cpu_logical=cpus, cpu_physical=cpus,
                            cpu_usable=float(shape.num_cpus), memory_mib=shape.memory_mib,
                            limitations=Limitations(max_concurrent_tasks=cpus), source="prospective")
    rec = NodeRecord(node_id=node_id, name=caps.name, capabilities=caps, tier=shape.tier, label_tier=shape.tier,
                     pool=pool, pool_tier=pool_tier, launching=True)
    # the shape's promised tags (capabilities, its tier), not what an empty probe would say
    tags = frozenset(caps.capability_tags) | frozenset(shape.capabilities) | {f"tier:{shape.tier.value}"}
    object.__setattr__(rec, "_tags", tags)
    return rec


def find_pool_tier(settings: FabricSettings, pool: str, pool_tier: str) -> PoolTier | None:
    for p in settings.pools:
        if p.name == pool:
            return next((t for t in p.tiers if t.name == pool_tier), None)
    return None


@dataclass
class ProvisionBook:
    """Every provision in flight, and the pool tiers held after a failure."""

    backoff_s: float = PROVISION_BACKOFF_S
    _open: dict[str, PendingProvision] = field(default_factory=dict)
    _held: dict[tuple[str, str], float] = field(default_factory=dict)
    _abandoned: set[str] = field(default_factory=set)
    """Provisions abandoned before the provider answered: terminate what it answers."""
    _early: dict[str, str] = field(default_factory=dict)
    """Instance id -> node id of provisioned nodes that registered before their provider answered."""
    _changed: set[str] = field(default_factory=set)
    """Provision ids opened, answered or closed since ``take_changes``: their rows are to be written again."""
    _holds_changed: set[tuple[str, str]] = field(default_factory=set)
    """Pool tiers whose hold was set or ended since ``take_changes``."""

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[PendingProvision]:
        return iter(sorted(self._open.values(), key=lambda p: (p.requested_at, p.provision_id)))

    def get(self, provision_id: str) -> PendingProvision | None:
        return self._open.get(provision_id)

    def open(self, pool: str, pool_tier: str, provider: str, shape: NodeShape, now: float, timeout_s: float,
             reason: str = "", job_id: str | None = None) -> PendingProvision:
        pid = f"p{next(_IDS)}"
        while pid in self._open:  # an id a scheduler before this one gave (adopted): never two of one id
            pid = f"p{next(_IDS)}"
        p = PendingProvision(pid, pool, pool_tier, provider, shape, now, now + timeout_s, reason=reason, job_id=job_id)
        self._open[pid] = p
        self._changed.add(pid)
        return p

    def adopt(self, p: PendingProvision) -> bool:
        """Take back a provision a scheduler before this one opened (its row read back, its instance
        still running): open again as it was, deadline and phase included. False when that id is
        open already, or the provision ended."""
        if p.provision_id in self._open or p.phase not in IN_FLIGHT:
            return False
        self._open[p.provision_id] = p
        return True

    def restore_hold(self, pool: str, pool_tier: str, until: float) -> None:
        """Hold a pool tier until ``until`` again (a hold read back after a restart; a later one stays)."""
        key = (pool, pool_tier)
        self._held[key] = max(until, self._held.get(key, until))

    @property
    def changed(self) -> bool:
        """Whether a provision or a hold changed since ``take_changes`` (cheap: asked after every stimulus)."""
        return bool(self._changed or self._holds_changed)

    def take_changes(self) -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
        """The provision ids and pool tiers whose rows changed since the last call (then forgotten):
        an id no longer open, or a pool tier no longer held, is a row to delete."""
        out = frozenset(self._changed), frozenset(self._holds_changed)
        self._changed.clear()
        self._holds_changed.clear()
        return out

    def started(self, provision_id: str, instance_id: str) -> tuple[PendingProvision | None, bool]:
        """The provider answered: ``(provision, registered_already)``; the provision is None when it
        is no longer open (abandoned: the caller terminates the instance)."""
        p = self._open.get(provision_id)
        if p is None:
            return None, False
        p.move(ProvisionPhase.STARTED, "the provider answered")
        p.instance_id = instance_id
        self._changed.add(provision_id)
        return p, instance_id in self._early

    def early_node(self, instance_id: str) -> str | None:
        """The node that registered with ``instance_id`` before its provider answered (None: none)."""
        return self._early.get(instance_id)

    def take_abandoned(self, provision_id: str) -> bool:
        """True once for a provision abandoned before its provider answered."""
        if provision_id in self._abandoned:
            self._abandoned.discard(provision_id)
            return True
        return False

    def match(self, rec: NodeRecord) -> PendingProvision | None:
        """The open provision a joining node fulfils: by instance id; else, for a node of a provider
        that cannot carry our instance id (``claims_by_tier``), the oldest open provision of its
        pool tier. A provisioned node whose provider has not answered yet is remembered."""
        iid = rec.instance_id
        if iid:
            for p in self._open.values():
                if p.instance_id == iid:
                    return p
            if rec.provider != "ray-autoscaler":
                self._early[iid] = rec.node_id
                return None
        if rec.provider == "ray-autoscaler":
            for p in self:
                if p.provider == "ray-autoscaler" and p.pool == rec.pool and p.pool_tier == rec.pool_tier:
                    return p
        return None

    def close(self, provision_id: str, ended: ProvisionPhase = ProvisionPhase.REGISTERED) -> PendingProvision | None:
        """End an open provision in phase ``ended`` (``registered``: its node joined; ``failed``:
        its provider raised; ``abandon`` for a timeout) and take it out of the book; None when it is
        not open. ``TransitionError`` (the book unchanged) for a move the table forbids."""
        if not PROVISION_LIFECYCLE.is_terminal(ended):
            raise ValueError(f"a provision closes in an end phase, not {ended.value}")
        p = self._open.get(provision_id)
        if p is None:
            return None
        p.move(ended)
        del self._open[provision_id]
        self._changed.add(provision_id)
        if p.instance_id:
            self._early.pop(p.instance_id, None)
        return p

    def abandon(self, provision_id: str) -> PendingProvision | None:
        """End an open provision as abandoned (its timeout passed); one its provider has not answered
        yet is remembered, so what it answers later is terminated (``take_abandoned``)."""
        p = self.close(provision_id, ProvisionPhase.ABANDONED)
        if p is not None and p.instance_id is None:
            self._abandoned.add(provision_id)
        return p

    def expired(self, now: float) -> list[PendingProvision]:
        return [p for p in self if p.deadline <= now]

    def hold(self, pool: str, pool_tier: str, now: float) -> None:
        self._held[(pool, pool_tier)] = now + self.backoff_s
        self._holds_changed.add((pool, pool_tier))

    def held(self, now: float) -> frozenset[tuple[str, str]]:
        """Pool tiers not to provision in now; drops holds that ended."""
        for k in [k for k, until in self._held.items() if until <= now]:
            del self._held[k]
            self._holds_changed.add(k)
        return frozenset(self._held)

    def held_until(self) -> dict[tuple[str, str], float]:
        return dict(self._held)

    def by_tier(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for p in self._open.values():
            out[(p.pool, p.pool_tier)] = out.get((p.pool, p.pool_tier), 0) + 1
        return out

    def problems(self, fleet_ids: Iterable[str]) -> list[str]:
        """Every open provision has its prospective record in the fleet, and every prospective record its
        provision; every open provision is in flight (``asked`` without an instance id, ``started`` with
        one), due no earlier than asked for; a provision remembered as abandoned is no longer open."""
        ids = set(fleet_ids)
        out = [f"provisions: {p.provision_id} has no prospective record in the fleet" for p in self._open.values()
               if p.node_id not in ids]
        out += [f"provisions: prospective record {nid} has no open provision" for nid in ids
                if is_prospective(nid) and nid[len(PROSPECTIVE_PREFIX):] not in self._open]
        for p in self._open.values():
            if p.deadline < p.requested_at:
                out.append(f"provisions: {p.provision_id} is due before it was asked for")
            if p.phase not in IN_FLIGHT:
                out.append(f"provisions: {p.provision_id} is open but {p.phase.value}")
            elif p.phase is not phase_for(p.instance_id):
                out.append(f"provisions: {p.provision_id} is {p.phase.value} with instance id {p.instance_id!r}")
        out += [f"provisions: {pid} is open and remembered as abandoned"
                for pid in sorted(self._abandoned & set(self._open))]
        return out


__all__ = ["MAX_PENDING", "PROSPECTIVE_PREFIX", "PROVISION_BACKOFF_S", "PendingProvision", "ProvisionBook",
           "find_pool_tier", "is_prospective", "prospective_id", "shape_record"]

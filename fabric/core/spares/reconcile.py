"""``reconcile``: what one pool's hot spares need now, as decisions.

Pure: the fleet, the pool's spare entry, the settings, the pool's ``SpareState`` and the time
come in; a list of ``Provision`` / ``Abandon`` / ``Reap`` / ``Tag`` / ``Underflow`` /
``Prefetch`` goes out, and ``state`` records what was asked for. The actor that drives it
(``SpareReconcilerActor``) calls it on every node event and tick, carries the decisions out and
reports outcomes back to ``state``:

    for d in reconcile(pool, spec, fleet, settings, state, now, templates):
        Provision -> provider.provision(...); state.provision_started(d.provision_id, now)
                     (or state.provision_failed(d.provision_id, now, spec.provision_backoff_s))
        node with that provision id registers -> state.provision_done(provision_id, node_id)
        Abandon / Reap -> provider.terminate(...);  Tag -> write the node's spare tags
        Prefetch -> fetch into the node's artifact cache;  Underflow -> emit ``spare_underflow``

What counts:

- A **live spare** is a node of the pool tagged ``spare`` that carries no work (unconsumed),
  active and not cordoned, and not being reaped; a node whose spare provision registered counts
  too before its tag is seen (it is tagged this round). A spare that took work is an ordinary
  node from then on: ``Tag(spare=False, reason="consumed")``, and the shortfall replaces it.
- **Pending** spares are provisions in flight plus registered nodes the fleet does not show yet.
  One that does not register within its pool tier's ``provision_timeout_s`` is abandoned and
  backs provisioning off as a failure does.
- **Under target** (live < target): an ``Underflow(pool, live, target)`` event, reported again
  only when the pair changes or a backoff window (``provision_backoff_s``) has passed since the
  last report; and, unless backing off, a ``Provision`` for each spare of ``target − live −
  pending``, from the pool's elastic pool tiers in order, skipping one at its ``max_nodes``
  (nodes of the pool tier in the fleet, dead ones aside, plus spare provisions pending there)
  or without the entry's ``shape``; the shape is the one the entry names, else the pool tier's
  first candidate. A pool without an elastic pool tier (or with every one full) only reports.
- **Over target**: the excess is removed coldest first, fewest of the entry's ``warm_for``
  held (a template's artifacts from ``templates``, else the template's own name, against the
  node's ``warm``), then least recent activity, then node id. A spare on an elastic pool tier is
  reaped (``Reap``); one on registered hardware (a fixed pool tier) is released
  (``Tag(spare=False, reason="released")``): the fabric never terminates a node it did not
  provision. Pending provisions the lower target no longer needs are abandoned, newest first.
  ``spec=None`` (the pool's entry was removed) is a target of 0: every live spare is an orphan.
- Live spares whose ``reserved_for``/``exclusive`` differ from the entry get a ``Tag``; each
  gets one ``Prefetch`` of the ``warm_for`` artifacts it does not hold and was not asked before.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

from fabric.core.lifecycle import NodeStatus
from fabric.core.placement.records import NodeRecord
from fabric.core.settings import FabricSettings, HotSpareSettings, NodeShape, Pool, PoolTier
from fabric.core.spares.decisions import Abandon, Prefetch, Provision, Reap, SpareDecision, SpareTags, Tag, Underflow
from fabric.core.spares.state import BACKOFF_S, REAP_RETRY_S, InFlight, SpareState

NO_TEMPLATES: Mapping[str, Sequence[str]] = MappingProxyType({})
DEFAULT_PROVISION_TIMEOUT_S = PoolTier.model_fields["provision_timeout_s"].default
"""For a provision whose pool tier is no longer in the settings."""


# -- warmth ------------------------------------------------------------------------------------------
def warm_units(warm_for: Sequence[str], templates: Mapping[str, Sequence[str]] = NO_TEMPLATES) -> tuple[str, ...]:
    """What warmth is counted against: each template's artifacts, or the template's own name
    when ``templates`` lists none for it (as placement's warmth does); once each, in order."""
    out: dict[str, None] = {}
    for t in warm_for:
        for unit in templates.get(t) or (t,):
            out.setdefault(unit, None)
    return tuple(out)


def warm_artifacts(warm_for: Sequence[str], templates: Mapping[str, Sequence[str]] = NO_TEMPLATES) -> tuple[str, ...]:
    """The artifacts a spare of ``warm_for`` fetches (templates without artifacts add none)."""
    out: dict[str, None] = {}
    for t in warm_for:
        for a in templates.get(t) or ():
            out.setdefault(a, None)
    return tuple(out)


def warmth(record: NodeRecord, warm_for: Sequence[str], templates: Mapping[str, Sequence[str]] = NO_TEMPLATES) -> int:
    """How many of ``warm_units(warm_for, templates)`` the node holds."""
    return sum(1 for unit in warm_units(warm_for, templates) if unit in record.warm)


# -- what the pool looks like --------------------------------------------------------------------------
@dataclass(frozen=True)
class PoolSpares:
    """One pool's spares as the reconciler sees them (``fabric status``: target / live / warm for)."""

    pool: str
    target: int
    live: tuple[str, ...]
    """Live spares' node ids (reaps in progress excluded)."""
    consumed: tuple[str, ...]
    """Nodes still tagged spare that carry work (to be untagged)."""
    pending: tuple[str, ...]
    """Provision ids in flight, and registered node ids the fleet does not show yet."""
    reaping: tuple[str, ...]
    backoff_until: float | None
    warm_for: tuple[str, ...]
    reserved_for: tuple[str, ...]
    exclusive: bool

    @property
    def short(self) -> int:
        """Spares still to provision: ``target − live − pending`` (never negative)."""
        return max(0, self.target - len(self.live) - len(self.pending))


@dataclass
class _Seen:
    live: list[tuple[NodeRecord, str | None]]
    consumed: list[NodeRecord]
    gone: list[str]
    """Registered or reaped node ids that are dead or absent (forgotten)."""
    absent_registered: list[tuple[str, InFlight]]
    tier_counts: dict[str | None, int]
    present: set[str]


def _pool_records(fleet: Iterable[NodeRecord], settings: FabricSettings, pool: str) -> list[tuple[NodeRecord, str | None]]:
    """The records of ``pool`` with their pool tiers, resolved as a ``FleetView`` resolves them
    (no pool: the default; no pool tier: the pool's fixed one), so a plain iterable works too."""
    default = settings.default_pool.name
    fixed: str | None = None
    for p in settings.pools:
        if p.name == pool:
            fixed = next((t.name for t in p.tiers if t.scale_out == "fixed"), p.tiers[0].name)
    return [(r, r.pool_tier if r.pool_tier is not None else fixed) for r in fleet if (r.pool or default) == pool]


def _timeout(pool: Pool | None, tier_name: str) -> float:
    for t in pool.tiers if pool is not None else ():
        if t.name == tier_name:
            return t.provision_timeout_s
    return DEFAULT_PROVISION_TIMEOUT_S


def _see(records: list[tuple[NodeRecord, str | None]], pool: Pool | None, state: SpareState, now: float) -> _Seen:
    seen = _Seen([], [], [], [], {}, {r.node_id for r, _ in records})
    for rec, tier in records:
        if rec.status is not NodeStatus.DEAD:
            seen.tier_counts[tier] = seen.tier_counts.get(tier, 0) + 1
        nid = rec.node_id
        if not rec.spare and nid not in state.registered:
            continue
        if rec.status is NodeStatus.DEAD:
            seen.gone.append(nid)
        elif rec.running or rec.jobs:
            if rec.spare:
                seen.consumed.append(rec)
            else:
                seen.gone.append(nid)  # took work before its tag: an ordinary node
        elif rec.status is NodeStatus.ACTIVE and not rec.cordoned and (
                nid not in state.reaping or now - state.reaping[nid] >= REAP_RETRY_S):
            seen.live.append((rec, tier))
    for nid, entry in state.registered.items():
        if nid in seen.present:
            continue
        if now - entry.asked_at >= _timeout(pool, entry.pool_tier):
            seen.gone.append(nid)  # registered, then never showed up (or went): stop waiting
        else:
            seen.absent_registered.append((nid, entry))
            seen.tier_counts[entry.pool_tier] = seen.tier_counts.get(entry.pool_tier, 0) + 1
    seen.gone += [nid for nid in state.reaping if nid not in seen.present]
    for entry in state.in_flight.values():
        seen.tier_counts[entry.pool_tier] = seen.tier_counts.get(entry.pool_tier, 0) + 1
    return seen


def _find_pool(settings: FabricSettings, name: str) -> Pool | None:
    return next((p for p in settings.pools if p.name == name), None)


def survey(pool: str, spec: HotSpareSettings | None, fleet: Iterable[NodeRecord], settings: FabricSettings,
           state: SpareState, now: float) -> PoolSpares:
    """One pool's spares now (changes nothing)."""
    seen = _see(_pool_records(fleet, settings, pool), _find_pool(settings, pool), state, now)
    return PoolSpares(
        pool=pool, target=spec.target_count if spec is not None else 0,
        live=tuple(r.node_id for r, _ in seen.live), consumed=tuple(r.node_id for r in seen.consumed),
        pending=tuple(sorted(state.in_flight)) + tuple(nid for nid, _ in seen.absent_registered),
        reaping=tuple(sorted(n for n in state.reaping if n in seen.present)), backoff_until=state.backoff_until,
        warm_for=spec.warm_for if spec is not None else (), reserved_for=spec.reserved_for if spec is not None else (),
        exclusive=spec.exclusive if spec is not None else False,
    )


# -- deciding ------------------------------------------------------------------------------------------
def _elastic_choices(pool: Pool | None, shape_name: str | None) -> list[tuple[PoolTier, NodeShape]]:
    """(pool tier, shape) for each elastic pool tier of the pool that can make the shape, in order."""
    out: list[tuple[PoolTier, NodeShape]] = []
    for tier in pool.tiers if pool is not None else ():
        if tier.scale_out != "elastic" or not tier.candidate_shapes:
            continue
        if shape_name is None:
            out.append((tier, tier.candidate_shapes[0]))
        else:
            shape = next((s for s in tier.candidate_shapes if s.name == shape_name), None)
            if shape is not None:
                out.append((tier, shape))
    return out


def is_elastic(pool: Pool | None, tier_name: str | None) -> bool:
    """Whether ``tier_name`` is an elastic pool tier of ``pool`` (its nodes were provisioned)."""
    return any(t.name == tier_name and t.scale_out == "elastic" for t in (pool.tiers if pool is not None else ()))


def reconcile(pool: str, spec: HotSpareSettings | None, fleet: Iterable[NodeRecord], settings: FabricSettings,
              state: SpareState, now: float, templates: Mapping[str, Sequence[str]] = NO_TEMPLATES) -> list[SpareDecision]:
    """The decisions that bring ``pool``'s spares to ``spec`` (module docstring), recorded in
    ``state``. ``fleet``: a ``FleetView`` or any iterable of records (other pools are ignored);
    ``templates``: template -> artifact URIs. In order: untags of consumed spares, abandons,
    reaps and releases, tags, prefetches, the underflow event, provisions."""
    if state.pool != pool:
        raise ValueError(f"SpareState is pool {state.pool!r}'s, not {pool!r}'s")
    target = spec.target_count if spec is not None else 0
    backoff_s = spec.provision_backoff_s if spec is not None else BACKOFF_S
    pool_obj = _find_pool(settings, pool)
    untags: list[SpareDecision] = []
    abandons: list[SpareDecision] = []
    removals: list[SpareDecision] = []
    tags: list[SpareDecision] = []
    prefetches: list[SpareDecision] = []
    report: list[SpareDecision] = []
    provisions: list[SpareDecision] = []

    # provisions that did not register in time end first (a backoff follows, as for a failure)
    for entry in sorted(state.in_flight.values(), key=lambda e: (e.asked_at, e.provision_id)):
        if now - entry.asked_at >= _timeout(pool_obj, entry.pool_tier):
            state.abandon(entry.provision_id, now, backoff_s)
            abandons.append(Abandon(entry.provision_id, "provision_timeout"))

    seen = _see(_pool_records(fleet, settings, pool), pool_obj, state, now)
    for rec in seen.consumed:
        untags.append(Tag(rec.node_id, spare=False, reason="consumed"))
        state.forget_node(rec.node_id)
    for nid in seen.gone:
        state.forget_node(nid)
    for rec, _ in seen.live:
        state.last_activity.setdefault(rec.node_id, now)

    # over target: the coldest live spares go; pending ones no longer needed are abandoned
    units = warm_units(spec.warm_for, templates) if spec is not None else ()
    live = sorted(seen.live, key=lambda rt: (sum(1 for u in units if u in rt[0].warm),
                                             state.last_activity.get(rt[0].node_id, now), rt[0].node_id))
    excess = max(0, len(live) - target)
    for rec, tier_name in live[:excess]:
        nid = rec.node_id
        state.registered.pop(nid, None)
        if is_elastic(pool_obj, tier_name):
            state.reaping[nid] = now
            removals.append(Reap(nid, "orphan" if spec is None else "over_target"))
        else:
            state.forget_node(nid)
            removals.append(Tag(nid, spare=False, reason="released"))
    kept = sorted(live[excess:], key=lambda rt: rt[0].node_id)
    pending = len(state.in_flight) + len(seen.absent_registered)
    newest = sorted(state.in_flight.values(), key=lambda e: (e.asked_at, e.provision_id), reverse=True)
    for entry in newest[:max(0, pending - (target - len(kept)))]:
        state.abandon(entry.provision_id, now, None)
        abandons.append(Abandon(entry.provision_id, "over_target"))
        seen.tier_counts[entry.pool_tier] -= 1
        pending -= 1

    # the spares that stay: their tags, their artifacts
    if spec is not None:
        artifacts = warm_artifacts(spec.warm_for, templates)
        for rec, _ in kept:
            nid = rec.node_id
            state.reaping.pop(nid, None)  # a reap that never took effect, no longer wanted
            if not rec.spare:
                tags.append(Tag(nid, True, spec.reserved_for, spec.exclusive, reason="provisioned"))
            else:
                state.registered.pop(nid, None)
                if rec.spare_reserved_for != frozenset(spec.reserved_for) or rec.spare_exclusive != spec.exclusive:
                    tags.append(Tag(nid, True, spec.reserved_for, spec.exclusive, reason="spec_changed"))
            asked = state.prefetched.get(nid, frozenset())
            missing = tuple(a for a in artifacts if a not in rec.warm and a not in asked)
            if missing:
                state.prefetched[nid] = asked | frozenset(missing)
                prefetches.append(Prefetch(nid, missing))

    # under target: report, and provision what is neither live nor pending
    if spec is None or len(kept) >= target:
        state.last_underflow = None
    else:
        last = state.last_underflow
        if last is None or last[:2] != (len(kept), target) or now - last[2] >= backoff_s:
            state.last_underflow = (len(kept), target, now)
            report.append(Underflow(pool, len(kept), target))
        short = target - len(kept) - pending
        if short > 0 and not state.backing_off(now):
            spare_tags = SpareTags(True, spec.reserved_for, spec.exclusive, spec.warm_for)
            for tier, shape in _elastic_choices(pool_obj, spec.shape):
                while short > 0 and (tier.max_nodes is None or seen.tier_counts.get(tier.name, 0) < tier.max_nodes):
                    entry = state.ask(tier.name, shape, now)
                    seen.tier_counts[tier.name] = seen.tier_counts.get(tier.name, 0) + 1
                    provisions.append(Provision(pool, tier.name, shape, spare_tags, entry.provision_id))
                    short -= 1

    # nodes that left the pool: nothing more to remember about them
    for d in (state.last_activity, state.prefetched):
        for nid in [n for n in d if n not in seen.present]:
            del d[nid]
    return untags + abandons + removals + tags + prefetches + report + provisions

"""The ``ray-autoscaler`` provider: Ray's autoscaler brings nodes up; the fabric says how many.

The fabric is the only writer of ``ray.autoscaler.sdk.request_resources`` (each call replaces
the last: a fact of Ray's). The provider keeps a demand model and rewrites the whole
request on every ``sync`` and after every ``provision`` / ``terminate``: one bundle per

- instance it holds: a *pending* provision (asked for, no node yet) or a *running* one (a node
  ``claim`` bound to it). Hot spares are such instances, provisioned with ``spare=True`` (no
  separate spare count: the spare reconciler provisions and terminates them like any other), so
  a node stays demanded, hence kept, until the fabric terminates it;
- *busy* node ``sync(busy=...)`` names that the provider does not hold (a node the autoscaler
  brought up for an earlier incarnation of the caller and that still carries work), by its labels.

A bundle asks for the shape's CPUs (and GPUs) with the label selector ``{fabric.io/pool,
fabric.io/pool-tier, fabric.io/shape}``, which only that pool tier's node type for that shape
carries, so the autoscaler launches that type (and no other node, the head included, satisfies
it). The autoscaler counts existing nodes against the request (a bundle a live node of the type
fits needs no launch), which is why every held instance keeps its bundle: one bundle per node
that should exist.

``node_types_for(settings)`` builds the autoscaler config's ``available_node_types``: per pool
tier whose provider is ``ray-autoscaler``, one type per candidate shape (``node_type_name``):
CPUs and GPUs of the shape, ``fabric.slots`` and the tier markers a node of it declares (those of
the shape's profile, probed as ``node_args`` does, slots capped at its CPUs; without a profile, one
slot per CPU and the shape's tier), labels pool, pool tier, provider, shape, tier, slots and
``fabric.io/profile`` when the shape names one (the node's ProbeActor then replays that profile's
recording); ``min_workers`` 0, ``max_workers`` the pool tier's ``max_nodes`` (8 when unset).

An autoscaler node cannot carry a per-provision instance-id label (every node of a type has the
same labels), so a provision is matched to its node by ``claim(node_id, labels)``: a newly
registered node labelled provider ``ray-autoscaler`` + pool + pool tier (+ shape) takes the
oldest pending provision of that pool tier and shape. Per-provision ``tags`` cannot reach such a
node either: ``provision`` refuses them (``unsupported_tags``). ``terminate`` drops the
instance's bundle, so the autoscaler gives the node back once it has idled for the cluster's
``idle_timeout_minutes``; a pending one is simply no longer asked for.

A restarted scheduler reads its ``instance`` rows back and ``adopt`` holds each again (pending, or
bound to the node its row names); every node joins the restarted scheduler's view again, so a
pending one is claimed by its running node then. Scale-down and ``close`` give them back as before.

Ray facts (Ray 2.60): label selectors reach the autoscaler only with autoscaler **v2**
(``RAY_enable_autoscaler_v2=1`` / system config ``enable_autoscaler_v2``); v1 keeps only the
resource shapes of ``request_resources`` and would pick node types by resources alone. The
monitor (``ray start --head --autoscaling-config=FILE``, or a ``Cluster`` head given
``autoscaling_config``) needs nothing special for token auth (``RAY_AUTH_MODE=token``): it and the
raylets it launches inherit ``RAY_AUTH_MODE`` and read the head's token file
(``~/.ray/auth_token`` or ``RAY_AUTH_TOKEN_PATH``); ``request_resources`` needs a connected
driver (``ray.init``) and goes through the GCS with the driver's token.
``fabric.testing.fake_autoscaler`` runs all of it on one machine.
"""

from __future__ import annotations

import builtins
import dataclasses
import itertools
import math
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from fabric.core.capabilities import label_value
from fabric.core.names import (
    CLOUD_LABEL, LABEL_PREFIX, POOL_LABEL, POOL_TIER_LABEL, PROFILE_LABEL, PROVIDER_LABEL, RAY_NODE_ID_LABEL, SHAPE_LABEL,
    SLOTS_RESOURCE, TIER_LABEL, TIER_RESOURCE_PREFIX, ZONE_LABEL,
)
from fabric.core.settings import FabricSettings, NodeShape, PoolTier
from fabric.providers.base import NO_TAGS, ProviderError, ProvisionedNode

__all__ = ["RayAutoscalerProvider", "Demand", "node_types_for", "node_type_for", "node_type_name", "bundle_for", "AUTOSCALER",
           "DEFAULT_MAX_WORKERS"]

AUTOSCALER = "ray-autoscaler"
DEFAULT_MAX_WORKERS = 8
"""A node type's ``max_workers`` when its pool tier sets no ``max_nodes``."""
SLOTS_LABEL = f"{LABEL_PREFIX}slots"
NODE_TYPE_PREFIX = "fabric."


# -- node types and bundles (pure) ------------------------------------------------------------------------------
def node_type_name(pool: str, pool_tier: str, shape: str) -> str:
    """The autoscaler node type of ``shape`` in ``pool`` / ``pool_tier``: ``fabric.<pool>.<pool tier>.<shape>``."""
    return f"{NODE_TYPE_PREFIX}{label_value(pool)}.{label_value(pool_tier)}.{label_value(shape)}"


def _cpus(shape: NodeShape) -> int | float:
    return int(shape.num_cpus) if float(shape.num_cpus).is_integer() else float(shape.num_cpus)


def _shape_resources(shape: NodeShape) -> dict[str, int | float]:
    out: dict[str, int | float] = {"CPU": _cpus(shape)}
    if shape.gpus:
        out["GPU"] = shape.gpus
    return out


def selector_for(shape: NodeShape, pool: str, pool_tier: str) -> dict[str, str]:
    """The labels only the node type of ``shape`` in ``pool`` / ``pool_tier`` carries (a bundle's selector)."""
    return {POOL_LABEL: label_value(pool), POOL_TIER_LABEL: label_value(pool_tier), SHAPE_LABEL: label_value(shape.name)}


def bundle_for(shape: NodeShape, pool: str, pool_tier: str) -> tuple[dict[str, int | float], dict[str, str]]:
    """One node of ``shape`` for ``pool`` / ``pool_tier`` as ``request_resources`` asks for it:
    (the shape's CPUs and GPUs, the label selector of its node type)."""
    return _shape_resources(shape), selector_for(shape, pool, pool_tier)


def node_type_for(shape: NodeShape, *, pool: str, pool_tier: str, max_workers: int = DEFAULT_MAX_WORKERS) -> dict[str, Any]:
    """The ``available_node_types`` entry for ``shape`` in ``pool`` / ``pool_tier`` (see the module
    docstring). ``ProviderError`` (``unknown_profile``) for a profile that is not bundled."""
    cpus = _cpus(shape)
    slots = max(1, math.floor(cpus))
    resources: dict[str, int | float] = _shape_resources(shape)
    labels = {**selector_for(shape, pool, pool_tier), PROVIDER_LABEL: AUTOSCALER, TIER_LABEL: shape.tier.value}
    labels.update({key: label_value(value) for key, value in ((ZONE_LABEL, shape.zone), (CLOUD_LABEL, shape.cloud)) if value})
    if shape.profile:
        from fabric.providers.local import node_args, profile_for

        spec = node_args(profile_for(shape, AUTOSCALER), max_slots=slots)
        resources.update({k: (int(v) if float(v).is_integer() else v) for k, v in spec.resources.items()})
        labels[TIER_LABEL] = spec.labels[TIER_LABEL]
        labels[SLOTS_LABEL] = spec.labels[SLOTS_LABEL]
        labels[PROFILE_LABEL] = shape.profile
    else:
        resources[SLOTS_RESOURCE] = slots
        resources[f"{TIER_RESOURCE_PREFIX}{shape.tier.value}"] = 1
        labels[SLOTS_LABEL] = str(slots)
    return {"resources": resources, "labels": labels, "node_config": {}, "min_workers": 0, "max_workers": max_workers}


def node_types_for(settings: FabricSettings | Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``available_node_types`` for every ``ray-autoscaler`` pool tier of ``settings``: one type per
    candidate shape, keyed by ``node_type_name`` (the head's type is the cluster config's own)."""
    settings = _settings(settings)
    out: dict[str, dict[str, Any]] = {}
    for pool in settings.pools:
        for pt in pool.tiers:
            if pt.provider != AUTOSCALER:
                continue
            for shape in pt.candidate_shapes:
                out[node_type_name(pool.name, pt.name, shape.name)] = node_type_for(
                    shape, pool=pool.name, pool_tier=pt.name,
                    max_workers=DEFAULT_MAX_WORKERS if pt.max_nodes is None else pt.max_nodes)
    return out


def _settings(settings: FabricSettings | Mapping[str, Any] | None) -> FabricSettings:
    return settings if isinstance(settings, FabricSettings) else FabricSettings.load(None if settings is None else dict(settings))


# -- the demand model ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Demand:
    """One ``request_resources`` call: ``bundles`` and their ``selectors`` (same order: running
    instances, pending ones, then busy nodes not held, each oldest first), plus the ``busy``
    entries that could not be turned into a bundle (``unresolved``: not a ``ray-autoscaler``
    node of a known pool tier and shape)."""

    bundles: tuple[dict[str, int | float], ...] = ()
    selectors: tuple[dict[str, str], ...] = ()
    unresolved: tuple[Any, ...] = ()


@dataclass
class _Instance:
    node: ProvisionedNode
    seq: int
    node_id: str | None = None
    claimed_at: float | None = None


@dataclass
class _Book:
    """Held instances by id (insertion = provision order) and the last busy set."""

    instances: dict[str, _Instance] = field(default_factory=dict)
    busy: tuple[tuple[dict[str, int | float], dict[str, str]], ...] = ()
    unresolved: tuple[Any, ...] = ()


RequestFn = Callable[..., Any]


class RayAutoscalerProvider:
    """Provision nodes through Ray's autoscaler by rewriting ``request_resources`` (module docstring).

    ``settings``: the fabric's settings; when given, ``provision`` refuses a pool tier that is not
    a ``ray-autoscaler`` one, a shape that is not one of its candidates, and a provision past its
    ``max_nodes``, and ``sync`` resolves busy nodes' shapes from it. ``request_resources``: the
    writer (default: ``ray.autoscaler.sdk.request_resources``, which needs a connected driver).
    ``clock`` (wall seconds) stamps ``started_at``; ``new_id`` makes instance ids (``ras-<hex>``).
    """

    name = AUTOSCALER

    def __init__(self, settings: FabricSettings | Mapping[str, Any] | None = None, *,
                 request_resources: RequestFn | None = None, clock: Callable[[], float] = time.time,
                 new_id: Callable[[], str] | None = None) -> None:
        self.settings = None if settings is None else _settings(settings)
        self._request = request_resources
        self._clock = clock
        self._new_id = new_id or (lambda: f"ras-{secrets.token_hex(5)}")
        self._seq = itertools.count()
        self._book = _Book()
        self._ended: set[str] = set()
        self._lock = threading.Lock()
        self.last_demand: Demand | None = None
        """What was written last (None: nothing yet)."""

    # -- the protocol -----------------------------------------------------------------------------------------
    def provision(self, shape: NodeShape, *, pool: str, pool_tier: str, spare: bool = False,
                  tags: Mapping[str, str] = NO_TAGS) -> ProvisionedNode:
        """Ask the autoscaler for one more node of ``shape`` for ``pool`` / ``pool_tier`` and return
        at once: a pending ``ProvisionedNode`` (``ras-<hex>``) whose ``labels`` are those its node
        will carry; ``claim`` binds the node when it registers. ``ProviderError``: a bad pool or
        pool tier (``invalid_pool``), tags (``unsupported_tags``), with settings a pool tier that
        is not ``ray-autoscaler`` (``unknown_pool_tier`` / ``wrong_provider``), a shape it does not
        list (``unknown_shape``), ``max_nodes`` reached (``max_nodes``), or a failed write
        (``request_failed``; nothing is kept)."""
        if not isinstance(shape, NodeShape):
            raise ProviderError(f"shape must be a NodeShape, got {type(shape).__name__}", reason="invalid_shape",
                                provider=self.name, field="shape")
        for what, value in (("pool", pool), ("pool_tier", pool_tier)):
            if not isinstance(value, str) or not value or label_value(value) != value:
                raise ProviderError(f"{what} {value!r} is not a valid label value", reason="invalid_pool", provider=self.name,
                                    shape=shape.name, field=what)
        if tags:
            raise ProviderError(f"tags {sorted(tags)} cannot reach a ray-autoscaler node: every node of a node type carries "
                                f"the same labels", reason="unsupported_tags", provider=self.name, shape=shape.name, field="tags")
        pt = self._pool_tier(pool, pool_tier, shape)
        labels = self._type_labels(shape, pool, pool_tier)
        with self._lock:
            if pt is not None and pt.max_nodes is not None:
                held = sum(1 for i in self._book.instances.values() if (i.node.pool, i.node.pool_tier) == (pool, pool_tier))
                if held >= pt.max_nodes:
                    raise ProviderError(f"pool tier {pool}/{pool_tier} holds {held} of its max_nodes {pt.max_nodes}",
                                        reason="max_nodes", provider=self.name, shape=shape.name, field="max_nodes")
            instance_id = self._new_id()
            if instance_id in self._book.instances or instance_id in self._ended:
                raise ProviderError(f"instance id {instance_id!r} is already used", reason="duplicate_instance",
                                    provider=self.name, instance_id=instance_id)
            node = ProvisionedNode(instance_id=instance_id, provider=self.name, pool=pool, pool_tier=pool_tier, shape=shape,
                                   spare=spare, started_at=self._clock(), name=instance_id, profile=shape.profile, labels=labels)
            self._book.instances[instance_id] = _Instance(node, next(self._seq))
            try:
                self._write()
            except ProviderError:
                del self._book.instances[instance_id]
                raise
        return node

    def terminate(self, instance_id: str) -> None:
        """Drop ``instance_id``'s bundle (pending or running) and rewrite the request: a pending one
        is no longer asked for, a running node is given back once idle. One already terminated is a
        no-op; an id never made here is ``ProviderError`` (``unknown_instance``)."""
        with self._lock:
            inst = self._book.instances.pop(instance_id, None)
            if inst is None:
                if instance_id in self._ended:
                    return
                raise ProviderError(f"no instance {instance_id!r} was provisioned by this ray-autoscaler provider; "
                                    f"held: {', '.join(self._book.instances) or 'none'}", reason="unknown_instance",
                                    provider=self.name, instance_id=instance_id, field="instance_id")
            self._ended.add(instance_id)
            try:
                self._write()
            except ProviderError:
                self._book.instances[instance_id] = inst
                self._ended.discard(instance_id)
                raise

    def adopt(self, node: ProvisionedNode) -> bool:
        """Hold again an instance an earlier incarnation of the caller provisioned (its ``instance``
        row read back after a scheduler restart): it is demanded again, so the autoscaler keeps its
        node (or still launches it), ``list`` shows it, ``terminate`` and ``close`` give it back.
        A row naming its node (``ray.io/node-id``) is bound to that node; one without is pending, and
        ``claim`` binds it when its node registers again (a restarted scheduler sees every node join).
        False, and nothing is held, for another provider's node, one terminated here, or one whose
        pool tier or shape the settings no longer list. The request is written with the next change
        or ``sync`` (the demand it had is not withdrawn in between: nothing wrote since the restart)."""
        if not isinstance(node, ProvisionedNode) or node.provider != self.name or not node.instance_id:
            return False
        try:
            self._pool_tier(node.pool, node.pool_tier, node.shape)
        except ProviderError:
            return False
        labels = dict(node.labels)
        node_id = labels.pop(RAY_NODE_ID_LABEL, None)
        with self._lock:
            if node.instance_id in self._ended:
                return False
            if node.instance_id not in self._book.instances:
                inst = _Instance(dataclasses.replace(node, labels=labels), next(self._seq))
                if node_id:
                    inst.node_id = node_id
                    inst.claimed_at = self._clock()
                self._book.instances[node.instance_id] = inst
        return True

    def list(self) -> builtins.list[ProvisionedNode]:
        """Instances not terminated, pending and running, in provision order (a running one's
        ``labels`` include ``ray.io/node-id``)."""
        with self._lock:
            return [self._view(i) for i in self._book.instances.values()]

    # -- matching nodes to provisions -----------------------------------------------------------------------------
    def claim(self, node_id: str, labels: Mapping[str, str]) -> str | None:
        """Bind a newly registered node to the oldest pending provision of its pool tier (and shape)
        and return that instance id; the instance is running from now on. None when the labels do
        not say ``ray-autoscaler`` + pool + pool tier or nothing of theirs is pending. A node
        already bound returns its instance again."""
        if not isinstance(node_id, str) or not node_id:
            raise ProviderError(f"node_id {node_id!r} is not a Ray node id", reason="invalid_node_id", provider=self.name,
                                field="node_id")
        with self._lock:
            for inst in self._book.instances.values():
                if inst.node_id == node_id:
                    return inst.node.instance_id
            if labels.get(PROVIDER_LABEL) != self.name or not labels.get(POOL_LABEL) or not labels.get(POOL_TIER_LABEL):
                return None
            shape_label = labels.get(SHAPE_LABEL)
            for inst in sorted(self._book.instances.values(), key=lambda i: (i.node.started_at, i.seq)):
                n = inst.node
                if inst.node_id is None and (label_value(n.pool), label_value(n.pool_tier)) == (labels[POOL_LABEL], labels[POOL_TIER_LABEL]) \
                        and (shape_label is None or shape_label == label_value(n.shape.name)):
                    inst.node_id = node_id
                    inst.claimed_at = self._clock()
                    return n.instance_id
        return None

    def node_id_of(self, instance_id: str) -> str | None:
        """The Ray node bound to ``instance_id`` (None: pending, or not held)."""
        with self._lock:
            inst = self._book.instances.get(instance_id)
            return None if inst is None else inst.node_id

    def pending(self) -> builtins.list[ProvisionedNode]:
        """Held instances no node has claimed yet, oldest first."""
        with self._lock:
            return [i.node for i in self._book.instances.values() if i.node_id is None]

    # -- the request -------------------------------------------------------------------------------------------------
    def sync(self, busy: Iterable[str | Mapping[str, str]] = ()) -> Demand:
        """Rewrite the whole request: held instances plus ``busy``, the nodes carrying work this
        tick (replacing the last tick's). A busy entry is a Ray node id or instance id (counted once
        when held; an id not held adds nothing) or a node's labels (a ``ray-autoscaler`` node of a
        pool tier and shape the settings know; other providers' nodes are ignored, the rest
        ``unresolved``). Returns what was written; ``ProviderError`` (``request_failed``) when the
        write fails."""
        resolved, unresolved = [], []
        for entry in busy:
            if isinstance(entry, str):
                continue  # an id: held ones are in the demand already; one not held says nothing of its shape
            if not isinstance(entry, Mapping):
                unresolved.append(entry)
                continue
            if entry.get(PROVIDER_LABEL) != self.name:
                continue
            with self._lock:
                held = any(i.node_id is not None and i.node_id == entry.get(RAY_NODE_ID_LABEL) for i in self._book.instances.values())
            if held:
                continue
            bundle = self._bundle_of_labels(entry)
            (resolved if bundle is not None else unresolved).append(bundle if bundle is not None else entry)
        with self._lock:
            self._book.busy = tuple(resolved)
            self._book.unresolved = tuple(unresolved)
            return self._write()

    def demand(self) -> Demand:
        """What the next write would ask for (nothing is written)."""
        with self._lock:
            return self._demand()

    def close(self) -> None:
        """Forget every instance and write an empty request: the autoscaler gives every idle node
        back. (A caller that restarts should not call it: its nodes would go.)"""
        with self._lock:
            self._ended.update(self._book.instances)
            self._book = _Book()
            self._write()

    def __repr__(self) -> str:
        return f"RayAutoscalerProvider(held={builtins.list(self._book.instances)})"

    # -- internals -------------------------------------------------------------------------------------------------
    def _pool_tier(self, pool: str, pool_tier: str, shape: NodeShape) -> PoolTier | None:
        if self.settings is None:
            return None
        pt = next((t for p in self.settings.pools if p.name == pool for t in p.tiers if t.name == pool_tier), None)
        if pt is None:
            raise ProviderError(f"no pool tier {pool}/{pool_tier} in the settings", reason="unknown_pool_tier", provider=self.name,
                                shape=shape.name, field="pool_tier")
        if pt.provider != self.name:
            raise ProviderError(f"pool tier {pool}/{pool_tier} uses provider {pt.provider!r}, not {self.name!r}",
                                reason="wrong_provider", provider=self.name, shape=shape.name, field="provider")
        if shape.name not in {s.name for s in pt.candidate_shapes}:
            raise ProviderError(f"shape {shape.name!r} is not a candidate shape of {pool}/{pool_tier} (candidates: "
                                f"{', '.join(s.name for s in pt.candidate_shapes)})", reason="unknown_shape", provider=self.name,
                                shape=shape.name, field="shape")
        return pt

    def _type_labels(self, shape: NodeShape, pool: str, pool_tier: str) -> dict[str, str]:
        try:
            return node_type_for(shape, pool=pool, pool_tier=pool_tier)["labels"]
        except ValueError as exc:
            raise ProviderError(f"shape {shape.name!r}: {exc}", reason="invalid_node", provider=self.name, shape=shape.name,
                                profile=shape.profile, field="profile") from exc

    def _bundle_of_labels(self, labels: Mapping[str, str]) -> tuple[dict[str, int | float], dict[str, str]] | None:
        if self.settings is None:
            return None
        for pool in self.settings.pools:
            for pt in pool.tiers:
                if pt.provider != self.name or (label_value(pool.name), label_value(pt.name)) != \
                        (labels.get(POOL_LABEL), labels.get(POOL_TIER_LABEL)):
                    continue
                for shape in pt.candidate_shapes:
                    if label_value(shape.name) == labels.get(SHAPE_LABEL):
                        return bundle_for(shape, pool.name, pt.name)
        return None

    def _demand(self) -> Demand:
        held = self._book.instances.values()
        ordered = [i for i in held if i.node_id is not None] + [i for i in held if i.node_id is None]
        pairs = [bundle_for(i.node.shape, i.node.pool, i.node.pool_tier) for i in ordered] + builtins.list(self._book.busy)
        return Demand(bundles=tuple(dict(b) for b, _ in pairs), selectors=tuple(dict(s) for _, s in pairs),
                      unresolved=self._book.unresolved)

    def _write(self) -> Demand:
        """Write the demand (the lock held: writes happen in the order the book changed)."""
        demand = self._demand()
        request = self._request
        if request is None:
            from ray.autoscaler.sdk import request_resources as request
        try:
            request(bundles=[dict(b) for b in demand.bundles], bundle_label_selectors=[dict(s) for s in demand.selectors])
        except Exception as exc:  # noqa: BLE001 - Ray not connected, GCS unreachable...: the caller sees a ProviderError
            raise ProviderError(f"request_resources failed: {type(exc).__name__}: {exc}", reason="request_failed",
                                provider=self.name) from exc
        self.last_demand = demand
        return demand

    def _view(self, inst: _Instance) -> ProvisionedNode:
        if inst.node_id is None:
            return inst.node
        return dataclasses.replace(inst.node, labels={**inst.node.labels, RAY_NODE_ID_LABEL: inst.node_id})

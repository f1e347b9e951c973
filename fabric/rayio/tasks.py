"""Ray task options and launch: how one call of an ``@adaptive.remote`` function is put on Ray.

The driver (``fabric.runtime.dispatch``) and the dispatcher actor (``actors.dispatcher``) both
submit calls through a ``CallPlan``, so a call carries the same options whichever path it takes:
one ``fabric.slots``, its CPUs, memory and GPUs, a soft pin to its node and a label selector that
keeps a retry inside its floor; and Ray's own options the call was decorated with (its custom
``resources``, ``accelerator_type``, its ``label_selector`` merged with the fabric's, ``runtime_env``,
``num_returns``, ``retry_exceptions``), so Ray holds a retry to them too.

A plan is built once per function, requirement class, retries and name, and builds each set of
Ray options once per node (or spill target), the first time a call needs it: a call looks its
options up and submits; nothing is built per call. Ray's remote functions are built once per
function (``FunctionRemotes``), shared by every class the function is called with.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import TYPE_CHECKING, Any, Callable

import ray
from ray import cloudpickle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fabric.core import names
from fabric.core.scheduling import NodeAssignment
from fabric.core.tiers import TIERS_BEST_FIRST
from fabric.rayio.worker_calls import wrap_for_fabric, wrap_spilled

if TYPE_CHECKING:  # pragma: no cover
    from fabric.core.placement import Requirement

#: Spill targets a plan keeps options for (the fleet's state makes new ones as it changes).
MAX_SPILL_TARGETS = 32


def tier_selector(req: "Requirement") -> dict[str, str]:
    """Ray label selector for every node whose tier is at or above the requirement's floor."""
    tiers = [t.value for t in TIERS_BEST_FIRST if t >= req.floor]
    return {names.TIER_LABEL: f"in({','.join(tiers)})"}


def merged_selector(fabric: dict[str, str], req: "Requirement") -> dict[str, str]:
    """The fabric's label selector ``fabric`` joined with the requirement's own (``label_selector``):
    on ``fabric.io/tier``, where both say something, the tiers both admit (the requirement refuses a
    selector that admits none at or above its floor); on any other key the requirement's term."""
    if not req.label_selector:
        return fabric
    out = dict(fabric)
    for term in req.label_selector:
        ours = out.get(term.key)
        if term.key == names.TIER_LABEL and ours is not None and ours.startswith("in(") and ours.endswith(")"):
            both = [t for t in ours[3:-1].split(",") if term.matches({names.TIER_LABEL: t})]
            out[term.key] = f"in({','.join(both)})" if both else term.ray_value()
        else:
            out[term.key] = term.ray_value()
    return out


def base_options(req: "Requirement", max_retries: int, name: str, gpus: float = 0.0) -> dict[str, Any]:
    """The Ray options every call of ``req`` carries, whichever path it takes: one ``fabric.slots``
    (so Ray never runs more calls on a node than its slots), its CPUs and memory, and ``gpus``:
    the GPUs the scheduler says to ask Ray for on the chosen node (``SchedulerCore.ray_gpus``), so
    Ray reserves those devices (never double-books one) and sets the call's ``CUDA_VISIBLE_DEVICES``."""
    opts: dict[str, Any] = {"resources": {names.SLOTS_RESOURCE: 1, **dict(req.resources)}, "num_cpus": req.num_cpus,
                            "max_retries": max_retries, "name": name, **req.ray.task_options()}
    if req.accelerator_type is not None:
        opts["accelerator_type"] = req.accelerator_type
    if req.memory_mib:
        opts["memory"] = int(req.memory_mib * 1024 * 1024)
    if gpus:
        opts["num_gpus"] = gpus
    return opts


def node_options(node_id: str, req: "Requirement", max_retries: int, name: str, gpus: float = 0.0) -> dict[str, Any]:
    """Ray options for a call on ``node_id``: softly pinned there, a retry kept inside the floor."""
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=True),
            "label_selector": merged_selector(tier_selector(req), req), **base_options(req, max_retries, name, gpus)}


def spill_options(selector: dict[str, str], via: str | None, req: "Requirement", max_retries: int,
                  name: str) -> dict[str, Any]:
    """Ray options for a spilled call: the grant's selector, and a soft affinity to ``via`` that
    spills when that node is busy (see ``SchedulerCore.spill_target``): Ray queues the calls in
    this process, its lease requests wait in that node's raylet, and each call runs on whichever
    node inside the floor frees a slot first."""
    strategy = {} if via is None else {"scheduling_strategy": NodeAffinitySchedulingStrategy(via, soft=True,
                                                                                             _spill_on_unavailable=True)}
    return {"label_selector": merged_selector(dict(selector), req), **strategy, **base_options(req, max_retries, name)}


class FunctionRemotes:
    """The Ray remote functions of one user function, built once each: the placed one (gives its
    reservation back), the leased one (the function as it is) and one per spilled
    ``(min_rank, name)``; and the pickled function the dispatcher receives for queued calls."""

    __slots__ = ("fn", "_placed", "_leased", "_spilled", "_blob")

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self._placed: Any = None
        self._leased: Any = None
        self._spilled: dict[tuple[int, str], Any] = {}
        self._blob: tuple[bytes, str] | None = None

    def placed(self) -> Any:
        if self._placed is None:
            self._placed = ray.remote(wrap_for_fabric(self.fn))
        return self._placed

    def leased(self) -> Any:
        """A call on a leased slot runs the function as it is (its driver counts it)."""
        if self._leased is None:
            self._leased = ray.remote(self.fn)
        return self._leased

    def spilled(self, min_rank: int, name: str) -> Any:
        rf = self._spilled.get((min_rank, name))
        if rf is None:
            rf = self._spilled[(min_rank, name)] = ray.remote(wrap_spilled(self.fn, min_rank, name))
        return rf

    def blob(self) -> tuple[bytes, str]:
        """The function pickled, and its digest (the dispatcher keeps functions by digest)."""
        if self._blob is None:
            blob = cloudpickle.dumps(self.fn)
            self._blob = (blob, hashlib.sha1(blob).hexdigest())
        return self._blob


class CallPlan:
    """How calls of one function under one requirement class, retries and name go to Ray: each
    set of options built once (per leased node, per spill target, per placed node)."""

    __slots__ = ("remotes", "req", "max_retries", "name", "_leased", "_spilled", "_placed", "_queued")

    def __init__(self, remotes: FunctionRemotes, req: "Requirement", max_retries: int, name: str) -> None:
        self.remotes = remotes
        self.req = req
        self.max_retries = max_retries
        self.name = name
        self._leased: dict[tuple[str, float], Any] = {}
        self._spilled: dict[tuple[tuple, str | None], Any] = {}
        self._placed: dict[tuple[str, float], Any] = {}
        self._queued: tuple[Any, Any] | None = None

    def leased(self, node_id: str, gpus: float) -> Any:
        """What a call on a leased slot of ``node_id`` is submitted with (``.remote(*args)``)."""
        key = (node_id, gpus)
        bound = self._leased.get(key)
        if bound is None:
            bound = self._leased[key] = self.remotes.leased().options(
                **node_options(node_id, self.req, self.max_retries, self.name, gpus))
        return bound

    def spilled(self, selector: dict[str, str], via: str | None) -> Any:
        """What a spilled call is submitted with (``.remote(deadline, *args)``)."""
        key = (tuple(sorted(selector.items())), via)
        bound = self._spilled.get(key)
        if bound is None:
            if len(self._spilled) >= MAX_SPILL_TARGETS:
                self._spilled.clear()
            bound = self._spilled[key] = self.remotes.spilled(self.req.min_tier.rank, self.name).options(
                **spill_options(selector, via, self.req, self.max_retries, self.name))
        return bound

    def placed(self, node_id: str, gpus: float) -> Any:
        """What a call the scheduler placed on ``node_id`` is submitted with
        (``.remote(allocation_id, *args)``)."""
        key = (node_id, gpus)
        bound = self._placed.get(key)
        if bound is None:
            bound = self._placed[key] = self.remotes.placed().options(
                **node_options(node_id, self.req, self.max_retries, self.name, gpus))
        return bound

    def queue(self, dispatcher: Any, request_id: str, args: tuple, kwargs: dict, priority: int,
              queue_timeout_s: float | None) -> Any:
        """Hand a call that found no capacity to the dispatcher actor, which waits in the
        scheduler's deferred queue and runs it (its ObjectRef is the method's result)."""
        if self._queued is None or self._queued[0] is not dispatcher:
            self._queued = (dispatcher, dispatcher.run.options(name=f"{self.name} (queued)",
                                                               num_returns=self.req.ray.num_returns))
        blob, digest = self.remotes.blob()
        return self._queued[1].remote(request_id, digest, blob, self.req, args, kwargs, priority, queue_timeout_s,
                                      self.max_retries, self.name)


def launch(fn: Callable, cache: dict, assignment: NodeAssignment, req: "Requirement", args: tuple, kwargs: dict,
           max_retries: int, name: str):
    """Submit one call to its assigned node; returns the task's ObjectRef (for ``num_returns`` N > 1,
    an awaitable of its N results: the dispatcher's method, run with ``num_returns`` N, returns them).
    ``cache``: a dict kept with ``fn`` by the caller, where its plans are built once."""
    key = (req.class_id, max_retries, name)
    plan = cache.get(key)
    if plan is None:
        remotes = cache.get("remotes")
        if remotes is None:
            remotes = cache["remotes"] = FunctionRemotes(fn)
        plan = cache[key] = CallPlan(remotes, req, max_retries, name)
    refs = plan.placed(assignment.node_id, assignment.ray_gpus).remote(assignment.allocation_id, *args, **kwargs)
    if req.ray.num_returns > 1:
        return asyncio.gather(*refs)
    return refs

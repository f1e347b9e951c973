"""Ray task options and launch: how one call of an ``@adaptive.remote`` function is put on Ray.

The driver (``fabric.runtime.dispatch``) and the dispatcher actor (``actors.dispatcher``) both
submit calls through these functions, so a call carries the same options whichever path it takes:
one ``fabric.slots``, its CPUs, memory and GPUs, a soft pin to its node and a label selector that
keeps a retry inside its floor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fabric.core import names
from fabric.core.scheduling import NodeAssignment
from fabric.core.tiers import TIERS_BEST_FIRST
from fabric.rayio.worker_calls import wrap_counted, wrap_for_fabric

if TYPE_CHECKING:  # pragma: no cover
    from fabric.core.placement import Requirement


def tier_selector(req: "Requirement") -> dict[str, str]:
    """Ray label selector for every node whose tier is at or above the requirement's floor."""
    tiers = [t.value for t in TIERS_BEST_FIRST if t >= req.floor]
    return {names.TIER_LABEL: f"in({','.join(tiers)})"}


def base_options(req: "Requirement", max_retries: int, name: str, gpus: float = 0.0) -> dict[str, Any]:
    """The Ray options every call of ``req`` carries, whichever path it takes: one ``fabric.slots``
    (so Ray never runs more calls on a node than its slots), its CPUs and memory, and ``gpus``:
    the GPUs the scheduler says to ask Ray for on the chosen node (``SchedulerCore.ray_gpus``), so
    Ray reserves those devices (never double-books one) and sets the call's ``CUDA_VISIBLE_DEVICES``."""
    opts: dict[str, Any] = {"resources": {names.SLOTS_RESOURCE: 1}, "num_cpus": req.num_cpus,
                            "max_retries": max_retries, "retry_exceptions": False, "name": name}
    if req.memory_mib:
        opts["memory"] = int(req.memory_mib * 1024 * 1024)
    if gpus:
        opts["num_gpus"] = gpus
    return opts


def task_options(assignment: NodeAssignment, req: "Requirement", max_retries: int, name: str) -> dict[str, Any]:
    """Ray options that put one call on its assigned node (see the module docstring)."""
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(assignment.node_id, soft=True),
            "label_selector": tier_selector(req), **base_options(req, max_retries, name, assignment.ray_gpus)}


def remote_for(fn: Callable, cache: dict):
    """The Ray remote function for ``fn`` (built once per function and process)."""
    rf = cache.get("remote")
    if rf is None:
        rf = cache["remote"] = ray.remote(wrap_for_fabric(fn))
    return rf


def counted_remote_for(fn: Callable, cache: dict, min_rank: int, name: str):
    """The Ray remote function for calls of ``fn`` under a lease at ``min_rank`` (built once each)."""
    key = ("counted", min_rank, name)
    rf = cache.get(key)
    if rf is None:
        rf = cache[key] = ray.remote(wrap_counted(fn, min_rank, name))
    return rf


def launch(fn: Callable, cache: dict, assignment: NodeAssignment, req: "Requirement", args: tuple, kwargs: dict,
           max_retries: int, name: str):
    """Submit one call to its assigned node; returns the task's ObjectRef."""
    opts = task_options(assignment, req, max_retries, name)
    return remote_for(fn, cache).options(**opts).remote(assignment.allocation_id, *args, **kwargs)

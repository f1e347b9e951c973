"""How an ``@adaptive.remote`` call is carried out on Ray.

1. Ask the scheduler for a node (one actor round trip). It reserves a slot there.
2. Submit the task *to that node* ourselves, asking Ray for one ``fabric.slots`` so that Ray
   itself refuses to oversubscribe the node. The ObjectRef we return is that task's: the
   result flows node → caller through the object store, never through the scheduler.
3. When the task ends (in the worker), its reservation is released back to the scheduler.

Node loss: the task is pinned *softly* (``NodeAffinitySchedulingStrategy(soft=True)``) and carries
a label selector for every tier at or above its floor. While the chosen node lives, Ray keeps the
task there (a busy node makes it wait, not spill). If the node dies, Ray's own retry (up to
``max_retries``) places it again on a node inside the floor — never below it, never lost silently.
A hard pin would instead fail with ``TaskUnschedulableError`` (measured on Ray 2.60).

No capacity: with ``on_no_capacity="raise"`` the call raises ``CapacityError`` at once; with
``"queue"`` the call goes to the dispatcher actor, which waits in the scheduler's deferred queue
(priority, then FIFO, retried on every capacity event) and runs the task when a node frees up; its
``ray.get`` raises ``CapacityError`` after the queue timeout. Only deferred calls take this path.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable


import ray
from ray import cloudpickle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fabric import names
from fabric.errors import CapacityError
from fabric.scheduling import NodeAssignment
from fabric.tiers import TIERS_BEST_FIRST

if TYPE_CHECKING:  # pragma: no cover
    from fabric.client import AdaptiveFunction
    from fabric.placement import Requirement


# -- in the worker: run the user's function, then give the slot back ------------------------------
_worker_scheduler = None
_worker_lock = threading.Lock()


def _release(allocation_id: int | None) -> None:
    """Tell the scheduler this work ended (fire and forget; a restarting scheduler gets it late)."""
    global _worker_scheduler
    if allocation_id is None:
        return
    try:
        with _worker_lock:
            if _worker_scheduler is None:
                _worker_scheduler = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
        _worker_scheduler.release.remote([allocation_id])
    except Exception:  # the scheduler is gone: it rebuilds its accounting when it comes back
        _worker_scheduler = None


def wrap_for_fabric(fn: Callable) -> Callable:
    """The function Ray runs: the user's function, with the reservation released when it ends."""

    def run(__fabric_allocation_id, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            _release(__fabric_allocation_id)

    run.__name__ = getattr(fn, "__name__", "adaptive_task")
    run.__qualname__ = getattr(fn, "__qualname__", run.__name__)
    return run


def tier_selector(req: "Requirement") -> dict[str, str]:
    """Ray label selector for every node whose tier is at or above the requirement's floor."""
    tiers = [t.value for t in TIERS_BEST_FIRST if t >= req.floor]
    return {names.TIER_LABEL: f"in({','.join(tiers)})"}


def task_options(assignment: NodeAssignment, req: "Requirement", max_retries: int, name: str) -> dict[str, Any]:
    """Ray options that put one call on its assigned node (see the module docstring)."""
    return {
        "scheduling_strategy": NodeAffinitySchedulingStrategy(assignment.node_id, soft=True),
        "label_selector": tier_selector(req),
        "resources": {names.SLOTS_RESOURCE: 1},
        "num_cpus": req.num_cpus,
        "memory": int(req.memory_mib * 1024 * 1024) if req.memory_mib else None,
        "max_retries": max_retries,
        "retry_exceptions": False,
        "name": name,
    }


def remote_for(fn: Callable, cache: dict):
    """The Ray remote function for ``fn`` (built once per function and process)."""
    rf = cache.get("remote")
    if rf is None:
        rf = cache["remote"] = ray.remote(wrap_for_fabric(fn))
    return rf


def launch(fn: Callable, cache: dict, assignment: NodeAssignment, req: "Requirement", args: tuple, kwargs: dict,
           max_retries: int, name: str):
    """Submit one call to its assigned node; returns the task's ObjectRef."""
    opts = {k: v for k, v in task_options(assignment, req, max_retries, name).items() if v is not None}
    return remote_for(fn, cache).options(**opts).remote(assignment.allocation_id, *args, **kwargs)


# -- in the caller ------------------------------------------------------------------------------------
class _Connection:
    """This process's handles on the fabric's actors (looked up once, brought up if missing)."""

    def __init__(self) -> None:
        self.scheduler = None
        self.dispatcher = None
        self.session: object = None
        self.lock = threading.Lock()

    def ensure(self):
        # Handles belong to one connection: after ray.shutdown() and a new ray.init() (a new
        # cluster, say) they must be looked up again.
        session = _session()
        if self.scheduler is not None and self.session == session:
            return self
        with self.lock:
            if self.scheduler is None or self.session != _session():
                self.scheduler = None
                if not ray.is_initialized():
                    ray.init()
                self.session = _session()
                try:
                    sched = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
                    disp = ray.get_actor(names.DISPATCHER, namespace=names.NAMESPACE)
                except ValueError:
                    from fabric.runtime import up

                    up()  # "`.remote()` brings the fabric up with defaults if it is not up"
                    sched = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
                    disp = ray.get_actor(names.DISPATCHER, namespace=names.NAMESPACE)
                self.dispatcher = disp
                self.scheduler = sched
        return self

    def reset(self) -> None:
        with self.lock:
            self.scheduler = None
            self.dispatcher = None


def _session() -> object:
    """Identifies this process's current Ray connection (None when not connected)."""
    worker = ray._private.worker.global_worker
    return getattr(worker, "core_worker", None) if ray.is_initialized() else None


_conn = _Connection()


def reset_connection() -> None:
    """Forget cached actor handles (``fabric.down`` and tests call this)."""
    _conn.reset()


def submit(af: "AdaptiveFunction", args: tuple, kwargs: dict):
    """Carry out one ``.remote()`` call of an adaptive function (see the module docstring)."""
    conn = _conn.ensure()
    req = af.requirement
    opts = af.dispatch
    try:
        assignment: NodeAssignment = ray.get(conn.scheduler.place_task.remote(req))
    except ray.exceptions.RayTaskError as exc:  # the actor raised: hand back our own error, clean
        if isinstance(exc.cause, CapacityError):
            raise exc.cause from None
        raise
    if assignment.status == "assigned":
        return launch(af.function, af._remote_cache, assignment, req, args, kwargs, opts.max_retries, af.task_name)
    if opts.on_no_capacity == "raise":
        raise CapacityError(
            f"{af.task_name}: no node at or above {req.floor} has capacity now ({assignment.reason})",
            requirement=repr(req), reason=assignment.reason or "no capacity",
        )
    blob = af._remote_cache.get("blob")
    if blob is None:
        blob = af._remote_cache["blob"] = cloudpickle.dumps(af.function)
        af._remote_cache["digest"] = hashlib.sha1(blob).hexdigest()
    return conn.dispatcher.run.options(name=f"{af.task_name} (queued)").remote(
        uuid.uuid4().hex, af._remote_cache["digest"], blob, req, args, kwargs,
        opts.priority, opts.queue_timeout_s, opts.max_retries, af.task_name,
    )

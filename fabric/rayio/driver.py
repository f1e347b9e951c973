"""The driver's Ray calls: the one seam between ``fabric.runtime`` and Ray (STYLE.md habit 3).

Everything the driver side does with Ray, other than launching tasks (``fabric.rayio.tasks``),
goes through ``RayDriver``: connecting, telling one Ray session from the next, finding, starting
and stopping the fabric's named actors, waiting for an actor's answer, and watching calls finish.
The session (``fabric.runtime.session``) and the lease logic receive it, so unit tests hand them
a fake with the same methods instead of patching ``ray``.

An actor's answer comes back as its value, as the ``FabricError`` the actor raised (not Ray's
wrapper around it), or as ``AnswerTimeout`` when it took longer than the caller may wait.
"""

from __future__ import annotations

import functools
from concurrent.futures import Future
from typing import Any, Callable, Iterable

import ray

from fabric.core.names import NAMESPACE, SLOTS_RESOURCE
from fabric.core.errors import FabricError


class AnswerTimeout(Exception):
    """An actor did not answer within the time the caller may wait (``RayDriver.answer``)."""

    def __init__(self, waited_s: float | None = None) -> None:
        super().__init__(waited_s)
        self.waited_s = waited_s
        """How long the caller waited (seconds), when known."""


class RayDriver:
    """Ray, as the driver side of the fabric uses it."""

    namespace = NAMESPACE

    # -- the connection ---------------------------------------------------------------------------
    def is_initialized(self) -> bool:
        return ray.is_initialized()

    def init(self) -> None:
        """Connect the way ``ray.init()`` does, unless connected already."""
        if not ray.is_initialized():
            ray.init()

    def session_key(self) -> object | None:
        """Stands for this process's current Ray connection (None when not connected): after
        ``ray.shutdown()`` and a new ``ray.init()`` it is another object. Called on every
        ``.remote()``, so it reads the worker directly."""
        worker = ray._private.worker.global_worker
        return getattr(worker, "core_worker", None) if worker.connected else None

    def job_id(self) -> str:
        """This process's Ray job id (hex), as its tasks' workers read it."""
        return ray.get_runtime_context().get_job_id()

    # -- named actors -----------------------------------------------------------------------------
    def get_actor(self, name: str) -> Any | None:
        """The fabric's actor ``name`` (namespace ``fabric``), or None when there is none."""
        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            return None

    def start_actor(self, actor_class: Any, name: str, *args: Any, **options: Any) -> Any:
        """Get or create the named actor ``name`` of ``actor_class`` (a Ray actor class) with
        ``options`` (``.options(**options)``) and constructor ``args``."""
        return actor_class.options(name=name, namespace=self.namespace, get_if_exists=True, **options).remote(*args)

    def named_actors(self) -> list[str]:
        """The names of every named actor in the fabric's namespace."""
        from ray.util import list_named_actors

        return [a["name"] for a in list_named_actors(all_namespaces=True) if a.get("namespace") == self.namespace]

    def kill(self, handle: Any) -> None:
        """Stop an actor for good (no restart)."""
        ray.kill(handle, no_restart=True)

    # -- answers ----------------------------------------------------------------------------------
    def get(self, refs: Any, timeout_s: float | None = None) -> Any:
        """``ray.get``, as it is (Ray's own errors, ``GetTimeoutError`` included)."""
        return ray.get(refs, timeout=timeout_s)

    def answer(self, ref: Any, timeout_s: float) -> Any:
        """An actor call's result; a ``FabricError`` the actor raised is raised as itself;
        ``AnswerTimeout`` past ``timeout_s``."""
        try:
            return ray.get(ref, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise AnswerTimeout(timeout_s) from None
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, FabricError):
                raise exc.cause from None
            raise

    # -- watching calls ---------------------------------------------------------------------------
    def when_done(self, ref: Any, callback: Callable[[Any], None]) -> None:
        """Call ``callback(result)`` on one of Ray's threads once ``ref``'s task has finished
        (it must not block or take a lock a submitter may hold). ``result`` is the task's value, or
        for a failed one the error object: Ray's ``RayError`` (``RayActorError``...), and a task's
        own error as the ``RayTaskError`` that ``ray.get`` raises, an instance of the task's error
        class as well, with its ``cause``.

        Through Ray's public ``ObjectRef.future()``: Ray sets the future from its completion
        callback on the core worker's thread (no thread per call, no polling; an already finished
        task's too), and the future's done-callback passes the outcome on. Only when Ray set the
        future in the instant between the two does ``add_done_callback`` call it at once on the
        calling thread, so it must not take a lock the caller holds either."""
        ref.future().add_done_callback(functools.partial(_pass_outcome, callback))

    def all_finished(self, refs: Iterable[Any]) -> bool:
        """Whether every task of ``refs`` has finished (no waiting, nothing fetched)."""
        refs = list(refs)
        if not refs:
            return True
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        return len(ready) == len(refs)

    # -- the cluster's resources ----------------------------------------------------------------
    def slots_in_use(self) -> dict[str, int]:
        """Per alive node id: ``fabric.slots`` in use (total minus available, from Ray's GCS)."""
        return slots_in_use()


def _pass_outcome(callback: Callable[[Any], None], future: Future) -> None:
    """``when_done``'s done-callback: a finished call's value, or its error object, to ``callback``."""
    error = future.exception()
    callback(future.result() if error is None else error)


def slots_in_use() -> dict[str, int]:
    """Per alive node id: ``fabric.slots`` in use (total minus available, from Ray's GCS): every
    fabric call holds one while it runs, however it was sent (placed, leased, spilled)."""
    from ray._private import state  # Ray 2.60 has no public per-node *available* view

    try:
        total = state.total_resources_per_node()
        available = state.available_resources_per_node()
    except Exception:  # GCS briefly away: running counts are best effort
        return {}
    out = {}
    for node_id, res in total.items():
        slots = res.get(SLOTS_RESOURCE, 0.0)
        if slots:
            out[node_id] = max(0, int(round(slots - available.get(node_id, {}).get(SLOTS_RESOURCE, 0.0))))
    return out

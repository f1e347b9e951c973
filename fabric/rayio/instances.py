"""A job's instances on Ray: the actor class built around the user's class, and its launch.

``instance_class(cls)`` is the user's class with the fabric's hooks, each in a concurrency group
of its own (``fabric``) so they never wait behind, or run beside, the user's methods (which keep
Ray's default: one at a time, in order):

- ``__init__`` unpickles the constructor arguments and runs the user's constructor; a constructor
  that raises does not kill the actor: ``__fabric_started__`` reports it (``InvalidSpecError``
  as ``("invalid_spec", message)``, anything else as ``("init_failed", message)``), so the
  scheduler tells a spec no node would fix from a failure another node might not have;
- ``__fabric_watch__(timeout_s)``: the scheduler's outstanding watch call. It returns ``alive``
  every ``timeout_s`` (so a call abandoned by a scheduler that restarted frees its thread) and
  ``stopped`` once a stop was asked; while it is out, the instance's death reaches the scheduler
  as the call's ``ActorDiedError`` (``preempted`` when Ray drained the node for preemption);
- ``__fabric_ping__``: the class's ``__fabric_health__()`` when it has one;
- ``__fabric_shutdown__``: the class's ``__fabric_stop__()`` when it has one, then the watch ends
  and the process ends itself ``SELF_STOP_S`` later (whether or not a kill reaches it): an answered
  shutdown is a stop on the node's own side, which a migration's target may start after.

The fence (``fabric.core.jobs.fence``): an instance started with a lease (``lease_ttl_s`` in its
info) runs a ``LeaseKeeper``: one thread renews the lease with the scheduler every
``renew_every_s`` (sooner while no answer comes), another ends the process once ``lease_ttl_s``
passed since it sent the last renewal granted; the user's constructor runs only once the first
renewal is granted.

``InstanceLauncher`` starts an instance as a detached, named actor hard-pinned to its node with
``max_restarts=0`` (the fabric, never Ray, restarts jobs), one ``fabric.slots`` and the job's
CPUs, memory and GPUs; finds one by name; and kills one.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import ray
from ray import cloudpickle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fabric.core import names
from fabric.core.errors import InvalidSpecError

GROUP = "fabric"
GROUP_SIZE = 8
"""Threads (or coroutines) of the hooks' group: a watch, a start check, a ping, a shutdown, and
room for watch calls abandoned by a restarted scheduler until they return."""


def _is_async(cls: type) -> bool:
    return any(inspect.iscoroutinefunction(v) or inspect.isasyncgenfunction(v)
               for k in dir(cls) if not k.startswith("__") for v in [getattr(cls, k, None)])


@dataclass(frozen=True)
class InstanceInfo:
    """What a job's instance knows of itself (``fabric.instance_info()`` inside it)."""

    job_id: str = ""
    instance_key: str = ""
    role: str = ""
    """The replica's slot (``primary``, ``backup``), without the instance's token."""
    handover_target: bool = False
    """Started as a ``handover`` migration's target: hold the output until ``__fabric_resume__``."""


_CURRENT = InstanceInfo()


def instance_info() -> InstanceInfo:
    """Inside a job's instance: which instance this is (outside one: an empty ``InstanceInfo``)."""
    return _CURRENT


GRANTED, REFUSED = "granted", "refused"


RETRY_S = 0.25
"""How soon a renewal that got no answer is tried again (a link back after a cut is used at once)."""


class LeaseKeeper:
    """An instance's lease, kept from inside its process: ``ask()`` renews it with the scheduler
    (``granted``, ``refused``, or None when no answer came); a grant extends the lease to
    ``lease_ttl_s`` after the moment the renewal was *sent*, on this process's clock; a refusal ends
    the renewals; once the lease has run out, ``end()`` ends the process.

    In an instance two threads keep it: ``renewals()`` asks (every ``renew_every_s``, every
    ``RETRY_S`` while no answer comes), and ``watchdog()`` ends the process when the lease runs out,
    however long an ask blocks. ``run()`` is both in one thread (for tests on a fake clock)."""

    def __init__(self, ask: Callable[[], str | None], lease_ttl_s: float, renew_every_s: float, *,
                 end: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.ask, self.ttl, self.every = ask, lease_ttl_s, renew_every_s
        self.end = end or _end_process
        self.clock, self.sleep = clock, sleep
        self.until: float | None = None
        """When the lease runs out (None: never granted)."""
        self.refused = False
        self.failing = False
        """The last ask got no answer."""
        self.grants = 0
        """Renewals granted so far."""

    def renew(self) -> None:
        """One renewal: ask, and extend the lease on a grant."""
        sent = self.clock()
        answer = self.ask()
        self.failing = answer is None
        if answer == GRANTED:
            self.until, self.grants = max(self.until or 0.0, sent + self.ttl), self.grants + 1
        elif answer == REFUSED:
            self.refused = True

    def pause(self) -> float:
        """How long until the next ask."""
        return min(self.every, RETRY_S) if self.failing else self.every

    def first(self) -> bool:
        """Before the user's constructor: renew until granted (True); False when refused, or when
        ``lease_ttl_s`` passes without a grant (the instance never served)."""
        deadline = self.clock() + self.ttl
        while True:
            self.renew()
            if self.until is not None:
                return True
            if self.refused or self.clock() >= deadline:
                return False
            self.sleep(min(1.0, self.every))

    def _over(self) -> str | None:
        if self.until is not None and self.clock() < self.until:
            return None
        return "its renewal was refused" if self.refused else f"no renewal granted for {self.ttl:g} s"

    def watchdog(self) -> None:
        """End the process once the lease has run out (woken at its end, which a grant may move on)."""
        while True:
            why = self._over()
            if why is not None:
                return self.end(why)
            assert self.until is not None
            self.sleep(max(0.01, self.until - self.clock()))

    def renewals(self) -> None:
        """Ask for renewals until one is refused."""
        while not self.refused:
            self.sleep(self.pause())
            self.renew()

    def run(self) -> None:
        """``renewals`` and ``watchdog`` in one thread: renew until refused, end when the lease runs out."""
        while True:
            why = self._over()
            if why is not None:
                return self.end(why)
            assert self.until is not None
            now = self.clock()
            if self.refused:
                self.sleep(max(0.0, self.until - now))
                continue
            self.sleep(max(0.0, min(self.pause(), self.until - now)))
            if self.clock() < self.until:
                self.renew()


def _end_process(why: str) -> None:
    print(f"[fabric] instance {_CURRENT.instance_key} of job {_CURRENT.job_id}: its lease ended ({why}): "
          "ending this process so that it never serves beside its replacement", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


SELF_STOP_S = 0.2
"""How long an instance whose shutdown was asked lives on: long enough for its answer to leave."""


def _stopping(self: Any) -> None:
    """A shutdown was asked: the watch ends, and the process ends itself ``SELF_STOP_S`` later."""
    self._fabric_stop.set()
    timer = threading.Timer(SELF_STOP_S, os.kill, (os.getpid(), signal.SIGKILL))
    timer.daemon = True
    timer.start()


def _scheduler_asker(job_id: str, instance_key: str, timeout_s: float) -> Callable[[], str | None]:
    """``ask`` for a ``LeaseKeeper``: the scheduler's ``renew_lease``, waited for ``timeout_s``."""
    from fabric.rayio.scheduler_client import SchedulerClient

    client: list[Any] = []

    def ask() -> str | None:
        try:
            if not client:  # looked up once: a restarted scheduler keeps its actor, and its handle
                handle = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
                client.append(SchedulerClient(handle, lambda ref, _wait: ray.get(ref, timeout=timeout_s)))
            answer = client[0].renew_lease(job_id, instance_key)
        except Exception:  # no answer (cut off, the scheduler restarting): the lease runs on meanwhile
            return None
        return answer if answer in (GRANTED, REFUSED) else None

    return ask


def _keep_lease(info: dict) -> None:
    """Hold the instance's lease (when it was started with one): the first grant now, then renewals
    in a thread of its own. An instance refused its first lease ends at once."""
    ttl, every = info.get("lease_ttl_s"), info.get("renew_every_s")
    if not ttl or not every:
        return
    keeper = LeaseKeeper(_scheduler_asker(str(info.get("job_id", "")), str(info.get("instance_key", "")),
                                          min(float(every), 2.0)), float(ttl), float(every))
    if not keeper.first():
        keeper.end("refused" if keeper.refused else f"no lease granted within {float(ttl):g} s")
    threading.Thread(target=keeper.watchdog, name="fabric-lease-watchdog", daemon=True).start()
    threading.Thread(target=keeper.renewals, name="fabric-lease-renewals", daemon=True).start()


def _prepare(self: Any, cls: type, blob: bytes, info: dict | None) -> None:
    """The actor's constructor: remember who it is, hold its lease; run the user's constructor now,
    or, for a deferred start (a ``stop_then_start`` target), only when ``__fabric_begin__`` is called."""
    global _CURRENT
    info = dict(info or {})
    deferred = bool(info.pop("deferred", False))
    lease = {k: info.pop(k, None) for k in ("lease_ttl_s", "renew_every_s")}
    _CURRENT = InstanceInfo(**{k: v for k, v in info.items() if k in InstanceInfo.__dataclass_fields__})
    self._fabric_error = None
    self._fabric_deferred = (cls, blob) if deferred else None
    self._fabric_begin_lock = threading.Lock()
    _keep_lease({**info, **lease})
    if not deferred:
        _start(self, cls, blob)


def _begin(self: Any) -> Any:
    """Run the deferred constructor once, ``2 * SELF_STOP_S`` after it is asked (a source whose
    stop was answered has ended its own process by then, even if the kill sent after never landed);
    a second call (a restarted scheduler asking again) waits for the first to finish and answers
    the same."""
    with self._fabric_begin_lock:
        deferred, self._fabric_deferred = self._fabric_deferred, None
        if deferred is not None:
            time.sleep(2 * SELF_STOP_S)  # the source stopped just before ends its own process meanwhile
            _start(self, *deferred)
        return self._fabric_error


def _start(self: Any, cls: type, blob: bytes) -> None:
    self._fabric_error = None
    try:
        args, kwargs = cloudpickle.loads(blob)
        cls.__init__(self, *args, **kwargs)
    except InvalidSpecError as exc:
        self._fabric_error = ("invalid_spec", str(exc) or type(exc).__name__)
    except Exception as exc:  # reported by __fabric_started__; the scheduler recovers by policy
        self._fabric_error = ("init_failed", f"{type(exc).__name__}: {exc}")


def instance_class(cls: type) -> type:
    """The actor class of ``cls``'s instances (see the module docstring)."""
    if _is_async(cls):
        class AsyncInstance(cls):  # type: ignore[valid-type, misc]
            def __init__(self, __fabric_blob: bytes, __fabric_info: dict | None = None) -> None:
                self._fabric_stop = asyncio.Event()
                _prepare(self, cls, __fabric_blob, __fabric_info)

            @ray.method(concurrency_group=GROUP)
            async def __fabric_started__(self) -> Any:
                return self._fabric_error

            @ray.method(concurrency_group=GROUP)
            async def __fabric_begin__(self) -> Any:
                return _begin(self)

            @ray.method(concurrency_group=GROUP)
            async def __fabric_watch__(self, timeout_s: float) -> str:
                try:
                    await asyncio.wait_for(self._fabric_stop.wait(), timeout_s)
                    return "stopped"
                except asyncio.TimeoutError:
                    return "alive"

            @ray.method(concurrency_group=GROUP)
            async def __fabric_ping__(self) -> Any:
                hook = getattr(self, "__fabric_health__", None)
                if hook is None:
                    return None
                out = hook()
                return await out if inspect.isawaitable(out) else out

            @ray.method(concurrency_group=GROUP)
            async def __fabric_shutdown__(self) -> None:
                hook = getattr(self, "__fabric_stop__", None)
                try:
                    if hook is not None:
                        out = hook()
                        if inspect.isawaitable(out):
                            await out
                finally:
                    _stopping(self)

        out: type = AsyncInstance
    else:
        class Instance(cls):  # type: ignore[valid-type, misc]
            def __init__(self, __fabric_blob: bytes, __fabric_info: dict | None = None) -> None:
                self._fabric_stop = threading.Event()
                _prepare(self, cls, __fabric_blob, __fabric_info)

            @ray.method(concurrency_group=GROUP)
            def __fabric_started__(self) -> Any:
                return self._fabric_error

            @ray.method(concurrency_group=GROUP)
            def __fabric_begin__(self) -> Any:
                return _begin(self)

            @ray.method(concurrency_group=GROUP)
            def __fabric_watch__(self, timeout_s: float) -> str:
                return "stopped" if self._fabric_stop.wait(timeout_s) else "alive"

            @ray.method(concurrency_group=GROUP)
            def __fabric_ping__(self) -> Any:
                hook = getattr(self, "__fabric_health__", None)
                return None if hook is None else hook()

            @ray.method(concurrency_group=GROUP)
            def __fabric_shutdown__(self) -> None:
                hook = getattr(self, "__fabric_stop__", None)
                try:
                    if hook is not None:
                        hook()
                finally:
                    _stopping(self)

        out = Instance
    out.__name__ = out.__qualname__ = getattr(cls, "__name__", "Job")
    out.__module__ = getattr(cls, "__module__", out.__module__)
    return out


class InstanceLauncher:
    """Starts, finds and kills job instances (the Ray side of ``actors.jobs.JobRunner``)."""

    namespace = names.NAMESPACE

    def __init__(self, lease: tuple[float, float] | None = None) -> None:
        self._classes: dict[bytes, tuple[type, Any]] = {}
        self.lease = lease
        """``(lease_ttl_s, renew_every_s)`` every instance started holds a lease with; None: no lease."""

    def loaded(self, cls_blob: bytes) -> tuple[type, Any]:
        """The user's class and its instances' Ray actor class (built once per class)."""
        got = self._classes.get(cls_blob)
        if got is None:
            if len(self._classes) > 1024:
                self._classes.clear()
            cls = cloudpickle.loads(cls_blob)
            got = self._classes[cls_blob] = (cls, ray.remote(concurrency_groups={GROUP: GROUP_SIZE})(instance_class(cls)))
        return got

    def actor_class(self, cls_blob: bytes) -> Any:
        return self.loaded(cls_blob)[1]

    def has_health(self, cls_blob: bytes) -> bool:
        """Whether the class defines ``__fabric_health__`` (its instances are pinged)."""
        try:
            return hasattr(self.loaded(cls_blob)[0], "__fabric_health__")
        except Exception:
            return False

    def start(self, job_id: str, instance_key: str, node_id: str, cls_blob: bytes, args_blob: bytes, req: Any,
              gpus: float = 0.0, *, deferred: bool = False, handover_target: bool = False) -> Any:
        """Create the instance ``instance_key`` of ``job_id`` on ``node_id``; returns its handle.
        ``deferred``: its constructor waits for ``__fabric_begin__``; ``handover_target``: it is told
        so (``instance_info()``)."""
        opts: dict[str, Any] = {
            "name": names.job_actor_name(job_id, instance_key), "namespace": self.namespace, "lifetime": "detached",
            "max_restarts": 0, "max_task_retries": 0,
            "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False),
            "resources": {names.SLOTS_RESOURCE: 1, **dict(req.resources)}, "num_cpus": req.num_cpus,
        }
        opts.update(actor_options(req))
        if req.memory_mib:
            opts["memory"] = int(req.memory_mib * 1024 * 1024)
        if gpus:
            opts["num_gpus"] = gpus
        info = {"job_id": job_id, "instance_key": instance_key, "role": instance_key.split("@")[0],
                "handover_target": handover_target, "deferred": deferred}
        if self.lease is not None:
            info["lease_ttl_s"], info["renew_every_s"] = self.lease
        return self.actor_class(cls_blob).options(**opts).remote(args_blob, info)

    def find(self, job_id: str, instance_key: str) -> Any | None:
        """The live instance's handle, or None when there is none (it died, or never started)."""
        try:
            return ray.get_actor(names.job_actor_name(job_id, instance_key), namespace=self.namespace)
        except ValueError:
            return None

    def instances(self) -> dict[str, list[str]]:
        """Every job instance alive in the cluster: job id -> instance keys (from the named actors)."""
        out: dict[str, list[str]] = {}
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name, namespace = entry.get("name", ""), entry.get("namespace", "")
            if namespace != self.namespace or not name.startswith(names.JOB_PREFIX):
                continue
            job_id, _, key = name[len(names.JOB_PREFIX):].rpartition(".")
            if job_id and key:
                out.setdefault(job_id, []).append(key)
        return out

    def head_nodes(self) -> frozenset[str]:
        """The ids of the nodes Ray's node table lists as heads (alive or dead: a head that was
        restarted left its old row dead), by the row's head flag or the head's marker resource."""
        return frozenset(str(row["NodeID"]) for row in ray.nodes()
                         if row.get("IsHeadNode") or names.HEAD_RESOURCE in (row.get("Resources") or {}))

    def kill(self, handle: Any) -> None:
        try:
            ray.kill(handle, no_restart=True)
        except Exception:  # already gone
            pass

    @staticmethod
    def death(exc: BaseException) -> tuple[bool, bool, str] | None:
        """``(dead, preempted, reason)`` for an error a watch call ended with; None when the error
        says nothing of the instance's fate (look again)."""
        if isinstance(exc, ray.exceptions.ActorUnavailableError):
            return None
        if isinstance(exc, ray.exceptions.RayActorError):
            return True, bool(getattr(exc, "preempted", False)), _first_line(exc)
        return True, False, f"{type(exc).__name__}: {_first_line(exc)}"


NODE_DIED = "because its node has died"
"""Ray's words for an actor it holds dead because its node died (the node may only be cut off)."""


def died_with_its_node(exc: BaseException) -> bool:
    """Whether a call's error says its actor is dead only because Ray holds its node dead."""
    return isinstance(exc, ray.exceptions.RayActorError) and NODE_DIED in str(exc)


def actor_options(req: Any) -> dict[str, Any]:
    """Ray's own actor options a job's class was decorated with (``Requirement.ray``,
    ``accelerator_type``): passed to its instance's actor as they are. Its ``label_selector`` is
    not: the instance is pinned to a node the placement engine found matching it."""
    ray_opts = req.ray
    out: dict[str, Any] = {}
    if ray_opts.max_concurrency is not None:
        out["max_concurrency"] = ray_opts.max_concurrency
    if ray_opts.max_task_retries is not None:
        out["max_task_retries"] = ray_opts.max_task_retries
    if ray_opts.runtime_env_json is not None:
        out["runtime_env"] = ray_opts.runtime_env
    if req.accelerator_type is not None:
        out["accelerator_type"] = req.accelerator_type
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def pickle_by_value(obj: Any, classes: Any = ()) -> bytes:
    """``obj`` (a user's class, a bundle, arguments) pickled so that a process that cannot import
    the user's modules can load it: the modules that define ``obj`` (when it is a class) and
    ``classes`` are pickled by value, as Ray does for ``__main__``."""
    import sys

    modules = []
    for cls in ([obj] if inspect.isclass(obj) else []) + list(classes):
        module = sys.modules.get(getattr(cls, "__module__", "") or "")
        if module is not None and _is_user_module(module) and module not in modules:
            modules.append(module)
    registered = []
    already = cloudpickle.list_registry_pickle_by_value()  # the user's own (or Ray's): left as they are
    try:
        for module in modules:
            if module.__name__ in already:
                continue
            try:
                cloudpickle.register_pickle_by_value(module)
                registered.append(module)
            except ValueError:  # not importable by its name: pickled as cloudpickle can
                pass
        return cloudpickle.dumps(obj)
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)


def _is_user_module(module: Any) -> bool:
    """A module of the user's own code: not the fabric's, Ray's, or an installed package's."""
    import sysconfig

    name = getattr(module, "__name__", "")
    if name == "__main__" or not getattr(module, "__file__", None):
        return False  # __main__ is by value already; a built-in has no file
    if name.split(".")[0] in ("fabric", "actors", "probes", "ray"):
        return False
    path = str(module.__file__)
    return not any(path.startswith(p) for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                                                 sysconfig.get_paths()["stdlib"]})

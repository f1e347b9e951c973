"""Ray, faked, as the fleet actors see it: ``FakeRayAdapter`` has ``RayAdapter``'s methods over an
in-memory node table and actor directory, and ``FakeHandle`` stands for an actor handle.

Unit tests hand these to the actors' logic through its constructor (``HealthMonitor(settings,
adapter=FakeRayAdapter(...))``), so a tick, a heartbeat or a dispatcher retry runs in
microseconds with no cluster. Nothing here imports Ray.

``handle.method.remote(*args)`` calls the target's method at once (the call is recorded in
``handle.calls`` either way) and returns an awaitable of its result, the way Ray's ObjectRef is
awaited; a call that is never awaited (fire and forget) has still happened. A handle marked
``away`` raises ``ActorGone`` (Ray's ``ActorUnavailableError`` / ``RayActorError``: the actor is
restarting or dead); ``fail_next(method, exc)`` makes the next call of ``method`` raise ``exc``.
"""

from __future__ import annotations

import asyncio
import inspect
import pickle
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from fabric.core.health import RayNodeView
from fabric.core.names import NAME_LABEL, NAMESPACE, TIER_LABEL, probe_actor_name

__all__ = ["ActorGone", "RemoteError", "FakeHandle", "FakeRayAdapter", "ProbeStart", "fabric_node"]


class ActorGone(Exception):
    """What a call on an away ``FakeHandle`` raises: Ray's "the actor died or is restarting"."""


class RemoteError(Exception):
    """Ray's ``RayTaskError`` stand-in: a remote method raised ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"remote method raised {type(cause).__name__}: {cause}")
        self.cause = cause


class _Ref:
    """An already-made call, awaited like an ObjectRef."""

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error

    def __await__(self):
        if self._error is not None:
            raise self._error
        if inspect.isawaitable(self._value):
            return (yield from self._value.__await__())
        return self._value
        yield  # pragma: no cover - makes this a generator


class _Method:
    def __init__(self, handle: "FakeHandle", name: str) -> None:
        self._handle, self._name = handle, name

    def remote(self, *args: Any, **kwargs: Any) -> _Ref:
        return self._handle.call(self._name, args, kwargs)


class FakeHandle:
    """An actor handle over ``target`` (any object; None: every method answers None)."""

    def __init__(self, target: Any = None, name: str = "") -> None:
        self._target = target
        self._name = name
        self.away = False
        self.calls: list[tuple[str, tuple, dict]] = []
        self._failures: dict[str, list[BaseException]] = {}

    def fail_next(self, method: str, exc: BaseException) -> None:
        """The next call of ``method`` raises ``exc`` (queued: call again for the one after)."""
        self._failures.setdefault(method, []).append(exc)

    def called(self, method: str) -> list[tuple]:
        """The arguments of every call of ``method`` so far, oldest first."""
        return [args for name, args, _ in self.calls if name == method]

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)

    def call(self, method: str, args: tuple, kwargs: dict) -> _Ref:
        self.calls.append((method, args, kwargs))
        if self.away:
            return _Ref(error=ActorGone(f"actor {self._name or '?'} is away"))
        queued = self._failures.get(method)
        if queued:
            return _Ref(error=queued.pop(0))
        if self._target is None:
            return _Ref()
        try:
            return _Ref(getattr(self._target, method)(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - raised on await, as Ray does
            return _Ref(error=exc)

    def __repr__(self) -> str:
        return f"FakeHandle({self._name or type(self._target).__name__})"


def fabric_node(node_id: str, *, tier: str = "cpu_ffmpeg", name: str | None = None, alive: bool = True,
                labels: Mapping[str, str] | None = None, resources: Mapping[str, float] | None = None) -> RayNodeView:
    """A row of Ray's node table for a node joined through the fabric (it has a tier label)."""
    merged = {TIER_LABEL: tier, **({NAME_LABEL: name} if name else {}), **dict(labels or {})}
    return RayNodeView(node_id=node_id, alive=alive, labels=merged, resources=dict(resources or {}), hostname=name or node_id)


@dataclass
class ProbeStart:
    """One ``ensure_probe`` call: the node, the intervals and the ``spot_notices`` settings the probe was started with."""

    node_id: str
    name: str
    heartbeat_interval_s: float
    reprobe_interval_s: float
    probe_actor: Any = field(default=None, repr=False)
    spot_notices: dict[str, Any] | None = None


class FakeRayAdapter:
    """``RayAdapter``'s methods over ``nodes`` (Ray's node table) and ``actors`` (named actors)."""

    namespace = NAMESPACE

    def __init__(self, nodes: Iterable[RayNodeView] = (), *, node_id: str = "head-node",
                 gcs_address: str = "127.0.0.1:6379", actors: Mapping[str, Any] | None = None) -> None:
        self.nodes: dict[str, RayNodeView] = {n.node_id: n for n in nodes}
        self.actors: dict[str, Any] = dict(actors or {})
        self.node_id = node_id
        self._gcs_address = gcs_address
        self.probe_starts: list[ProbeStart] = []
        self.ensure_error: Exception | None = None
        """When set, ``ensure_probe`` raises it (a node whose raylet refuses the actor)."""
        self.slots_used: dict[str, int] = {}
        """What ``slots_in_use`` answers: ``fabric.slots`` in use per node, as a test sets it."""
        self.drain_requests: list[tuple[str, str, str, float | None]] = []
        """Every ``drain_node`` call: (node_id, reason, message, deadline_s)."""
        self.drain_answer: tuple[bool, str] | None = None
        """When set, what ``drain_node`` answers a known alive node (a refusal, say); else accepted."""
        self.draining: dict[str, float | None] = {}
        """Node id -> deadline of each drain accepted (what ``draining_nodes`` answers)."""

    # -- driving the fake -------------------------------------------------------------------
    def add_node(self, node: RayNodeView) -> RayNodeView:
        self.nodes[node.node_id] = node
        return node

    def kill_node(self, node_id: str) -> None:
        """Ray declares ``node_id`` dead (its row stays, ``Alive`` false, as in ``ray.nodes()``)."""
        row = self.nodes[node_id]
        self.nodes[node_id] = RayNodeView(node_id=row.node_id, alive=False, labels=row.labels, resources=row.resources,
                                          hostname=row.hostname, address=row.address)

    def kill_actor(self, name: str) -> None:
        """The named actor is dead for good: its name is free again."""
        self.actors.pop(name, None)

    # -- RayAdapter --------------------------------------------------------------------------
    def list_nodes(self) -> list[RayNodeView]:
        return list(self.nodes.values())

    def alive_node(self, node_id: str) -> RayNodeView | None:
        node = self.nodes.get(node_id)
        return node if node is not None and node.alive else None

    def current_node_id(self) -> str:
        return self.node_id

    def slots_in_use(self) -> dict[str, int]:
        return dict(self.slots_used)

    def gcs_address(self) -> str:
        return self._gcs_address

    def get_actor(self, name: str) -> Any | None:
        return self.actors.get(name)

    async def wait_for_actor(self, name: str, interval_s: float = 0.2) -> Any:
        while True:
            handle = self.get_actor(name)
            if handle is not None:
                return handle
            await asyncio.sleep(0)  # a fake's actors appear only when a test adds them: yield, do not wait

    def ensure_probe(self, probe_actor: Any, node: RayNodeView, *, heartbeat_interval_s: float, reprobe_interval_s: float,
                     spot_notices: dict[str, Any] | None = None) -> Any:
        """Record the start and, like ``get_if_exists=True``, return the node's probe handle (a
        recording ``FakeHandle`` made now when there is none)."""
        self.probe_starts.append(ProbeStart(node.node_id, node.name, heartbeat_interval_s, reprobe_interval_s, probe_actor,
                                            spot_notices))
        if self.ensure_error is not None:
            raise self.ensure_error
        name = probe_actor_name(node.node_id)
        if name not in self.actors:
            self.actors[name] = FakeHandle(name=name)
        return self.actors[name]

    def drain_node(self, node_id: str, reason: str, message: str = "", deadline_s: float | None = None) -> tuple[bool, str]:
        """As ``RayAdapter.drain_node``: a node not alive here is refused without a request."""
        if reason not in ("IDLE_TERMINATION", "PREEMPTION"):
            from fabric.core.errors import RequirementError

            raise RequirementError("reason", "must be one of IDLE_TERMINATION, PREEMPTION", reason)
        if self.alive_node(node_id) is None:
            return False, f"no alive Ray node {node_id[:12]!r}"
        self.drain_requests.append((node_id, reason, message, deadline_s))
        accepted, why = self.drain_answer if self.drain_answer is not None else (True, "")
        if accepted:
            self.draining[node_id] = deadline_s
        return accepted, why

    def draining_nodes(self) -> dict[str, float | None]:
        return {n: d for n, d in self.draining.items() if self.alive_node(n) is not None}

    def is_draining(self, node_id: str) -> bool:
        return node_id in self.draining_nodes()

    def is_actor_gone(self, exc: BaseException) -> bool:
        return isinstance(exc, ActorGone)

    def remote_cause(self, exc: BaseException) -> BaseException | None:
        return exc.cause if isinstance(exc, RemoteError) else None

    def loads(self, blob: bytes) -> Any:
        return pickle.loads(blob)

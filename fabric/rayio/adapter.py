"""The one seam between the fleet actors and Ray (STYLE.md habit 3).

Every Ray call the registry, the health monitor, the probe actors and the dispatcher make goes
through ``RayAdapter``: reading the node table, finding and starting named actors, the cluster's
GCS address, asking Ray's GCS to drain a node (``drain_node``, ``is_draining``), what a caught Ray
exception means (``is_actor_gone``, ``remote_cause``) and the unpickling of shipped functions.
Calls on an actor handle (``handle.method.remote(...)``) are made on handles the adapter returned,
so a fake adapter hands out fake handles. Unit tests give the actors' logic
``fabric.testing.fake_ray.FakeRayAdapter``, which has the same methods.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import ray
from ray import cloudpickle
from ray.exceptions import RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fabric.core.errors import RequirementError
from fabric.core.health import RayNodeView
from fabric.core.names import HEAD_RESOURCE, NAMESPACE, probe_actor_name

DRAIN_REASONS = ("IDLE_TERMINATION", "PREEMPTION")
"""What ``drain_node`` takes: Ray's ``DrainNodeReason`` without its ``DRAIN_NODE_REASON_`` prefix
(never ``UNSPECIFIED``: Ray 2.60's raylet died on it when tried)."""
_GCS_TIMEOUT_S = 10.0
SLOTS_READ_EVERY_S = 2.0
"""``RayAdapter.slots_in_use`` reads Ray's resource table at most this often: the scheduler asks
every tick, and the two GCS reads were a large part of a busy tick. Well under the 5 s an
observation vouches for (``fabric.core.scheduling.lease_desk.OBSERVATION_VALID_S``)."""


class _Unanswerable(Exception):
    """The GCS cannot be asked for one node here (no connected worker, an older Ray)."""


def _gcs_alive_node(node_id: str) -> RayNodeView | None:
    """The GCS's row of ``node_id`` when alive (``GetAllNodeInfo`` with a node selector and the
    ALIVE state filter, as Ray's own ``services`` does), as ``ray.nodes()`` would show it."""
    try:
        from ray._private.worker import global_worker
        from ray.core.generated.gcs_pb2 import GcsNodeInfo
        from ray.core.generated.gcs_service_pb2 import GetAllNodeInfoRequest

        client = global_worker.gcs_client
        wanted = bytes.fromhex(node_id)
    except Exception as exc:  # not connected, an older Ray, not a node id
        raise _Unanswerable(str(exc)) from exc
    try:
        rows = client.get_all_node_info(timeout=_GCS_TIMEOUT_S,
                                        node_selectors=[GetAllNodeInfoRequest.NodeSelector(node_id=wanted)],
                                        state_filter=GcsNodeInfo.GcsNodeState.ALIVE)
    except TypeError as exc:  # a Ray whose client takes no selectors
        raise _Unanswerable(str(exc)) from exc
    for info in rows.values():
        if info.node_id == wanted and info.state == GcsNodeInfo.GcsNodeState.ALIVE:
            return RayNodeView(node_id=node_id, alive=True, labels=dict(info.labels),
                               resources=dict(info.resources_total), hostname=info.node_manager_hostname or "",
                               address=info.node_manager_address or "")
    return None


class RayAdapter:
    """Ray, as the fleet actors use it."""

    namespace = NAMESPACE

    def list_nodes(self) -> list[RayNodeView]:
        """Ray's node table (alive and dead rows), ~0.3 ms."""
        return [RayNodeView.from_ray(row) for row in ray.nodes()]

    def alive_node(self, node_id: str) -> RayNodeView | None:
        """The alive node ``node_id``, or None when Ray does not know it alive: one row asked of the
        GCS by id (the registry asks at every registration and re-probe; reading the whole table
        each time would cost O(fleet) per call), the whole table only where that is not possible."""
        try:
            return _gcs_alive_node(node_id)
        except _Unanswerable:
            pass
        for node in self.list_nodes():
            if node.node_id == node_id and node.alive:
                return node
        return None

    _slots_read_at = float("-inf")
    _clock: Callable[[], float] = staticmethod(time.monotonic)

    def slots_in_use(self) -> dict[str, int]:
        """Per alive node id: ``fabric.slots`` in use, as Ray's GCS counts them, read now; ``{}``
        (nothing new) when the last read is less than ``SLOTS_READ_EVERY_S`` old."""
        from fabric.rayio.driver import slots_in_use

        now = self._clock()
        if now - self._slots_read_at < SLOTS_READ_EVERY_S:
            return {}
        self._slots_read_at = now
        return slots_in_use()

    def current_node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def gcs_address(self) -> str:
        """The cluster's GCS address (``host:port``): the same after a head restart on the same port."""
        return str(ray.get_runtime_context().gcs_address)

    def get_actor(self, name: str) -> Any | None:
        try:
            return ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            return None

    def kill_actor(self, name: str) -> None:
        """End the named actor for good (not restarted); no such actor is a no-op."""
        handle = self.get_actor(name)
        if handle is not None:
            ray.kill(handle, no_restart=True)

    async def wait_for_actor(self, name: str, interval_s: float = 0.2) -> Any:
        """The named actor, once it exists (it may still be starting or restarting)."""
        while True:
            handle = self.get_actor(name)
            if handle is not None:
                return handle
            await asyncio.sleep(interval_s)

    def ensure_probe(self, probe_actor: Any, node: RayNodeView, *, heartbeat_interval_s: float, reprobe_interval_s: float,
                     spot_notices: dict[str, Any] | None = None) -> Any:
        """Get or start the probe actor of ``node`` (``probe_actor``: the Ray actor class, which the
        health monitor passes in), hard-pinned to it: it is meant to die with its node.
        ``spot_notices``: the settings section of that name, for a node with a cloud label."""
        return probe_actor.options(
            name=probe_actor_name(node.node_id),
            namespace=self.namespace,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_restarts=3,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
        ).remote(
            node.node_id,
            name=node.name,
            labels=dict(node.labels),
            heartbeat_interval_s=heartbeat_interval_s,
            reprobe_interval_s=reprobe_interval_s,
            spot_notices=spot_notices,
        )

    # -- Ray's drain (the GCS's DrainNode: it stops new work on the node; it moves nothing) --------
    def drain_node(self, node_id: str, reason: str, message: str = "", deadline_s: float | None = None) -> tuple[bool, str]:
        """Ask Ray's GCS to drain ``node_id`` (``ray._raylet.GcsClient.drain_node``, what ``ray
        drain-node`` and autoscaler v2 call): ``reason`` ``"IDLE_TERMINATION"`` or ``"PREEMPTION"``
        (Ray's ``DrainNodeReason``), ``message`` for Ray's records (a node that then exits carries it
        as its death reason message), ``deadline_s`` the epoch second (``time.time()`` base) the node
        goes at, sent as Ray's ``deadline_timestamp_ms`` (None: 0, no deadline). Returns
        ``(accepted, rejection message)``.

        Ray 2.60, as tried: IDLE_TERMINATION is refused ("The node to be idle terminated is no
        longer idle.") while anything runs there (an actor too: every fabric node has its probe
        actor); accepted on an idle node, whose raylet then exits at once (death reason
        ``AUTOSCALER_DRAIN_IDLE``). PREEMPTION is always accepted: the node keeps what runs, takes
        no new work, is listed by the GCS as draining with its deadline, and exits once idle. The
        GCS accepts a node id it does not know and does nothing, so a node not alive in Ray's table
        is answered ``(False, ...)`` here without asking; so is the head node (draining it would
        take the cluster down)."""
        if reason not in DRAIN_REASONS:
            raise RequirementError("reason", f"must be one of {', '.join(DRAIN_REASONS)}", reason)
        if not isinstance(message, str):
            raise RequirementError("message", "must be a string", message)
        if deadline_s is not None and (isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float)) or deadline_s <= 0):
            raise RequirementError("deadline_s", "must be epoch seconds (time.time()) or None", deadline_s)
        row = next((n for n in self.list_nodes() if n.node_id == node_id), None)
        if row is None or not row.alive:
            return False, f"no alive Ray node {str(node_id)[:12]!r}"
        if HEAD_RESOURCE in row.resources:
            return False, f"{row.name} is the head node: Ray is not asked to drain it"
        from ray.core.generated import autoscaler_pb2

        code = autoscaler_pb2.DrainNodeReason.Value(f"DRAIN_NODE_REASON_{reason}")
        deadline_ms = 0 if deadline_s is None else int(deadline_s * 1000)
        accepted, why = self._gcs().drain_node(node_id, code, message, deadline_ms, timeout=_GCS_TIMEOUT_S)
        return bool(accepted), str(why or "")

    def draining_nodes(self) -> dict[str, float | None]:
        """Node id -> drain deadline (epoch seconds; None: no deadline) for every node Ray's GCS
        lists as draining (accepted and still alive)."""
        got = self._gcs().get_draining_nodes(timeout=_GCS_TIMEOUT_S)
        return {str(k): (v / 1000.0 if v else None) for k, v in dict(got).items()}

    def is_draining(self, node_id: str) -> bool:
        """Whether Ray reports ``node_id`` draining (its GCS's draining list, as Serve reads it)."""
        return node_id in self.draining_nodes()

    def _gcs(self) -> Any:
        """This worker's GCS client (the one ``ray.init`` made)."""
        import ray._private.worker as worker

        client = getattr(worker.global_worker, "gcs_client", None)
        if client is None:
            raise RuntimeError("not connected to Ray: no GCS client (ray.init first)")
        return client

    # -- what a caught Ray exception means -----------------------------------------------------
    def is_actor_gone(self, exc: BaseException) -> bool:
        """True when ``exc`` says the actor a call went to died or is unreachable for now (Ray's
        ``RayActorError`` family: ``ActorDiedError``, ``ActorUnavailableError``): look it up
        again and retry. An error the actor's method raised itself is not one."""
        return isinstance(exc, RayActorError)

    def remote_cause(self, exc: BaseException) -> BaseException | None:
        """The exception a remote method raised, when ``exc`` is Ray's wrapper of it
        (``RayTaskError``); None otherwise."""
        return exc.cause if isinstance(exc, RayTaskError) else None

    def loads(self, blob: bytes) -> Any:
        """A function (or any value) shipped as ``ray.cloudpickle`` bytes."""
        return cloudpickle.loads(blob)

"""The one seam between the fleet actors and Ray (STYLE.md habit 3).

Every Ray call the registry, the health monitor, the probe actors and the dispatcher make goes
through ``RayAdapter``: reading the node table, finding and starting named actors, the cluster's
GCS address, what a caught Ray exception means (``is_actor_gone``, ``remote_cause``) and the
unpickling of shipped functions. Calls on an actor handle (``handle.method.remote(...)``) are
made on handles the adapter returned, so a fake adapter hands out fake handles. Unit tests give
the actors' logic ``fabric.testing.fake_ray.FakeRayAdapter``, which has the same methods.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from ray import cloudpickle
from ray.exceptions import RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fabric.core.health import RayNodeView
from fabric.core.names import NAMESPACE, probe_actor_name


class RayAdapter:
    """Ray, as the fleet actors use it."""

    namespace = NAMESPACE

    def list_nodes(self) -> list[RayNodeView]:
        """Ray's node table (alive and dead rows), ~0.3 ms."""
        return [RayNodeView.from_ray(row) for row in ray.nodes()]

    def alive_node(self, node_id: str) -> RayNodeView | None:
        """The alive node ``node_id``, or None when Ray does not know it alive."""
        for node in self.list_nodes():
            if node.node_id == node_id and node.alive:
                return node
        return None

    def slots_in_use(self) -> dict[str, int]:
        """Per alive node id: ``fabric.slots`` in use, as Ray's GCS counts them."""
        from fabric.rayio.driver import slots_in_use

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

    def ensure_probe(self, probe_actor: Any, node: RayNodeView, *, heartbeat_interval_s: float, reprobe_interval_s: float) -> Any:
        """Get or start the probe actor of ``node`` (``probe_actor``: the Ray actor class, which the
        health monitor passes in), hard-pinned to it: it is meant to die with its node."""
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
        )

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

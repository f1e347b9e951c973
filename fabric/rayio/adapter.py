"""The one seam between the fleet actors and Ray (STYLE.md habit 3).

Every Ray call the registry, the health monitor and the probe actors make goes through
``RayAdapter``: reading the node table, finding and starting named actors, the session
directory. Unit tests hand the actors' logic a fake with the same methods instead.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import ray
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

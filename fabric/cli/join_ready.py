"""The last step of ``fabric join``: wait until the fabric's registry lists the new node as active,
then print one ready line, or say why not.

``ray start`` returning means the raylet runs, not that the fabric can use the node: the health
monitor must see it in Ray's node table, start its probe actor there, and the probe must register
it. So ``join`` (without ``--block``, ``--supervise`` or ``--no-wait``) waits up to
``--ready-timeout`` seconds for the registry's record of the node to be ``active`` and prints::

    ready: node edge-1 (5c0e2b9f1a3d) tier=relay slots=4 address=100.101.102.103

Which node is this one: the node table (the head's GCS, over gRPC, with the join's token) is read
just before ``ray start`` and again after it; the new alive node with this node's name (and its
address, when known) is it. To read the registry, the join process attaches to the cluster as a
Ray driver for a moment. The registry is asked only while time is left: with a timeout shorter than
connecting takes, the answer is "not ready" without asking.

Not ready in time is exit 1 with the last thing known (the fabric is not up on the cluster, the
registry does not list the node yet, it lists it as another status, the head holds it dead); the
node stays in Ray either way.

Deciding is pure (``new_node_id``, ``ready_from``, ``ready_line``); the outside world (the node
table, the driver, the registry, the clock) is behind one seam, ``ReadySeam``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

__all__ = ["NotReady", "Ready", "ReadySeam", "SeenNode", "new_node_id", "ready_from", "ready_line", "wait_ready"]

POLL_S = 0.5


@dataclass(frozen=True)
class SeenNode:
    """One row of Ray's node table, as far as this step needs it."""

    node_id: str
    name: str | None
    """Its ``fabric.io/name`` label."""
    address: str
    alive: bool


@dataclass(frozen=True)
class Ready:
    """The node as the registry lists it."""

    node_id: str
    name: str
    tier: str
    slots: int
    address: str


@dataclass(frozen=True)
class NotReady:
    """Why the node was not ready in time: the last thing known."""

    reason: str
    node_id: str | None = None


def ready_line(ready: Ready) -> str:
    return (f"ready: node {ready.name} ({ready.node_id[:12]}) tier={ready.tier} slots={ready.slots} "
            f"address={ready.address}")


def new_node_id(before: set[str] | None, after: Sequence[SeenNode], name: str, ip: str | None) -> str | None:
    """The node ``ray start`` just added: alive, not in ``before``, named ``name``, at ``ip`` when
    that is known (else the only such node). None when it cannot be told."""
    fresh = [n for n in after if n.alive and n.name == name and (before is None or n.node_id not in before)]
    if ip is not None:
        fresh = [n for n in fresh if n.address == ip] or fresh
    return fresh[0].node_id if len(fresh) == 1 else None


def ready_from(records: Sequence[Any], node_id: str | None, name: str, address: str | None,
               now: float) -> tuple[Ready | None, str]:
    """The node ready, from the registry's ``records`` (``RegistryRecord``), or None and what the
    registry says of it. ``node_id`` None: the newest record named ``name``."""
    if node_id is not None:
        mine = [r for r in records if r.node_id == node_id]
    else:
        mine = sorted((r for r in records if r.name == name), key=lambda r: r.registered_at)[-1:]
    if not mine:
        shown = f"node {node_id[:12]}" if node_id else f"a node named {name}"
        return None, f"the fabric's registry does not list {shown} yet"
    rec = mine[0]
    status = str(getattr(rec.status, "value", rec.status))
    if status != "active":
        return None, f"the fabric's registry lists node {rec.name} ({rec.node_id[:12]}) as {status}, not active"
    view = rec.to_node_record(now)
    slots = int(view.max_concurrent_tasks or rec.capabilities.limitations.max_concurrent_tasks)
    return Ready(rec.node_id, rec.name, view.tier.value, slots, address or "?"), ""


class ReadySeam:
    """The node table, a short-lived Ray driver and the registry. Tests pass a fake."""

    def __init__(self, gcs: str, token: str | None, env: Mapping[str, str], unset: Sequence[str] = (),
                 node_ip: str | None = None, timeout_s: float = 3.0) -> None:
        self.gcs, self.token, self.env, self.unset = gcs, token, dict(env), tuple(unset)
        self.node_ip, self.timeout_s = node_ip, timeout_s
        self._ray: Any = None

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def nodes(self) -> list[SeenNode] | None:
        """Ray's node table from the head's GCS; None when it cannot be read this way (TLS, no answer)."""
        if self.env.get("RAY_USE_TLS", "0").lower() not in ("0", "", "false"):
            return None
        try:
            import grpc
            from ray.core.generated import gcs_pb2, gcs_service_pb2, gcs_service_pb2_grpc
        except ImportError:
            return None
        meta = (("authorization", f"Bearer {self.token}"),) if self.token else ()
        with grpc.insecure_channel(self.gcs, options=[("grpc.enable_http_proxy", 0)]) as channel:
            stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
            try:
                reply = stub.GetAllNodeInfo(gcs_service_pb2.GetAllNodeInfoRequest(), metadata=meta, timeout=self.timeout_s)
            except grpc.RpcError:
                return None
        return [SeenNode(n.node_id.hex(), dict(n.labels).get("fabric.io/name"), n.node_manager_address,
                         n.state == gcs_pb2.GcsNodeInfo.ALIVE) for n in reply.node_info_list]

    def attach(self) -> str | None:
        """Connect this process to the cluster as a Ray driver (with the join's token settings);
        None when connected, else why not."""
        for key in self.unset:
            os.environ.pop(key, None)
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("RAY_AUTH_")})
        try:
            import ray

            extra = {"_node_ip_address": self.node_ip} if self.node_ip else {}
            ray.init(address=self.gcs, log_to_driver=False, logging_level="ERROR", **extra)
        except Exception as exc:  # Ray's own words, first line
            text = str(exc).strip()
            return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
        self._ray = ray
        return None

    def records(self) -> list[Any] | None:
        """The registry's records; None when the fabric is not up on the cluster (no registry)."""
        from fabric.runtime.control import FabricHandle

        try:
            return FabricHandle(timeout_s=10.0).records()
        except RuntimeError:
            return None

    def detach(self) -> None:
        if self._ray is not None:
            self._ray.shutdown()
            self._ray = None


def wait_ready(seam: ReadySeam, *, name: str, ip: str | None, before: set[str] | None, timeout_s: float,
               poll_s: float = POLL_S, say: Callable[[str], None] = lambda line: None) -> Ready | NotReady:
    """Wait up to ``timeout_s`` for the registry to list the node ``ray start`` just added as active.
    ``say`` hears, once, that the fabric is not up yet (the wait goes on: ``fabric up`` may come)."""
    start = seam.now()
    deadline = start + timeout_s
    node_id: str | None = None
    address: str | None = ip
    attached = False
    last = "nothing was asked yet"
    try:
        while True:
            table = seam.nodes()
            if table is not None:
                node_id = node_id or new_node_id(before, table, name, ip)
                row = next((n for n in table if n.node_id == node_id), None)
                if row is not None:
                    address = row.address
                    if not row.alive:
                        return NotReady(f"the head holds node {name} ({node_id[:12] if node_id else '?'}) dead", node_id)
            if not attached:
                why = seam.attach()
                attached = why is None
                last = f"could not connect to the cluster as a driver ({why})" if why else \
                    f"connected to the cluster after {seam.now() - start:.1f} s, the registry not asked yet"
            if seam.now() >= deadline:  # asked only while there is time left: a later answer would not count
                return NotReady(last, node_id)
            if attached:
                records = seam.records()
                if records is None:
                    if not last.startswith("the fabric is not up"):
                        say("the fabric is not up on this cluster yet: waiting for `fabric up` (--no-wait skips this wait)")
                    last = "the fabric is not up on this cluster (no registry): `fabric up` on the head brings it up"
                else:
                    ready, last = ready_from(records, node_id, name, address, time.time())
                    if ready is not None:
                        return ready
            if seam.now() >= deadline:
                return NotReady(last, node_id)
            seam.sleep(poll_s)
    finally:
        if attached:
            seam.detach()

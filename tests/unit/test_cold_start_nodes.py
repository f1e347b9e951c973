"""The node records a new Ray cluster finds in the store of one that is gone are collected after their
drain grace like any other: the registry (``actors.registry.Registry``) and the health monitor
(``actors.health.HealthMonitor``) over a real ``FabricStore``, a fake Ray seam and a manual clock.

A record already offline for longer than the grace (the old monitor saw its node leave) goes at the
monitor's first tick; one the old cluster left active is set offline as the registry starts (Ray does
not know it) and goes once the grace has run from then; a node of the new cluster stays."""

import asyncio

from actors.health import HealthMonitor
from actors.registry import Registry
from fabric.core.clock import ManualClock
from fabric.core.events import NodeLost
from fabric.core.lifecycle import NodeStatus
from fabric.core.names import REGISTRY
from fabric.store import FabricStore
from fabric.testing.fake_ray import FakeHandle, FakeRayAdapter

from test_registry import FakeRay, caps, view

GONE, LEFT_ACTIVE, NEW = "a" * 56, "b" * 56, "c" * 56
GRACE_S = 300.0


def old_cluster(path, clock):
    """The cluster that is gone: two nodes registered; one seen leaving an hour before the end."""
    store = FabricStore(path)
    reg = Registry(store, FakeRay(view(GONE), view(LEFT_ACTIVE, name="other")), clock=clock)
    reg.register(GONE, caps())
    reg.register(LEFT_ACTIVE, caps(name="other"))
    reg.apply([NodeLost(node_id=GONE, name="box", at=clock(), stimulus_id="old", reason="missed heartbeats")])
    store.close()


def test_a_new_cluster_collects_the_old_clusters_node_records_after_their_drain_grace(tmp_path):
    clock = ManualClock()
    old_cluster(tmp_path / "fabric.db", clock)
    clock.advance(3600)  # the new cluster starts an hour later, on the same store
    store = FabricStore(tmp_path / "fabric.db")
    ray = FakeRayAdapter([view(NEW, name="fresh")])
    reg = Registry(store, ray, clock=clock)
    assert reg.reconcile_with_ray() == [LEFT_ACTIVE]  # Ray does not know it: offline from now
    ray.actors[REGISTRY] = FakeHandle(reg, name=REGISTRY)
    monitor = HealthMonitor({"health": {"drain_grace_s": GRACE_S, "join_timeout_s": 60.0}}, adapter=ray,
                            probe_actor="ProbeActorClass", clock=clock)

    async def ticks(n):
        registry = await monitor.start() if not monitor.ticks else ray.actors[REGISTRY]
        for _ in range(n):
            registry = await monitor.step(registry)
            clock.advance(0.5)

    asyncio.run(ticks(2))
    assert {r.node_id for r in store.collected()} == {GONE}  # offline an hour: past its grace at once
    assert store.get(LEFT_ACTIVE).status is NodeStatus.OFFLINE
    clock.advance(GRACE_S)
    asyncio.run(ticks(2))
    assert {r.node_id for r in store.collected()} == {GONE, LEFT_ACTIVE}
    assert {r.node_id for r in store.list()} <= {NEW}  # only the new cluster's node may remain
    assert monitor.last_error is None

"""HealthMonitorActor's logic (``actors.health.HealthMonitor``) driven tick by tick over a fake Ray
seam (``fabric.testing.fake_ray``), a fake registry handle and a manual clock: no Ray started.

What the tick must do: a node Ray reports dead is lost in the registry; a new tier-labelled raylet
gets its probe actor; a quiet node whose probe is gone gets it started again, backed off; a
registry that is away leaves the tick standing, and nothing decided meanwhile is lost.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from actors.health import HealthMonitor
from fabric.core.errors import TransitionError
from fabric.core.events import NodeAdded, NodeLost
from fabric.core.health import ManualClock, RayNodeView
from fabric.core.lifecycle import NodeStatus
from fabric.core.names import REGISTRY, probe_actor_name
from fabric.rayio.adapter import RayAdapter
from fabric.testing.fake_ray import ActorGone, FakeHandle, FakeRayAdapter, fabric_node

HEALTH = {"heartbeat_interval_s": 1.0, "monitor_interval_s": 0.5, "offline_after_s": 60.0, "join_timeout_s": 60.0,
          "drain_grace_s": 600.0, "reprobe_interval_s": 300.0}
QUIET_AFTER_S = 2 * HEALTH["heartbeat_interval_s"] + HEALTH["monitor_interval_s"]


class FakeRegistry:
    """What the monitor calls on the registry, over dicts; ``apply`` records every batch and refuses
    (all or nothing, as the real one) a batch holding an event for a node id in ``refuse``."""

    def __init__(self, records=(), beats=None) -> None:
        self.record_list = list(records)
        self.beats: dict[str, float] = dict(beats or {})
        self.state: dict[str, object] = {}
        self.batches: list[list] = []
        self.refuse: set[str] = set()
        self.status: dict[str, NodeStatus] = {}

    def records(self):
        return list(self.record_list)

    def get_state(self, key, default=None):
        return self.state.get(key, default)

    def put_state(self, key, value):
        self.state[key] = value

    def collected_ids(self):
        return []

    def health_inputs(self):
        return {n: {"last_seen": at, "degraded": []} for n, at in self.beats.items()}

    def apply(self, events):
        events = list(events)
        refused = [e for e in events if e.node_id in self.refuse]
        if refused:
            raise TransitionError(f"node {refused[0].node_id}", "active", "?", "refused by the fake")
        self.batches.append(events)
        for e in events:
            if getattr(e, "status", None) is not None:
                self.status[e.node_id] = e.status
        return len(events)

    @property
    def applied(self) -> list:
        return [e for batch in self.batches for e in batch]


def make(nodes=(), records=(), *, health=None):
    clock = ManualClock()
    adapter = FakeRayAdapter(nodes)
    registry = FakeRegistry(records)
    handle = adapter.actors[REGISTRY] = FakeHandle(registry, name=REGISTRY)
    monitor = HealthMonitor({"health": {**HEALTH, **(health or {})}}, adapter=adapter, probe_actor="ProbeActorClass", clock=clock)
    return SimpleNamespace(clock=clock, adapter=adapter, registry=registry, handle=handle, monitor=monitor)


def run(coro):
    return asyncio.run(coro)


def test_a_node_ray_reports_dead_is_lost_in_the_registry():
    f = make([fabric_node("n1", name="box")])

    async def scenario():
        reg = await f.monitor.start()
        reg = await f.monitor.step(reg)
        assert [type(e) for e in f.registry.applied] == [NodeAdded]
        f.clock.advance(0.5)
        f.adapter.kill_node("n1")
        reg = await f.monitor.step(reg)
        return reg

    run(scenario())
    lost = [e for e in f.registry.applied if isinstance(e, NodeLost)]
    assert len(lost) == 1 and lost[0].node_id == "n1" and lost[0].ray_dead and lost[0].reason == "ray: node dead"
    assert f.registry.status["n1"] is NodeStatus.OFFLINE
    assert f.registry.state["health.flaps"]["box"]["online"] is False  # the flap table follows the loss
    assert f.monitor.last_error is None and f.monitor.ticks == 2
    seq, events = run(f.monitor.events(0))
    assert seq == 2 and [type(e) for e in events] == [NodeAdded, NodeLost]


def test_a_new_tier_labelled_raylet_gets_its_probe_and_a_bare_one_does_not():
    f = make([fabric_node("n1")])

    async def scenario():
        reg = await f.monitor.start()
        reg = await f.monitor.step(reg)
        f.adapter.add_node(fabric_node("n2", tier="gpu_nvenc", name="gpu-box"))
        f.adapter.add_node(RayNodeView(node_id="bare", alive=True, hostname="head"))  # no fabric.io/tier label
        await f.monitor.step(reg)

    run(scenario())
    starts = [(s.node_id, s.heartbeat_interval_s, s.reprobe_interval_s, s.probe_actor) for s in f.adapter.probe_starts]
    assert starts == [("n1", 1.0, 300.0, "ProbeActorClass"), ("n2", 1.0, 300.0, "ProbeActorClass")]
    assert sorted(e.node_id for e in f.registry.applied if isinstance(e, NodeAdded)) == ["n1", "n2"]
    assert f.adapter.get_actor(probe_actor_name("n2")) is not None


def test_a_probe_is_started_with_the_spot_notices_settings():
    clock = ManualClock()
    adapter = FakeRayAdapter([fabric_node("n1")])
    adapter.actors[REGISTRY] = FakeHandle(FakeRegistry(), name=REGISTRY)
    spot = {"enabled": True, "poll_interval_s": 0.5, "timeout_s": 1.0, "metadata_url": "http://127.0.0.1:9"}
    monitor = HealthMonitor({"health": HEALTH, "spot_notices": spot}, adapter=adapter, probe_actor="ProbeActorClass", clock=clock)

    async def scenario():
        await monitor.step(await monitor.start())

    run(scenario())
    assert [s.spot_notices for s in adapter.probe_starts] == [spot]


def test_restart_restores_the_registry_view_and_starts_the_probes_of_live_nodes():
    rec = SimpleNamespace(node_id="n1", name="box", status=NodeStatus.ACTIVE, status_since=10.0, last_seen=20.0, degraded=["x"])
    gone = SimpleNamespace(node_id="n0", name="old", status=NodeStatus.OFFLINE, status_since=10.0, last_seen=5.0, degraded=[])
    f = make([fabric_node("n1", name="box")], [rec, gone])
    run(f.monitor.start())
    assert [s.node_id for s in f.adapter.probe_starts] == ["n1"]  # n0 is offline and not in Ray's table
    assert f.monitor.policy.nodes["n1"].last_beat == f.clock()  # silence timed afresh from the restart
    assert f.monitor.policy.nodes["n1"].degraded == ("x",)


def test_a_quiet_node_whose_probe_is_gone_gets_it_restarted_backed_off():
    f = make([fabric_node("n1")])
    name = probe_actor_name("n1")

    async def scenario():
        reg = await f.monitor.start()
        reg = await f.monitor.step(reg)
        assert len(f.adapter.probe_starts) == 1 and f.adapter.get_actor(name) is not None
        f.registry.beats["n1"] = f.clock()
        # beating: the probe is alive by definition and never looked up, even when its name is free
        f.adapter.kill_actor(name)
        f.clock.advance(1.0)
        reg = await f.monitor.step(reg)
        assert len(f.adapter.probe_starts) == 1
        # quiet and missing: started again at once
        f.clock.advance(QUIET_AFTER_S)
        reg = await f.monitor.step(reg)
        assert len(f.adapter.probe_starts) == 2 and f.adapter.get_actor(name) is not None
        # it dies again at once: the next start waits out the 1 s backoff
        f.adapter.kill_actor(name)
        f.clock.advance(0.5)
        reg = await f.monitor.step(reg)
        assert len(f.adapter.probe_starts) == 2
        f.clock.advance(0.6)
        reg = await f.monitor.step(reg)
        assert len(f.adapter.probe_starts) == 3
        return await f.monitor.status()

    status = run(scenario())
    assert status["probe_restarts"]["total"] == 2 and status["probe_restarts"]["nodes"]["n1"]["restarts"] == 2
    assert status["node_id"] == "head-node" and status["last_error"] is None


def test_a_failing_probe_start_is_reported_and_the_tick_goes_on():
    f = make([fabric_node("n1")])
    f.adapter.ensure_error = RuntimeError("raylet refused")

    async def scenario():
        reg = await f.monitor.start()
        await f.monitor.tick(reg)  # the tick itself does not raise

    run(scenario())
    assert "probe for n1" in f.monitor.last_error and "raylet refused" in f.monitor.last_error
    assert [type(e) for e in f.registry.applied] == [NodeAdded]


def test_a_registry_away_leaves_the_tick_standing_and_what_was_decided_meanwhile_reaches_it():
    f = make([fabric_node("n1"), fabric_node("n2")])

    async def scenario():
        reg = await f.monitor.start()
        reg = await f.monitor.step(reg)
        f.handle.away = True  # restarting
        f.adapter.kill_node("n1")
        f.clock.advance(0.5)
        reg = await f.monitor.step(reg)
        assert f.monitor.last_error.startswith("tick: ActorGone")
        assert f.monitor.ticks == 2 and not any(isinstance(e, NodeLost) for e in f.registry.applied)
        # it restarted under a new handle: the failed tick looked the name up again
        back = f.adapter.actors[REGISTRY] = FakeHandle(f.registry, name=REGISTRY)
        reg = await f.monitor.step(reg)
        assert reg is back
        reg = await f.monitor.step(reg)
        return reg

    reg = run(scenario())
    assert f.monitor.last_error is None
    lost = [e for e in f.registry.applied if isinstance(e, NodeLost)]
    assert [e.node_id for e in lost] == ["n1"] and f.registry.status["n1"] is NodeStatus.OFFLINE
    assert f.registry.status["n2"] is NodeStatus.ACTIVE


def test_a_registry_away_at_apply_keeps_the_events_queued_for_the_next_tick():
    f = make([fabric_node("n1")])

    async def scenario():
        reg = await f.monitor.start()
        f.handle.fail_next("apply", ActorGone("restarting"))
        reg = await f.monitor.step(reg)
        assert f.registry.applied == [] and f.monitor.last_error.startswith("tick: ActorGone")
        reg = await f.monitor.step(reg)

    run(scenario())
    assert [type(e) for e in f.registry.applied] == [NodeAdded] and f.monitor.last_error is None
    assert len(f.adapter.probe_starts) == 1


def test_a_refused_batch_goes_again_one_event_at_a_time():
    f = make([fabric_node("n1"), fabric_node("n2")])
    f.registry.refuse = {"n1"}

    async def scenario():
        reg = await f.monitor.start()
        await f.monitor.step(reg)

    run(scenario())
    assert [e.node_id for e in f.registry.applied] == ["n2"]
    assert f.monitor.refused_events == 1 and f.monitor.last_refusal.startswith("NodeAdded for n1")
    assert f.monitor.last_error is None and f.monitor._unapplied == []


def test_events_are_pushed_to_subscribers_and_the_subscription_is_kept_in_the_registry():
    f = make([fabric_node("n1")])
    sub = f.adapter.actors["fabric.scheduler"] = FakeHandle(name="fabric.scheduler")

    async def scenario():
        reg = await f.monitor.start()
        await f.monitor.subscribe("fabric.scheduler", "on_fleet_event")
        reg = await f.monitor.step(reg)
        f.adapter.kill_node("n1")
        await f.monitor.step(reg)
        return await f.monitor.events(0)

    _, logged = run(scenario())
    assert f.registry.state["health.subscribers"] == {"fabric.scheduler": "on_fleet_event"}
    pushed = [args[0] for args in sub.called("on_fleet_event")]
    assert [type(e) for e in pushed] == [NodeAdded, NodeLost] and pushed == logged


def test_the_fake_seam_has_every_method_of_the_real_one():
    real = {n for n in dir(RayAdapter) if not n.startswith("_") and callable(getattr(RayAdapter, n))}
    missing = sorted(n for n in real if not callable(getattr(FakeRayAdapter, n, None)))
    assert not missing, f"RayAdapter grew {missing}: give fabric/testing/fake_ray.py's FakeRayAdapter them too"


def test_a_released_node_loses_its_probe_for_good():
    f = make([fabric_node("n1")])
    name = probe_actor_name("n1")

    async def scenario():
        reg = await f.monitor.start()
        reg = await f.monitor.step(reg)
        assert f.adapter.get_actor(name) is not None
        assert await f.monitor.release_node("n1") is True  # given back to its provider (ray-autoscaler)
        assert f.adapter.get_actor(name) is None
        for _ in range(5):  # quiet and missing: never started again (Ray must see the node idle)
            f.clock.advance(QUIET_AFTER_S)
            reg = await f.monitor.step(reg)
        assert f.adapter.get_actor(name) is None and len(f.adapter.probe_starts) == 1
        assert await f.monitor.release_node("n1") is False

    run(scenario())

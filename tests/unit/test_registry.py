"""Registry logic with a fake Ray adapter: what it accepts, what it refuses (typed, nothing stored)."""

from __future__ import annotations

import pickle

import pytest

from actors.registry import Registry
from fabric.core.capabilities import NodeCapabilities
from fabric.core.errors import NodeNotFoundError, RegistrationError, TransitionError
from fabric.core.events import NodeCollected, NodeDegraded, NodeFlapHeld, NodeFlapReleased, NodeLost, NodeRecovered
from fabric.core.health import ManualClock, RayNodeView
from fabric.core.lifecycle import NodeStatus
from fabric.store import FabricStore

A = "a" * 56
B = "b" * 56


class FakeRay:
    """Ray's node table as a dict: node id -> RayNodeView."""

    def __init__(self, *nodes: RayNodeView) -> None:
        self.nodes = {n.node_id: n for n in nodes}

    def alive_node(self, node_id):
        n = self.nodes.get(node_id)
        return n if n is not None and n.alive else None


def view(node_id, name="box", alive=True, profile=None, tiers=("cpu_ffmpeg", "relay")):
    """A Ray node row as a fabric node joins: its tier label and one ``fabric.tier.*`` resource per
    served tier (``NodeCapabilities.to_ray_resources``; ``caps()`` serves cpu_ffmpeg and relay)."""
    labels = {"fabric.io/tier": tiers[0] if tiers else "relay", "fabric.io/name": name}
    if profile:
        labels["fabric.io/profile"] = profile
    resources = {"fabric.slots": 1.0, **{f"fabric.tier.{t}": 1.0 for t in tiers}}
    return RayNodeView(node_id=node_id, alive=alive, labels=labels, resources=resources)


def caps(name="box", **kw):
    fields = dict(name=name, cpu_logical=4, cpu_physical=2, cpu_usable=4, memory_mib=8192)
    fields.update(kw)
    return NodeCapabilities(**fields).model_dump(mode="json")


@pytest.fixture
def env(tmp_path):
    clock = ManualClock(1000.0)
    ray = FakeRay(view(A, profile="cpu-only-box"), view(B, name="other", alive=False))
    store = FabricStore(tmp_path / "fabric.db")
    return Registry(store, ray, clock=clock), store, ray, clock


def test_register_known_alive_node(env):
    reg, store, _, clock = env
    r = reg.register(A, caps(), utilization={"cpu_percent": 12.5, "memory_percent": 40})
    assert r.status is NodeStatus.ACTIVE and r.registered_at == clock() == r.last_seen
    assert r.profile == "cpu-only-box" and r.labels["fabric.io/name"] == "box" and r.utilization.cpu_percent == 12.5
    assert store.get(A) == r and r.capabilities.tier.value == "cpu_ffmpeg"


def test_reregistration_keeps_status_and_updates_capabilities(env):
    reg, store, _, clock = env
    reg.register(A, caps())
    reg.apply([NodeLost(node_id=A, name="box", at=clock(), stimulus_id="s", reason="x")])
    clock.advance(5)
    r = reg.register(A, caps(cpu_usable=3))
    assert r.status is NodeStatus.OFFLINE and r.capabilities.cpu_usable == 3 and r.last_seen == clock()


def test_reregistration_reads_the_ray_resources_a_record_stored_without_them_lacks(env):
    reg, store, _, _ = env
    r = reg.register(A, caps())
    assert r.ray_resources == {"fabric.slots": 1.0, "fabric.tier.cpu_ffmpeg": 1.0, "fabric.tier.relay": 1.0}
    store.upsert(r.model_copy(update={"ray_resources": {}}))  # as a store written before the field was kept
    assert reg.register(A, caps()).ray_resources == r.ray_resources == store.get(A).ray_resources


@pytest.mark.parametrize("node_id", ["c" * 56, B], ids=["unknown-to-ray", "dead-in-ray"])
def test_spoofed_node_id_is_refused_and_nothing_stored(env, node_id):
    reg, store, _, _ = env
    with pytest.raises(RegistrationError) as err:
        reg.register(node_id, caps(name="other"))
    assert err.value.node_id == node_id and err.value.field == "node_id" and "cannot invent" in str(err.value)
    assert store.list() == []
    again = pickle.loads(pickle.dumps(err.value))  # crosses actor boundaries intact
    assert isinstance(again, RegistrationError) and again.node_id == node_id and again.field == "node_id"


def test_name_contradicting_the_ray_label_is_refused(env):
    reg, store, _, _ = env
    with pytest.raises(RegistrationError) as err:
        reg.register(A, caps(name="impostor"))
    assert err.value.field == "capabilities.name" and store.list() == []


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "box", "cpu_logical": -1}, "capabilities.cpu_logical"),
        ({"name": "box", "bogus": 1}, "capabilities.bogus"),
        ({"cpu_logical": 2}, "capabilities.name"),
        ("not a dict", "capabilities"),
        (None, "capabilities"),
    ],
)
def test_malformed_registration_is_refused_naming_the_field(env, payload, field):
    reg, store, _, _ = env
    with pytest.raises(RegistrationError) as err:
        reg.register(A, payload)
    assert err.value.field == field and err.value.node_id == A
    assert store.list() == []


def test_malformed_node_id_and_utilisation(env):
    reg, store, _, _ = env
    with pytest.raises(RegistrationError) as err:
        reg.register("", caps())
    assert err.value.field == "node_id"
    with pytest.raises(RegistrationError) as err:
        reg.register(A, caps(), utilization={"cpu_percent": "lots"})
    assert err.value.field == "utilization.cpu_percent" and store.list() == []


def test_heartbeats_and_reports(env):
    reg, store, _, clock = env
    reg.register(A, caps())
    clock.advance(3)
    assert reg.heartbeat(A, {"cpu_percent": 50}) == clock()
    assert reg.health_inputs() == {A: {"last_seen": clock(), "degraded": []}}
    with pytest.raises(RegistrationError):
        reg.heartbeat("c" * 56)
    with pytest.raises(RegistrationError) as err:
        reg.heartbeat(A, {"cpu_percent": -5})
    assert err.value.field == "utilization.cpu_percent"
    r = reg.report(A, caps(cpu_usable=2), degraded=["ffmpeg encoder stopped: h264_nvenc"])
    assert r.degraded == ("ffmpeg encoder stopped: h264_nvenc",) and "ffmpeg encoder stopped: h264_nvenc" in r.limitations
    with pytest.raises(RegistrationError):
        reg.report(A, caps(name="someone-else"))
    assert store.get(A).capabilities.cpu_usable == 2


def test_apply_events_statuses_holds_and_collection(env):
    reg, store, _, clock = env
    reg.register(A, caps())
    now = clock()
    assert reg.apply([NodeLost(node_id=A, name="box", at=now, stimulus_id="s", reason="ray: node dead").model_dump()]) == 1
    assert store.get(A).status is NodeStatus.OFFLINE and store.get(A).status_since == now
    reg.apply([NodeFlapHeld(node_id=A, name="box", at=now, stimulus_id="s", until=now + 600, toggles=3)])
    assert store.get(A).held_until == now + 600 and store.get(A).flap_held(now + 1)
    reg.apply([NodeFlapReleased(node_id=A, name="box", at=now, stimulus_id="s")])
    assert store.get(A).held_until is None
    reg.apply([NodeRecovered(node_id=A, name="box", at=now, stimulus_id="s", status=NodeStatus.ACTIVE, reason="back")])
    reg.apply([NodeDegraded(node_id=A, name="box", at=now, stimulus_id="s", reasons=("gpu vanished: X",))])
    assert store.get(A).status is NodeStatus.ACTIVE and store.get(A).degraded == ("gpu vanished: X",)
    reg.apply([NodeLost(node_id=A, name="box", at=now, stimulus_id="s", reason="x"),
               NodeCollected(node_id=A, name="box", at=now + 300, stimulus_id="s", lost_for_s=300)])
    assert store.get(A) is None and [r.status for r in reg.collected()] == [NodeStatus.DEAD]
    with pytest.raises(RegistrationError) as err:  # dead is terminal: the same id cannot come back
        reg.register(A, caps())
    assert "collected" in str(err.value)
    assert reg.apply([NodeLost(node_id="c" * 56, name="x", at=now, stimulus_id="s", reason="x")]) == 0  # unknown: ignored


def test_a_hold_decided_before_registration_reaches_the_new_record(env):
    reg, store, ray, clock = env
    reg.apply([NodeFlapHeld(node_id=A, name="box", at=clock(), stimulus_id="s", until=clock() + 600, toggles=0)])
    assert reg.register(A, caps()).held_until == clock() + 600


def test_lookup_by_name_prefers_the_newest_record_and_cordon_drain(env):
    reg, store, ray, clock = env
    reg.register(A, caps())
    clock.advance(1)
    newer = "d" * 56
    ray.nodes[newer] = view(newer)
    reg.register(newer, caps())
    assert reg.record("box").node_id == newer and reg.record(A[:10]).node_id == A
    with pytest.raises(NodeNotFoundError):
        reg.record("nobody")
    assert reg.set_cordoned("box", True).cordoned
    d = reg.mark_draining(A)
    assert d.status is NodeStatus.DRAINING and d.cordoned
    with pytest.raises(TransitionError):  # the transition table holds in the registry too
        reg.apply([NodeCollected(node_id=A, name="box", at=clock(), stimulus_id="s", lost_for_s=1),
                   NodeRecovered(node_id=newer, name="box", at=clock(), stimulus_id="s", status=NodeStatus.DEAD, reason="x"),
                   NodeRecovered(node_id=newer, name="box", at=clock(), stimulus_id="s", status=NodeStatus.ACTIVE, reason="x")])


def test_registry_survives_reopen(tmp_path):
    clock = ManualClock()
    ray = FakeRay(view(A))
    reg = Registry(FabricStore(tmp_path / "f.db"), ray, clock=clock)
    reg.register(A, caps())
    reg.store.close()
    again = Registry(FabricStore(tmp_path / "f.db"), ray, clock=clock)
    assert [r.node_id for r in again.records()] == [A]

"""The registry's boundary (issue 12): every message validated on arrival, a refusal typed and
naming the field, and a refused message changing nothing in the store (every table's rows and the
database and WAL files' bytes are the same after it)."""

from __future__ import annotations

import math
import pickle
import warnings

import pytest

from actors.registry import Registry
from fabric.core.errors import RegistrationError, TransitionError
from fabric.core.events import NodeAdded, NodeCollected, NodeDegraded, NodeFlapHeld, NodeLost, NodeRecovered
from fabric.core.health import ManualClock
from fabric.core.lifecycle import NodeStatus
from fabric.core.messages import MAX_DEGRADED, MAX_EVENTS, MAX_GPUS, MAX_HOLD_S, MAX_ITEMS, MAX_REPORT_BYTES, MAX_TEXT_CHARS, scan
from fabric.core.records import RegistryRecord
from fabric.store import FabricStore

from test_registry import A, B, FakeRay, caps, view

C = "c" * 56  # alive in Ray, never registered
U = "e" * 56  # unknown to Ray and to the store
CUDA_GPU = {"vendor": "nvidia", "model": "NVIDIA GeForce RTX 4070", "discrete": True, "cuda": True, "vram_mib": 12282, "bus": "pcie"}


@pytest.fixture
def env(tmp_path):
    clock = ManualClock(1000.0)
    ray = FakeRay(view(A, profile="cpu-only-box"), view(B, name="other", alive=False), view(C, name="third"))
    store = FabricStore(tmp_path / "fabric.db")
    reg = Registry(store, ray, clock=clock)
    reg.register(A, caps())
    return reg, store, ray, clock


def snapshot(store: FabricStore):
    """Everything stored: every table's rows, and the bytes of the database and its WAL."""
    files = {suffix: (store.path.with_name(store.path.name + suffix).read_bytes()
                      if store.path.with_name(store.path.name + suffix).exists() else None) for suffix in ("", "-wal")}
    return store.dump(), files


def refused(store, call, *args, field=None, error=RegistrationError, **kwargs):
    """Call, expect ``error`` naming ``field``, and check nothing changed in the store."""
    before = snapshot(store)
    with pytest.raises(error) as err:
        call(*args, **kwargs)
    assert snapshot(store) == before, "a refused message changed the store"
    if field is not None:
        assert err.value.field == field, (err.value.field, str(err.value))
    again = pickle.loads(pickle.dumps(err.value))  # crosses the actor boundary intact
    assert type(again) is type(err.value) and str(again) == str(err.value)
    return err.value


# -- node ids --------------------------------------------------------------------------------------
@pytest.mark.parametrize("node_id", [{"id": A}, [A], 7, None, A.upper(), A[:-1], A + "0", "g" * 56, "x" * 20_000_000],
                         ids=["dict", "list", "int", "none", "upper", "short", "long", "not-hex", "20MB"])
def test_a_node_id_that_is_not_a_ray_node_id_is_refused_by_every_call(env, node_id):
    reg, store, _, _ = env
    for call, args in ((reg.register, (node_id, caps())), (reg.heartbeat, (node_id, None)), (reg.report, (node_id, caps()))):
        err = refused(store, call, *args, field="node_id")
        assert len(str(err)) < 1000  # a 20 MB id is not echoed back


# -- reports ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("degraded", "field"), [
    (5, "degraded"), (None, "degraded"), ("gpu vanished", "degraded"), ((i for i in ["x"]), "degraded"),
    ([{"a": 1}], "degraded.0"), (["r"] * (MAX_DEGRADED + 1), "degraded"), (["x" * (MAX_TEXT_CHARS + 1)], "degraded.0"),
], ids=["int", "none", "str", "generator", "dict-item", "too-many", "too-long"])
def test_a_malformed_degraded_list_is_refused(env, degraded, field):
    reg, store, _, _ = env
    refused(store, reg.report, A, caps(), degraded, field=field)


def test_a_good_report_is_still_taken(env):
    reg, store, _, _ = env
    r = reg.report(A, caps(cpu_usable=2), ("gpu vanished: X",) * MAX_DEGRADED)
    assert store.get(A) == r and len(r.degraded) == MAX_DEGRADED


@pytest.mark.parametrize("size_mb", [20, 37])
def test_a_huge_report_is_refused_before_it_is_validated(env, size_mb):
    reg, store, _, _ = env
    codecs = ["h" * 1000] * 1000  # every string and list within its own bound: only the whole is too big
    big = {**caps(), "gpus": [dict(CUDA_GPU, index=i, encoders=codecs) for i in range(size_mb)]}
    refused(store, reg.report, A, big, field="capabilities")
    refused(store, reg.register, A, big, field="capabilities")


@pytest.mark.parametrize(("patch", "field"), [
    ({"ffmpeg": {"listed": ["x" * (MAX_TEXT_CHARS + 1)]}}, "capabilities.ffmpeg.listed.0"),
    ({"ffmpeg": {"listed": ["e"] * (MAX_ITEMS + 1)}}, "capabilities.ffmpeg.listed"),
    ({"name": "b" * 254}, "capabilities.name"),
    ({"memory_mib": 10**30}, "capabilities.memory_mib"),
    ({"cpu_usable": math.nan}, "capabilities.cpu_usable"),
    ({"gpus": [dict(CUDA_GPU, index=i) for i in range(MAX_GPUS + 1)]}, "capabilities.gpus"),
    ({"roles": object()}, "capabilities.roles"),
])
def test_an_oversized_or_non_data_field_is_refused_naming_it(env, patch, field):
    reg, store, _, _ = env
    refused(store, reg.report, A, {**caps(), **patch}, field=field)


def test_a_cyclic_or_deeply_nested_report_is_refused_before_pydantic_recurses(env):
    reg, store, _, _ = env
    loop: list = []
    loop.append(loop)
    deep: list = []
    for _ in range(500):  # shallow enough for Python's repr, deep enough to make pydantic recurse
        deep = [deep]
    for nested in (loop, deep):
        err = refused(store, reg.report, A, {**caps(), "roles": nested})
        assert err.field.startswith("capabilities.roles.0.0") and "nested deeper than" in str(err)


@pytest.mark.parametrize(("util", "field"), [
    ({"gpus": [{"gpu_percent": math.nan}]}, "utilization.gpus.0.gpu_percent"),
    ({"gpus": [{"gpu_percent": math.inf}]}, "utilization.gpus.0.gpu_percent"),
    ({"gpus": [{"memory_used_mib": -1}]}, "utilization.gpus.0.memory_used_mib"),
    ({"gpus": [{}] * (MAX_GPUS + 1)}, "utilization.gpus"),
    ({"cpu_percent": "lots"}, "utilization.cpu_percent"),
    ("busy", "utilization"),
])
def test_a_heartbeat_with_a_bad_utilisation_is_refused(env, util, field):
    reg, store, _, _ = env
    refused(store, reg.heartbeat, A, util, field=field)
    assert store.get(A) is not None  # and the record stays readable


# -- tiers -------------------------------------------------------------------------------------------
def test_a_cuda_gpu_claimed_for_a_cpu_only_node_is_refused(env):
    reg, store, ray, _ = env
    err = refused(store, reg.report, A, caps(gpus=[CUDA_GPU]), field="capabilities.tiers")
    assert "gpu_cuda" in str(err) and "rejoin" in str(err)
    refused(store, reg.register, A, caps(gpus=[CUDA_GPU]), field="capabilities.tiers")
    refused(store, reg.register, C, caps("third", gpus=[CUDA_GPU]), field="capabilities.tiers")
    assert store.get(C) is None


def test_a_node_that_joined_with_a_tier_may_report_fewer(env):
    reg, store, ray, _ = env
    gpu_node = "d" * 56
    ray.nodes[gpu_node] = view(gpu_node, name="gpubox", tiers=("gpu_cuda", "cpu_ffmpeg", "relay"))
    assert reg.register(gpu_node, caps("gpubox", gpus=[CUDA_GPU])).capabilities.tier.value == "gpu_cuda"
    demoted = reg.report(gpu_node, caps("gpubox"), ["gpu vanished: NVIDIA GeForce RTX 4070"])
    assert demoted.capabilities.tier.value == "cpu_ffmpeg"  # a demotion is fine
    assert reg.report(gpu_node, caps("gpubox", gpus=[CUDA_GPU])).capabilities.tier.value == "gpu_cuda"  # and back


def test_a_report_from_a_node_ray_no_longer_has_alive_is_refused(env):
    reg, store, ray, _ = env
    ray.nodes[A] = view(A, alive=False)
    refused(store, reg.report, A, caps(), field="node_id")


# -- fleet events ----------------------------------------------------------------------------------------
def lost(node_id=A, at=1000.0, **kw):
    return NodeLost(node_id=node_id, name=kw.pop("name", "box"), at=at, stimulus_id="s", reason="x", **kw)


def test_events_for_unknown_nodes_change_nothing(env):
    reg, store, _, clock = env
    before = snapshot(store)
    assert reg.apply([lost(U), NodeCollected(node_id=U, name="x", at=clock(), stimulus_id="s", lost_for_s=1),
                      NodeDegraded(node_id=U, name="x", at=clock(), stimulus_id="s", reasons=("r",)),
                      NodeFlapHeld(node_id=U, name="box", at=clock(), stimulus_id="s", until=clock() + 600, toggles=3)]) == 0
    assert snapshot(store) == before


def test_a_forged_hold_for_an_unknown_id_never_holds_a_real_node(env):
    """Issue 12: a NodeFlapHeld for an unknown id was stored under the node's name and held the
    real node off for ~10^6 s when it registered."""
    reg, store, _, clock = env
    refused(store, reg.apply, [NodeFlapHeld(node_id=U, name="third", at=clock(), stimulus_id="s", until=clock() + 1e6, toggles=3)],
            field="events[0].until")
    reg.apply([NodeFlapHeld(node_id=U, name="third", at=clock(), stimulus_id="s", until=clock() + 600, toggles=3)])
    assert reg.register(C, caps("third")).held_until is None


def test_a_hold_for_a_live_unregistered_node_waits_for_its_registration_by_id_and_name(env):
    reg, store, ray, clock = env
    before = snapshot(store)
    reg.apply([NodeFlapHeld(node_id=C, name="impostor", at=clock(), stimulus_id="s", until=clock() + 600, toggles=0)])
    assert snapshot(store) == before  # Ray knows C by another name: not this node's hold
    reg.apply([NodeFlapHeld(node_id=C, name="third", at=clock(), stimulus_id="s", until=clock() + 600, toggles=0)])
    assert reg.register(C, caps("third")).held_until == clock() + 600
    assert reg.get_state("registry.pending_holds") == {}  # taken by the record


def test_a_hold_past_the_horizon_is_refused_even_for_a_known_node(env):
    reg, store, _, clock = env
    refused(store, reg.apply, [NodeFlapHeld(node_id=A, name="box", at=clock(), stimulus_id="s", until=clock() + MAX_HOLD_S + 1, toggles=3)],
            field="events[0].until")
    reg.apply([NodeFlapHeld(node_id=A, name="box", at=clock(), stimulus_id="s", until=clock() + MAX_HOLD_S, toggles=3)])
    assert store.get(A).held_until == clock() + MAX_HOLD_S


@pytest.mark.parametrize(("event", "field"), [
    ({"kind": "node_lost"}, "events[0].node_id"),
    ({"kind": "node_exploded", "node_id": A}, "events[0]"),
    ({**lost().model_dump(), "at": "soon"}, "events[0].at"),
    ({**lost().model_dump(), "at": math.nan}, "events[0].at"),
    ({**lost().model_dump(), "at": 1000.0 + MAX_HOLD_S + 1}, "events[0].at"),
    ({**lost().model_dump(), "node_id": {"$ne": 1}}, "events[0].node_id"),
    ({**lost().model_dump(), "node_id": "c" * 12}, "events[0].node_id"),
    ({**lost().model_dump(), "name": ""}, "events[0].name"),
    ({**lost().model_dump(), "reason": "r" * (MAX_TEXT_CHARS + 1)}, "events[0].reason"),
    ({**lost().model_dump(), "extra": 1}, "events[0].extra"),
    ({**NodeCollected(node_id=A, name="box", at=1000.0, stimulus_id="s", lost_for_s=1).model_dump(), "status": "active"},
     "events[0].status"),
    (42, "events[0]"),
    ("node_lost", "events[0]"),
])
def test_a_malformed_event_is_refused_naming_the_field(env, event, field):
    reg, store, _, _ = env
    err = refused(store, reg.apply, [event], field=field)
    assert err.field.startswith("events[0]")


@pytest.mark.parametrize("events", [42, None, "events", {"kind": "node_lost"}, [lost()] * (MAX_EVENTS + 1),
                                    (e for e in [lost()]), {lost()}],
                         ids=["int", "none", "str", "dict", "too-many", "generator", "set"])
def test_a_batch_that_is_not_a_list_of_events_is_refused(env, events):
    reg, store, _, _ = env
    refused(store, reg.apply, events, field="events")


def test_an_event_built_without_validation_is_validated_again(env):
    reg, store, _, _ = env
    forged = NodeLost.model_construct(node_id=A, name="box", at=math.inf, stimulus_id="s", reason="x", status=NodeStatus.OFFLINE, ray_dead=False)
    refused(store, reg.apply, [forged], field="events[0].at")
    garbage = NodeLost.model_construct(node_id=A, name="box", at="soon", stimulus_id="s", reason="x", status=NodeStatus.OFFLINE, ray_dead=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # read from its fields, never serialized unchecked (pydantic would warn)
        refused(store, reg.apply, (garbage,), field="events[0].at")


def test_a_tuple_of_events_is_a_batch(env):
    reg, store, _, _ = env
    assert reg.apply((lost(),)) == 1 and store.get(A).status is NodeStatus.OFFLINE


def test_one_bad_event_refuses_the_whole_batch(env):
    reg, store, _, clock = env
    refused(store, reg.apply, [lost().model_dump(), {"kind": "node_lost", "node_id": A}], field="events[1].name")
    assert store.get(A).status is NodeStatus.ACTIVE  # the good event before it was not applied either


def test_an_illegal_transition_refuses_the_whole_batch(env):
    reg, store, _, clock = env
    reg.register(C, caps("third"))
    refused(store, reg.apply, [lost(), NodeCollected(node_id=A, name="box", at=clock(), stimulus_id="s", lost_for_s=1),
                               NodeRecovered(node_id=C, name="third", at=clock(), stimulus_id="s", status=NodeStatus.DEAD, reason="x"),
                               NodeRecovered(node_id=C, name="third", at=clock(), stimulus_id="s", status=NodeStatus.ACTIVE, reason="x")],
            error=TransitionError)  # dead -> active, planned in memory: the three changes before it are not written
    assert store.get(A).status is NodeStatus.ACTIVE and reg.collected() == []


def test_a_good_batch_is_applied_in_order_in_one_write(env):
    reg, store, _, clock = env
    n = reg.apply([NodeAdded(node_id=A, name="box", at=clock(), stimulus_id="s"), lost(),
                   NodeFlapHeld(node_id=A, name="box", at=clock(), stimulus_id="s", until=clock() + 600, toggles=3),
                   NodeCollected(node_id=A, name="box", at=clock() + 5, stimulus_id="s", lost_for_s=5), lost()])
    assert n == 3 and store.get(A) is None
    (dead,) = reg.collected()
    assert dead.status is NodeStatus.DEAD and dead.held_until == clock() + 600  # the trail keeps what came before


# -- the pure pieces --------------------------------------------------------------------------------------
def test_scan_is_bounded_whatever_the_input():
    wide = [[0] * MAX_ITEMS] * MAX_ITEMS  # a million numbers by reference: refused on size, not walked
    assert scan(wide, limit_bytes=MAX_REPORT_BYTES).message.endswith("serialized")
    deep: dict = {}
    node = deep
    for _ in range(100_000):
        node["k"] = {}
        node = node["k"]
    assert scan(deep, limit_bytes=MAX_REPORT_BYTES) is not None  # no RecursionError
    assert scan({"a": [1, 2.5, None, True, "x"]}, limit_bytes=1024) is None


def test_store_write_is_all_or_nothing(env):
    reg, store, _, _ = env
    before = snapshot(store)
    record = RegistryRecord(node_id=C, name="third", capabilities=caps("third"))
    with pytest.raises(TypeError):
        store.write([record], documents={"k": object()})
    assert snapshot(store) == before

"""The registry's change feed (issue 13): every write that changes a record is numbered; a follower
asks for what changed after its number and gets only that (the live fields, or the whole record
when it is new to it or its capabilities changed; tombstones for collected records), with each
change's cause and stimulus id; another epoch, a number the log no longer keeps, or not a number
at all sends it back to a snapshot. Cordons and drains are events through ``apply`` like any
other status change."""

from __future__ import annotations

import pickle

import pytest

from actors.registry import Registry
from fabric.core.errors import RegistrationError, TransitionError
from fabric.core.events import (NodeAdded, NodeCollected, NodeCordoned, NodeDrainRequested, NodeFlapHeld, NodeLost,
                                NodeRecovered, NodeUncordoned, parse_event)
from fabric.core.health import ManualClock
from fabric.core.lifecycle import NodeStatus
from fabric.core.records import LIVE_FIELDS, ChangePage, RecordChange, live_fields
from fabric.store import FabricStore
from fabric.store.changes import ChangeLog

from test_registry import A, FakeRay, caps, view

C = "c" * 56  # alive in Ray, not registered
D = "d" * 56


class FakeRayTable(FakeRay):
    def list_nodes(self):
        return list(self.nodes.values())


@pytest.fixture
def env(tmp_path):
    clock = ManualClock(1000.0)
    ray = FakeRayTable(view(A), view(D, name="dee"), view(C, name="third"))
    reg = Registry(FabricStore(tmp_path / "fabric.db"), ray, clock=clock)
    return reg, ray, clock


def page(reg, since, epoch=None):
    p = reg.changes(since, reg.log.epoch if epoch is None else epoch)
    return pickle.loads(pickle.dumps(p))  # as it crosses the actor boundary


def by_node(p: ChangePage) -> dict[str, RecordChange]:
    assert p.changes is not None
    return {c.node_id: c for c in p.changes}


def test_every_change_is_numbered_and_a_follower_gets_only_what_changed_since(env):
    reg, _, clock = env
    assert reg.changes(0, reg.log.epoch) == ChangePage(reg.log.epoch, 0, ())
    reg.register(A, caps())
    reg.register(D, caps("dee"))
    p = page(reg, 0)
    assert p.seq == 2 and [c.node_id for c in p.changes] == [A, D]
    assert all(c.kind == "record" and c.cause == "registered" and c.stimulus_id is None for c in p.changes)
    assert by_node(p)[A].record == reg.store.get(A)
    clock.advance(1)
    reg.apply([NodeLost(node_id=A, name="box", at=clock(), stimulus_id="tick-7", reason="missed heartbeats for 3.2 s")])
    later = page(reg, p.seq)
    (ch,) = later.changes
    assert (ch.node_id, ch.kind, ch.seq, later.seq) == (A, "update", 3, 3)  # only the live fields: the follower holds the rest
    assert ch.cause == "missed heartbeats for 3.2 s" and ch.stimulus_id == "tick-7"
    assert set(ch.live) == set(LIVE_FIELDS) and ch.live["status"] is NodeStatus.OFFLINE
    assert ch.applied_to(by_node(p)[A].record) == reg.store.get(A)
    assert page(reg, later.seq).changes == ()


def test_a_node_changed_twice_comes_once_with_its_newest_state_and_the_event_that_caused_it(env):
    reg, _, clock = env
    reg.register(A, caps())
    since = reg.log.seq
    reg.apply([NodeLost(node_id=A, name="box", at=clock(), stimulus_id="tick-1", reason="ray: node dead", ray_dead=True)])
    reg.heartbeat(A, {"cpu_percent": 70})  # a new load after the event: it does not hide the event's cause
    (ch,) = page(reg, since).changes
    assert ch.seq == reg.log.seq and ch.live["utilization"].cpu_percent == 70 and ch.live["status"] is NodeStatus.OFFLINE
    assert (ch.cause, ch.stimulus_id) == ("ray: node dead", "tick-1")


def test_heartbeats_are_numbered_only_when_they_bring_a_new_load(env):
    reg, _, clock = env
    reg.register(A, caps(), utilization={"cpu_percent": 10})
    seq = reg.log.seq
    clock.advance(1)
    reg.heartbeat(A)  # last_seen alone is no change a follower needs
    reg.heartbeat(A, {"cpu_percent": 10})
    assert reg.log.seq == seq
    reg.heartbeat(A, {"cpu_percent": 55})
    (ch,) = page(reg, seq).changes
    assert ch.cause == "heartbeat load" and ch.live["utilization"].cpu_percent == 55 and ch.live["last_seen"] == clock()


def test_a_new_capability_sends_the_whole_record_again(env):
    reg, _, _ = env
    reg.register(A, caps())
    seq = reg.log.seq
    reg.report(A, caps(), degraded=["ffmpeg encoder stopped: h264_nvenc"])  # same capabilities: the live fields do
    (ch,) = page(reg, seq).changes
    assert ch.kind == "update" and ch.cause.startswith("re-probed") and ch.live["degraded"] == ("ffmpeg encoder stopped: h264_nvenc",)
    seq = reg.log.seq
    reg.report(A, caps(cpu_usable=2))
    (ch,) = page(reg, seq).changes
    assert ch.kind == "record" and ch.record.capabilities.cpu_usable == 2
    assert page(reg, 0).changes[0].kind == "record"  # from before its registration: the whole record


def test_a_collected_record_is_a_tombstone(env):
    reg, _, clock = env
    reg.register(A, caps())
    seq = reg.log.seq
    reg.apply([NodeLost(node_id=A, name="box", at=clock(), stimulus_id="s1", reason="x"),
               NodeCollected(node_id=A, name="box", at=clock() + 300, stimulus_id="s2", lost_for_s=300)])
    (ch,) = page(reg, seq).changes
    assert ch.kind == "collected" and ch.record is None and ch.live is None and ch.stimulus_id == "s2"
    assert ch.cause == "collected after 300 s offline" and ch.applied_to(None) is None


def test_a_raylet_without_a_record_is_published_as_seen(env):
    reg, _, clock = env
    assert reg.apply([NodeAdded(node_id=C, name="third", at=clock(), stimulus_id="tick-2")]) == 0  # no record changed
    (ch,) = page(reg, 0).changes
    assert (ch.node_id, ch.kind, ch.stimulus_id) == (C, "seen", "tick-2") and ch.record is None


@pytest.mark.parametrize("since", [-1, 99, "3", None, 2.0, True])
def test_a_number_the_log_never_handed_out_or_not_a_number_resyncs(env, since):
    reg, _, _ = env
    reg.register(A, caps())
    p = reg.changes(since, reg.log.epoch)
    assert p.changes is None and p.seq == reg.log.seq and p.epoch == reg.log.epoch
    assert pickle.loads(pickle.dumps(p)) == p


def test_another_epoch_or_a_number_older_than_the_log_keeps_resyncs(tmp_path):
    clock = ManualClock(1000.0)
    ray = FakeRayTable(view(A))
    reg = Registry(FabricStore(tmp_path / "f.db"), ray, clock=clock, log=ChangeLog(retain=3))
    reg.register(A, caps())
    for pct in range(1, 8):
        reg.heartbeat(A, {"cpu_percent": pct})
    assert reg.changes(0, reg.log.epoch).changes is None  # trimmed away
    assert reg.changes(reg.log.seq - 2, reg.log.epoch).changes is not None
    assert reg.changes(reg.log.seq, "some-other-epoch").changes is None
    snap = reg.snapshot()
    assert (snap.epoch, snap.seq) == (reg.log.epoch, reg.log.seq) and [r.node_id for r in snap.records] == [A]
    reg.store.close()
    again = Registry(FabricStore(tmp_path / "f.db"), ray, clock=clock)  # a restarted registry: a new epoch
    assert again.log.epoch != reg.log.epoch and again.log.seq == 0
    stale = again.changes(0, reg.log.epoch)  # a number from before the restart is never answered incrementally
    assert stale.changes is None and stale.epoch == again.log.epoch
    assert [r.node_id for r in again.snapshot().records] == [A]


def test_cordon_uncordon_and_drain_are_events_through_apply_with_cause_and_stimulus(env):
    reg, _, clock = env
    reg.register(A, caps())
    seq = reg.log.seq
    r = reg.set_cordoned(A, True, stimulus_id="op-1")
    assert r.cordoned and r.status is NodeStatus.ACTIVE and reg.store.get(A) == r
    (ch,) = page(reg, seq).changes
    assert (ch.cause, ch.stimulus_id, ch.live["cordoned"]) == ("operator cordon", "op-1", True)
    seq = reg.log.seq
    r = reg.mark_draining("box", reason="scheduler: drain grace over")
    assert r.status is NodeStatus.DRAINING and r.cordoned and r.drained
    (ch,) = page(reg, seq).changes
    assert ch.cause == "scheduler: drain grace over" and ch.stimulus_id.startswith("drain-")
    seq = reg.log.seq
    r = reg.set_cordoned(A, False)
    assert r.status is NodeStatus.ACTIVE and not r.cordoned and not r.drained
    (ch,) = page(reg, seq).changes
    assert ch.cause == "operator uncordon" and ch.stimulus_id.startswith("uncordon-")
    # the same events, sent by anyone, go the same way (a drain on an offline node is allowed)
    reg.apply([NodeLost(node_id=A, name="box", at=clock(), stimulus_id="s", reason="x")])
    assert reg.apply([NodeDrainRequested(node_id=A, name="box", at=clock(), stimulus_id="s2")]) == 1
    assert reg.store.get(A).status is NodeStatus.DRAINING
    assert reg.apply([NodeUncordoned(node_id=A, name="box", at=clock(), stimulus_id="s3"),
                      NodeCordoned(node_id=A, name="box", at=clock(), stimulus_id="s4")]) == 2
    r = reg.store.get(A)
    assert r.status is NodeStatus.ACTIVE and r.cordoned and not r.drained
    for e in (NodeCordoned, NodeUncordoned, NodeDrainRequested):
        event = e(node_id=A, name="box", at=clock(), stimulus_id="s")
        assert parse_event(event.model_dump()) == event


def test_operator_events_are_read_like_any_other(env):
    reg, _, clock = env
    reg.register(A, caps())
    before = reg.store.dump(), reg.log.seq
    base = dict(node_id=A, name="box", at=clock(), stimulus_id="s")
    for bad, field in [({**base, "kind": "node_cordoned", "status": "dead"}, "events[0].status"),
                       ({**base, "kind": "node_drain_requested", "status": "active"}, "events[0].status"),
                       ({**base, "kind": "node_uncordoned", "reason": "x" * 5000}, "events[0].reason")]:
        with pytest.raises(RegistrationError) as err:
            reg.apply([bad])
        assert err.value.field == field, err.value
    with pytest.raises(RegistrationError) as err:
        reg.set_cordoned(A, True, stimulus_id="s" * 300)
    assert err.value.field == "events[0].stimulus_id"
    assert (reg.store.dump(), reg.log.seq) == before  # refused: nothing stored, nothing numbered


def test_a_refused_batch_numbers_nothing(env):
    reg, _, clock = env
    reg.register(A, caps())
    seq = reg.log.seq
    with pytest.raises(TransitionError):
        reg.apply([NodeFlapHeld(node_id=A, name="box", at=clock(), stimulus_id="s", until=clock() + 60, toggles=3),
                   NodeRecovered(node_id=A, name="box", at=clock(), stimulus_id="s", status=NodeStatus.DEAD, reason="x"),
                   NodeRecovered(node_id=A, name="box", at=clock(), stimulus_id="s", status=NodeStatus.ACTIVE, reason="x")])
    assert reg.log.seq == seq and page(reg, seq).changes == ()


def test_reconciliation_on_start_goes_through_apply_and_is_numbered(env):
    reg, ray, clock = env
    reg.register(A, caps())
    reg.register(D, caps("dee"))
    del ray.nodes[D]  # a new head: Ray no longer knows D
    seq = reg.log.seq
    assert reg.reconcile_with_ray() == [D]
    (ch,) = page(reg, seq).changes
    assert ch.node_id == D and ch.live["status"] is NodeStatus.OFFLINE
    assert ch.stimulus_id == f"registry-start-{reg.log.epoch[:12]}" and "registry started" in ch.cause


def test_a_change_round_trips_the_actor_boundary():
    log = ChangeLog()
    from fabric.core.records import GpuUtilization, RegistryRecord, Utilization
    from fabric.core.capabilities import NodeCapabilities

    rec = RegistryRecord(node_id=A, name="box", capabilities=NodeCapabilities(name="box"), held_until=5.0, degraded=("x",),
                         utilization=Utilization(cpu_percent=3.5, gpus=(GpuUtilization(index=1, gpu_percent=9.0, encoder_percent=None),)))
    log.record(rec, "because", "sid-1")
    (ch,) = log.page(log.epoch, 0, lambda node_id: None).changes
    again = pickle.loads(pickle.dumps(ch))
    assert again == ch and again.live == live_fields(rec) and again.applied_to(rec) == rec
    with pytest.raises(KeyError):
        again.applied_to(None)

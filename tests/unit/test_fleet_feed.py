"""The scheduler's fleet feed diff (pure part): joined, changed, lost; heartbeats alone are no change."""

from fabric import NodeCapabilities
from fabric.core.capabilities import Limitations
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import NodeRecord

from actors.fleet_feed import diff_fleet


def rec(node_id, **kw):
    caps = NodeCapabilities(name=node_id, cpu_logical=4, cpu_physical=4, cpu_usable=4, memory_mib=8192,
                            limitations=Limitations(max_concurrent_tasks=2))
    return NodeRecord(node_id=node_id, name=node_id, capabilities=caps, **kw)


def test_joined_changed_lost():
    known = {"a": rec("a"), "b": rec("b")}
    wanted = {"a": rec("a", cordoned=True), "c": rec("c")}
    changes = {(c.kind, c.node_id): c for c in diff_fleet(known, wanted)}
    assert set(changes) == {("lost", "b"), ("changed", "a"), ("joined", "c")}
    assert changes[("changed", "a")].fields == {"cordoned": True}


def test_heartbeats_and_small_load_wobble_are_not_changes():
    known = {"a": rec("a", last_seen=1.0, utilization=0.50)}
    assert diff_fleet(known, {"a": rec("a", last_seen=2.0, utilization=0.52)}) == []
    (c,) = diff_fleet(known, {"a": rec("a", last_seen=2.0, utilization=0.9)})
    assert c.fields == {"utilization": 0.9}


def test_status_change_is_reported():
    (c,) = diff_fleet({"a": rec("a")}, {"a": rec("a", status=NodeStatus.DRAINING)})
    assert c.kind == "changed" and c.fields == {"status": NodeStatus.DRAINING}


# -- following the registry's change feed (issue 13) -------------------------------------------------------
import asyncio  # noqa: E402
import pickle  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from actors.fleet_feed import HOLD_ENDED_CAUSE, RAY_DEAD_CAUSE, RESYNC_CAUSE, FleetFeed, FleetMirror  # noqa: E402
from actors.registry import Registry  # noqa: E402
from fabric.core.events import NodeAdded, NodeCollected, NodeFlapHeld, NodeFlapReleased, NodeLost, NodeRecovered  # noqa: E402
from fabric.core.health import ManualClock, RayNodeView  # noqa: E402
from fabric.core.settings import FabricSettings  # noqa: E402
from fabric.core.tiers import ComputeTier  # noqa: E402
from fabric.store import FabricStore  # noqa: E402

from test_registry import caps as reg_caps, view  # noqa: E402

IDS = [c * 56 for c in "abcdef"]
NAMES = {node_id: f"box-{i}" for i, node_id in enumerate(IDS)}


class FakeRay:
    """Ray's node table: every id alive (a test may kill one), each a cpu_ffmpeg fabric node."""

    def __init__(self, registry_handle=None) -> None:
        self.nodes = {n: view(n, name=NAMES[n]) for n in IDS}
        self.handle = registry_handle
        self.reads = 0

    def alive_node(self, node_id):
        n = self.nodes.get(node_id)
        return n if n is not None and n.alive else None

    def list_nodes(self):
        self.reads += 1
        return list(self.nodes.values())

    def get_actor(self, name):
        return self.handle

    def is_actor_gone(self, exc):
        return False

    def kill(self, node_id):
        self.nodes[node_id] = RayNodeView(node_id=node_id, alive=False, labels=self.nodes[node_id].labels)


class FakeHandle:
    """An actor handle over a local object: ``handle.method.remote(*args)`` is awaitable, and what it
    returns has crossed a pickle, as through Ray. ``away``: every call fails as a restarting actor's."""

    def __init__(self, target) -> None:
        self.target = target
        self.away = False

    def __getattr__(self, name):
        handle = self

        class _Method:
            @staticmethod
            def remote(*args):
                async def call():
                    if handle.away:
                        raise ValueError("the registry is restarting")
                    return pickle.loads(pickle.dumps(getattr(handle.target, name)(*args)))
                return call()
        return _Method


def make_registry(tmp_path, clock, ray, name="f.db"):
    return Registry(FabricStore(tmp_path / name), ray, clock=clock)


def full_fleet(reg: Registry, now: float, settings: FabricSettings) -> dict[str, NodeRecord]:
    """The reference: every record listed and rebuilt, as the feed did before it followed changes."""
    out = {}
    for r in reg.records():
        if r.status in (NodeStatus.ACTIVE, NodeStatus.DRAINING):
            o = settings.nodes.get(r.name)
            out[r.node_id] = r.to_node_record(now, max_concurrent_tasks=o.max_concurrent_tasks if o else None)
    return out


def without_last_seen(rec):
    # A heartbeat that brings nothing but last_seen is no change the feed is told of.
    return None if rec is None else rec.evolve(last_seen=None)


def comparable(changes):
    return sorted((c.kind, c.node_id, without_last_seen(c.record), tuple(sorted(c.fields.items(), key=str))) for c in changes)


OPS = st.lists(st.tuples(
    st.sampled_from(["poll", "poll", "poll", "register", "beat", "beat", "beat_same", "lost", "lost", "recovered", "recovered",
                     "cordon", "uncordon", "drain", "hold", "hold", "release", "collect", "report", "advance", "advance",
                     "degrade"]),
    st.sampled_from(IDS[:4]), st.floats(0, 100), st.sampled_from([0.5, 2.0, 30.0])), min_size=12, max_size=40)
"""Writes through the registry as a fleet makes them, and the feed's polls between them."""


def apply_op(reg, clock, op, node_id, x, dt):
    name, now = NAMES[node_id], clock()
    ev = dict(node_id=node_id, name=name, at=now, stimulus_id=f"{op}-{now}")
    try:
        if op == "register":
            reg.register(node_id, reg_caps(name), utilization={"cpu_percent": x})
        elif op == "beat":
            reg.heartbeat(node_id, {"cpu_percent": x})
        elif op == "beat_same":
            clock.advance(0.1)
            reg.heartbeat(node_id)
        elif op == "lost":
            reg.apply([NodeLost(**ev, reason="missed heartbeats for 3.0 s")])
        elif op == "recovered":
            reg.apply([NodeRecovered(**ev, status=NodeStatus.ACTIVE, reason="heartbeats resumed")])
        elif op in ("cordon", "uncordon"):
            reg.set_cordoned(node_id, op == "cordon")
        elif op == "drain":
            reg.mark_draining(node_id)
        elif op == "hold":
            reg.apply([NodeFlapHeld(**ev, until=now + min(dt, 2.0), toggles=3)])
        elif op == "release":
            reg.apply([NodeFlapReleased(**ev)])
        elif op == "collect":
            reg.apply([NodeCollected(**ev, lost_for_s=1.0)])
        elif op == "report":
            reg.report(node_id, reg_caps(name, cpu_usable=1 + x % 3))
        elif op == "degrade":
            reg.report(node_id, reg_caps(name), degraded=[f"gpu vanished: {int(x)}"])
        elif op == "advance":
            clock.advance(dt)
    except Exception as exc:  # a refused message (unregistered, collected, illegal move) changes nothing
        assert type(exc).__name__ in ("RegistrationError", "TransitionError", "NodeNotFoundError"), exc


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_following_the_changes_equals_rebuilding_the_whole_fleet(tmp_path_factory, ops):
    """Whatever the registry was told, and however many writes came between two polls, the feed's
    changes and fleet are what rebuilding every record and diffing the whole fleet gives."""
    clock = ManualClock(1000.0)
    reg = make_registry(tmp_path_factory.mktemp("feed"), clock, FakeRay())
    for node_id in IDS[:3]:  # a fleet up before the feed started; box-3 joins later, if at all
        reg.register(node_id, reg_caps(NAMES[node_id]))
    settings_ = FabricSettings.load({"nodes": {"box-1": {"max_concurrent_tasks": 1}}})
    mirror = FleetMirror(settings_)
    reference = full_fleet(reg, clock(), settings_)
    assert comparable(mirror.resync(pickle.loads(pickle.dumps(reg.snapshot())), clock())) == comparable(diff_fleet({}, reference))
    for i, (op, node_id, x, dt) in enumerate(ops):
        apply_op(reg, clock, op, node_id, x, dt)
        if op not in ("poll", "advance") and i != len(ops) - 1:
            continue  # several writes between two polls; time passing (holds ending) is polled at once
        now = clock()
        got = mirror.apply(pickle.loads(pickle.dumps(reg.changes(mirror.seq, mirror.epoch))), now)
        assert got is not None
        wanted = full_fleet(reg, now, settings_)
        assert comparable(got) == comparable(diff_fleet(reference, wanted))
        reference = wanted
        assert {k: without_last_seen(v) for k, v in mirror.known.items()} == {k: without_last_seen(v) for k, v in wanted.items()}
        assert {k: r.model_copy(update={"last_seen": 0.0}) for k, r in mirror.records.items()} == {
            r.node_id: r.model_copy(update={"last_seen": 0.0}) for r in reg.records()}


@pytest.fixture
def fleet(tmp_path):
    clock = ManualClock(1000.0)
    ray = FakeRay()
    reg = make_registry(tmp_path, clock, ray)
    for node_id in IDS[:3]:
        reg.register(node_id, reg_caps(NAMES[node_id]))
    mirror = FleetMirror()
    mirror.resync(reg.snapshot(), clock())
    return reg, ray, clock, mirror


def poll(reg, mirror, clock):
    return mirror.apply(pickle.loads(pickle.dumps(reg.changes(mirror.seq, mirror.epoch))), clock())


def test_each_fleet_change_carries_the_cause_and_stimulus_of_the_registry_event(fleet):
    reg, _, clock, mirror = fleet
    a, b, c = IDS[:3]
    reg.apply([NodeLost(node_id=a, name=NAMES[a], at=clock(), stimulus_id="tick-9", reason="missed heartbeats for 3.2 s")])
    reg.mark_draining(b, "op-7")
    reg.register(IDS[3], reg_caps(NAMES[IDS[3]]))
    got = {ch.node_id: ch for ch in poll(reg, mirror, clock)}
    assert (got[a].kind, got[a].cause, got[a].stimulus_id) == ("lost", "missed heartbeats for 3.2 s", "tick-9")
    assert (got[b].kind, got[b].cause, got[b].stimulus_id) == ("changed", "operator drain", "op-7")
    assert got[b].fields == {"status": NodeStatus.DRAINING, "cordoned": True}
    assert (got[IDS[3]].kind, got[IDS[3]].cause, got[IDS[3]].stimulus_id) == ("joined", "registered", None)
    assert c not in got and set(mirror.known) == {b, c, IDS[3]}


def test_a_flap_hold_that_ends_is_a_change_without_any_write(fleet):
    reg, _, clock, mirror = fleet
    a = IDS[0]
    reg.apply([NodeFlapHeld(node_id=a, name=NAMES[a], at=clock(), stimulus_id="s", until=clock() + 5, toggles=3)])
    (held,) = poll(reg, mirror, clock)
    assert held.fields == {"flap_held": True}
    clock.advance(6)
    seq = reg.log.seq
    (ended,) = poll(reg, mirror, clock)
    assert reg.log.seq == seq and (ended.fields, ended.cause) == ({"flap_held": False}, HOLD_ENDED_CAUSE)
    assert poll(reg, mirror, clock) == []


def test_ray_dead_nodes_leave_the_fleet_and_alive_ones_outside_it_are_outsiders(fleet):
    reg, ray, clock, mirror = fleet
    a, b = IDS[:2]
    assert mirror.observe_ray(ray.list_nodes(), clock()) == []
    assert set(mirror.outsiders()) == set(IDS[3:])  # raylets Ray runs that the fleet does not hold (not registered)
    reg.apply([NodeLost(node_id=a, name=NAMES[a], at=clock(), stimulus_id="s", reason="missed heartbeats for 3.0 s")])
    poll(reg, mirror, clock)
    assert mirror.outsiders()[a] is ComputeTier.CPU_FFMPEG  # offline by heartbeats, still run by Ray: at once
    ray.kill(b)
    (lost,) = mirror.observe_ray(ray.list_nodes(), clock())  # the monitor has not told the registry yet
    assert (lost.kind, lost.node_id, lost.cause) == ("lost", b, RAY_DEAD_CAUSE) and b not in mirror.outsiders()
    reg.heartbeat(b, {"cpu_percent": 50})
    assert poll(reg, mirror, clock) == [] and b not in mirror.known  # a dead raylet never comes back


def test_a_page_that_cannot_be_applied_asks_for_a_resync(fleet):
    reg, _, clock, mirror = fleet
    a = IDS[0]
    reg.apply([NodeLost(node_id=a, name=NAMES[a], at=clock(), stimulus_id="s", reason="x")])
    page = reg.changes(mirror.seq, mirror.epoch)
    del mirror.records[a]  # an update to a record the mirror lacks
    known = dict(mirror.known)
    assert mirror.apply(page, clock()) is None and mirror.known == known  # nothing applied
    assert mirror.apply(reg.changes(0, "another-epoch"), clock()) is None
    changes = mirror.resync(reg.snapshot(), clock())
    assert [(c.kind, c.node_id, c.cause) for c in changes] == [("lost", a, RESYNC_CAUSE)]


def run(coro):
    return asyncio.run(coro)


def test_the_feed_resyncs_first_then_follows_and_resyncs_after_a_registry_restart(tmp_path):
    clock = ManualClock(1000.0)
    ray = FakeRay()
    reg = make_registry(tmp_path, clock, ray)
    for node_id in IDS[:2]:
        reg.register(node_id, reg_caps(NAMES[node_id]))
    ray.handle = FakeHandle(reg)
    feed = FleetFeed(FabricSettings(), ray, clock=clock)
    first = run(feed.poll())
    assert sorted((c.kind, c.node_id, c.cause) for c in first) == [("joined", n, RESYNC_CAUSE) for n in IDS[:2]]
    assert feed.resyncs == 1 and set(feed.outsiders) == set(IDS[2:])
    reg.set_cordoned(IDS[0], True, "op-1")
    (ch,) = run(feed.poll())
    assert (ch.kind, ch.fields, ch.stimulus_id, feed.resyncs) == ("changed", {"cordoned": True}, "op-1", 1)
    ray.handle.away = True  # restarting: the fleet stays as it was
    assert run(feed.poll()) == [] and set(feed.known) == set(IDS[:2])
    reg.store.close()
    reg = make_registry(tmp_path, clock, ray)  # the restarted registry: same store, new epoch
    reg.apply([NodeLost(node_id=IDS[1], name=NAMES[IDS[1]], at=clock(), stimulus_id="s", reason="x")])
    ray.handle = FakeHandle(reg)
    changes = run(feed.poll())
    assert [(c.kind, c.node_id) for c in changes] == [("lost", IDS[1])] and feed.resyncs == 2
    feed.resync()  # when told to
    assert run(feed.poll()) == [] and feed.resyncs == 3


def test_the_feed_reads_rays_table_rarely_and_when_membership_says_so(tmp_path):
    clock = ManualClock(1000.0)
    ray = FakeRay()
    reg = make_registry(tmp_path, clock, ray)
    for node_id in IDS[:3]:
        reg.register(node_id, reg_caps(NAMES[node_id]))
    ray.handle = FakeHandle(reg)
    feed = FleetFeed(FabricSettings(), ray, clock=clock, ray_table_every_s=10.0, ray_table_min_s=1.0)
    run(feed.poll())
    assert ray.reads == 1
    for _ in range(5):  # ticks with changes that do not touch membership: no read
        clock.advance(0.5)
        reg.heartbeat(IDS[0], {"cpu_percent": clock() % 100})
        run(feed.poll())
    assert ray.reads == 1
    reg.apply([NodeLost(node_id=IDS[1], name=NAMES[IDS[1]], at=clock(), stimulus_id="s", reason="missed heartbeats")])
    clock.advance(0.5)
    (lost,) = run(feed.poll())
    assert lost.kind == "lost" and ray.reads == 2 and IDS[1] in feed.outsiders  # still run by Ray: an outsider
    reg.apply([NodeAdded(node_id=IDS[4], name=NAMES[IDS[4]], at=clock(), stimulus_id="s")])  # a raylet without a record
    clock.advance(0.5)
    run(feed.poll())
    assert ray.reads == 2  # not before ray_table_min_s
    clock.advance(0.6)
    run(feed.poll())
    assert ray.reads == 3
    clock.advance(10.0)
    run(feed.poll())
    assert ray.reads == 4  # and every ray_table_every_s


def test_the_feeds_writes_go_to_the_registry(tmp_path):
    clock = ManualClock(1000.0)
    ray = FakeRay()
    reg = make_registry(tmp_path, clock, ray)
    reg.register(IDS[0], reg_caps(NAMES[IDS[0]]))
    ray.handle = FakeHandle(reg)
    feed = FleetFeed(FabricSettings(), ray, clock=clock)
    run(feed.poll())
    run(feed.set_cordoned(IDS[0], True, stimulus_id="sched-1"))
    assert reg.store.get(IDS[0]).cordoned and feed.known[IDS[0]].cordoned
    assert run(feed.poll()) == []  # the scheduler knew already
    run(feed.mark_draining(IDS[0], reason="drain: work ended"))
    (ch,) = run(feed.poll())
    assert ch.fields == {"status": NodeStatus.DRAINING} and ch.cause == "drain: work ended"


def test_a_page_asked_for_before_an_uncordon_does_not_undo_it(tmp_path):
    """The race behind a node read back cordoned after its uncordon: the feed asks for changes (a
    heartbeat moved the node's load), the scheduler's uncordon is written while that page is on
    its way, and the page (the record as it was, cordoned) arrives after. Until a page asked for
    after the write comes, the fleet keeps what the scheduler wrote."""
    clock = ManualClock(1000.0)
    ray = FakeRay()
    reg = make_registry(tmp_path, clock, ray)
    a = IDS[0]
    reg.register(a, reg_caps(NAMES[a]))
    ray.handle = FakeHandle(reg)
    feed = FleetFeed(FabricSettings(), ray, clock=clock)
    run(feed.poll())
    run(feed.set_cordoned(a, True, stimulus_id="op-1"))
    run(feed.poll())
    reg.heartbeat(a, {"cpu_percent": 90.0})
    early = pickle.loads(pickle.dumps(reg.changes(feed.mirror.seq, feed.mirror.epoch)))  # answered now...

    class Delayed(FakeHandle):  # ...and delivered once the uncordon is in
        def __getattr__(self, name):
            if name != "changes":
                return super().__getattr__(name)

            class _Changes:
                @staticmethod
                def remote(*args):
                    async def call():
                        await feed.set_cordoned(a, False, stimulus_id="op-2")
                        return early
                    return call()
            return _Changes

    ray.handle, feed._registry = Delayed(reg), None
    changes = run(feed.poll())
    assert not feed.known[a].cordoned and all("cordoned" not in c.fields for c in changes), changes
    ray.handle, feed._registry = FakeHandle(reg), None
    run(feed.poll())  # asked for after the write: the registry's word again
    assert not feed.known[a].cordoned and not feed.mirror._pins
    run(feed.set_cordoned(a, True, stimulus_id="op-3"))
    reg.set_cordoned(a, False, "op-4")  # another writer's uncordon, after ours: the feed follows it
    (ch,) = run(feed.poll())
    assert ch.fields == {"cordoned": False} and not feed.known[a].cordoned

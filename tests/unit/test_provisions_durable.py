"""Provisions in flight survive a scheduler restart (issue 21, durable state), without Ray.

- Rows: a pending provision, a held pool tier and a spare's provision round-trip as versioned JSON
  (``"schema": 1``), times moved between one process's clock and the next through the wall clock;
  a row of a newer schema or with a bad field is refused by kind and key. The book says what
  changed since it was last asked, so each change is written once.
- Adopt after a restart: a new ``SchedulerCore`` given the kept provisions back
  (``ProvisionsAdopted``) waits on them (no second ``ProvisionNode``), matches the node by its
  instance id when it joins, keeps each deadline and each hold.
- The provisioner over a real ``JobStore``: the instance and the provision's row naming it are
  written together; a restarted one adopts what still runs, drops (with a note) what was never
  answered or is gone, and its provider is asked once in all. A spare's provision asked again by
  id answers the same node; a restarted reconciler counts its kept provisions as pending and asks
  for nothing twice.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from actors.provisioner import Provisioner
from actors.spares import SpareReconciler
from fabric.core.scheduling import (
    NodeJoined, Placed, PlaceRequested, ProvisionFailed, ProvisionNode, ProvisionsAdopted, ProvisionStarted,
    SchedulerCore, TerminateNode, Tick,
)
from fabric.core.scheduling.provision_rows import (
    HOLD_KIND, PROVISION_KIND, ProvisionRowError, book_changes, hold_from_row, hold_row, provision_from_row,
    provision_row,
)
from fabric.core.scheduling.provisions import PendingProvision, ProvisionBook
from fabric.core.settings import FabricSettings, HotSpareSettings, NodeShape
from fabric.core.spares import Provision, ProvisionPhase, SpareState, reconcile, validate_state
from fabric.core.spares.rows import (
    SPARE_PROVISION_KIND, KeptSpareProvision, in_flight_of, spare_provision_from_row, spare_provision_row,
)
from fabric.providers import ProvisionedNode
from fabric.store.jobs import JobStore

from test_cascade import CPU, burst, cascade_settings, provisioned
from test_scheduling import Clock, rec

SHAPE = NodeShape(name="cpu-box", tier="cpu_ffmpeg", num_cpus=2, memory_mib=2048, profile="cpu-only-box")
WALL = 1_700_000_000.0
"""A wall-clock time the first scheduler's clock (1000.0 at start) stands beside."""


def json_round(row: dict) -> dict:
    return json.loads(json.dumps(row))


def kept_rows(book: ProvisionBook, offset: float, store: dict) -> None:
    """What the actor writes after a stimulus: the book's changes, into a dict standing for the ``state`` table."""
    for kind, key, row in book_changes(book, offset):
        if row is None:
            store.pop((kind, key), None)
        else:
            store[(kind, key)] = json.dumps(row)


def adopted_from(store: dict, wall: float) -> ProvisionsAdopted:
    """What a restarted provisioner hands the core: every kept provision (wall-clock times) and hold."""
    rows = sorted(store.items())
    provisions = tuple(provision_from_row(json.loads(v), 0.0) for (k, _), v in rows if k == PROVISION_KIND)
    holds = tuple(hold_from_row(json.loads(v), 0.0) for (k, _), v in rows if k == HOLD_KIND)
    return ProvisionsAdopted(provisions, holds, wall)


# -- rows ------------------------------------------------------------------------------------------
def test_a_pending_provision_row_round_trips_and_moves_into_the_next_process_clock():
    p = PendingProvision("p7", "default", "burst", "local", SHAPE, 1000.0, 1030.0, instance_id="local-abc",
                         reason="queued calls")
    row = json_round(provision_row(p, WALL - 1000.0))
    assert row["schema"] == 1 and row["requested_at"] == WALL and row["deadline"] == WALL + 30
    assert provision_from_row(row, WALL - 1000.0) == p
    again = provision_from_row(row, WALL - 5.0)  # a new process whose clock read 5.0 at WALL
    assert (again.requested_at, again.deadline) == (5.0, 35.0) and again.shape == SHAPE
    unanswered = provision_from_row(json_round(provision_row(PendingProvision("p8", "default", "burst", "local", SHAPE,
                                                                              1.0, 2.0), 0.0)), 0.0)
    assert unanswered.instance_id is None


def test_a_hold_row_round_trips():
    assert hold_from_row(json_round(hold_row("default", "burst", 1060.0, WALL - 1000.0)), WALL - 10.0) == (
        "default", "burst", 70.0)


@pytest.mark.parametrize("change, message", [
    ({"schema": 2}, "newer fabric"),
    ({"schema": True}, "schema version"),
    ({"pool": ""}, "pool"),
    ({"deadline": "soon"}, "deadline"),
    ({"requested_at": float("nan")}, "requested_at"),
    ({"shape": {"name": 3}}, "shape"),
    ({"instance_id": 42}, "instance_id"),
])
def test_a_provision_row_that_cannot_be_read_is_refused_by_kind_and_key(change, message):
    row = {**provision_row(PendingProvision("p1", "default", "burst", "local", SHAPE, 1.0, 2.0), 0.0), **change}
    with pytest.raises(ProvisionRowError, match=message) as err:
        provision_from_row(row, 0.0)
    assert err.value.kind == PROVISION_KIND and err.value.key == "p1"
    with pytest.raises(ProvisionRowError, match="JSON object"):
        provision_from_row([row], 0.0)


def test_the_book_says_each_change_once_and_a_closed_provision_or_ended_hold_is_a_deletion():
    book = ProvisionBook(backoff_s=60.0)
    assert not book.changed and book_changes(book, 0.0) == []
    p = book.open("default", "burst", "local", SHAPE, 10.0, 30.0)
    ((kind, key, row),) = book_changes(book, 100.0)
    assert (kind, key, row["instance_id"], row["deadline"]) == (PROVISION_KIND, p.provision_id, None, 140.0)
    assert book_changes(book, 100.0) == []  # asked again, nothing new
    book.started(p.provision_id, "local-1")
    assert book_changes(book, 100.0)[0][2]["instance_id"] == "local-1"
    book.close(p.provision_id)
    book.hold("default", "burst", 20.0)
    assert book_changes(book, 100.0) == [(PROVISION_KIND, p.provision_id, None),
                                        (HOLD_KIND, "default/burst", hold_row("default", "burst", 80.0, 100.0))]
    assert book.held(79.0) and book_changes(book, 100.0) == []
    assert not book.held(80.0) and book_changes(book, 100.0) == [(HOLD_KIND, "default/burst", None)]


def test_a_new_provision_never_takes_the_id_of_one_adopted():
    book = ProvisionBook()
    first = book.open("default", "burst", "local", SHAPE, 0.0, 30.0)
    restarted = ProvisionBook()
    assert restarted.adopt(PendingProvision(f"p{int(first.provision_id[1:]) + 1}", "default", "burst", "local", SHAPE,
                                            0.0, 30.0))
    taken = {p.provision_id for p in restarted}
    assert restarted.open("default", "burst", "local", SHAPE, 1.0, 30.0).provision_id not in taken
    assert not restarted.adopt(next(iter(restarted)))  # an id open already is not adopted twice


def test_a_spare_provision_row_round_trips_and_becomes_the_reconcilers_in_flight_entry():
    asked = KeptSpareProvision("default", "spare-default-9-1", "local", "burst", SHAPE, WALL)
    assert spare_provision_from_row(json_round(spare_provision_row(asked))) == asked
    answered = asked.answered("local-7", WALL + 4)
    assert spare_provision_from_row(json_round(spare_provision_row(answered))) == answered
    entry = in_flight_of(answered, WALL - 50.0)  # the reconciler's clock read 50.0 at WALL
    assert (entry.phase, entry.asked_at, entry.started_at) == (ProvisionPhase.STARTED, 50.0, 54.0)
    assert in_flight_of(asked, WALL - 50.0).phase is ProvisionPhase.ASKED
    with pytest.raises(ProvisionRowError, match="start time") as err:
        spare_provision_from_row({**spare_provision_row(asked), "instance_id": "local-7"})
    assert err.value.kind == SPARE_PROVISION_KIND and err.value.key == "spare-default-9-1"


# -- the task core: adopt after a restart --------------------------------------------------------------
def test_a_restarted_core_waits_on_the_kept_provision_and_matches_its_node_nothing_asked_twice():
    clock = Clock()
    first = SchedulerCore(cascade_settings(), clock=clock)
    first.handle(NodeJoined(rec("fixed-1", "cpu_ffmpeg", slots=2)))
    store: dict = {}
    (ask,) = [i for i in burst(first, 4) if isinstance(i, ProvisionNode)]
    first.handle(ProvisionStarted(ask.provision_id, "local-abc", "local"))
    kept_rows(first.provisions, WALL - clock.t, store)
    assert json.loads(store[(PROVISION_KIND, ask.provision_id)])["instance_id"] == "local-abc"
    # SIGKILL: a new process, a new clock; the queue's callers call again (Ray retries them)
    clock2 = Clock()
    clock2.t = 5.0
    second = SchedulerCore(cascade_settings(), clock=clock2)
    second.handle(NodeJoined(rec("fixed-1", "cpu_ffmpeg", slots=2)))
    assert second.handle(adopted_from(store, WALL + 3)) == []
    second.validate_state()
    again = burst(second, 4)
    second.validate_state()
    assert not [i for i in again if isinstance(i, ProvisionNode)]  # the burst waits on the adopted node
    assert second.counters["provisions_requested"] == 0 and len(second.provisions) == 1
    joined = second.handle(NodeJoined(provisioned("ray-node-7", "local-abc", "burst")))
    second.validate_state()
    assert {p.assignment.node_id for p in joined if isinstance(p, Placed)} == {"ray-node-7"}
    assert len(second.provisions) == 0 and second.counters["provisions_registered"] == 1
    kept_rows(second.provisions, WALL + 3 - clock2.t, store)
    assert store == {}  # registered: its row is gone


def test_a_kept_provision_whose_node_is_in_the_fleet_already_is_not_opened_again():
    store: dict = {}
    book = ProvisionBook()
    p = book.open("default", "burst", "local", SHAPE, 1000.0, 30.0)
    book.started(p.provision_id, "local-abc")
    kept_rows(book, WALL - 1000.0, store)
    core = SchedulerCore(cascade_settings(), clock=Clock())
    core.handle(NodeJoined(provisioned("ray-node-7", "local-abc", "burst")))
    core.handle(adopted_from(store, WALL))
    assert len(core.provisions) == 0 and core.handle(Tick(now=5000.0)) == []  # never terminated as late
    core.validate_state()


def test_an_adopted_provision_keeps_its_deadline_and_is_abandoned_then():
    clock = Clock()
    first = SchedulerCore(cascade_settings(timeout_s=30.0), clock=clock)
    store: dict = {}
    (ask,) = [i for i in burst(first, 1) if isinstance(i, ProvisionNode)]
    first.handle(ProvisionStarted(ask.provision_id, "local-abc", "local"))
    kept_rows(first.provisions, WALL - clock.t, store)  # asked at WALL, due at WALL + 30
    clock2 = Clock()
    clock2.t = 5.0
    second = SchedulerCore(cascade_settings(timeout_s=30.0), clock=clock2)
    second.handle(adopted_from(store, WALL + 25))  # 25 s after the ask: 5 s left, due at 10.0 here
    (pending,) = second.provisions
    assert pending.deadline == pytest.approx(10.0) and pending.instance_id == "local-abc"
    assert second.handle(Tick(now=9.9)) == []
    out = second.handle(Tick(now=10.0))
    terminated = [(i.instance_id, i.reason) for i in out if isinstance(i, TerminateNode)]
    assert terminated == [("local-abc", "provision_timeout")]
    assert len(second.provisions) == 0 and not any(r.launching for r in second.fleet.records())


def test_a_held_pool_tier_stays_held_after_a_restart_until_its_end():
    clock = Clock()
    first = SchedulerCore(cascade_settings(), clock=clock)
    store: dict = {}
    (ask,) = [i for i in burst(first, 1) if isinstance(i, ProvisionNode)]
    first.handle(ProvisionFailed(ask.provision_id, "ray start exited"))
    kept_rows(first.provisions, WALL - clock.t, store)
    assert (PROVISION_KIND, ask.provision_id) not in store  # a failed provision's row does not outlive it
    assert (HOLD_KIND, "default/burst") in store  # (its call spilled on to a provision in overflow)
    holds = {k: v for k, v in store.items() if k[0] == HOLD_KIND}
    clock2 = Clock()
    clock2.t = 5.0
    second = SchedulerCore(cascade_settings(), clock=clock2)
    second.handle(adopted_from(holds, WALL + 10))
    assert ("default", "burst") in second.fleet.provision_held
    (spilled,) = [i for i in burst(second, 1) if isinstance(i, ProvisionNode)]
    assert spilled.pool_tier == "overflow"  # held: the cascade spills on, as before the restart


# -- the provisioner over a real job store --------------------------------------------------------------
class Provider:
    """A provider whose instances outlive one provisioner (``running``, shared): ``adopt`` takes them back."""

    name = "local"

    def __init__(self, running: dict[str, ProvisionedNode], asked: list[str]) -> None:
        self.running, self.asked, self.mine = running, asked, set()

    def provision(self, shape, *, pool, pool_tier, spare=False, tags=None):
        iid = f"local-{len(self.asked)}"
        self.asked.append(iid)
        node = ProvisionedNode(iid, self.name, pool, pool_tier, shape, spare, time.time(), iid, pid=4242)
        self.running[iid] = node
        self.mine.add(iid)
        return node

    def adopt(self, node):
        if node.instance_id not in self.running:
            return False
        self.mine.add(node.instance_id)
        return True

    def terminate(self, instance_id):
        self.running.pop(instance_id, None)
        self.mine.discard(instance_id)

    def list(self):
        return [n for i, n in self.running.items() if i in self.mine]


class Host:
    """The scheduler actor's part in this: a real core, its answer carried out, the book persisted."""

    def __init__(self, provider: Provider, clock: Clock) -> None:
        self.settings = cascade_settings()
        self.jobs = self
        self.feed = None
        self.events: list[tuple[str, dict]] = []
        self.core = SchedulerCore(self.settings, clock=clock)
        self.core.handle(NodeJoined(rec("fixed-1", "cpu_ffmpeg", slots=2)))
        self.provisioner = Provisioner(self, {"local": provider})

    def handle_stimulus(self, stimulus):
        out = self.core.handle(stimulus)
        self.provisioner.persist(self.core.provisions, self.core.clock)
        for ins in out:
            if isinstance(ins, (ProvisionNode, TerminateNode)):
                self.provisioner.carry_out(ins)
        return out

    def emit(self, kind, data):
        self.events.append((kind, data))

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]


async def settle() -> None:
    for _ in range(300):
        await asyncio.sleep(0.01)
        if not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
            return


def test_a_restarted_provisioner_adopts_the_provision_in_flight_and_its_provider_is_asked_once(tmp_path):
    store = JobStore(tmp_path / "fabric.jobs.db")
    running: dict[str, ProvisionedNode] = {}
    asked: list[str] = []

    async def first_life() -> None:
        host = Host(Provider(running, asked), Clock())
        host.provisioner.attach(store)
        for i in range(3):
            host.handle_stimulus(PlaceRequested(CPU, request_id=f"r{i}", queue=True))
        await settle()

    asyncio.run(first_life())
    assert asked == ["local-0"]
    (row,) = [json.loads(b) for _, b in store.state(PROVISION_KIND)]
    assert row["instance_id"] == "local-0" and [k for k, _ in store.state("instance")] == ["local/local-0"]

    async def second_life() -> Host:
        clock = Clock()
        clock.t = 5.0
        host = Host(Provider(running, asked), clock)
        assert host.provisioner.attach(store) == 1
        (p,) = host.core.provisions
        assert p.instance_id == "local-0" and p.node_id in host.core.fleet
        for i in range(3):  # the callers call again
            host.handle_stimulus(PlaceRequested(CPU, request_id=f"r{i}", queue=True))
        await settle()
        host.handle_stimulus(NodeJoined(provisioned("ray-node-7", "local-0", "burst")))
        return host

    host = asyncio.run(second_life())
    assert asked == ["local-0"]  # nothing provisioned twice
    assert "provision_adopted" in host.kinds() and host.core.counters["provisions_registered"] == 1
    assert store.state(PROVISION_KIND) == []


def test_a_kept_provision_never_answered_or_whose_instance_is_gone_is_dropped_with_a_note(tmp_path):
    store = JobStore(tmp_path / "fabric.jobs.db")
    running: dict[str, ProvisionedNode] = {}
    live = ProvisionedNode("local-live", "local", "default", "burst", SHAPE, False, WALL, "local-live", pid=1)
    running["local-live"] = live
    rows = [("instance", "local/local-live", json.dumps(live.as_row()).encode())]
    for pid, iid in (("p1", None), ("p2", "local-gone"), ("p3", "local-live")):
        p = PendingProvision(pid, "default", "burst", "local", SHAPE, WALL, WALL + 600, instance_id=iid)
        rows.append((PROVISION_KIND, pid, json.dumps(provision_row(p, 0.0)).encode()))
    rows.append((PROVISION_KIND, "p4", b'{"schema": 9}'))
    store.write(state=rows)
    host = Host(Provider(running, []), Clock())
    host.provisioner.attach(store)
    assert [p.provision_id for p in host.core.provisions] == ["p3"]
    dropped = {d["provision_id"]: d["reason"] for k, d in host.events if k == "provision_dropped"}
    assert set(dropped) == {"p1", "p2", "p4"}
    assert "had not answered" in dropped["p1"] and "no longer runs" in dropped["p2"] and "newer" in dropped["p4"]
    assert [k for k, _ in store.state(PROVISION_KIND)] == ["p3"]


def test_a_spare_provision_asked_again_by_id_after_a_restart_answers_the_same_node(tmp_path):
    store = JobStore(tmp_path / "fabric.jobs.db")
    running: dict[str, ProvisionedNode] = {}
    asked: list[str] = []

    async def ask(host: Host) -> ProvisionedNode:
        return await host.provisioner.provision("local", SHAPE, "default", "burst", spare=True,
                                                provision_id="spare-default-1")

    first = Host(Provider(running, asked), Clock())
    first.provisioner.attach(store)
    node = asyncio.run(ask(first))
    (row,) = first.provisioner.view()["spare_provisions"]
    assert row["instance_id"] == node.instance_id and row["pool"] == "default"
    second = Host(Provider(running, asked), Clock())  # the scheduler restarted; Ray retries the call
    second.provisioner.attach(store)
    assert asyncio.run(ask(second)).instance_id == node.instance_id and asked == [node.instance_id]
    assert "spare_provision_answered_again" in second.kinds()
    second.provisioner.registered(node.instance_id)  # its node joined: no longer kept
    assert store.state(SPARE_PROVISION_KIND) == [] and second.provisioner.view()["spare_provisions"] == []


def test_a_restarted_spare_reconciler_counts_its_kept_provisions_and_asks_for_nothing_twice():
    settings = {"pools": [{"name": "default", "tiers": [
        {"name": "onprem"},
        {"name": "burst", "scale_out": "elastic", "provider": "local", "provision_timeout_s": 600,
         "candidate_shapes": [SHAPE.model_dump(mode="json")]},
    ]}], "hot_spares": [{"pool": "default", "target_count": 2}]}
    kept = [KeptSpareProvision("default", "spare-default-old-1", "local", "burst", SHAPE, time.time() - 5),
            KeptSpareProvision("default", "spare-default-old-2", "local", "burst", SHAPE, time.time() - 5)]
    fake = FakeScheduler(kept)

    async def go() -> None:
        r = SpareReconciler("default", settings, run_loop=False)
        r._scheduler = lambda: fake
        decisions = await r.reconcile_once()
        assert not [d for d in decisions if isinstance(d, Provision)] and fake.provisioned == []
        assert set(r.state.in_flight) == {"spare-default-old-1", "spare-default-old-2"}
        fake.kept = [kept[0].answered("local-5", time.time())]  # one answered; the other's row went (it failed)
        decisions = await r.reconcile_once()
        assert r.state.in_flight["spare-default-old-1"].phase is ProvisionPhase.STARTED
        assert r.instances == {"local-5": ("spare-default-old-1", "local")}
        assert r.state.finished["spare-default-old-2"] is ProvisionPhase.ABANDONED and r.state.backoff_until is None
        assert len([d for d in decisions if isinstance(d, Provision)]) == 1  # only the one that ended is replaced
        fake.nodes_ = [provisioned("ray-node-5", "local-5", "burst").evolve(spare=True)]
        decisions = await r.reconcile_once()  # its node joined: matched by instance id, a spare
        assert r.state.finished["spare-default-old-1"] is ProvisionPhase.REGISTERED
        assert not [d for d in decisions if isinstance(d, Provision)] and validate_state(r.state) == []

    asyncio.run(go())
    both = ["spare-default-old-1", "spare-default-old-2"]
    assert ("spare_provisions_adopted", {"pool": "default", "provision_ids": both, "unanswered": both}) in fake.events


def test_an_adopted_spare_provision_times_out_from_its_own_ask():
    state = SpareState("default", id_prefix="spare-default-new")
    settings = FabricSettings.load({"pools": [{"name": "default", "tiers": [
        {"name": "burst", "scale_out": "elastic", "provider": "local", "provision_timeout_s": 60,
         "candidate_shapes": [SHAPE.model_dump(mode="json")]}]}]})
    entry = HotSpareSettings(pool="default", target_count=1)
    old = KeptSpareProvision("default", "spare-default-old-1", "local", "burst", SHAPE, WALL, "local-1", WALL + 1)
    assert state.adopt(in_flight_of(old, WALL - 100.0)) and not state.adopt(in_flight_of(old, WALL - 100.0))
    assert [d for d in reconcile("default", entry, [], settings, state, 150.0) if isinstance(d, Provision)] == []
    out = reconcile("default", entry, [], settings, state, 160.0)  # 60 s after its ask, not after the restart
    assert state.finished["spare-default-old-1"] is ProvisionPhase.ABANDONED and out
    assert validate_state(state) == []


class _Remote:
    def __init__(self, fn) -> None:
        self.fn = fn

    def remote(self, *args, **kwargs):
        async def answer():
            return self.fn(*args, **kwargs)
        return answer()


class FakeScheduler:
    """The scheduler actor as a spare reconciler sees it: ``provisions`` (its kept rows), ``nodes``, events."""

    def __init__(self, kept: list[KeptSpareProvision]) -> None:
        self.kept, self.nodes_, self.events, self.provisioned = kept, [], [], []
        self.provisions = _Remote(lambda: {"spare_provisions": [spare_provision_row(k) for k in self.kept]})
        self.nodes = _Remote(lambda: list(self.nodes_))
        self.record_event = _Remote(lambda kind, data: self.events.append((kind, data)))
        self.set_spare_tags = _Remote(lambda *a: True)
        self.terminate_instance = _Remote(lambda *a: None)
        self.provision_node = _Remote(self._provision)

    def _provision(self, *args):
        self.provisioned.append(args)
        return {"instance_id": f"local-new-{len(self.provisioned)}"}

"""The fabric's one event log (issue 17) without Ray.

- ``fleet_events`` (pure): each fleet feed change is ``node_joined`` / ``node_lost`` /
  ``node_changed`` (its fields as plain data), and a flap hold or a demotion that begins or ends is
  ``node_unhealthy`` / ``node_healthy`` with its reason.
- ``Scheduler._sync`` puts them in the job runner's log with the stimulus's id, in seq order
  beside the jobs' events (each with a ``stimulus_id`` too, a fresh one when none is given);
  ``Scheduler.events`` filters by kind, pages (``limit``) and tails (negative ``limit``); the log
  is read back whole by a runner over the same store.
- ``Subscription`` (``fabric.on``'s poller) over a fake handle: order, kinds, ``"*"``, ``since``
  (None: from now on), a raising callback (reported once per distinct error, counted, polling
  goes on), cancel, a gap, a restarted log, a scheduler that does not answer.
"""

import asyncio
import io
import threading

import pytest

from actors.fleet_feed import FleetChange
from actors.jobs import JobRunner
from actors.scheduler import Scheduler
from fabric import ComputeTier
from fabric.core.errors import MessageError
from fabric.core.scheduling.node_events import fleet_events, plain, unwell
from fabric.rayio.metrics import RecordingMetrics
from fabric.runtime.events import Subscription, on, read_kinds
from fabric.store.jobs import JobStore

from test_job_runner import SPEC, FakeLauncher
from test_scheduler_actor import FakeFeed
from test_scheduling import Clock, rec


# -- fleet_events (pure) ----------------------------------------------------------------------------------
def test_joined_lost_changed_are_node_events_with_the_cause():
    r = rec("n1", "cpu_ffmpeg")
    assert fleet_events(FleetChange("joined", "n1", r, cause="registered"), None) == [
        ("node_joined", {"node_id": "n1", "name": "n1", "cause": "registered", "tier": "cpu_ffmpeg", "pool": r.pool})]
    assert fleet_events(FleetChange("lost", "n1", cause="ray: node dead"), r) == [
        ("node_lost", {"node_id": "n1", "name": "n1", "cause": "ray: node dead"})]
    assert fleet_events(FleetChange("lost", "n9"), None) == [("node_lost", {"node_id": "n9", "name": None, "cause": ""})]
    changed = fleet_events(FleetChange("changed", "n1", r.evolve(cordoned=True, warm=frozenset({"b", "a"})),
                                       {"cordoned": True, "warm": frozenset({"b", "a"})}, cause="operator cordon"), r)
    assert changed == [("node_changed", {"node_id": "n1", "name": "n1", "cause": "operator cordon",
                                         "fields": {"cordoned": True, "warm": ["a", "b"]}})]
    assert fleet_events(FleetChange("renamed", "n1", r), r) == []


def test_a_flap_hold_and_a_demotion_begin_and_end_as_unhealthy_and_healthy():
    r = rec("n1", "cpu_ffmpeg").evolve(label_tier=ComputeTier.CPU_FFMPEG)
    held = r.evolve(flap_held=True)
    kinds = lambda evs: [(k, d.get("reason")) for k, d in evs]  # noqa: E731
    assert kinds(fleet_events(FleetChange("changed", "n1", held, {"flap_held": True}), r)) == [
        ("node_changed", None), ("node_unhealthy", "flap_held")]
    assert kinds(fleet_events(FleetChange("changed", "n1", r, {"flap_held": False}, cause="flap hold ended"), held)) == [
        ("node_changed", None), ("node_healthy", "flap_held")]
    demoted = rec("n1", "cpu_ffmpeg").evolve(label_tier=ComputeTier.GPU_CUDA)  # its label says more than it serves
    assert unwell(demoted) == {"demoted"} and unwell(r) == set() and unwell(held) == {"flap_held"}
    out = fleet_events(FleetChange("changed", "n1", demoted, {"capabilities": demoted.capabilities}), r.evolve(label_tier=ComputeTier.GPU_CUDA, tier=ComputeTier.GPU_CUDA))
    assert kinds(out) == [("node_changed", None), ("node_unhealthy", "demoted")]
    assert out[1][1]["tier"] == "cpu_ffmpeg" and out[1][1]["label_tier"] == "gpu_cuda"
    assert isinstance(out[0][1]["fields"]["capabilities"], dict)  # a model, as plain data
    # a node that comes back flap-held is unhealthy from its join; a still-held change says nothing new
    assert kinds(fleet_events(FleetChange("joined", "n1", held), None)) == [("node_joined", None), ("node_unhealthy", "flap_held")]
    assert kinds(fleet_events(FleetChange("changed", "n1", held.evolve(cordoned=True), {"cordoned": True}), held)) == [("node_changed", None)]


def test_plain_values():
    assert plain(ComputeTier.GPU_CUDA) == "gpu_cuda"
    assert plain((ComputeTier.CPU_FFMPEG, frozenset({2, 1}))) == ["cpu_ffmpeg", [1, 2]]
    assert plain({"a": ComputeTier.CPU_FFMPEG}) == {"a": "cpu_ffmpeg"} and plain(3.5) == 3.5 and plain(None) is None


# -- the scheduler's log ------------------------------------------------------------------------------------
def _scheduler(tmp_path, *batches):
    clock = Clock()
    sched = Scheduler(feed=FakeFeed(*batches), metrics=RecordingMetrics(), clock=clock, run_loop=False,
                      jobs=lambda s: JobRunner(s, JobStore(tmp_path / "jobs.db"), FakeLauncher(), clock=clock))
    return sched, clock


def test_the_fleet_events_go_into_the_one_log_in_order_with_their_stimulus_ids(tmp_path):
    n1, n2 = rec("n1", "cpu_ffmpeg"), rec("n2", "cpu_ffmpeg")
    batches = ([FleetChange("joined", "n1", n1, cause="registered", stimulus_id="reg-1"), FleetChange("joined", "n2", n2),
                FleetChange("joined", "n3", rec("n3", "cpu_ffmpeg"))],
               [FleetChange("changed", "n1", n1.evolve(flap_held=True), {"flap_held": True}, stimulus_id="tick-9")],
               [FleetChange("lost", "n2", cause="ray: node dead")])

    async def go():
        sched, clock = _scheduler(tmp_path, *batches)
        for _ in batches:
            await sched._sync()
        job_id = sched.jobs.submit(SPEC, b"cls", b"args")
        sched.jobs.tick()
        for _ in range(10):
            await asyncio.sleep(0.005)
        return sched, job_id

    sched, job_id = asyncio.run(go())
    events = sched.events()
    node = [(e["kind"], e["data"]["node_id"]) for e in events if e["kind"].startswith("node_")]
    assert node == [("node_joined", "n1"), ("node_joined", "n2"), ("node_joined", "n3"), ("node_changed", "n1"), ("node_unhealthy", "n1"),
                    ("node_lost", "n2")]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) == list(range(seqs[0], seqs[0] + len(seqs)))
    assert all(e["stimulus_id"] for e in events)  # every event names what caused it
    by_kind = {e["kind"]: e for e in events}
    assert events[0]["stimulus_id"] == "reg-1" and by_kind["node_unhealthy"]["stimulus_id"] == "tick-9"
    assert by_kind["node_changed"]["stimulus_id"] == "tick-9"
    assert events[1]["stimulus_id"] not in ("reg-1", "tick-9")  # none from the registry: the feed's own
    jobs = [e for e in events if e["kind"] in ("job_state", "placement_decision")]
    assert jobs and jobs[0]["seq"] > by_kind["node_lost"]["seq"] and jobs[0]["data"]["job_id"] == job_id
    assert by_kind["placement_decision"]["data"]["node_id"] == "n3"  # the one node left that takes work
    # kinds, pages, the newest ones; job_events still reads the same log
    assert [e["kind"] for e in sched.events(kinds=["node_lost", "node_unhealthy"])] == ["node_unhealthy", "node_lost"]
    assert sched.events(since=seqs[0], limit=2) == events[1:3]
    assert sched.events(limit=-2) == events[-2:]
    assert sched.job_events() == events
    with pytest.raises(MessageError):
        sched.events(since=-1)
    with pytest.raises(MessageError):
        sched.events(limit=0)
    with pytest.raises(MessageError):
        sched.events(kinds="node_lost")
    # persisted: a runner over the same store reads the log back, stimulus ids and all
    sched.jobs.persist()
    again = JobRunner(sched, JobStore(tmp_path / "jobs.db"), FakeLauncher(), clock=Clock())
    assert again.events_since(0) == events and again.seq == seqs[-1]


def test_emit_without_a_stimulus_id_gets_a_fresh_one(tmp_path):
    sched, _ = _scheduler(tmp_path)
    sched.jobs.emit("spare_tagged", {"node_id": "n1"})
    sched.jobs.emit("spare_tagged", {"node_id": "n2"}, "drain-4")
    a, b = sched.events()
    assert a["stimulus_id"] and a["stimulus_id"] != b["stimulus_id"] == "drain-4"


# -- the poller ---------------------------------------------------------------------------------------------
class Log:
    """The scheduler's log as a fake handle sees it: bounded, numbered, ``read(since, kinds, limit)``."""

    def __init__(self, bound: int = 10_000) -> None:
        self.items: list[dict] = []
        self.seq, self.bound, self.calls, self.fail = 0, bound, 0, None

    def add(self, kind: str, **data) -> dict:
        self.seq += 1
        e = {"seq": self.seq, "kind": kind, "at": 1000.0 + self.seq, "stimulus_id": f"s-{self.seq}", "data": data}
        self.items = (self.items + [e])[-self.bound:]
        return e

    def read(self, since, kinds, limit):
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        found = [e for e in self.items if e["seq"] > since and (not kinds or e["kind"] in kinds)]
        return found[:limit] if limit > 0 else found[limit:]


class FakeHandle:
    def __init__(self) -> None:
        self.log = Log()

    def events(self, since=0, kinds=None, limit=1000):
        return self.log.read(since, kinds, limit)


def _sub(h, kind="*", fn=None, **kw):
    got: list[dict] = []
    err = io.StringIO()
    sub = Subscription(h, kind, fn or got.append, start=False, err=err, **kw)
    return sub, got, err


def test_every_new_event_of_the_kind_in_order_and_since_none_means_from_now():
    h = FakeHandle()
    h.log.add("job_state", job_id="a")
    sub, got, _ = _sub(h, "node_lost")  # since=None: what is in the log now is not new
    all_sub, everything, _ = _sub(h, "*", since=0)
    for i in range(5):
        h.log.add("node_lost", node_id=f"n{i}")
        h.log.add("node_joined", node_id=f"n{i}")
    assert sub.poll_once() == 5 and [e["data"]["node_id"] for e in got] == ["n0", "n1", "n2", "n3", "n4"]
    assert all(e["kind"] == "node_lost" for e in got)
    assert all_sub.poll_once() == 11 and [e["seq"] for e in everything] == list(range(1, 12))
    assert sub.poll_once() == 0 and all_sub.poll_once() == 0  # nothing twice
    h.log.add("node_lost", node_id="n5")
    assert sub.poll_once() == 1 and all_sub.poll_once() == 1 and got[-1]["seq"] == everything[-1]["seq"] == 12
    assert sub.delivered == 6 and sub.since == 12 and sub.gaps == sub.restarts == 0


def test_pages_are_read_until_caught_up():
    h = FakeHandle()
    sub, got, _ = _sub(h, "*", since=0, limit=3)
    for i in range(10):
        h.log.add("k", i=i)
    assert sub.poll_once() == 10 and [e["data"]["i"] for e in got] == list(range(10))


def test_a_raising_callback_is_reported_once_per_distinct_error_and_counted_and_polling_goes_on():
    h = FakeHandle()
    seen: list[int] = []

    def fn(e):
        seen.append(e["seq"])
        if e["data"]["bad"]:
            raise ValueError(f"bad {e['data']['bad']}")

    sub, _, err = _sub(h, "*", fn=fn, since=0)
    for bad in (0, 1, 1, 0, 2, 1):
        h.log.add("job_state", bad=bad)
    assert sub.poll_once() == 6 and seen == [1, 2, 3, 4, 5, 6]  # every event reached the callback
    assert sub.errors == 4
    lines = err.getvalue().splitlines()
    assert len(lines) == 2 and "ValueError: bad 1" in lines[0] and "event #2" in lines[0] and "bad 2" in lines[1]
    h.log.add("job_state", bad=1)
    assert sub.poll_once() == 1 and sub.errors == 5 and len(err.getvalue().splitlines()) == 2


def test_a_gap_is_reported_once_and_what_is_left_is_delivered():
    h = FakeHandle()
    h.log.bound = 5
    sub, got, err = _sub(h, "*", since=0)
    h.log.add("k")
    assert sub.poll_once() == 1
    for _ in range(8):  # 2..9; the log keeps 5..9 only
        h.log.add("k")
    assert sub.poll_once() == 5 and [e["seq"] for e in got] == [1, 5, 6, 7, 8, 9]
    assert sub.gaps == 1 and "events #2..#4 were dropped" in err.getvalue()
    h.log.add("k")
    assert sub.poll_once() == 1 and sub.gaps == 1  # reported once
    # with no anchor yet (a given since), an all-kinds reader sees the hole too
    late, got2, err2 = _sub(h, "*", since=2)
    assert late.poll_once() == 5 and late.gaps == 1 and "#3..#5" in err2.getvalue()


def test_a_restarted_log_is_reported_once_and_only_newer_events_are_delivered():
    h = FakeHandle()
    sub, got, err = _sub(h, "*", since=0)
    for _ in range(5):
        h.log.add("k")
    assert sub.poll_once() == 5
    # the scheduler restarts and its log lost the last two (not yet persisted): seqs 4, 5 are reused
    h.log.items, h.log.seq = h.log.items[:3], 3
    new = h.log.add("k", new=True)
    new["at"] = 2000.0  # after what was read
    assert sub.poll_once() == 1 and got[-1] is not None and got[-1]["data"] == {"new": True}
    assert sub.restarts == 1 and "restarted" in err.getvalue()
    assert sub.poll_once() == 0 and sub.restarts == 1
    # a fresh, shorter log (a new store): reported, its newer events delivered
    h.log.items, h.log.seq = [], 0
    fresh = h.log.add("k", fresh=True)
    fresh["at"] = 3000.0
    assert sub.poll_once() == 1 and got[-1]["data"] == {"fresh": True} and sub.restarts == 2


def test_a_scheduler_that_does_not_answer_is_reported_once_and_polling_goes_on_and_cancel_stops_it():
    h = FakeHandle()
    arrived = threading.Event()
    got: list[dict] = []

    def fn(e):
        got.append(e)
        if e["data"].get("last"):
            arrived.set()
        raise RuntimeError("callback trouble")  # never stops the thread either

    err = io.StringIO()
    sub = Subscription(h, "*", fn, since=0, interval_s=0.01, err=err)
    h.log.fail = ConnectionError("scheduler restarting")
    while h.log.calls < 5:
        threading.Event().wait(0.01)
    h.log.fail = None
    h.log.add("k", last=True)
    assert arrived.wait(10)
    sub.cancel()
    assert not sub.alive and sub.cancelled
    assert sub.outages == 1 and err.getvalue().count("scheduler restarting") == 1 and "answers again" in err.getvalue()
    assert sub.errors == 1 and len(got) == 1
    calls = h.log.calls
    h.log.add("k")
    threading.Event().wait(0.05)
    assert h.log.calls == calls and len(got) == 1  # cancelled: not polled any more


def test_on_takes_a_handle_and_refuses_bad_arguments():
    h = FakeHandle()
    h.log.add("old")
    got, done = [], threading.Event()
    sub = on("k", lambda e: (got.append(e), done.set()), handle=h, interval_s=0.01)
    try:
        h.log.add("k", x=1)
        assert done.wait(10) and [e["data"] for e in got] == [{"x": 1}]
    finally:
        sub.cancel()
    for bad in ({"kind": ""}, {"fn": 3}, {"interval_s": 0}, {"since": -1}, {"limit": 0}):
        args = {"kind": "k", "fn": print, **bad}
        with pytest.raises(MessageError):
            Subscription(h, args.pop("kind"), args.pop("fn"), start=False, **args)
    assert read_kinds(None) is None and read_kinds("a") == ["a"] and read_kinds(("a", "b")) == ["a", "b"]
    with pytest.raises(MessageError):
        read_kinds([1])

"""Placement decisions on the record, no Ray: the core's tap records every job placement, every
fallback and refusal and one in N of the rest; the book keeps them compressed under their event
number, each fleet version and node record once, bounded by count and bytes; a kept decision is
explained in ``Decision.explain``'s words with the fleet as it was, and replayed: the recorded
inputs decide the same, an edited slice or changed settings decide differently and say why."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from actors.fleet_feed import FleetChange
from actors.jobs import JobRunner
from actors.scheduler import Scheduler
from fabric.core.decisions import DecisionBook, DecisionTap, explain_recorded, replay
from fabric.core.decisions.rows import context_from_row, context_row
from fabric.core.errors import MessageError, SettingsError
from fabric.core.jobs import JobSpec
from fabric.core.placement import FleetView, NodeRecord, Peer, PlacementContext, Requirement, dry_run, place
from fabric.core.scheduling import SchedulerCore
from fabric.core.settings import FabricSettings
from fabric.rayio.metrics import RecordingMetrics
from fabric.store.jobs import JobStore

from test_job_runner import FakeLauncher, settle
from test_scheduler_actor import FakeFeed
from test_scheduling import Clock, rec

APU_DOWN_TO_CPU = Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", num_cpus=1)


def core(settings=None, nodes=(("cuda", "gpu_cuda"), ("apu", "gpu_apu"), ("cpu", "cpu_ffmpeg"))):
    c = SchedulerCore(FabricSettings.load(settings or {}), clock=Clock())
    for nid, tier in nodes:
        c.node_joined(rec(nid, tier))
    return c


def kept(c, book=None, seq=1):
    book = DecisionBook() if book is None else book
    for cap in c.decision_tap.take():
        book.keep(seq, cap, 0.0)
        seq += 1
    return book


# -- what is recorded ----------------------------------------------------------------------------------------
def test_every_job_fallback_and_refusal_is_recorded_and_one_in_n_of_the_rest():
    c = core({"decisions": {"sample_one_in": 3}})
    for _ in range(6):  # cuda x2, apu x2 at gpu_apu; then two on cpu, below min_tier: fallbacks
        c.place(APU_DOWN_TO_CPU)
    whys = [cap.why for cap in c.decision_tap.take()]
    assert whys == ["sampled", "fallback", "fallback"]  # the third of four plain ones, then both fallbacks
    c.place(Requirement(min_tier="gpu_cuda", fallback=False))  # cuda is full: refused (deferred)
    c.place(Requirement(min_tier="cpu_ffmpeg", num_cpus=0), PlacementContext(job_id="j1"))
    assert [(cap.subject, cap.why) for cap in c.decision_tap.take()] == [("task", "refused"), ("job", "job")]


def test_nothing_is_captured_when_recording_is_off_and_lease_grants_carry_their_slots():
    c = core({"decisions": {"enabled": False}})
    c.place(APU_DOWN_TO_CPU)
    assert c.decision_tap.take() == []
    c = core({"decisions": {"sample_one_in": 1}})
    grant = c.lease("L1", APU_DOWN_TO_CPU, want=3)
    (cap,) = c.decision_tap.take()
    assert cap.subject == "lease" and cap.decision.node_id == grant.slots[0].node_id
    assert cap.grant["lease_id"] == "L1" and sum(s["capacity"] for s in cap.grant["slots"]) == 3


def test_a_queued_call_is_recorded_once_placed_and_a_grant_that_spills_is_no_refusal():
    cpu = Requirement(min_tier="cpu_ffmpeg", num_cpus=1)
    c = core({"decisions": {"sample_one_in": 1000}}, nodes=(("cpu", "cpu_ffmpeg"),))
    c.place(cpu), c.place(cpu)  # its two slots taken
    c.place(cpu, request_id="q1", queue=True)  # deferred and queued: it waits, nobody was refused
    assert c.decision_tap.take() == []
    c.place(cpu)  # deferred, and the caller told so: a refusal
    assert [x.why for x in c.decision_tap.take()] == ["refused"]
    tap, fleet = DecisionTap(sample_one_in=1000), c.fleet
    for spill, recorded in (({"fabric.io/tier": "in(cpu_ffmpeg)"}, []), (None, ["refused"])):
        tap.lease(fleet, "s")(place(fleet, cpu))  # the grant's first decision: nothing free
        tap.granted(SimpleNamespace(lease_id="L1", slots=(), spill=spill))
        assert [x.why for x in tap.take()] == recorded  # with a spill target Ray chooses: sampled, not refused


def test_the_settings_section_is_checked_and_named():
    assert FabricSettings.load({}).decisions.enabled is True
    for bad in ({"sample_one_in": 0}, {"max_records": 0}, {"max_bytes": 10}, {"keep": 1}):
        with pytest.raises(SettingsError) as info:
            FabricSettings.load({"decisions": bad})
        assert "decisions." in str(info.value)


def test_a_context_round_trips():
    ctx = PlacementContext(replica_index=1, other_node="a", same_node="forbid", job="enc", job_id="j",
                           co_locate_with=("x",), peers=(Peer("x", "n1", "z1", False),), exclude_nodes=frozenset({"b"}),
                           recovering=True, on_runtime_failure="prefer_spare", template="t", template_images=("i",))
    assert context_from_row(context_row(ctx)) == ctx


# -- explained and replayed ----------------------------------------------------------------------------------
def test_a_kept_decision_explains_in_todays_words_with_the_fleet_as_it_was():
    c = core()
    a = c.place(APU_DOWN_TO_CPU, PlacementContext(job_id="j1"))
    words = dry_run(c.fleet.copy(), APU_DOWN_TO_CPU, PlacementContext(job_id="j1"))  # not the same fleet any more
    book = kept(c)
    c.node_lost("cuda")
    c.node_joined(rec("newcomer", "gpu_cuda"))
    rd = book.get(1)
    text = explain_recorded(rd)
    assert f"placed on {a.node_id}" in text and "newcomer" not in text and "job j1 decision recorded (job)" in text
    assert "  walk:\n    level gpu_apu, pool tier default/fixed: 2 of 3 nodes fit" in text
    assert words.explain().splitlines()[1] in text.splitlines()  # the requirement line, as explain prints it
    assert replay(rd)["same"] is True


def test_replay_reruns_the_engine_an_edited_slice_or_new_settings_move_the_decision():
    c = core()
    c.place(APU_DOWN_TO_CPU, PlacementContext(job_id="j1"))
    rd = kept(c).get(1)
    assert rd.row["decision"]["node_id"] == "cuda"
    edited = [r.evolve(cordoned=True) if r.node_id == "cuda" else r for r in rd.records]
    moved = replay(rd, records=edited)
    assert not moved["same"] and moved["now"]["node_id"] == "apu"
    assert "node cuda now fails filter cordoned" in moved["why"]
    binpack = {"pools": [{"name": "default", "tiers": [{"name": "fixed", "packing": "binpack"}]}]}
    cpu = Requirement(min_tier="cpu_ffmpeg", num_cpus=1)
    c2 = core(nodes=(("a", "cpu_ffmpeg"), ("b", "cpu_ffmpeg")))
    c2.place(cpu)  # a takes one: spread now ranks b first, binpack would rank a
    c2.place(cpu, PlacementContext(job_id="j2"))
    rd2 = kept(c2).get(1)
    assert rd2.row["decision"]["node_id"] == "b" and replay(rd2)["same"]
    now = replay(rd2, settings=FabricSettings.load(binpack))
    assert not now["same"] and now["now"]["node_id"] == "a"
    assert any(w.startswith("settings pools[0].tiers[0].packing: 'spread' -> 'binpack'") for w in now["why"])
    assert "node b still fits but ranks behind a on key component packing" in " ".join(now["why"])
    capped = replay(rd2, settings=FabricSettings.load({**binpack, "nodes": {"a": {"max_concurrent_tasks": 1}}}))
    assert capped["same"] and capped["now"]["node_id"] == "b"  # today's cap on a: it has no slot left


def test_replay_with_todays_settings_applies_todays_operation_preset_keeping_the_fields_given_over_it():
    then = {"operations": {"encode": {"min_tier": "gpu_apu", "floor": "cpu_ffmpeg", "num_cpus": 2}}}
    c = core(then)
    req = Requirement.from_operation("encode", c.settings, num_cpus=1)
    assert req.preset == ("encode", ("num_cpus",)) and req == Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", num_cpus=1)
    c.place(req, PlacementContext(job_id="j1"))
    book = kept(c)
    rd = book.get(1)
    assert rd.requirement.preset == ("encode", ("num_cpus",))  # the record keeps where the requirement came from
    assert replay(rd)["same"] and replay(rd, settings=FabricSettings.load(then))["same"]
    # today the preset needs a capability no node has, and more CPUs: the CPUs given over it stay 1
    today = {"operations": {"encode": {"min_tier": "gpu_apu", "floor": "cpu_ffmpeg", "num_cpus": 4, "capabilities": ["av1"]}}}
    now = replay(rd, settings=FabricSettings.load(today))
    assert not now["same"] and now["now"]["status"] != "placed", now["now"]
    assert "operation 'encode': capabilities: () -> ('av1',)" in now["why"], now["why"]
    assert not any("num_cpus" in w and w.startswith("operation") for w in now["why"])
    # a preset gone from today's settings: replayed with the requirement recorded, and said
    gone = replay(rd, settings=FabricSettings.load({}))
    assert gone["same"] and gone["now"]["node_id"] == rd.row["decision"]["node_id"]
    from fabric.core.decisions.replay import preset_again

    assert preset_again(rd.requirement, FabricSettings.load({}))[1] == [
        "operation 'encode': unknown operation 'encode'; operations: ['braid', 'flac', 'lupine', 'vaapi_encode'];"
        " replayed with the requirement recorded"]


def test_a_requirement_keeps_its_preset_through_replace_pickling_and_its_row():
    import pickle

    from fabric.core.decisions.rows import requirement_from_row, requirement_row

    s = FabricSettings.load({"operations": {"encode": {"min_tier": "gpu_apu", "num_cpus": 2}}})
    req = Requirement.from_operation("encode", s)
    assert req.preset == ("encode", ()) and req.preset_overrides() == {}
    pooled = req.replace(pool="default")
    assert pooled.preset == ("encode", ("pool",)) and pooled.preset_overrides() == {"pool": "default"}
    assert pickle.loads(pickle.dumps(pooled)).preset == pooled.preset
    assert requirement_from_row(requirement_row(pooled)).preset == pooled.preset
    assert pooled.with_payload(10).preset == pooled.preset
    assert Requirement(min_tier="gpu_apu", num_cpus=2).preset is None and "preset" not in Requirement().as_kwargs()
    assert Requirement(min_tier="gpu_apu", num_cpus=2) == req  # where it came from is no part of equality


# -- bounded -------------------------------------------------------------------------------------------------
def test_retention_is_bounded_by_count_and_bytes_and_fleet_versions_are_shared():
    c = core({"decisions": {"sample_one_in": 1}})
    book = DecisionBook(max_records=3)
    for seq in range(1, 6):
        for _ in range(2):  # placed and given back: the fleet the next one reads is the same version
            c.release([c.place(Requirement(min_tier="cpu_ffmpeg")).allocation_id])
        kept(c, book, seq * 10)
    assert len(book) == 3 and book.get(10) is None and book.get(51) is not None
    before = book.figures()
    assert before["decisions_forgotten"] == 7 and before["fleet_versions"] == 1 and before["node_records"] == 3
    while len(book):
        book._forget(next(iter(book._rows)))
    assert book.bytes == 0 and book.figures()["node_records"] == 0  # every shared blob went with its last user
    small = DecisionBook(max_bytes=65_536)
    big = core({"decisions": {"sample_one_in": 1}}, nodes=[(f"n{i:03}", "cpu_ffmpeg") for i in range(300)])
    for seq in range(1, 30):
        big.place(Requirement(min_tier="cpu_ffmpeg"))
        kept(big, small, seq)
    assert small.bytes <= 65_536 or len(small) == 1
    assert small.figures()["decisions_forgotten"] > 0


def test_a_ten_thousand_node_fleet_fits_the_default_byte_bound():
    hardware = {t: rec("x", t).capabilities for t in ("gpu_cuda", "cpu_ffmpeg", "relay")}  # three kinds of box
    fleet = FleetView([NodeRecord(f"n{i:05}", f"n{i:05}", hardware[("gpu_cuda", "cpu_ffmpeg", "relay")[i % 3]])
                       for i in range(10_000)])
    tap, book = DecisionTap(sample_one_in=1), DecisionBook()
    for seq in range(1, 4):
        d = place(fleet, Requirement(min_tier="cpu_ffmpeg"))
        book.keep(seq, tap.decided("task", d, fleet, f"s{seq}"), 0.0)
        fleet.commit(d)
    f = book.figures()
    assert f["decisions_kept"] == 3 and f["fleet_versions"] == 3 and f["decision_bytes"] < book.max_bytes
    assert f["node_records"] == 10_000 + 2 and f["capabilities"] == 3  # a later version adds the record that changed
    assert book.get(3).records[0] == fleet.records()[0]


# -- on the scheduler ----------------------------------------------------------------------------------------
def test_the_scheduler_keeps_a_jobs_decision_under_its_placement_event_and_tasks_under_their_own(tmp_path):
    clock = Clock()
    feed = FakeFeed([FleetChange("joined", n, rec(n, t)) for n, t in (("cuda", "gpu_cuda"), ("apu", "gpu_apu"))])

    async def go():
        sched = Scheduler({"decisions": {"sample_one_in": 1}}, feed=feed, metrics=RecordingMetrics(), clock=clock,
                          run_loop=False, jobs=lambda s: JobRunner(s, JobStore(tmp_path / "jobs.db"), FakeLauncher(), clock=clock))
        await sched._sync()
        sched.jobs.submit(JobSpec("enc", Requirement(min_tier="gpu_apu", num_cpus=1)), b"cls", b"args", "job-1")
        sched.jobs.tick()
        await settle()
        (placed,) = [e for e in sched.events() if e["kind"] == "placement_decision"]
        out = sched.explain_event(placed["seq"])
        assert out["job_id"] == "job-1" and out["decision"]["node_id"] == placed["data"]["node_id"] == "cuda"
        assert out["text"].splitlines()[1].startswith("placed on cuda")
        feed.batches.append([FleetChange("lost", "cuda")])
        await sched._sync()
        again = sched.explain_event(placed["seq"], replay=True)
        assert again["replay"]["same"] and "replay (recorded settings): decides the same" in again["text"]
        assert "placed on cuda" in sched.explain_event(placed["seq"])["text"]  # the fleet as it was
        await sched.place_task(Requirement(min_tier="gpu_apu", num_cpus=1))
        (task,) = [e for e in sched.events() if e["kind"] == "placement_recorded"]
        assert task["data"]["subject"] == "task" and sched.explain_event(task["seq"])["decision"]["node_id"] == "apu"
        with pytest.raises(MessageError) as info:
            sched.explain_event(placed["seq"] + 100)
        assert info.value.field == "event_seq"
        assert sched.metrics()["decisions"]["decisions_kept"] == 2
        assert sched.decision_recording(False) is False and sched.decision_recording() is False

    asyncio.run(go())


# -- through the store ---------------------------------------------------------------------------------------
def test_the_record_round_trips_the_jobs_store_and_forgetting_removes_what_nothing_uses(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    c = core({"decisions": {"sample_one_in": 1}})
    book = DecisionBook(max_records=2)
    for seq in (1, 2, 3):
        c.place(APU_DOWN_TO_CPU)
        kept(c, book, seq)
        store.write_decisions(*book.take_writes())
    rows, parts = store.decisions()
    assert [seq for seq, _ in rows] == [2, 3]  # the first was forgotten, in the store too
    again = DecisionBook()
    assert again.load(rows, parts) == 2 and again.get(1) is None
    assert explain_recorded(again.get(3)) == explain_recorded(book.get(3)) and replay(again.get(3))["same"]
    assert again.take_writes() == ([], [])  # nothing to write: all of it came from the store
    assert again.bytes == book.bytes
    del parts[next(k for k in parts if k.startswith("settings:"))]  # a part lost: its rows are dropped, not half-read
    broken = DecisionBook()
    assert broken.load(rows, parts) == 0 and broken.bytes == 0
    dropped_rows, dropped_parts = broken.take_writes()
    assert dropped_rows == [(2, None), (3, None)] and all(b is None for _, b in dropped_parts) and dropped_parts


def test_a_restarted_scheduler_reads_its_decisions_back(tmp_path):
    clock = Clock()

    def start():
        feed = FakeFeed([FleetChange("joined", n, rec(n, t)) for n, t in (("cuda", "gpu_cuda"), ("apu", "gpu_apu"))])
        return Scheduler({"decisions": {"sample_one_in": 1}}, feed=feed, metrics=RecordingMetrics(), clock=clock,
                         run_loop=False, jobs=lambda s: JobRunner(s, JobStore(tmp_path / "jobs.db"), FakeLauncher(), clock=clock))

    async def go():
        first = start()
        await first._sync()
        await first.place_task(Requirement(min_tier="gpu_apu", num_cpus=1))
        (task,) = [e for e in first.events() if e["kind"] == "placement_recorded"]
        before = first.explain_event(task["seq"])["text"]
        first.decisions.flush()  # every tick does it
        second = start()
        assert second.explain_event(task["seq"])["text"] == before

    asyncio.run(go())

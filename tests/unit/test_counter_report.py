"""The self-counting job of issue 16's migration tests, without Ray: ``analyze`` on hand-made tick
files (gaps, duplicates, overlap, a partial last line, a window), the ``Emitter``'s schedule on an
injected clock (catch-up, cut, a handover target's resume), and ``CounterJob``'s thread writing
real files for a handover and a stop-then-start done by hand."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import fabric
from fabric.testing.counter import CounterJob, Emitter, safe_file_name
from fabric.testing.counter_report import CounterReport, analyze, read_ticks


def write(d: Path, writer: str, ticks, tail: str = "") -> None:
    (d / f"{writer}.ticks").write_text("".join(f"{t}\n" for t in ticks) + tail)


def wait_for(predicate, what: str, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.002)
    raise AssertionError(f"timed out waiting for {what}")


# -- analyze -------------------------------------------------------------------------------------------
def test_one_writer_without_holes_has_no_gap_and_no_duplicate(tmp_path):
    write(tmp_path, "a", range(100, 150))
    r = analyze(str(tmp_path))
    assert (r.writers, r.ticks, r.first, r.last) == (1, 50, 100, 149)
    assert (r.gaps, r.gap_ms, r.duplicates, r.overlap_writers) == ([], 0.0, 0, 1)
    assert r.per_writer == {"a": (100, 149, 50)}


def test_a_hole_between_two_writers_is_a_gap_of_its_length_times_the_period(tmp_path):
    write(tmp_path, "source", range(0, 10))
    write(tmp_path, "target", range(17, 30))
    r = analyze(str(tmp_path), period_ms=10.0)
    assert r.gaps == [(10, 7)] and r.gap_ms == 70.0
    assert (r.duplicates, r.overlap_writers, r.writers) == (0, 1, 2)


def test_gap_ms_is_the_longest_missing_run_and_every_run_is_listed(tmp_path):
    write(tmp_path, "a", [0, 1, 3, 4, 9, 10])
    r = analyze(str(tmp_path), period_ms=5.0)
    assert r.gaps == [(2, 1), (5, 4)] and r.gap_ms == 20.0


def test_ticks_written_by_two_writers_are_duplicates_and_the_overlap_counts_writers(tmp_path):
    write(tmp_path, "source", range(0, 20))
    write(tmp_path, "target", range(15, 40))
    write(tmp_path, "third", [18])
    r = analyze(str(tmp_path))
    assert r.duplicates == 5 and r.overlap_writers == 3
    assert r.gaps == [] and r.ticks == 40


def test_a_partial_last_line_is_ignored_and_a_bad_complete_line_is_an_error(tmp_path):
    write(tmp_path, "a", [1, 2, 3], tail="4")  # a write cut short: "4" without its newline
    assert read_ticks(str(tmp_path / "a.ticks")) == [1, 2, 3]
    assert analyze(str(tmp_path)).last == 3
    write(tmp_path, "b", [1], tail="x\n")
    with pytest.raises(ValueError, match="b.ticks:2"):
        analyze(str(tmp_path))


def test_the_window_keeps_only_ticks_inside_it_and_an_empty_folder_has_none(tmp_path):
    write(tmp_path, "a", list(range(0, 10)) + list(range(50, 60)))
    write(tmp_path, "b", range(100, 110))
    r = analyze(str(tmp_path), start=5, end=55)
    assert (r.first, r.last, r.writers) == (5, 55, 1)
    assert r.gaps == [(10, 40)]
    (tmp_path / "empty").mkdir()
    empty = analyze(str(tmp_path / "empty"))
    assert empty == CounterReport(writers=0, ticks=0, first=None, last=None)
    assert empty.as_dict()["gaps"] == [] and analyze(str(tmp_path / "missing")).ticks == 0


def test_as_dict_is_plain_data(tmp_path):
    write(tmp_path, "a", [0, 2])
    d = analyze(str(tmp_path)).as_dict()
    assert d["gaps"] == [[1, 1]] and d["per_writer"] == {"a": [0, 2, 2]} and d["gap_ms"] == 10.0


def test_a_bad_period_is_refused(tmp_path):
    with pytest.raises(ValueError, match="period_ms"):
        analyze(str(tmp_path), period_ms=0)
    with pytest.raises(ValueError, match="period_s"):
        Emitter(0.0)


# -- the emitter's schedule ------------------------------------------------------------------------------
def test_a_late_wake_up_writes_the_ticks_it_skipped():
    e = Emitter(period_s=0.01, epoch=100.0)
    e.start_now(100.001)
    assert e.pump(100.001) == [] and e.next_tick == 1  # from the first tick due after the start
    assert e.pump(100.01) == [1]
    assert e.pump(100.015) == []
    assert e.pump(100.047) == [2, 3, 4]  # woke 20 ms late: the skipped ticks too, in order
    assert e.pump(100.047) == []
    assert e.wait_s(100.047) == pytest.approx(0.003)


def test_a_cut_stops_after_lead_ticks_and_a_second_cut_keeps_the_first():
    e = Emitter(period_s=0.01)
    e.start(100)
    e.pump(1.0)
    assert e.cut(1.0, lead_ticks=3) == 103
    assert e.cut(1.5, lead_ticks=3) == 103
    assert not e.done
    assert e.pump(2.0) == [101, 102, 103] and e.done
    assert e.pump(3.0) == []


def test_an_unarmed_emitter_writes_nothing_until_started_and_then_catches_up_from_its_position():
    e = Emitter(period_s=0.01)
    assert e.pump(5.0) == [] and not e.armed
    e.start(497)  # a resume after position 496, arriving at tick 500
    assert e.pump(5.0) == [497, 498, 499, 500]
    e2 = Emitter(period_s=0.01)
    e2.start(600)  # an early resume: nothing until tick 600 is due
    assert e2.pump(5.0) == [] and e2.wait_s(5.0) == pytest.approx(0.05)
    assert e2.pump(6.0) == [600]


# -- CounterJob's thread, driven by hand ---------------------------------------------------------------
def test_a_counter_writes_its_ticks_to_a_file_named_after_its_writer(tmp_path):
    job = CounterJob(str(tmp_path), period_ms=1.0)
    try:
        wait_for(lambda: analyze(str(tmp_path), period_ms=1.0).ticks >= 5, "five ticks")
        assert (tmp_path / f"{safe_file_name(job.writer())}.ticks").exists()
        r = analyze(str(tmp_path), period_ms=1.0)
        assert r.writers == 1 and r.gaps == [] and r.duplicates == 0
    finally:
        job.__fabric_stop__()
    assert safe_file_name("fabric.job.j1.primary@3f/x") == "fabric.job.j1.primary@3f_x"


def test_a_handover_by_hand_leaves_neither_a_gap_nor_a_duplicate(tmp_path, monkeypatch):
    source = CounterJob(str(tmp_path), period_ms=1.0, lead_ticks=5)
    wait_for(lambda: source.last_tick() is not None, "the source's first tick")
    monkeypatch.setattr(fabric, "instance_info", lambda: type("Info", (), {"handover_target": True})(), raising=False)
    target = CounterJob(str(tmp_path), period_ms=1.0)
    try:
        time.sleep(0.01)
        assert target.last_tick() is None  # a handover target waits for its resume
        payload = target.__fabric_ready__()
        position = source.__fabric_cut__(payload)
        target.__fabric_resume__(position)
        source.__fabric_stop__()  # waits until the source wrote its position
        assert source.last_tick() == position
        wait_for(lambda: (target.last_tick() or 0) >= position + 10, "the target past the cut")
    finally:
        target.__fabric_stop__()
    r = analyze(str(tmp_path), period_ms=1.0)
    assert (r.writers, r.gaps, r.duplicates, r.overlap_writers) == (2, [], 0, 1)
    assert r.per_writer[safe_file_name(target.writer())][0] == position + 1


def test_a_stop_then_start_by_hand_leaves_one_gap_and_never_two_writers(tmp_path):
    source = CounterJob(str(tmp_path), period_ms=1.0)
    wait_for(lambda: source.last_tick() is not None, "the source's first tick")
    source.__fabric_stop__()  # not cut: it stops at once
    stopped_at = source.last_tick()
    time.sleep(0.02)  # the target starts later (an actor start): every tick in between is missed
    target = CounterJob(str(tmp_path), period_ms=1.0)
    try:
        wait_for(lambda: target.last_tick() is not None, "the target's first tick")
    finally:
        target.__fabric_stop__()
    r = analyze(str(tmp_path), period_ms=1.0)
    assert len(r.gaps) == 1 and r.gaps[0][0] == stopped_at + 1 and r.gap_ms >= 19.0
    assert (r.duplicates, r.overlap_writers) == (0, 1)


def test_a_stop_writes_every_tick_due_until_it_even_from_a_thread_that_lagged(tmp_path):
    job = CounterJob(str(tmp_path), period_ms=10.0)
    with job._lock:  # drive its clock by hand: the thread sees nothing due, then 6 ticks at once
        base = job._emitter.next_tick
        fake = [job._emitter.due_at(base) - 0.045]  # nothing due for 45 ms: the thread sleeps
        job._clock = lambda: fake[0]
    time.sleep(0.02)
    fake[0] = job._emitter.due_at(base + 5) + 0.0001
    job.__fabric_stop__()  # whether or not the thread woke in between, the stop writes base..base+5
    ticks = read_ticks(str(tmp_path / f"{safe_file_name(job.writer())}.ticks"))
    assert ticks[-6:] == list(range(base, base + 6)) and ticks == list(range(ticks[0], base + 6))

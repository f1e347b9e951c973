"""Scoring a chaos scenario (pure): lost, refused, run twice, below the floor, on an excluded node."""

import math

from fabric.testing.chaos import Exclusion, RunLine, read_run_log, score


def test_score_counts_what_ran_against_what_was_accepted(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("a n1 10.0\nb n1 11.0\nb n2 12.0\nc relay 13.0\nd n3 20.0\ntorn li")  # a torn last line
    runs = read_run_log(log)
    assert [r.call_id for r in runs] == ["a", "b", "b", "c", "d"]
    submitted = {"a": 9.0, "b": 10.9, "c": 12.5, "d": 16.0, "e": 17.0}
    o = score("s", accepted=submitted, completed=["a", "b", "c", "d"], failed={"e": "NodeDiedError"},
              refused=2, runs=runs, below_floor=lambda r: r.node_id == "relay",
              exclusions=[Exclusion("n3", since=15.0, until=math.inf), Exclusion("n1", since=0.0, until=10.5),
                          Exclusion("n2", since=11.5, until=math.inf)],
              recovery_s=1.25, records_before=["x", "y"], records_after=["y"])
    assert (o.calls, o.completed, o.lost, o.refused) == (7, 4, 1, 2)
    assert o.duplicates == 1  # b ran twice: at-least-once, reported
    # d (sent at 16 s) on n3, excluded from 15 s; a on n1 before 10.5 s. b's second start on n2 at 12 s
    # is no fault: b was sent at 10.9 s, before n2 was excluded (it waited in n2's queue)
    assert o.below_floor == 1 and o.on_excluded == 2
    assert o.records_lost == 1 and o.failures == {"NodeDiedError": 1}
    assert not o.clean
    doc = o.as_json()
    assert doc["lost"] == 1 and doc["recovery_s"] == 1.25


def test_a_clean_scenario_is_clean():
    o = score("s", accepted=["a"], completed=["a"], failed={}, refused=0, runs=[RunLine("a", "n1", 1.0)],
              below_floor=lambda r: False)
    assert o.clean and o.as_json()["recovery_s"] is None

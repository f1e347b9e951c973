"""The fuzz runner sorts outcomes as it says: ok, typed refusal, crash, stored on refusal, timeout."""

from __future__ import annotations

import time

from hypothesis import strategies as st

from fabric.testing.fuzz import SURFACES, Surface, register, run_surface


def _call(n: int) -> None:
    if n % 4 == 1:
        raise ValueError("typed refusal")
    if n % 4 == 2:
        raise KeyError("a crash")


def test_outcomes_are_counted_by_kind():
    surface = Surface("counting", st.integers(0, 1000), _call, typed=(ValueError,), stored=lambda n: n % 8 == 1)
    report = run_surface(surface, 200, seed=1)
    assert report["tried"] == report["ok"] + report["typed"] + report["crashes"]
    assert report["typed"] > 0 and report["crashes"] > 0 and report["stored_on_refusal"] > 0
    assert len(report["examples_of_crashes"]) == 3
    crash = report["examples_of_crashes"][0]
    assert crash["error"].startswith("KeyError") and "test_fuzz_runner.py" in crash["where"]
    assert report["stored_on_refusal"] <= report["typed"]


def test_a_seed_repeats_the_run():
    seen: list[list[int]] = [[], []]
    for run in seen:
        run_surface(Surface("seeded", st.integers(), run.append), 30, seed=7)
    assert seen[0] == seen[1] and len(seen[0]) > 1


def test_an_example_past_its_time_guard_is_a_crash_not_a_hang():
    def swallow_everything(_):
        try:
            time.sleep(5)
        except Exception:  # the guard is a BaseException: a surface's own guard cannot swallow it
            pass

    report = run_surface(Surface("slow", st.just(0), swallow_everything, timeout_s=0.2), 1)
    assert report["crashes"] == 1 and "ExampleTimeout" in report["examples_of_crashes"][0]["error"]
    assert report["slowest_ms"] < 2000


def test_setup_and_teardown_wrap_the_run():
    events: list[str] = []
    surface = Surface("wrapped", st.just(1), lambda _: events.append("call"),
                      setup=lambda: events.append("setup"), teardown=lambda: events.append("teardown"))
    run_surface(surface, 5)
    assert events[0] == "setup" and events[-1] == "teardown" and "call" in events


def test_register_replaces_a_surface_of_the_same_name():
    first = Surface("replace-me", st.just(1), lambda _: None)
    second = Surface("replace-me", st.just(2), lambda _: None)
    try:
        register(first)
        assert register(second) is second and SURFACES["replace-me"] is second
    finally:
        SURFACES.pop("replace-me", None)

"""The job state machine's hard cases, run every time: a saga of each strategy in each phase meeting
each stimulus (a grid the random walk reaches only now and then), and what the machine found,
replayed step by step (each bug fixed since). ``test_jobs_state_machine`` has the machine."""

from __future__ import annotations

import pytest

from fabric.core.jobs.migration import MigrationStrategy
from test_jobs_state_machine import THENS, JobsMachine


# -- every phase of a saga meets every stimulus ------------------------------------------------------------
@pytest.mark.parametrize("then", THENS)
@pytest.mark.parametrize("walk", range(6))
@pytest.mark.parametrize("strategy", list(MigrationStrategy))
def test_a_saga_in_any_phase_meets_a_stimulus_and_no_job_is_lost_or_doubled(
        strategy: MigrationStrategy, walk: int, then: str | None) -> None:
    """What the machine's random walk reaches only now and then, in full: a saga of each strategy,
    left in each of its phases (``walk`` rounds of everything going well), meets each stimulus, then
    launches land before any hook answers, everything goes well, time passes, the scheduler restarts;
    every invariant holds after each step."""
    replay(("running", {"n": 2, "policy": "avoid_spare", "up": True, "move": (strategy, walk, then)}),
           ("progress", {"rounds": 1, "land": True, "answer": False}),
           ("progress", {"rounds": 6, "land": True, "answer": True}),
           ("tick", {"dt": 400.0}),
           ("progress", {"rounds": 6, "land": True, "answer": True}),
           ("restart", {"landed": False, "early": False}),
           ("progress", {"rounds": 6, "land": True, "answer": True}),
           ("tick", {"dt": 3700.0}),
           ("progress", {"rounds": 6, "land": True, "answer": True}))


# -- what the machine found (each fixed since), replayed step by step ------------------------------------
INVARIANTS = ("nothing_failed_inside", "books_are_consistent", "never_two_instances", "nothing_stray",
              "no_job_forgotten", "no_slot_leaked")


def replay(*steps: tuple[str, dict], checks: tuple[str, ...] = INVARIANTS, at_end: tuple[str, ...] = ()) -> None:
    """Run the machine's rules in order, ``checks`` after each step and ``at_end`` after the last."""
    m = JobsMachine()
    try:
        for i, (name, kwargs) in enumerate(steps):
            getattr(m, name)(**kwargs)
            for check in checks + (at_end if i == len(steps) - 1 else ()):
                getattr(m, check)()
    finally:
        m.teardown()


def test_a_restart_keeps_the_slot_of_a_job_it_re_adopts() -> None:
    """Two jobs run; the scheduler is SIGKILLed; job-1's instance dies while it is away. The new
    process re-adopts job-2 (``reserve_again``: a new allocation, id 1 in the new core) and recovers
    job-1, whose ``died`` gives back the allocation id its binding kept from the old process (1,
    too): job-2's new slot is freed, and its node counts one job fewer than it runs."""
    replay(("running", {"n": 2, "policy": "avoid_spare", "up": True}),
           ("restart", {"landed": False, "early": True}),
           ("instance_dies", {"pick": 0}),
           ("tick", {"dt": 0.0}))


def test_a_forced_drain_leaves_a_job_past_its_point_of_no_return_to_its_saga() -> None:
    """A stop_then_start saga is stopping its source when a reclaim notice's forced drain reaches
    the node: ``_stop_on_node`` evicts the job (it recovers elsewhere) while the saga, past its point
    of no return, goes on and runs its target's constructor: two instances of the job run."""
    replay(("running", {"n": 1, "policy": "avoid_spare", "up": True}),
           ("migrate", {"pick": 0, "move": (MigrationStrategy.STOP_THEN_START, 2, None)}),
           ("operator", {"pick": 0, "act": "notice", "strategy": None, "force": False, "timeout": 0.0,
                         "kind": "spot-interruption", "ray_accepts": False}),
           ("progress", {"rounds": 1, "land": True, "answer": False}))


def test_a_job_evicted_mid_migration_is_not_lost_by_a_restart() -> None:
    """As above, and the scheduler restarts before the recovery's launch lands: ``resume`` leaves
    the job to its saga (it is the saga's ``owned``), the saga completes, finds the job not migrating
    and stops its target; the job stays ``starting`` on an instance that never existed, for good."""
    replay(("running", {"n": 1, "policy": "avoid_spare", "up": True}),
           ("migrate", {"pick": 0, "move": (MigrationStrategy.STOP_THEN_START, 2, None)}),
           ("operator", {"pick": 0, "act": "notice", "strategy": None, "force": False, "timeout": 0.0,
                         "kind": "spot-interruption", "ray_accepts": False}),
           ("restart", {"landed": False, "early": False}),
           ("progress", {"rounds": 3, "land": True, "answer": True}),
           ("tick", {"dt": 3700.0}),
           checks=("nothing_failed_inside", "books_are_consistent"), at_end=("no_job_forgotten",))


@pytest.mark.parametrize("strategy", [MigrationStrategy.OVERLAP, MigrationStrategy.STOP_THEN_START])
def test_a_stop_while_a_migration_stops_the_source_ends_the_job(strategy: MigrationStrategy) -> None:
    """A stop arrives while the saga is stopping the source: the source's end is the saga's
    (``moves.source_died``: its key is ``ignored``), so the book never hears the instance ended; the
    job stays ``stopping`` on a dead instance, holding its slot, until a restart."""
    replay(("running", {"n": 2, "policy": "avoid_spare", "up": True}),
           ("migrate", {"pick": 0, "move": (strategy, 2, None)}),
           ("stop", {"pick": 0}),
           ("progress", {"rounds": 4, "land": True, "answer": True}),
           ("tick", {"dt": 3700.0}))


@pytest.mark.parametrize("strategy", [MigrationStrategy.OVERLAP, MigrationStrategy.STOP_THEN_START])
def test_a_stop_that_a_restart_finds_under_a_migration_ends_the_job(strategy: MigrationStrategy) -> None:
    """As above, but the scheduler restarts before the stop is done: ``resume`` leaves the job to
    its saga (``owned``), so its stop is not asked again; the saga stops the source (``source_ended``,
    not the book), finds the job not migrating and stops its target: the job stays ``stopping`` on
    a dead instance, its source's slot reserved anew and held, for good."""
    replay(("running", {"n": 2, "policy": "avoid_spare", "up": True}),
           ("migrate", {"pick": 0, "move": (strategy, 2, None)}),
           ("stop", {"pick": 0}),
           ("restart", {"landed": False, "early": False}),
           ("progress", {"rounds": 4, "land": True, "answer": True}),
           ("tick", {"dt": 3700.0}))


def test_a_drain_follows_a_job_stopped_mid_migration_without_failing_its_tick() -> None:
    """A drain's job is stopped while its overlap saga stops the source; the saga ends ``done`` with
    the job still bound there, so the drain marks it ``stuck``; once it leaves the node the drain
    says ``migrated`` (its saga is done): stuck -> migrated is not in the table, the TransitionError
    fails ``JobRunner.tick`` at ``drains.step`` on every tick from then on."""
    replay(("running", {"n": 2, "policy": "avoid_spare", "up": True}),
           ("migrate", {"pick": 0, "move": (MigrationStrategy.OVERLAP, 2, None)}),
           ("operator", {"pick": 0, "act": "drain", "strategy": None, "force": False, "timeout": None,
                         "kind": "rebalance", "ray_accepts": True}),
           ("stop", {"pick": 0}),
           ("progress", {"rounds": 2, "land": True, "answer": True}),
           ("tick", {"dt": 0.0}),
           ("restart", {"landed": False, "early": False}),
           ("tick", {"dt": 0.0}),
           checks=("nothing_failed_inside", "books_are_consistent"))


def test_a_handover_stopped_past_its_point_of_no_return_then_restarted_hears_its_source_die() -> None:
    """A handover past its point of no return when its job is stopped; the scheduler restarts, and
    the source dies before the saga moved on: ``resume`` leaves the job to its saga (``owned``) and
    watches only the target, so the source's death is heard by nobody: the job stays ``stopping``
    on a gone instance while its target runs on."""
    replay(("running", {"n": 1, "policy": "avoid_spare", "up": True,
                        "move": (MigrationStrategy.HANDOVER, 4, "stop")}),
           ("restart", {"landed": False, "early": False}),
           ("instance_dies", {"pick": 0}))

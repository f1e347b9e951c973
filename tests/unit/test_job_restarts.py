"""Job and bundle lifecycles (``fabric.core.jobs.states``) and the runtime-failure policy
(``fabric.core.jobs.restarts``): issue 14 § Recovery by policy.

Time is explicit: hours of restarts are driven in milliseconds."""

import itertools

import pytest

from fabric.core.errors import TransitionError
from fabric.core.jobs.restarts import HOUR_S, Restart, Verdict, ceiling, restarts_last_hour, verdict
from fabric.core.jobs.states import BUNDLE_LIFECYCLE, JOB_LIFECYCLE, LIVE_STATES, BundleState, JobState
from fabric.core.settings import FabricSettings

J, B = JobState, BundleState

# -- lifecycles ------------------------------------------------------------------------------------
# The tables written out by hand from the states module's docstring: every pair not listed is refused.
JOB_MOVES = {
    J.SCHEDULED: {J.PENDING, J.STOPPING, J.DROPPED, J.FAILED},
    J.PENDING: {J.STARTING, J.STOPPING, J.DROPPED, J.FAILED},
    J.STARTING: {J.RUNNING, J.RECOVERING, J.PENDING, J.STOPPING, J.DROPPED, J.FAILED},
    J.RUNNING: {J.RECOVERING, J.MIGRATING, J.STOPPING, J.DROPPED, J.FAILED},
    J.RECOVERING: {J.STARTING, J.STOPPING, J.DROPPED, J.FAILED},
    J.MIGRATING: {J.RUNNING, J.RECOVERING, J.STOPPING, J.DROPPED, J.FAILED},
    J.STOPPING: {J.STOPPED},
    J.STOPPED: set(), J.DROPPED: set(), J.FAILED: set(),
}
BUNDLE_MOVES = {B.LIVE: {B.BROKEN, B.DELETING}, B.BROKEN: {B.LIVE, B.DELETING}, B.DELETING: set()}


def test_job_lifecycle_table_is_exactly_the_documented_one():
    assert {s: set(t) for s, t in JOB_LIFECYCLE.table().items()} == JOB_MOVES
    assert JOB_LIFECYCLE.terminal == {J.STOPPED, J.DROPPED, J.FAILED}
    assert LIVE_STATES == {J.STARTING, J.RUNNING, J.MIGRATING}


@pytest.mark.parametrize("frm, to", list(itertools.product(JobState, JobState)))
def test_every_job_pair_is_allowed_or_refused_as_the_table_says(frm, to):
    if frm == to or to in JOB_MOVES[frm]:
        assert JOB_LIFECYCLE.allows(frm, to)
        assert JOB_LIFECYCLE.check("job j1", frm, to) is to
    else:
        assert not JOB_LIFECYCLE.allows(frm, to)
        with pytest.raises(TransitionError) as err:
            JOB_LIFECYCLE.check("job j1", frm, to, "because")
        e = err.value
        assert (e.what, e.from_state, e.to_state, e.why) == ("job j1", frm.value, to.value, "because")
        assert "job j1" in str(e) and frm.value in str(e) and to.value in str(e)


@pytest.mark.parametrize("frm, to", list(itertools.product(BundleState, BundleState)))
def test_every_bundle_pair_is_allowed_or_refused_as_the_table_says(frm, to):
    allowed = frm == to or to in BUNDLE_MOVES[frm]
    assert BUNDLE_LIFECYCLE.allows(frm, to) is allowed
    if not allowed:
        with pytest.raises(TransitionError) as err:
            BUNDLE_LIFECYCLE.check("bundle b1", frm, to)
        assert (err.value.what, err.value.from_state, err.value.to_state) == ("bundle b1", frm.value, to.value)


@pytest.mark.parametrize("terminal", [J.STOPPED, J.DROPPED, J.FAILED])
def test_a_terminal_job_state_has_no_way_out_and_says_so(terminal):
    assert JOB_LIFECYCLE.is_terminal(terminal)
    with pytest.raises(TransitionError, match=f"{terminal.value} is terminal"):
        JOB_LIFECYCLE.check("job j1", terminal, J.PENDING)


def test_the_key_refusals():
    assert not JOB_LIFECYCLE.allows(J.PENDING, J.RUNNING)       # must start first
    assert not JOB_LIFECYCLE.allows(J.STOPPING, J.RUNNING)      # stopping only goes to stopped
    assert not JOB_LIFECYCLE.allows(J.STOPPING, J.RECOVERING)
    assert not JOB_LIFECYCLE.allows(J.RECOVERING, J.RUNNING)    # re-placed means starting again
    assert not JOB_LIFECYCLE.allows(J.RUNNING, J.STOPPED)       # a stop goes through stopping
    assert not BUNDLE_LIFECYCLE.allows(B.DELETING, B.LIVE)
    assert BUNDLE_LIFECYCLE.is_terminal(B.DELETING)


def test_states_print_as_their_value():
    assert str(J.RECOVERING) == "recovering" and f"{B.BROKEN}" == "broken"
    assert J("running") is J.RUNNING and J.RUNNING == "running"


# -- restarts_last_hour: a trailing hour ----------------------------------------------------------
def test_restarts_last_hour_counts_only_counted_restarts_inside_the_trailing_hour():
    now = 10 * HOUR_S
    history = [Restart(now - HOUR_S - 1), Restart(now - HOUR_S), Restart(now - HOUR_S + 1),
               Restart(now - 10), Restart(now - 5, counted=False), Restart(now)]
    # exactly an hour old is outside (now - at < HOUR_S), a second younger is inside
    assert restarts_last_hour(history, now) == 3
    assert restarts_last_hour([], now) == 0
    assert restarts_last_hour(iter(history), now + HOUR_S) == 0


# -- ceiling precedence ----------------------------------------------------------------------------
def test_ceiling_defaults_to_six():
    f = FabricSettings().failure
    for policy in ("prefer_spare", "avoid_spare", "drop"):
        assert ceiling(None, policy, f) == 6


def test_ceiling_job_own_then_per_policy_then_flat():
    f = FabricSettings.load({"failure": {"max_restarts_per_hour": 9, "prefer_spare_max_restarts_per_hour": 2,
                                         "avoid_spare_max_restarts_per_hour": 4}}).failure
    assert ceiling(None, "prefer_spare", f) == 2
    assert ceiling(None, "avoid_spare", f) == 4
    assert ceiling(None, "drop", f) == 9
    assert ceiling(3, "prefer_spare", f) == 3
    assert ceiling(0, "avoid_spare", f) == 0          # a job's own 0 is a ceiling, not "unset"
    only_flat = FabricSettings.load({"failure": {"max_restarts_per_hour": 1}}).failure
    assert ceiling(None, "prefer_spare", only_flat) == 1 and ceiling(None, "avoid_spare", only_flat) == 1
    zero_policy = FabricSettings.load({"failure": {"avoid_spare_max_restarts_per_hour": 0}}).failure
    assert ceiling(None, "avoid_spare", zero_policy) == 0 and ceiling(None, "prefer_spare", zero_policy) == 6


# -- verdicts --------------------------------------------------------------------------------------
def run_failures(times, *, policy="avoid_spare", essential=True, max_per_hour=6, preempted=lambda i: False):
    """Feed deaths at ``times`` through ``verdict`` as the book does (a restart stamped at its
    ``not_before``); return the verdicts up to and including the first that is not ``recover``."""
    history, out = [], []
    for i, t in enumerate(times):
        v = verdict(policy=policy, essential=essential, history=history, now=t, max_per_hour=max_per_hour,
                    preempted=preempted(i))
        out.append(v)
        if v.action != "recover":
            break
        history.append(Restart(v.not_before, v.counted))
    return out


@pytest.mark.parametrize("policy", ["prefer_spare", "avoid_spare"])
@pytest.mark.parametrize("essential, end", [(True, "break"), (False, "drop")])
def test_the_seventh_failure_within_an_hour_ends_the_job(policy, essential, end):
    times = [i * 60.0 for i in range(10)]  # one death a minute
    out = run_failures(times, policy=policy, essential=essential)
    assert [v.action for v in out] == ["recover"] * 6 + [end]
    assert "restart ceiling" in out[-1].reason and "6" in out[-1].reason


def test_failures_spread_over_more_than_an_hour_never_trip_the_ceiling():
    gap = HOUR_S / 6 + 1  # 7 deaths always span more than an hour
    out = run_failures([i * gap for i in range(200)])
    assert len(out) == 200 and all(v.action == "recover" for v in out)


def test_the_window_trails_a_burst_after_a_quiet_hour_recovers_again():
    times = [i * 10.0 for i in range(6)] + [50.0 + HOUR_S + i * 10.0 for i in range(6)]
    out = run_failures(times)
    assert all(v.action == "recover" for v in out) and len(out) == 12
    # ... but one more death right after the second burst is the 7th of that hour
    out = run_failures(times + [times[-1] + 10.0])
    assert out[-1].action == "break" and len(out) == 13


def test_a_preempted_death_is_recovered_but_not_counted():
    t = [i * 10.0 for i in range(20)]
    out = run_failures(t, preempted=lambda i: True)
    assert all(v.action == "recover" and not v.counted for v in out) and len(out) == 20
    assert "preempted" in out[0].reason
    # past the ceiling already, a preempted death is still recovered
    full = [Restart(float(i)) for i in range(6)]
    v = verdict(policy="avoid_spare", essential=True, history=full, now=100.0, max_per_hour=6, preempted=True)
    assert v.action == "recover" and v.counted is False
    v = verdict(policy="avoid_spare", essential=True, history=full, now=100.0, max_per_hour=6)
    assert v.action == "break"
    # preempted deaths in between do not move the 7th counted one
    out = run_failures([i * 10.0 for i in range(30)], preempted=lambda i: i % 2 == 1)
    assert [v.action for v in out if v.counted or v.action != "recover"][-1] == "break"
    assert sum(1 for v in out if v.action == "recover" and v.counted) == 6


@pytest.mark.parametrize("essential, end", [(True, "break"), (False, "drop")])
def test_an_invalid_spec_is_terminal_on_the_first_failure(essential, end):
    v = verdict(policy="prefer_spare", essential=essential, history=[], now=0.0, max_per_hour=6,
                invalid_spec="channel must be a string")
    assert v.action == end and "channel must be a string" in v.reason
    # even when preempted
    v = verdict(policy="avoid_spare", essential=essential, history=[], now=0.0, max_per_hour=6, preempted=True,
                invalid_spec="bad")
    assert v.action == end


@pytest.mark.parametrize("essential, end", [(True, "break"), (False, "drop")])
def test_policy_drop_never_recovers(essential, end):
    for preempted in (False, True):
        v = verdict(policy="drop", essential=essential, history=[], now=0.0, max_per_hour=100, preempted=preempted)
        assert v.action == end and "drop" in v.reason


def test_a_zero_ceiling_ends_on_the_first_counted_failure():
    assert verdict(policy="avoid_spare", essential=False, history=[], now=0.0, max_per_hour=0).action == "drop"
    assert verdict(policy="avoid_spare", essential=False, history=[], now=0.0, max_per_hour=0,
                   preempted=True).action == "recover"


def test_recovery_attempts_are_at_least_the_interval_apart():
    # first death: at once
    v = verdict(policy="avoid_spare", essential=True, history=[], now=100.0, max_per_hour=6)
    assert v == Verdict("recover", "recovering", not_before=100.0, counted=True)
    # 2 s after the last attempt: not before last + 5
    v = verdict(policy="avoid_spare", essential=True, history=[Restart(100.0)], now=102.0, max_per_hour=6)
    assert v.not_before == 105.0
    # long after: at once
    v = verdict(policy="avoid_spare", essential=True, history=[Restart(100.0)], now=200.0, max_per_hour=6)
    assert v.not_before == 200.0
    # the interval is a parameter; the latest restart (counted or not) is the one that spaces
    hist = [Restart(100.0), Restart(110.0, counted=False)]
    v = verdict(policy="avoid_spare", essential=True, history=hist, now=111.0, max_per_hour=6, min_interval_s=30.0)
    assert v.not_before == 140.0
    # an explicit last attempt wins over the history
    v = verdict(policy="avoid_spare", essential=True, history=hist, now=111.0, max_per_hour=6, last_attempt=108.0)
    assert v.not_before == 113.0
    # a fast-dying job's attempts are spaced by the interval, whatever the death times
    out = run_failures([0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
    nbs = [v.not_before for v in out]
    assert nbs == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0]
    assert all(b - a >= 5.0 for a, b in zip(nbs, nbs[1:]))

"""Typed errors carry their data and survive pickling (they cross actor boundaries)."""

import pickle

import pytest

from fabric.core.errors import (
    CapacityError,
    FabricError,
    NodeNotFoundError,
    ProbeError,
    RegistrationError,
    RequirementError,
    SettingsError,
    SettingsProblem,
    TransitionError,
)

CASES = [
    SettingsError([SettingsProblem("duplicate_pool", "pools.1.name", "pool 'a' is defined twice")]),
    RequirementError("min_tier", "unknown compute tier 'gpu'", "gpu"),
    CapacityError("no node at or above cpu_ffmpeg", requirement={"min_tier": "gpu_apu"}, reason="queue timeout", waited_s=3.5),
    ProbeError("recording folder does not exist", source="/nope"),
    RegistrationError("node id unknown to Ray", node_id="abc", field="node_id"),
    TransitionError("node n1", "dead", "active", "dead is terminal"),
    NodeNotFoundError("steamdeck"),
]


@pytest.mark.parametrize("err", CASES, ids=lambda e: type(e).__name__)
def test_errors_pickle_with_their_data(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    assert back._data == err._data
    assert isinstance(back, FabricError)


def test_value_errors_where_input_is_at_fault():
    assert isinstance(CASES[0], ValueError) and isinstance(CASES[1], ValueError)
    assert not isinstance(CASES[2], ValueError)


def test_requirement_error_names_the_field():
    err = RequirementError("num_cpus", "must be >= 0", -1)
    assert err.field == "num_cpus" and err.value == -1
    assert str(err).startswith("num_cpus:")


def test_settings_error_lists_every_problem():
    problems = [SettingsProblem("a", "x.y", "first"), SettingsProblem("b", "z", "second")]
    err = SettingsError(problems)
    assert err.problems == tuple(problems)
    assert "first" in str(err) and "second" in str(err) and "2 problem" in str(err)


def test_transition_error_says_from_to_and_why():
    err = TransitionError("node n1", "dead", "active", "dead is terminal")
    assert (err.from_state, err.to_state) == ("dead", "active")
    assert "dead" in str(err) and "active" in str(err) and "terminal" in str(err)


def test_cause_is_kept_when_raised_from():
    try:
        try:
            raise KeyError("x")
        except KeyError as inner:
            raise ProbeError("bad", source="s") from inner
    except ProbeError as outer:
        assert isinstance(outer.__cause__, KeyError)

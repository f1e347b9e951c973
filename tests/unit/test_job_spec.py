"""``JobSpec`` (``fabric.core.jobs.spec``): every bad field is a ``RequirementError`` naming it;
good values are kept (and normalised: rule lists to tuples, seconds to floats)."""

import pickle

import pytest

from fabric.core.errors import RequirementError
from fabric.core.jobs.spec import MAX_HOURLY_RESTARTS, MAX_NAME, MAX_RULES, MAX_SECONDS, JobSpec
from fabric.core.placement import Requirement


def refused(field, **kw):
    kw.setdefault("name", "encode")
    with pytest.raises(RequirementError) as err:
        JobSpec(**kw)
    assert err.value.field == field, (err.value.field, str(err.value))
    return err.value


def test_defaults():
    s = JobSpec(name="encode")
    assert (s.on_runtime_failure, s.max_restarts_per_hour, s.essential, s.start_mode) == \
        ("avoid_spare", None, True, "auto")
    assert s.requirement == Requirement() and s.rule_less and not s.single_use
    assert (s.health_period_s, s.health_timeout_s, s.health_failures, s.call_timeout_s) == (10.0, 10.0, 3, 30.0)
    assert pickle.loads(pickle.dumps(s)) == s


@pytest.mark.parametrize("name", ["", "a\x00b", "tab\there", "x" * (MAX_NAME + 1), None, 3, b"encode"])
def test_a_bad_name_is_refused(name):
    e = refused("name", name=name)
    assert e.value == name


def test_the_longest_name_is_kept():
    assert JobSpec(name="x" * MAX_NAME).name == "x" * MAX_NAME


def test_a_requirement_must_be_a_requirement():
    refused("requirement", requirement={"cpu": 1})


@pytest.mark.parametrize("policy", ["retry", "preferSpare", "", None, "DROP"])
def test_a_bad_failure_policy_is_refused(policy):
    refused("on_runtime_failure", on_runtime_failure=policy)


@pytest.mark.parametrize("policy", ["prefer_spare", "avoid_spare", "drop"])
def test_each_failure_policy_is_kept(policy):
    assert JobSpec(name="a", on_runtime_failure=policy).on_runtime_failure == policy


@pytest.mark.parametrize("m", [True, False, -1, MAX_HOURLY_RESTARTS + 1, 10**12, 6.0, "6", float("inf")])
def test_a_bad_restart_ceiling_is_refused(m):
    refused("max_restarts_per_hour", max_restarts_per_hour=m)


@pytest.mark.parametrize("m", [None, 0, 1, 6, MAX_HOURLY_RESTARTS])
def test_a_good_restart_ceiling_is_kept(m):
    assert JobSpec(name="a", max_restarts_per_hour=m).max_restarts_per_hour == m


@pytest.mark.parametrize("flag", ["essential", "single_use"])
@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_flags_must_be_bools(flag, value):
    refused(flag, **{flag: value})


@pytest.mark.parametrize("template", ["", "a\nb", "x" * (MAX_NAME + 1), 7])
def test_a_bad_template_is_refused(template):
    refused("template", template=template)


@pytest.mark.parametrize("field", ["health_period_s", "health_timeout_s", "call_timeout_s"])
@pytest.mark.parametrize("value", [0, -1, 0.0, MAX_SECONDS + 1, float("nan"), float("inf"), True, "10", None])
def test_bad_seconds_are_refused(field, value):
    refused(field, **{field: value})


@pytest.mark.parametrize("field", ["health_period_s", "health_timeout_s", "call_timeout_s"])
def test_good_seconds_are_kept_as_floats(field):
    s = JobSpec(name="a", **{field: 2})
    assert getattr(s, field) == 2.0 and isinstance(getattr(s, field), float)
    assert getattr(JobSpec(name="a", **{field: MAX_SECONDS}), field) == MAX_SECONDS
    assert getattr(JobSpec(name="a", **{field: 0.001}), field) == 0.001


@pytest.mark.parametrize("value", [0, -3, 1001, True, 2.0, "3", None])
def test_bad_health_failures_are_refused(value):
    refused("health_failures", health_failures=value)


@pytest.mark.parametrize("mode", ["", "Manual", "lazy", None])
def test_a_bad_start_mode_is_refused(mode):
    refused("start_mode", start_mode=mode)


def test_manual_start_mode_is_kept():
    assert JobSpec(name="a", start_mode="manual").start_mode == "manual"


def test_single_use_needs_exclusive():
    refused("single_use", single_use=True)
    refused("single_use", single_use=True, requirement=Requirement(exclusive=False))
    assert JobSpec(name="a", single_use=True, requirement=Requirement(exclusive=True)).single_use


@pytest.mark.parametrize("field", ["co_locate_with", "separate_from"])
@pytest.mark.parametrize("value", ["other", 3, [""], ["ok", None], ["x" * (MAX_NAME + 1)],
                                   ["n%d" % i for i in range(MAX_RULES + 1)]])
def test_bad_rule_lists_are_refused(field, value):
    with pytest.raises(RequirementError) as err:
        JobSpec(name="a", **{field: value})
    assert err.value.field.split("[")[0] == field, err.value.field  # the list, or one entry of it


def test_a_bad_rule_entry_is_named_by_its_index():
    with pytest.raises(RequirementError) as err:
        JobSpec(name="a", separate_from=["b", "", "c"])
    assert err.value.field == "separate_from[1]"


def test_rule_lists_become_tuples():
    s = JobSpec(name="a", co_locate_with=["b", "c"], separate_from=("d",))
    assert s.co_locate_with == ("b", "c") and s.separate_from == ("d",) and not s.rule_less
    most = JobSpec(name="a", co_locate_with=["n%d" % i for i in range(MAX_RULES)])
    assert len(most.co_locate_with) == MAX_RULES


def test_co_locate_and_separate_naming_the_same_job_is_refused():
    e = refused("separate_from", co_locate_with=["b", "c"], separate_from=["c"])
    assert "co-locates" in str(e)


def test_a_co_location_naming_the_job_itself_is_refused():
    refused("co_locate_with", name="a", co_locate_with=["a"])


def test_a_separation_naming_the_job_itself_names_separate_from():
    refused("separate_from", name="a", separate_from=["a"])


def test_with_requirement_changes_only_the_requirement():
    s = JobSpec(name="a", requirement=Requirement(num_cpus=1), on_runtime_failure="prefer_spare", essential=False)
    t = s.with_requirement(num_cpus=2)
    assert t.requirement.num_cpus == 2 and s.requirement.num_cpus == 1
    assert (t.name, t.on_runtime_failure, t.essential) == ("a", "prefer_spare", False)

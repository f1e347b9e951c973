"""Bundle validation (every problem at once), admission and dry-run placement."""

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from placement_helpers import fleet, node

from fabric.core.errors import InvalidSpecError
from fabric.core.jobs.bundles import Bundle, BundleJob, ResiliencePolicy
from fabric.core.jobs.spec import JobSpec
from fabric.core.jobs.validation import (
    Admission, Unplaceable, ValidationIssue, ValidationReport, known_capability, place_dry_run,
    validate_bundle, validate_bundle_admission,
)
from fabric.core.placement import Requirement
from fabric.core.placement.synth import mixed_settings, node_capabilities

SETTINGS = mixed_settings()  # pools: default (fixed + elastic burst: small-cpu, gpu-box), edge (fixed, binpack)


def usage(f):
    return [(r.node_id, r.running, r.reserved_cpus, r.jobs, r.exclusive_job) for r in f.records()]


def codes_at(issues):
    return {(i.code, i.path) for i in issues}


# -- every error at once ----------------------------------------------------------------------------
def test_every_error_is_reported_at_once():
    b = Bundle(bundle_id="broken", pool="nope", resilience=ResiliencePolicy(pool="gone"), jobs=[
        BundleJob(name="a", co_locate_with=["b", "ghost"], requirement={"capabilities": ["warp-drive"], "pool": "x"}),
        BundleJob(name="b", separate_from=["a"], single_use=True),
        BundleJob(name="a", operation="no-such-op"),
        BundleJob(name="c", co_locate_with=["c"], requirement={"ports": ["1935/tcp"]}),
        BundleJob(name="d", co_locate_with=["c"], requirement={"ports": ["1935/tcp"], "capabilities": ["tier:gpu_quantum"]}),
    ])
    report = validate_bundle(b, SETTINGS)
    assert not report.ok
    assert codes_at(report.errors) == {
        ("unknown_pool", "pool"),
        ("unknown_pool", "resilience.pool"),
        ("unknown_pool", "jobs.0.requirement.pool"),
        ("duplicate_job_name", "jobs.2.name"),
        ("unknown_job", "jobs.0.co_locate_with.1"),
        ("rule_conflict", "jobs.1.separate_from.0"),      # b separates from a, co-located through a's rule
        ("rule_conflict", "jobs.3.co_locate_with.0"),     # c names itself
        ("rule_conflict", "jobs.4.requirement.ports"),    # c and d share a node and a host port
        ("single_use_needs_exclusive", "jobs.1.single_use"),
        ("unsatisfiable", "jobs.0.requirement.capabilities"),
        ("unsatisfiable", "jobs.2.operation"),
        ("unsatisfiable", "jobs.4.requirement.capabilities"),
    }
    assert report.codes() == {"unknown_pool", "duplicate_job_name", "unknown_job", "rule_conflict",
                              "single_use_needs_exclusive", "unsatisfiable"}
    dup = next(i for i in report.errors if i.code == "duplicate_job_name")
    assert str(dup) == "jobs.2.name: job name 'a' is already used by jobs.0 [duplicate_job_name]"
    assert "warp-drive" in str(next(i for i in report.errors if i.path == "jobs.0.requirement.capabilities"))


def test_same_node_default_grouping_conflicts_with_a_separation():
    b = Bundle(bundle_id="b", same_node_default=True, jobs=[
        BundleJob(name="a"), BundleJob(name="b"), BundleJob(name="c", co_locate_with=["a"], separate_from=["b"])])
    assert codes_at(validate_bundle(b, SETTINGS).errors) == {("rule_conflict", "jobs.2.separate_from.0")}
    b_off = b.model_copy(update={"same_node_default": False})
    assert validate_bundle(b_off, SETTINGS).ok


def test_a_valid_bundle_has_no_errors_or_warnings():
    b = Bundle(bundle_id="ok", resilience=ResiliencePolicy(pool="edge"), jobs=[
        BundleJob(name="encode", requirement={"min_tier": "cpu_ffmpeg", "ports": ["1935/tcp"], "capabilities": ["arch:x86_64"]},
                  exclusive=True, single_use=True),
        BundleJob(name="mux", co_locate_with=["encode"], exclusive=True, requirement={"ports": ["8080/tcp"]}),
        BundleJob(name="probe", separate_from=["encode"], requirement={"operation": "flac"}),
    ])
    report = validate_bundle(b, SETTINGS, fleet(node("n1", "cpu"), node("e1", "cpu", pool="edge")))
    assert report == ValidationReport() and report.ok


def test_exclusive_and_single_use_read_the_class_defaults():
    b = Bundle(bundle_id="b", jobs=[BundleJob(name="a", cls=int, single_use=True)])
    assert "single_use_needs_exclusive" in validate_bundle(b, SETTINGS).codes()
    excl = JobSpec(name="int", requirement=Requirement(exclusive=True))
    assert validate_bundle(b, SETTINGS, defaults_for=lambda cls: excl).ok


def test_class_defaults_that_raise_are_an_error_not_an_exception():
    def boom(cls):
        raise RuntimeError("cannot read")
    report = validate_bundle(Bundle(bundle_id="b", jobs=[BundleJob(name="a")]), SETTINGS, defaults_for=boom)
    assert codes_at(report.errors) == {("unsatisfiable", "jobs.0")}


def test_a_job_pool_other_than_the_bundle_pool_is_a_warning():
    b = Bundle(bundle_id="b", jobs=[BundleJob(name="a", requirement={"pool": "edge"})])
    report = validate_bundle(b, SETTINGS)
    assert report.ok and codes_at(report.warnings) == {("pool_ignored", "jobs.0.requirement.pool")}


# -- capabilities -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["cuda", "vaapi", "apu", "cpu", "batch", "framebuffer", "relay", "esp32"])
def test_every_tag_a_probe_reports_is_a_known_capability(kind):
    for tag in node_capabilities(kind).capability_tags:
        assert known_capability(tag, SETTINGS), tag


def test_unknown_capabilities():
    assert not known_capability("warp-drive", SETTINGS)
    assert not known_capability("role:pilot", SETTINGS) and not known_capability("gpu:3dfx", SETTINGS)
    assert not known_capability("arch:", SETTINGS)
    shapes = SETTINGS.model_copy(update={"pools": (SETTINGS.pools[0].model_copy(update={"tiers": (
        SETTINGS.pools[0].tiers[0], SETTINGS.pools[0].tiers[1].model_copy(update={"candidate_shapes": (
            SETTINGS.pools[0].tiers[1].candidate_shapes[0].model_copy(update={"capabilities": ("warp-drive",)}),)}))}),)})
    assert known_capability("warp-drive", shapes)  # a candidate shape declares it


# -- capacity is a warning, against a fleet --------------------------------------------------------------
def test_no_node_fits_a_fixed_pool_is_a_warning():
    f = fleet(node("n1", "cpu"), node("e1", "cpu", pool="edge"))
    b = Bundle(bundle_id="b", pool="edge", jobs=[
        BundleJob(name="cuda", requirement={"min_tier": "gpu_cuda", "fallback": False}),
        BundleJob(name="big", requirement={"num_cpus": 64}),
        BundleJob(name="fits", requirement={"min_tier": "cpu_ffmpeg"}),
    ])
    report = validate_bundle(b, SETTINGS, f)
    assert report.ok
    assert codes_at(report.warnings) == {("no_node_fits", "jobs.0"), ("no_node_fits", "jobs.1")}
    assert "edge" in report.warnings[0].message
    assert validate_bundle(b, SETTINGS).warnings == ()  # without a fleet: no capacity check


def test_an_elastic_shape_that_serves_is_not_even_a_warning():
    f = fleet(node("n1", "cpu"))
    b = Bundle(bundle_id="b", jobs=[
        BundleJob(name="cuda", requirement={"min_tier": "gpu_cuda", "fallback": False}),  # the gpu-box shape
        BundleJob(name="model", requirement={"min_tier": "gpu_cuda", "fallback": False, "num_gpus": 1, "gpu_model": "A100"}),
    ])
    assert codes_at(validate_bundle(b, SETTINGS, f).warnings) == {("no_node_fits", "jobs.1")}
    # the burst tier at max_nodes still counts: nodes end, "ever" ignores the cap
    full = fleet(*(node(f"b{i}", "cpu", pool_tier="burst") for i in range(3)))
    assert codes_at(validate_bundle(b, SETTINGS, full).warnings) == {("no_node_fits", "jobs.1")}


def test_no_node_fits_ignores_load_cordons_and_status():
    from fabric.core.lifecycle import NodeStatus
    busy = node("e1", "cuda", pool="edge", cordoned=True, reserved_cpus=8.0, running=8, status=NodeStatus.OFFLINE)
    b = Bundle(bundle_id="b", pool="edge", jobs=[BundleJob(name="a", requirement={"min_tier": "gpu_cuda", "fallback": False})])
    assert validate_bundle(b, SETTINGS, fleet(busy)).warnings == ()
    dead = node("e1", "cuda", pool="edge", status=NodeStatus.DEAD)
    assert validate_bundle(b, SETTINGS, fleet(dead)).codes() == {"no_node_fits"}


def test_the_backup_pool_is_checked_too():
    f = fleet(node("g1", "cuda"), node("e1", "cpu", pool="edge"))
    b = Bundle(bundle_id="b", resilience=ResiliencePolicy(pool="edge"),
               jobs=[BundleJob(name="a", requirement={"min_tier": "gpu_cuda", "fallback": False})])
    [w] = validate_bundle(b, SETTINGS, f).warnings
    assert w.code == "no_node_fits" and "'edge'" in w.message


# -- admission ------------------------------------------------------------------------------------------
def test_admission_ok_and_the_fleet_is_untouched():
    f = fleet(node("n1", "cpu"), node("n2", "cpu"))
    before = usage(f)
    b = Bundle(bundle_id="b", resilience=ResiliencePolicy(), jobs=[BundleJob(name="a"), BundleJob(name="b", separate_from=["a"])])
    assert validate_bundle_admission(b, SETTINGS, f) == Admission("ok")
    assert usage(f) == before
    f.validate()


def test_admission_counts_capacity_as_it_places():
    f = fleet(node("e1", "cpu", pool="edge", cpus=8))
    one = Bundle(bundle_id="b", pool="edge", jobs=[BundleJob(name="a", requirement={"num_cpus": 6})])
    assert validate_bundle_admission(one, SETTINGS, f).ok
    two = Bundle(bundle_id="b", pool="edge", jobs=[BundleJob(name="a", requirement={"num_cpus": 6}),
                                                   BundleJob(name="b", requirement={"num_cpus": 6})])
    adm = validate_bundle_admission(two, SETTINGS, f)
    assert adm.kind == "no_capacity" and not adm.ok
    assert [(u.replica, u.job) for u in adm.unplaceable] == [(0, "b")]
    assert isinstance(adm.unplaceable[0], Unplaceable) and adm.unplaceable[0].reason.startswith("no capacity")


def test_admission_applies_rules_and_replicas():
    f = fleet(node("e1", "cpu", pool="edge"), node("e2", "cpu", pool="edge"))
    b = Bundle(bundle_id="b", pool="edge", resilience=ResiliencePolicy(), jobs=[
        BundleJob(name="a", exclusive=True), BundleJob(name="b", exclusive=True), BundleJob(name="c", co_locate_with=["a"])])
    adm = validate_bundle_admission(b, SETTINGS, f)
    # replica 0 takes both nodes exclusively (c beside its peer a); replica 1 finds none free
    assert adm.kind == "no_capacity"
    assert [(u.replica, u.job) for u in adm.unplaceable] == [(1, "a"), (1, "b"), (1, "c")]


def test_admission_reports_validation_errors_first():
    b = Bundle(bundle_id="b", pool="nope", jobs=[BundleJob(name="a", requirement={"num_cpus": 1000})])
    adm = validate_bundle_admission(b, SETTINGS, fleet(node("n1", "cpu")))
    assert adm.kind == "validation_errors" and [e.code for e in adm.errors] == ["unknown_pool"] and adm.unplaceable == ()


def test_admission_counts_a_provision_as_admitted():
    b = Bundle(bundle_id="b", jobs=[BundleJob(name="a", requirement={"min_tier": "gpu_cuda", "fallback": False})])
    assert validate_bundle_admission(b, SETTINGS, fleet(node("n1", "cpu"))).ok


# -- dry run ---------------------------------------------------------------------------------------------
def resilient_edge():
    return Bundle(bundle_id="b", pool="edge", resilience=ResiliencePolicy(same_node="forbid"), jobs=[
        BundleJob(name="encode"), BundleJob(name="mux", co_locate_with=["encode"])])


def test_dry_run_places_the_primary_first_so_the_backup_keeps_off_its_node():
    f = fleet(node("e1", "cpu", pool="edge"), node("e2", "cpu", pool="edge"))
    before = usage(f)
    primary = place_dry_run(resilient_edge(), SETTINGS, f, 0, "encode")
    assert primary.placed and primary.node_id == "e1"
    backup = place_dry_run(resilient_edge(), SETTINGS, f, 1, "encode")
    # binpack would take the fuller e1; the backup's same_node=forbid keeps it on e2
    assert backup.placed and backup.node_id == "e2" and backup.resilience_violations == ()
    assert backup.context.other_node == "e1" and backup.trace is not None
    mux = place_dry_run(resilient_edge(), SETTINGS, f, 1, "mux")
    assert mux.node_id == "e2" and mux.trace.verdicts() == {"e1": "co_location", "e2": "survivor"}
    assert usage(f) == before
    f.validate()


def test_dry_run_of_a_bundle_without_resilience_binpacks_both_on_one_node():
    f = fleet(node("e1", "cpu", pool="edge"), node("e2", "cpu", pool="edge"))
    b = Bundle(bundle_id="b", pool="edge", jobs=[BundleJob(name="a"), BundleJob(name="b")])
    assert place_dry_run(b, SETTINGS, f, 0, "b").node_id == "e1"


def test_dry_run_names_an_unknown_replica_or_job():
    f = fleet(node("n1", "cpu"))
    b = Bundle(bundle_id="b", jobs=[BundleJob(name="a")])
    with pytest.raises(InvalidSpecError) as err:
        place_dry_run(b, SETTINGS, f, 1, "a")
    assert err.value.field == "replica"
    with pytest.raises(InvalidSpecError) as err:
        place_dry_run(b, SETTINGS, f, 0, "zz")
    assert err.value.field == "job"


def test_issue_str_without_a_path():
    assert str(ValidationIssue("x", "", "whole bundle")) == "<bundle>: whole bundle [x]"


# -- never raises ------------------------------------------------------------------------------------------
NAMES = st.sampled_from(["a", "b", "c", "d"])
REQS = st.fixed_dictionaries({}, optional={
    "min_tier": st.sampled_from(["relay", "cpu_ffmpeg", "gpu_cuda", "gpu_vaapi"]),
    "fallback": st.booleans(),
    "num_cpus": st.sampled_from([0, 1, 4, 64]),
    "capabilities": st.lists(st.sampled_from(["cuda", "arch:x86_64", "warp", "tier:relay", "role:nope"]), max_size=2),
    "ports": st.lists(st.sampled_from(["1935/tcp", "80/tcp"]), max_size=2),
    "pool": st.sampled_from(["default", "edge", "nope"]),
    "exclusive": st.booleans(),
    "operation": st.sampled_from(["flac", "lupine", "nope"]),
})
JOBS = st.builds(
    BundleJob, name=NAMES, requirement=REQS, co_locate_with=st.lists(NAMES | st.just("ghost"), max_size=2),
    separate_from=st.lists(NAMES, max_size=2), exclusive=st.booleans(), single_use=st.booleans(),
    on_runtime_failure=st.sampled_from([None, "prefer_spare", "avoid_spare", "drop"]),
)
BUNDLES = st.builds(
    Bundle, bundle_id=st.just("b"), pool=st.sampled_from(["default", "edge", "nope"]),
    resilience=st.none() | st.builds(ResiliencePolicy, pool=st.sampled_from([None, "edge", "gone"])),
    same_node_default=st.booleans(), intra_zone=st.sampled_from(["hard", "soft", "off"]),
    jobs=st.lists(JOBS, min_size=1, max_size=5),
)
FLEET = fleet(node("n1", "cpu", zone="a"), node("g1", "cuda", zone="b"), node("e1", "cpu", pool="edge"))


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BUNDLES, st.booleans())
def test_validate_bundle_never_raises(b, with_fleet):
    report = validate_bundle(b, SETTINGS, FLEET if with_fleet else None)
    assert isinstance(report, ValidationReport)
    assert all(isinstance(i, ValidationIssue) and i.code and str(i) for i in report.errors + report.warnings)
    adm = validate_bundle_admission(b, SETTINGS, FLEET)
    assert adm.kind == ("validation_errors" if report.errors else adm.kind)
    if report.ok:  # a bundle without errors expands and dry-runs
        assert len(b.expand(settings=SETTINGS)) == b.replica_count * len(b.jobs)
        place_dry_run(b, SETTINGS, FLEET, b.replica_count - 1, b.jobs[-1].name)

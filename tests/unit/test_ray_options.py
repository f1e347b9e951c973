"""Ray's own option names on @adaptive.remote (no Ray cluster): what each maps to, what is refused
and with which fabric option named, the placement filters they become (with their trace reasons,
fast path and reference walk agreeing), and the Ray options a call and a job's actor are given."""

from __future__ import annotations

import pickle
import random

import pytest

from fabric import ComputeTier, RequirementError, adaptive
from fabric.core.names import POOL_LABEL, SLOTS_RESOURCE, TIER_LABEL
from fabric.core.placement import FleetView, NodeRecord, Requirement, dry_run, place, reference, synth
from fabric.core.placement.filters import shape_has_ray_terms
from fabric.core.placement.ray_terms import parse_label_selector, ray_call_options
from fabric.core.records import RegistryRecord
from fabric.core.settings import NodeShape
from fabric.runtime.options import RAY_REFUSED

from placement_helpers import both, fleet, node


def f(x):
    return x


class Job:
    def work(self) -> int:
        return 1


# -- the option mapping ------------------------------------------------------------------------------
def test_ray_names_map_to_the_requirement_the_dispatch_and_ray():
    af = adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=2, num_gpus=0, memory=3 << 20, resources={"x": 1, "y": 0},
                         accelerator_type="A100", label_selector={"rack": "in(r1,r2)"}, runtime_env={"env_vars": {"A": "1"}},
                         num_returns=2, max_retries=5, retry_exceptions=[ValueError], name="t")(f)
    req = af.requirement
    assert req.num_cpus == 2 and req.memory_mib == 3.0
    assert req.resources == (("x", 1.0),)  # a zero amount asks for nothing
    assert req.accelerator_type == "A100"
    assert req.selector_dict() == {"rack": "in(r1,r2)"}
    assert req.ray.runtime_env == {"env_vars": {"A": "1"}}
    assert req.ray.num_returns == 2 and req.ray.retry_exceptions == (ValueError,)
    assert af.dispatch.max_retries == 5 and af.task_name == "t"
    again = pickle.loads(pickle.dumps(req))
    assert again == req and again.class_key == req.class_key and again.ray.runtime_env == req.ray.runtime_env


def test_ray_options_split_requirement_classes_but_plain_ones_keep_their_key():
    plain = Requirement("cpu_ffmpeg")
    assert len(plain.class_key) == 14
    a = Requirement("cpu_ffmpeg", ray=ray_call_options(runtime_env={"env_vars": {"A": "1"}}))
    b = Requirement("cpu_ffmpeg", ray=ray_call_options(runtime_env={"env_vars": {"A": "2"}}))
    assert a.class_id != b.class_id != plain.class_id
    assert Requirement("cpu_ffmpeg", ray=ray_call_options()).class_id == plain.class_id


def test_memory_is_bytes_and_never_given_twice():
    assert adaptive.remote(min_tier="relay", memory=512 * 1024 * 1024)(f).requirement.memory_mib == 512
    with pytest.raises(RequirementError) as exc:
        adaptive.remote(min_tier="relay", memory=1 << 20, memory_mib=1)
    assert exc.value.field == "memory" and "memory_mib" in str(exc.value)
    af = adaptive.remote(min_tier="relay", memory_mib=100)(f)
    assert af.options(memory=1 << 30).requirement.memory_mib == 1024  # replaces memory_mib
    assert af.options(memory=1 << 30).options(memory_mib=7).requirement.memory_mib == 7
    for bad in (-1, "1G", float("nan"), True):
        with pytest.raises(RequirementError) as exc:
            adaptive.remote(min_tier="relay", memory=bad)
        assert exc.value.field == "memory"


@pytest.mark.parametrize("key,fabric_word", [
    ("scheduling_strategy", "min_tier"), ("scheduling_strategy", "bundle"),
    ("placement_group", "bundle"), ("placement_group_bundle_index", "min_tier"),
    ("placement_group_capture_child_tasks", "bundle"),
    ("max_restarts", "max_restarts_per_hour"), ("max_restarts", "on_runtime_failure"),
    ("lifetime", "detached"), ("get_if_exists", "named"), ("namespace", "name="),
])
def test_ray_options_the_fabric_owns_are_refused_naming_the_fabric_option(key, fabric_word):
    with pytest.raises(RequirementError) as exc:
        adaptive.remote(min_tier="relay", **{key: None})
    assert exc.value.field == key and fabric_word in str(exc.value)
    with pytest.raises(RequirementError) as exc:  # .options(...) refuses them too
        adaptive.remote(min_tier="relay")(f).options(**{key: None})
    assert exc.value.field == key


def test_every_refused_option_has_a_pointer():
    for key, why in RAY_REFUSED.items():
        with pytest.raises(RequirementError, match=key):
            adaptive.remote(min_tier="relay", **{key: 1})
        assert why


@pytest.mark.parametrize("value", ["streaming", "dynamic"])
def test_generator_returns_are_not_supported_yet(value):
    with pytest.raises(RequirementError, match="not supported yet") as exc:
        adaptive.remote(min_tier="relay", num_returns=value)
    assert exc.value.field == "num_returns"


@pytest.mark.parametrize("kwargs,field", [
    ({"num_returns": 0}, "num_returns"), ({"num_returns": 1.5}, "num_returns"),
    ({"retry_exceptions": "yes"}, "retry_exceptions"), ({"retry_exceptions": [int]}, "retry_exceptions"),
    ({"retry_exceptions": []}, "retry_exceptions"),
    ({"runtime_env": "conda"}, "runtime_env"), ({"runtime_env": {"x": object()}}, "runtime_env"),
    ({"resources": {"CPU": 1}}, "resources"), ({"resources": {"GPU": 1}}, "resources"),
    ({"resources": {"accelerator_type:A100": 1}}, "resources"), ({"resources": {"x": -1}}, "resources"),
    ({"resources": {"x": 1.5}}, "resources"), ({"resources": ["x"]}, "resources"),
    ({"accelerator_type": ""}, "accelerator_type"), ({"accelerator_type": 3}, "accelerator_type"),
    ({"label_selector": {"rack": ""}}, "label_selector"), ({"label_selector": {"rack": "in()"}}, "label_selector"),
    ({"label_selector": ["rack"]}, "label_selector"), ({"label_selector": {"rack": 1}}, "label_selector"),
    ({"max_concurrency": 4}, "max_concurrency"), ({"max_task_retries": 1}, "max_task_retries"),
])
def test_bad_ray_values_fail_at_decoration_naming_the_field(kwargs, field):
    with pytest.raises(RequirementError) as exc:
        adaptive.remote(min_tier="relay", **kwargs)(f)
    assert exc.value.field == field


def test_a_class_takes_rays_actor_options_and_refuses_task_ones():
    cls = adaptive.remote(min_tier="cpu_ffmpeg", max_concurrency=4, max_task_retries=2, name="enc",
                          runtime_env={"env_vars": {"B": "2"}}, resources={"x": 1})(Job)
    assert cls.spec.name == "enc"  # name= names the job
    ray_opts = cls.requirement.ray
    assert (ray_opts.max_concurrency, ray_opts.max_task_retries) == (4, 2)
    assert cls.options(max_concurrency=8).requirement.ray.max_concurrency == 8
    for key, value in (("num_returns", 2), ("retry_exceptions", True), ("max_retries", 1)):
        with pytest.raises(RequirementError) as exc:
            adaptive.remote(min_tier="cpu_ffmpeg", **{key: value})(Job)
        assert exc.value.field == key
    for key in ("namespace", "lifetime", "get_if_exists", "max_restarts"):
        with pytest.raises(RequirementError) as exc:
            adaptive.remote(min_tier="cpu_ffmpeg", **{key: "x"})
        assert exc.value.field == key
    with pytest.raises(RequirementError) as exc:
        adaptive.remote(min_tier="cpu_ffmpeg", max_concurrency=0)(Job)
    assert exc.value.field == "max_concurrency"


# -- label selectors -----------------------------------------------------------------------------
def test_label_selector_terms_match_as_rays_do():
    (eq,), (neq,), (isin,), (notin,) = (parse_label_selector({"k": v}) for v in ("a", "!a", "in(a, b)", "!in(a,b)"))
    assert eq.matches({"k": "a"}) and not eq.matches({"k": "b"}) and not eq.matches({})
    assert neq.matches({"k": "b"}) and neq.matches({}) and not neq.matches({"k": "a"})
    assert isin.matches({"k": "b"}) and not isin.matches({"k": "c"}) and not isin.matches({})
    assert notin.matches({"k": "c"}) and notin.matches({}) and not notin.matches({"k": "a"})
    assert [t.ray_value() for t in (eq, neq, isin, notin)] == ["a", "!a", "in(a,b)", "!in(a,b)"]


@pytest.mark.parametrize("kwargs", [
    {"min_tier": "gpu_cuda", "fallback": False, "label_selector": {TIER_LABEL: "cpu_ffmpeg"}},
    {"min_tier": "gpu_cuda", "floor": "gpu_vaapi", "label_selector": {TIER_LABEL: "in(gpu_cuda,relay)"}},
    {"min_tier": "gpu_cuda", "fallback": False, "label_selector": {TIER_LABEL: "!gpu_cuda"}},
    {"min_tier": "relay", "pool": "default", "label_selector": {POOL_LABEL: "edge"}},
])
def test_a_selector_on_the_fabrics_labels_that_contradicts_the_tier_is_refused(kwargs):
    with pytest.raises(RequirementError) as exc:
        adaptive.remote(**kwargs)
    assert exc.value.field == "label_selector"
    assert (TIER_LABEL in str(exc.value) and "floor" in str(exc.value)) or POOL_LABEL in str(exc.value)


def test_a_selector_inside_the_tiers_asked_for_is_taken():
    req = adaptive.remote(min_tier="gpu_cuda", floor="cpu_ffmpeg", label_selector={TIER_LABEL: "in(gpu_cuda,gpu_apu)"})(f).requirement
    assert req.selector_dict() == {TIER_LABEL: "in(gpu_apu,gpu_cuda)"}
    with pytest.raises(RequirementError):  # a lower tier and the selector no longer agree: checked again
        req.replace(min_tier="gpu_cuda", floor="gpu_cuda", fallback=False, label_selector={TIER_LABEL: "gpu_apu"})


# -- placement filters, traces, fast path --------------------------------------------------------------
def _two(req, a_kw, z_kw):
    f_ = fleet(node("a", "cpu_ffmpeg", **a_kw), node("z", "cpu_ffmpeg", **z_kw))
    return both(f_, req)


def test_a_node_lacking_a_resource_is_never_chosen_and_the_trace_says_why():
    req = Requirement("cpu_ffmpeg", resources={"x": 1})
    d = _two(req, {}, {"ray_resources": {"x": 1.0}})
    assert d.node_id == "z" and d.trace.verdicts()["a"] == "resources"
    assert "filter resources" in d.explain()
    nobody = both(fleet(node("a", "cpu_ffmpeg")), Requirement("cpu_ffmpeg", resources={"gone": 1}))
    assert nobody.status == "deferred" and nobody.trace.steps[0].verdicts["a"] == "resources"


def test_accelerator_type_and_label_selector_filters_name_themselves():
    d = _two(Requirement("cpu_ffmpeg", accelerator_type="T4"), {}, {"ray_resources": {"accelerator_type:T4": 1.0}})
    assert d.node_id == "z" and d.trace.verdicts()["a"] == "accelerator_type"
    d = _two(Requirement("cpu_ffmpeg", label_selector={"fabric.io/rack": "r2"}), {"ray_labels": {"fabric.io/rack": "r1"}},
             {"ray_labels": {"fabric.io/rack": "r2"}})
    assert d.node_id == "z" and d.trace.verdicts()["a"] == "label_selector"
    assert "filter label_selector" in dry_run(fleet(node("a", "cpu_ffmpeg")), Requirement(
        "cpu_ffmpeg", label_selector={"rack": "r9"})).explain()


def test_a_requirement_with_ray_terms_never_provisions_a_node_that_would_lack_them():
    shape = NodeShape(name="s", tier=ComputeTier.CPU_FFMPEG)
    assert shape_has_ray_terms(shape, Requirement("cpu_ffmpeg"))
    assert shape_has_ray_terms(shape, Requirement("cpu_ffmpeg", label_selector={TIER_LABEL: "in(cpu_ffmpeg,gpu_cuda)"}))
    assert not shape_has_ray_terms(shape, Requirement("cpu_ffmpeg", label_selector={TIER_LABEL: "gpu_cuda"}))
    assert not shape_has_ray_terms(shape, Requirement("cpu_ffmpeg", label_selector={"rack": "r1"}))
    assert not shape_has_ray_terms(shape, Requirement("cpu_ffmpeg", resources={"x": 1}))
    assert not shape_has_ray_terms(shape, Requirement("cpu_ffmpeg", accelerator_type="A100"))


def test_the_generators_exercise_the_ray_filters_and_fast_agrees_with_reference():
    seen: set[str] = set()
    for seed in range(150):
        rnd = random.Random(seed)
        recs = [synth.random_record(rnd, i) for i in range(rnd.randint(1, 20))]
        fl = FleetView(recs, synth.mixed_settings())
        for _ in range(6):
            req = synth.random_requirement(rnd)
            fast = place(fl, req)
            ref = reference.place(fl, req, trace=True)
            assert fast.same_outcome(ref), f"{req!r}\nfast {fast}\nref  {ref}"
            if req.resources or req.label_selector or req.accelerator_type:
                seen.update(v for s in ref.trace.steps for v in s.verdicts.values())
            fl.commit(fast)
    assert {"resources", "label_selector", "accelerator_type"} <= seen


def test_a_nodes_ray_labels_and_resources_reach_its_placement_record():
    from fabric.core.placement.synth import node_capabilities

    caps = node_capabilities("cpu", 4, 4096)
    rec = RegistryRecord(node_id="n1", name="n1", capabilities=caps, labels={TIER_LABEL: "cpu_ffmpeg", "fabric.io/rack": "r1"},
                         ray_resources={"CPU": 4.0, "x": 2.0})
    view = rec.to_node_record(0.0)
    assert view.ray_labels["fabric.io/rack"] == "r1" and view.ray_resources["x"] == 2.0
    live = rec.model_copy(update={"last_seen": 5.0}).to_node_record(1.0, previous=view)  # the live-fields copy
    assert live.ray_resources == {"CPU": 4.0, "x": 2.0} and live.ray_labels == view.ray_labels
    assert NodeRecord.from_dict(view.to_dict()) == view
    assert RegistryRecord.model_validate_json(rec.model_dump_json()) == rec


def test_spilling_is_off_for_a_requirement_labels_cannot_say():
    from fabric.core.scheduling.spill import spill_target

    fl = FleetView([node("a", "cpu_ffmpeg", ray_resources={"x": 1.0})], synth.mixed_settings())
    for req in (Requirement("cpu_ffmpeg", resources={"x": 1}), Requirement("cpu_ffmpeg", accelerator_type="T4"),
                Requirement("cpu_ffmpeg", label_selector={"rack": "r1"})):
        assert spill_target(fl, synth.mixed_settings(), {}, req) == (None, None)


# -- what Ray is told ------------------------------------------------------------------------------------
NODE = "ab" * 28  # a Ray node id (hex)


def test_a_calls_ray_options_carry_rays_names_and_merge_the_selectors():
    from fabric.rayio.tasks import node_options, spill_options

    req = adaptive.remote(min_tier="gpu_cuda", floor="cpu_ffmpeg", resources={"x": 1}, accelerator_type="A100",
                          label_selector={TIER_LABEL: "in(gpu_cuda,cpu_ffmpeg)", "fabric.io/rack": "r1"},
                          runtime_env={"env_vars": {"A": "1"}}, num_returns=2, retry_exceptions=True)(f).requirement
    opts = node_options(NODE, req, 4, "t")
    assert opts["resources"] == {SLOTS_RESOURCE: 1, "x": 1.0}
    assert opts["accelerator_type"] == "A100"
    assert opts["label_selector"] == {TIER_LABEL: "in(gpu_cuda,cpu_ffmpeg)", "fabric.io/rack": "r1"}
    assert opts["runtime_env"] == {"env_vars": {"A": "1"}}
    assert (opts["num_returns"], opts["retry_exceptions"], opts["max_retries"]) == (2, True, 4)
    spilled = spill_options({TIER_LABEL: "in(gpu_cuda,gpu_apu,cpu_ffmpeg)"}, None, req, 4, "t")
    assert spilled["label_selector"][TIER_LABEL] == "in(gpu_cuda,cpu_ffmpeg)"
    plain = node_options(NODE, Requirement("cpu_ffmpeg"), 3, "t")
    assert plain["retry_exceptions"] is False and "runtime_env" not in plain and "num_returns" not in plain
    typed = node_options(NODE, Requirement("cpu_ffmpeg", ray=ray_call_options(retry_exceptions=[KeyError])), 3, "t")
    assert typed["retry_exceptions"] == [KeyError]


def test_a_jobs_actor_gets_rays_actor_options():
    from fabric.rayio.instances import actor_options

    req = adaptive.remote(min_tier="cpu_ffmpeg", max_concurrency=4, max_task_retries=2, accelerator_type="T4",
                          runtime_env={"env_vars": {"B": "2"}})(Job).requirement
    assert actor_options(req) == {"max_concurrency": 4, "max_task_retries": 2, "runtime_env": {"env_vars": {"B": "2"}},
                                  "accelerator_type": "T4"}
    assert actor_options(Requirement("cpu_ffmpeg")) == {}


def test_a_jobs_ray_options_survive_its_durable_row():
    import json

    from fabric.core.jobs.rows import requirement_from_row, requirement_row

    req = adaptive.remote(min_tier="cpu_ffmpeg", max_concurrency=4, runtime_env={"env_vars": {"B": "2"}}, resources={"x": 1},
                          label_selector={"rack": "!r1"}, accelerator_type="T4")(Job).requirement
    back = requirement_from_row(json.loads(json.dumps(requirement_row(req))))
    assert back == req and back.ray.max_concurrency == 4 and back.selector_dict() == {"rack": "!r1"}
    assert set(requirement_row(Requirement("cpu_ffmpeg"))) == {  # a plain requirement's row is as it was
        "min_tier", "floor", "fallback", "num_cpus", "memory_mib", "num_cores", "num_gpus", "gpu_model", "capabilities",
        "ports", "pool", "prefer", "exclusive", "payload_size", "when_full", "scale"}


def test_every_option_of_ray_remote_is_taken_or_refused_with_a_pointer_and_is_in_the_docs_table():
    from pathlib import Path

    options = pytest.importorskip("ray._common.ray_option_utils")
    table = (Path(__file__).resolve().parents[2] / "docs" / "ray-options.md").read_text()
    for key in sorted(set(options.task_options) | set(options.actor_options)):
        assert f"`{key}`" in table, f"docs/ray-options.md does not map Ray's {key}"
        for target in (f, Job):
            try:
                adaptive.remote(min_tier="relay", **{key: None})(target)
            except RequirementError as exc:
                assert "unknown argument" not in str(exc), f"Ray's {key} is refused without saying what to use"


def test_a_bundle_job_whose_ray_terms_no_node_has_is_a_no_node_fits_warning():
    from fabric.core.jobs.bundles import Bundle, BundleJob
    from fabric.core.jobs.validation import validate_bundle

    f_ = fleet(node("n1", "cpu", ray_resources={"x": 1.0}, ray_labels={"rack": "r1"}))
    b = Bundle(bundle_id="b", jobs=[
        BundleJob(name="has-x", requirement={"min_tier": "cpu_ffmpeg", "resources": {"x": 1}, "label_selector": {"rack": "r1"}}),
        BundleJob(name="needs-y", requirement={"min_tier": "cpu_ffmpeg", "resources": {"y": 1}}),  # no shape has it either
        BundleJob(name="rack-9", requirement={"min_tier": "cpu_ffmpeg", "label_selector": {"rack": "r9"}}),
    ])
    report = validate_bundle(b, synth.mixed_settings(), f_)
    assert report.ok
    assert {(i.code, i.path) for i in report.warnings} == {("no_node_fits", "jobs.1"), ("no_node_fits", "jobs.2")}

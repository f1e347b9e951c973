"""@adaptive.remote: arguments validated when decorating, presets, .options()."""

import pytest

from fabric import ComputeTier, FabricSettings, RequirementError, adaptive
from fabric.runtime import session
from fabric.runtime.client import AdaptiveFunction


def f(x):
    return x


def test_decorating_builds_the_requirement():
    af = adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg", num_cpus=2)(f)
    assert isinstance(af, AdaptiveFunction)
    assert af.requirement.min_tier is ComputeTier.GPU_APU
    assert af.requirement.floor is ComputeTier.CPU_FFMPEG
    assert af.requirement.num_cpus == 2
    assert af.dispatch.on_no_capacity == "queue" and af.dispatch.max_retries == 3
    assert af.__name__ == "f" and af.function is f


def test_hard_requirement():
    af = adaptive.remote(min_tier="gpu_cuda", fallback=False)(f)
    assert af.requirement.hard and af.requirement.floor is ComputeTier.GPU_CUDA


def test_operation_presets():
    assert adaptive.remote(operation="lupine")(f).requirement.hard
    enc = adaptive.remote(operation="vaapi_encode")(f).requirement
    assert (enc.min_tier, enc.floor) == (ComputeTier.GPU_VAAPI, ComputeTier.CPU_FFMPEG)
    assert adaptive.remote(operation="flac")(f).requirement.floor is ComputeTier.RELAY


@pytest.mark.parametrize("kwargs,field", [
    ({"min_tier": "gpu_cuad"}, "min_tier"),
    ({"min_tier": "cpu_ffmpeg", "floor": "gpu_cuda"}, "floor"),
    ({"min_tier": "relay", "num_cpus": -1}, "num_cpus"),
    ({"min_tier": "relay", "num_cpus": float("nan")}, "num_cpus"),
    ({"min_tier": "relay", "ports": ["http"]}, "ports"),
    ({"min_tier": "relay", "on_no_capacity": "explode"}, "on_no_capacity"),
    ({"min_tier": "relay", "queue_timeout_s": 0}, "queue_timeout_s"),
    ({"min_tier": "relay", "max_retries": "3"}, "max_retries"),
    ({"min_tier": "relay", "min_teir": "relay"}, "min_teir"),
    ({"operation": "lupin"}, "operation"),
    ({}, "min_tier"),
])
def test_bad_arguments_fail_at_decoration(kwargs, field):
    with pytest.raises(RequirementError) as exc:
        adaptive.remote(**kwargs)
    assert exc.value.field == field


def test_bare_decorator_is_refused():
    with pytest.raises(RequirementError, match="min_tier"):
        adaptive.remote(f)


def test_options_revalidates_and_keeps_the_function():
    af = adaptive.remote(min_tier="gpu_apu")(f)
    cpu = af.options(min_tier="cpu_ffmpeg", num_cpus=2)
    assert cpu.requirement.min_tier is ComputeTier.CPU_FFMPEG and cpu.requirement.num_cpus == 2
    assert af.requirement.min_tier is ComputeTier.GPU_APU  # the original is unchanged
    assert cpu.function is f
    with pytest.raises(RequirementError):
        af.options(num_gpus=-1)
    preset = af.options(operation="lupine")
    assert preset.requirement.hard and preset.requirement.min_tier is ComputeTier.GPU_CUDA


def test_calling_directly_explains_remote():
    af = adaptive.remote(min_tier="relay")(f)
    with pytest.raises(TypeError, match=r"\.remote"):
        af(1)


def test_operations_of_the_running_fabric_are_known():
    custom = FabricSettings.load({"operations": {"thumbs": {"min_tier": "gpu_apu", "floor": "cpu_ffmpeg"}}})
    with pytest.raises(RequirementError):
        adaptive.remote(operation="thumbs")
    session.use_settings(custom, driver=OneSession())  # what fabric.up does once the fabric is up
    try:
        assert adaptive.remote(operation="thumbs")(f).requirement.floor is ComputeTier.CPU_FFMPEG
    finally:
        session.end()


class OneSession:
    """A driver seam whose Ray session never changes."""

    key = object()

    def session_key(self):
        return self.key


def test_settings_in_force_belong_to_the_ray_session_they_were_handed_to():
    custom = FabricSettings.load({"operations": {"thumbs": {"min_tier": "gpu_apu", "floor": "cpu_ffmpeg"}}})
    driver = OneSession()
    session.use_settings(custom, driver=driver)
    try:
        assert session.settings_in_force() is custom
        driver.key = object()  # ray.shutdown() and a new ray.init(): another cluster, another fabric
        assert session.settings_in_force() is None
        with pytest.raises(RequirementError):
            adaptive.remote(operation="thumbs")
        assert session.session(driver).settings is None  # the new Ray session gets a fresh session
    finally:
        session.end()


@pytest.mark.parametrize("kwargs, field", [
    # OverflowError and TypeError escaped these before (issue 12's fuzz run)
    ({"min_tier": "relay", "queue_timeout_s": 10**400}, "queue_timeout_s"),
    ({"min_tier": "relay", "queue_timeout_s": float("inf")}, "queue_timeout_s"),
    ({"min_tier": "relay", "ports": 5}, "ports"),
    ({"min_tier": "relay", "capabilities": 7}, "capabilities"),
    ({"min_tier": "relay", "num_cpus": 10**400}, "num_cpus"),
    ({"min_tier": "relay", "on_no_capacity": ["queue"]}, "on_no_capacity"),
    ({"min_tier": "relay", "max_retries": 10**400}, "max_retries"),
    ({"min_tier": "relay", "priority": 10**400}, "priority"),
    ({"min_tier": "relay", "name": 5}, "name"),
    ({"min_tier": "relay", "name": "n" * 100_000}, "name"),
    ({"operation": ["lupine"]}, "operation"),
])
def test_hostile_decorator_arguments_fail_at_decoration(kwargs, field):
    with pytest.raises(RequirementError) as exc:
        adaptive.remote(**kwargs)
    assert exc.value.field == field
    with pytest.raises(RequirementError) as exc:
        adaptive.remote(min_tier="relay")(f).options(**kwargs)
    assert exc.value.field == field

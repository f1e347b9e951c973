"""Requirement and PlacementContext: the API examples, defaults, operations, validation."""

import math
import pickle

import pytest

import fabric
from fabric.core.errors import RequirementError
from fabric.core.placement import PlacementContext, Requirement
from fabric.core.settings import FabricSettings, OperationSpec, Pool
from fabric.core.tiers import ComputeTier


def test_api_examples():
    req = Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", num_cpus=1, payload_size=1024)
    assert req.min_tier is ComputeTier.GPU_APU and req.floor is ComputeTier.CPU_FFMPEG
    assert req.levels == (ComputeTier.GPU_APU, ComputeTier.CPU_FFMPEG)
    hard = Requirement(min_tier="gpu_cuda", fallback=False)
    assert hard.hard and hard.floor is ComputeTier.GPU_CUDA and hard.levels == (ComputeTier.GPU_CUDA,)
    assert Requirement(min_tier="gpu_vaapi", when_full="wait").when_full == "wait"
    assert fabric.Requirement is Requirement


def test_defaults():
    r = Requirement()
    assert r.min_tier is ComputeTier.RELAY and r.floor is ComputeTier.RELAY
    assert r.num_cpus == 1.0 and r.memory_mib == 0 and r.num_gpus == 0 and r.prefer == "highest"
    assert r.when_full == "spill" and r.scale == "degrade_first" and not r.exclusive
    soft = Requirement(min_tier="gpu_cuda")
    assert soft.floor is ComputeTier.RELAY and len(soft.levels) == 11


def test_hashable_immutable_and_class_key_ignores_payload():
    a = Requirement(min_tier="gpu_apu", payload_size=10)
    b = Requirement(min_tier="gpu_apu", payload_size=20)
    assert a.class_key == b.class_key and a != b
    assert a == Requirement(min_tier="gpu_apu", payload_size=10) and hash(a) == hash(Requirement(min_tier="gpu_apu", payload_size=10))
    assert Requirement(capabilities=("x", "y")).class_key == Requirement(capabilities=["y", "x"]).class_key
    with pytest.raises(AttributeError):
        a.num_cpus = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(a)) == a
    assert {a, b, Requirement(min_tier="gpu_apu", payload_size=10)} == {a, b}


def test_replace_keeps_intent():
    hard = Requirement(min_tier="gpu_cuda", fallback=False)
    assert hard.replace(min_tier="gpu_apu").floor is ComputeTier.GPU_APU
    soft = Requirement(min_tier="gpu_cuda", floor="cpu_ffmpeg")
    assert soft.replace(num_cpus=2).floor is ComputeTier.CPU_FFMPEG
    assert Requirement().replace(min_tier="gpu_cuda").floor is ComputeTier.RELAY
    assert soft.replace(fallback=False).hard


@pytest.mark.parametrize("kwargs,field", [
    ({"min_tier": "gpu_quantum"}, "min_tier"),
    ({"min_tier": 7}, "min_tier"),
    ({"floor": "nope"}, "floor"),
    ({"min_tier": "cpu_ffmpeg", "floor": "gpu_cuda"}, "floor"),
    ({"min_tier": "gpu_cuda", "floor": "cpu_ffmpeg", "fallback": False}, "floor"),
    ({"num_cpus": -1}, "num_cpus"),
    ({"num_cpus": math.nan}, "num_cpus"),
    ({"num_cpus": math.inf}, "num_cpus"),
    ({"num_cpus": "2"}, "num_cpus"),
    ({"num_cpus": True}, "num_cpus"),
    ({"memory_mib": -5}, "memory_mib"),
    ({"memory_mib": math.nan}, "memory_mib"),
    ({"num_cores": 1.5}, "num_cores"),
    ({"num_gpus": -0.5}, "num_gpus"),
    ({"num_gpus": 1.5}, "num_gpus"),
    ({"gpu_model": "RTX"}, "gpu_model"),
    ({"num_gpus": 1, "gpu_model": " "}, "gpu_model"),
    ({"capabilities": "arch:aarch64"}, "capabilities"),
    ({"capabilities": ("",)}, "capabilities"),
    ({"ports": ("1935",)}, "ports"),
    ({"ports": ("99999/tcp",)}, "ports"),
    ({"ports": ("1935/sctp",)}, "ports"),
    ({"ports": ("0/tcp",)}, "ports"),
    ({"ports": "1935/tcp"}, "ports"),
    ({"ports": (1935,)}, "ports"),
    ({"pool": ""}, "pool"),
    ({"prefer": "cheapest"}, "prefer"),
    ({"when_full": "queue"}, "when_full"),
    ({"scale": "always"}, "scale"),
    ({"payload_size": -1}, "payload_size"),
])
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(RequirementError) as info:
        Requirement(**kwargs)
    assert info.value.field == field
    assert isinstance(info.value, ValueError) and str(info.value).startswith(field)
    again = pickle.loads(pickle.dumps(info.value))
    assert again.field == field


def test_ports_are_normalised():
    assert Requirement(ports=("8080/TCP", "1935/tcp", "1935/tcp")).ports == ("1935/tcp", "8080/tcp")


def test_validate_against_settings_unknown_pool():
    settings = FabricSettings()
    assert Requirement(pool="default").validate_against(settings).pool == "default"
    with pytest.raises(RequirementError) as info:
        Requirement(pool="gpu-farm").validate_against(settings)
    assert info.value.field == "pool" and "gpu-farm" in str(info.value)


def test_operations_resolve_to_requirements():
    settings = FabricSettings()
    lupine = Requirement.from_operation("lupine", settings)
    assert lupine.hard and lupine.min_tier is ComputeTier.GPU_CUDA
    vaapi = Requirement.from_operation("vaapi_encode")
    assert vaapi.min_tier is ComputeTier.GPU_VAAPI and vaapi.floor is ComputeTier.CPU_FFMPEG
    flac = Requirement.from_operation("flac", settings, num_cpus=2)
    assert flac.floor is ComputeTier.RELAY and flac.num_cpus == 2
    with pytest.raises(RequirementError) as info:
        Requirement.from_operation("nope", settings)
    assert info.value.field == "operation"
    custom = FabricSettings(pools=(Pool(name="default"), Pool(name="gpu")),
                            operations={"x": OperationSpec(min_tier="gpu_apu", pool="gpu", when_full="wait", capabilities=("cuda",))})
    x = Requirement.from_operation("x", custom)
    assert x.pool == "gpu" and x.when_full == "wait" and x.capabilities == frozenset({"cuda"})
    with pytest.raises(RequirementError):
        Requirement.from_operation("x", FabricSettings(operations=custom.operations))


@pytest.mark.parametrize("kwargs,field", [
    ({"same_node": "maybe"}, "same_node"),
    ({"same_az": "no"}, "same_az"),
    ({"same_cloud": ""}, "same_cloud"),
    ({"intra_zone": "strict"}, "intra_zone"),
    ({"on_runtime_failure": "retry"}, "on_runtime_failure"),
    ({"recovering": True, "on_runtime_failure": "drop"}, "on_runtime_failure"),
    ({"launch_policy": "prefer_spare"}, "launch_policy"),
    ({"replica_index": 2}, "replica_index"),
])
def test_context_validation(kwargs, field):
    with pytest.raises(RequirementError) as info:
        PlacementContext(**kwargs)
    assert info.value.field == field


def test_context_policies():
    assert PlacementContext().avoid_spares and not PlacementContext().prefer_spares
    assert not PlacementContext(launch_policy="allow_spare").avoid_spares
    rec = PlacementContext(recovering=True, on_runtime_failure="prefer_spare", launch_policy="avoid_spare")
    assert rec.prefer_spares and not rec.avoid_spares
    assert PlacementContext(exclude_nodes={"a"}).exclude_nodes == frozenset({"a"})
    assert PlacementContext().simple and not PlacementContext(template="t").simple
    assert pickle.loads(pickle.dumps(rec)) == rec


def test_with_payload_is_the_same_class():
    base = Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", ports=("1935/tcp",))
    call = base.with_payload(4096)
    assert call.payload_size == 4096 and call.class_key == base.class_key and call.class_id == base.class_id
    assert call == Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", ports=("1935/tcp",), payload_size=4096)
    assert hash(call) == hash(Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg", ports=("1935/tcp",), payload_size=4096))
    with pytest.raises(RequirementError):
        base.with_payload(-1)


class _Hostile:
    """Every protocol raises: ==, hash, iteration, truth, repr. Type checks come first, so it is
    refused as a wrong type without being touched."""

    def _boom(self, *args, **kwargs):
        raise RuntimeError("touched")

    __eq__ = __hash__ = __iter__ = __len__ = __bool__ = __repr__ = __float__ = __index__ = _boom


_deep: list = []
for _ in range(5000):
    _deep = [_deep]


@pytest.mark.parametrize("kwargs, field", [
    # the fuzz run: TypeError and OverflowError escaped these (issue 12)
    ({"ports": 5}, "ports"),
    ({"capabilities": 7}, "capabilities"),
    ({"capabilities": None}, "capabilities"),
    ({"num_cpus": 10**400}, "num_cpus"),
    ({"memory_mib": -(10**400)}, "memory_mib"),
    ({"num_gpus": 10**400}, "num_gpus"),
    ({"num_cores": 2**1024}, "num_cores"),
    ({"num_cpus": 1e300}, "num_cpus"),
    ({"prefer": 10**5000}, "prefer"),                  # its repr alone raises ValueError
    ({"min_tier": _deep}, "min_tier"),                 # its repr alone raises RecursionError
    ({"when_full": _Hostile()}, "when_full"),
    ({"fallback": _Hostile()}, "fallback"),
    ({"capabilities": [_Hostile()]}, "capabilities"),
    ({"capabilities": {"a": 1}}, "capabilities"),
    ({"capabilities": [f"t{i}" for i in range(100_000)]}, "capabilities"),
    ({"capabilities": ["x" * 100_000]}, "capabilities"),
    ({"num_gpus": 1, "gpu_model": "x" * 100_000}, "gpu_model"),
    ({"pool": "p" * 100_000}, "pool"),
    ({"ports": ["1935/tcp" + " " * 100_000]}, "ports"),
    ({"payload_size": 10**400}, "payload_size"),
])
def test_hostile_input_is_a_requirement_error_naming_the_field(kwargs, field):
    with pytest.raises(RequirementError) as info:
        Requirement(**kwargs)
    assert info.value.field == field
    assert len(str(info.value)) < 400  # the value is shown cut short, never whole


def test_amount_bounds_are_inclusive_and_documented():
    from fabric.core.placement.requirement import MAX_AMOUNT, MAX_ITEMS, MAX_NAME

    assert Requirement(num_cpus=MAX_AMOUNT, memory_mib=int(MAX_AMOUNT)).num_cpus == MAX_AMOUNT
    assert len(Requirement(capabilities=[f"t{i}" for i in range(MAX_ITEMS)]).capabilities) == MAX_ITEMS
    assert Requirement(pool="p" * MAX_NAME).pool == "p" * MAX_NAME
    assert Requirement(capabilities={"a", "b"}, ports=frozenset({"80/tcp"})).capabilities == {"a", "b"}


def test_an_unknown_operation_of_any_type_is_refused():
    for name in (["vaapi_encode"], 10**5000):
        with pytest.raises(RequirementError) as info:
            Requirement.from_operation(name)
        assert info.value.field == "operation"

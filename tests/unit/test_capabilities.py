"""NodeCapabilities: validation naming the field, derived tiers, Ray resources and labels."""

import math

import pytest
from pydantic import ValidationError
from ray._private.label_utils import validate_node_label_syntax, validate_node_labels

from fabric import ComputeTier, GpuInfo, NodeCapabilities
from fabric.core.capabilities import FramebufferInfo, Limitations, classify, derive_max_concurrent_tasks, label_value, normalise_gpu_name

VAAPI_ENCODE = {"VAProfileH264Main": ("VAEntrypointVLD", "VAEntrypointEncSlice")}
VAAPI_DECODE = {"VAProfileH264Main": ("VAEntrypointVLD",)}


def node(**kw) -> NodeCapabilities:
    base = dict(name="n", cpu_logical=4, cpu_physical=4, cpu_usable=4, memory_mib=8192)
    base.update(kw)
    return NodeCapabilities(**base)


def rtx4070(**kw) -> GpuInfo:
    return GpuInfo(vendor="nvidia", model="NVIDIA GeForce RTX 4070", vram_mib=12282, discrete=True, cuda=True, bus="pcie", **kw)


def field_of(exc: ValidationError) -> set[str]:
    return {".".join(str(p) for p in e["loc"]) for e in exc.errors()}


@pytest.mark.parametrize("kw,field", [
    ({"gpus": [{"vendor": "nvidia", "model": "x", "vram_mib": -1, "discrete": True}]}, "gpus.0.vram_mib"),
    ({"gpus": [{"vendor": "matrox", "model": "x", "discrete": True}]}, "gpus.0.vendor"),
    ({"cpu_usable": math.nan}, "cpu_usable"),
    ({"cpu_usable": 0}, "cpu_usable"),
    ({"memory_mib": -5}, "memory_mib"),
    ({"name": ""}, "name"),
    ({"roles": ["superhero"]}, "roles"),
    ({"storage": [{"device": "/dev/sda", "size_gib": math.inf}]}, "storage.0.size_gib"),
    ({"limitations": {"max_concurrent_tasks": 0}}, "limitations.max_concurrent_tasks"),
    ({"gpu_count": 3}, "gpu_count"),
])
def test_bad_values_name_the_field(kw, field):
    with pytest.raises(ValidationError) as exc:
        node(**kw)
    assert field in field_of(exc.value)


def test_tiers_follow_seed_002():
    ws = node(cpu_usable=12, memory_mib=31132, gpus=[
        rtx4070(),
        GpuInfo(index=1, vendor="amd", model="AMD Radeon Graphics", vram_mib=512, discrete=False, vaapi_profiles=VAAPI_ENCODE),
    ])
    assert ws.tier is ComputeTier.GPU_CUDA
    assert ws.tiers == (ComputeTier.GPU_CUDA, ComputeTier.GPU_APU, ComputeTier.CPU_FFMPEG, ComputeTier.RELAY)
    discrete_amd = node(gpus=[GpuInfo(vendor="amd", model="AMD Radeon RX 7600", vram_mib=8192, discrete=True, vaapi_profiles=VAAPI_ENCODE)])
    assert discrete_amd.tier is ComputeTier.GPU_VAAPI
    assert node().tier is ComputeTier.CPU_FFMPEG


def test_vaapi_on_nvidia_never_makes_a_vaapi_tier():
    # VA-API on NVIDIA is decode-only (nvidia-vaapi-driver); even a claimed encode entrypoint does not count.
    no_cuda = node(gpus=[GpuInfo(vendor="nvidia", model="NVIDIA GeForce GTX 1050", discrete=True, vaapi_profiles=VAAPI_ENCODE)])
    assert ComputeTier.GPU_VAAPI not in no_cuda.tiers and ComputeTier.GPU_APU not in no_cuda.tiers


def test_decode_only_vaapi_serves_no_gpu_tier():
    igpu = node(gpus=[GpuInfo(vendor="intel", model="Intel UHD 620", discrete=False, vaapi_profiles=VAAPI_DECODE)])
    assert igpu.tier is ComputeTier.CPU_FFMPEG


def test_small_box_and_relay_role_only_relay():
    assert node(cpu_usable=1, cpu_logical=1, cpu_physical=1, memory_mib=1024).tiers == (ComputeTier.RELAY,)
    assert node(roles=["relay"], gpus=[rtx4070()]).tiers == (ComputeTier.RELAY,)


def test_roles_and_framebuffer_add_tiers():
    n = node(roles=["batch", "dsp"], framebuffer=FramebufferInfo(resolution="3840x2160"))
    assert n.tiers == (ComputeTier.CPU_FFMPEG, ComputeTier.BATCH, ComputeTier.FRAMEBUFFER, ComputeTier.DSP, ComputeTier.RELAY)
    assert classify(n) == n.tiers


def test_max_concurrent_tasks_from_hardware():
    assert derive_max_concurrent_tasks(12.0, (ComputeTier.GPU_CUDA,)) == 12
    assert derive_max_concurrent_tasks(1.5, (ComputeTier.CPU_FFMPEG,)) == 1
    assert derive_max_concurrent_tasks(8, (ComputeTier.RELAY,)) == 1


def test_ray_resources_carry_slots_and_tier_markers():
    n = node(limitations=Limitations(max_concurrent_tasks=3))
    assert n.to_ray_resources() == {"fabric.slots": 3.0, "fabric.tier.cpu_ffmpeg": 1.0, "fabric.tier.relay": 1.0}


@pytest.mark.parametrize("caps", [
    node(cpu_usable=12, memory_mib=31132, gpus=[rtx4070()], name="qfox-1.tail-abc123.ts.net"),
    node(name="weird name/with:colons and spaces that go on and on and on and on for a very long time indeed", arch="arm64", roles=["relay"]),
    node(gpus=[GpuInfo(vendor="amd", model="AMD Custom GPU 0405 (radeonsi, vangogh, LLVM 15.0.7, DRM 3.49)", discrete=False, vaapi_profiles=VAAPI_ENCODE)]),
])
def test_labels_pass_rays_own_validators(caps):
    labels = caps.to_ray_labels(pool="default", pool_tier="fixed", zone="home lab")
    validate_node_labels(labels)
    validate_node_label_syntax(labels)
    validate_node_label_syntax(caps.to_k3s_labels())
    assert labels["fabric.io/tier"] == caps.tier.value


def test_gpu_names_normalised_like_rays_accelerator_type():
    assert normalise_gpu_name("NVIDIA GeForce RTX 4070") == "GeForce-RTX-4070"
    assert normalise_gpu_name("Tesla V100-SXM2-16GB") == "V100"
    assert normalise_gpu_name("NVIDIA A100-SXM4-40GB") == "A100"
    assert normalise_gpu_name("NVIDIA H200") == "H200"
    assert rtx4070().label_name == "GeForce-RTX-4070"


def test_normalisation_matches_ray_for_nvidia_names():
    from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager as M

    for name in ["NVIDIA GeForce RTX 4070", "Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3",
                 "NVIDIA GeForce RTX 2080 SUPER", "NVIDIA RTX PRO 6000 Blackwell", "NVIDIA L4"]:
        assert normalise_gpu_name(name) == label_value(M._gpu_name_to_accelerator_type(name)), name


def test_k3s_labels_use_seed_002_names():
    labels = node(gpus=[rtx4070()], arch="aarch64").to_k3s_labels()
    assert set(labels) == {f"topology.researchstack.io/{k}" for k in ("role", "tier", "gpu", "arm64", "storage-tier", "network")}
    assert labels["topology.researchstack.io/arm64"] == "true"
    assert labels["topology.researchstack.io/gpu"] == "nvidia-geforce-rtx-4070"


def test_json_round_trip_rederives_tiers():
    n = node(gpus=[rtx4070()])
    data = n.model_dump(mode="json")
    assert data["tier"] == "gpu_cuda" and data["tiers"][0] == "gpu_cuda"
    assert NodeCapabilities.model_validate(data) == n


def test_capability_tags():
    tags = node(gpus=[rtx4070(encoders=["h264", "hevc"])], arch="aarch64").capability_tags
    assert {"arch:aarch64", "gpu:nvidia", "encode:hevc", "cuda", "tier:gpu_cuda"} <= tags


def test_label_value_edges():
    assert label_value("") == "unknown"
    assert label_value("--a--") == "a"
    assert len(label_value("x" * 200)) == 63


def test_unserved_reasons_round_trip_by_tier_name():
    n = node(unserved={"gpu_vaapi": "VA-API encode not proven: no ffmpeg"})
    assert n.unserved == {ComputeTier.GPU_VAAPI: "VA-API encode not proven: no ffmpeg"}
    data = n.model_dump(mode="json")
    assert data["unserved"] == {"gpu_vaapi": "VA-API encode not proven: no ffmpeg"}
    assert NodeCapabilities.model_validate(data) == n and node().unserved == {}
    with pytest.raises(ValidationError) as exc:
        node(unserved={"gpu_warp": "no such tier"})
    assert any(loc.startswith("unserved") for loc in field_of(exc.value))

"""Every bundled profile classifies to the tier its name promises, serves exactly the expected
tiers, and produces Ray labels/resources that Ray's own validators accept."""

import json
import re

import pytest
from ray._private.label_utils import parse_node_labels_string, validate_node_label_syntax, validate_node_labels

from fabric import ComputeTier
from probes.profiles import profile_info, profile_path, profiles
from probes import RecordedSources, probe_node

T = ComputeTier
SERVED = {
    "gpu-cuda-workstation": (T.GPU_CUDA, T.GPU_APU, T.CPU_FFMPEG, T.FRAMEBUFFER, T.RELAY),
    "steamdeck-apu": (T.GPU_APU, T.CPU_FFMPEG, T.FRAMEBUFFER, T.RELAY),
    "cpu-only-box": (T.CPU_FFMPEG, T.RELAY),
    "arm64-board": (T.CPU_FFMPEG, T.FRAMEBUFFER, T.RELAY),
    "edge-relay": (T.RELAY,),
    "amd-discrete-vaapi": (T.GPU_VAAPI, T.CPU_FFMPEG, T.RELAY),
    "intel-igpu-nuc": (T.GPU_APU, T.CPU_FFMPEG, T.RELAY),
}
_K8S_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def probe(name):
    return probe_node(RecordedSources(profile_path(name)))


def test_the_issue_profiles_are_bundled():
    assert set(profiles()) == set(SERVED)
    assert {"gpu-cuda-workstation", "steamdeck-apu", "cpu-only-box", "arm64-board", "edge-relay"} <= set(profiles())


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(ValueError, match="profiles: amd-discrete-vaapi, arm64-board"):
        profile_path("gpu-cuda-workstaton")


@pytest.mark.parametrize("name", sorted(SERVED))
def test_profile_classifies_as_promised(name):
    caps = probe(name)
    info = profile_info(name)
    assert caps.tier is ComputeTier.parse(info["expect_tier"])
    assert caps.tiers == SERVED[name]
    assert caps.source == name
    assert not [n for n in caps.limitations.notes if n.startswith("internal:")]
    assert (profile_path(name) / "PROVENANCE.md").is_file()


@pytest.mark.parametrize("name", sorted(SERVED))
def test_profile_labels_and_resources_pass_rays_validators(name):
    caps = probe(name)
    labels = caps.to_ray_labels(pool="default", pool_tier="fixed", zone="lab-1")
    validate_node_label_syntax(labels)
    validate_node_labels(labels)
    as_string = ",".join(f"{k}={v}" for k, v in labels.items())
    assert parse_node_labels_string(as_string) == labels
    resources = caps.to_ray_resources()
    assert resources["fabric.slots"] == caps.limitations.max_concurrent_tasks
    assert {k.removeprefix("fabric.tier.") for k in resources if k.startswith("fabric.tier.")} == {t.value for t in caps.tiers}
    for key, value in caps.to_k3s_labels().items():
        assert key.startswith("topology.researchstack.io/") and len(value) <= 63 and _K8S_VALUE.match(value), (key, value)


def test_the_workstation_is_seed_002s_qfox_1():
    caps = probe("gpu-cuda-workstation")
    assert (caps.name, caps.arch, caps.cpu_usable, caps.memory_mib) == ("qfox-1", "x86_64", 12.0, 31132)
    nvidia, amd = caps.gpus
    assert (nvidia.model, nvidia.vram_mib, nvidia.cuda, nvidia.discrete, nvidia.compute_capability) == ("NVIDIA GeForce RTX 4070", 12282, True, True, "8.9")
    assert nvidia.render_node == "/dev/dri/renderD128" and nvidia.encoders == ("av1", "h264", "hevc")
    assert (amd.vendor.value, amd.discrete, amd.bus, amd.vram_mib) == ("amd", False, "integrated", 512)
    assert {"h264_nvenc", "hevc_nvenc", "h264_vaapi"} <= set(caps.ffmpeg.working)
    assert caps.storage_kind.value == "nvme" and caps.framebuffer.resolution == "3840x2160"
    assert caps.tailnet.dns_name == "qfox-1.tail-abc123.ts.net"
    assert caps.to_ray_labels()["fabric.io/gpu"] == "GeForce-RTX-4070"


def test_the_deck_is_an_apu_even_though_its_vainfo_looks_like_a_discrete_cards():
    caps = probe("steamdeck-apu")
    [gpu] = caps.gpus
    assert gpu.model == "AMD Custom GPU 0405" and not gpu.discrete and gpu.encoders == ("h264", "hevc")
    discrete = probe("amd-discrete-vaapi").gpus[0]
    assert discrete.discrete and set(discrete.vaapi_profiles) <= set(gpu.vaapi_profiles)


def test_cpu_only_box_lists_but_does_not_have_hardware_encoders():
    caps = probe("cpu-only-box")
    assert "h264_nvenc" in caps.ffmpeg.listed and "h264_nvenc" not in caps.ffmpeg.working
    assert "libx264" in caps.ffmpeg.working
    assert any(n.startswith("av1_nvenc, h264_nvenc, hevc_nvenc listed but their test encode failed: Cannot load libcuda.so.1") for n in caps.limitations.notes)
    assert caps.storage_kind.value == "virtual"


def test_arm64_board_and_edge_relay():
    arm = probe("arm64-board")
    assert (arm.arch, arm.cpu_usable, arm.to_k3s_labels()["topology.researchstack.io/arm64"]) == ("aarch64", 4.0, "true")
    relay = probe("edge-relay")
    assert relay.roles == ("relay",) and relay.limitations.max_concurrent_tasks == 1 and relay.tailnet is not None


def test_max_concurrent_tasks_override_and_declared_roles_override():
    assert probe_node(RecordedSources(profile_path("cpu-only-box")), max_concurrent_tasks=1).limitations.max_concurrent_tasks == 1
    caps = probe_node(RecordedSources(profile_path("cpu-only-box")), roles=["relay"])
    assert caps.tiers == (T.RELAY,)
    with pytest.raises(ValueError, match="unknown role"):
        probe_node(RecordedSources(profile_path("cpu-only-box")), roles=["superhero"])
    with pytest.raises(ValueError):
        probe_node(RecordedSources(profile_path("cpu-only-box")), max_concurrent_tasks=0)


def test_profile_json_round_trips_through_the_model():
    from fabric import NodeCapabilities

    caps = probe("gpu-cuda-workstation")
    again = NodeCapabilities.model_validate(json.loads(caps.model_dump_json()))
    assert again == caps and again.tier is ComputeTier.GPU_CUDA


@pytest.mark.parametrize("bad", ["4", 2.5, True, 10**400, 1 << 31])
def test_a_max_concurrent_tasks_override_that_is_no_count_is_a_value_error(bad):
    # "4" and 2.5 compared or overflowed as a TypeError before (issue 12); 10**400 reached Ray
    with pytest.raises(ValueError, match="max_concurrent_tasks must be an integer"):
        probe_node(RecordedSources(profile_path("cpu-only-box")), max_concurrent_tasks=bad)

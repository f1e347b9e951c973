"""Probes prove what they claim (issue 11): a hardware encoder is in a GPU's ``encoders`` (and in
the tags derived from them) only when its one-frame test encode succeeded, a VA-API tier only
when at least one VA-API encode was proven on that GPU's render node, and the capabilities say
why a tier is not served. Each recording is a bundled profile copied to tmp_path and edited."""

import shutil
from pathlib import Path

import pytest

from fabric import ComputeTier
from probes.profiles import profile_path, profiles
from probes import RecordedSources, probe_node
from probes.vaapi import ENCODE_ENTRYPOINTS, parse_vainfo

T = ComputeTier
VAAPI_TIERS = {T.GPU_VAAPI, T.GPU_APU}
#: The VA-API tier each VA-API profile serves, and its GPU's render node.
VAAPI_PROFILES = {"amd-discrete-vaapi": T.GPU_VAAPI, "steamdeck-apu": T.GPU_APU, "intel-igpu-nuc": T.GPU_APU}


def copy_profile(name: str, tmp_path: Path) -> Path:
    dest = tmp_path / name
    shutil.copytree(profile_path(name), dest)
    return dest


def probe(rec: Path):
    return probe_node(RecordedSources(rec))


def encode_entrypoints(gpu) -> list[str]:
    return [ep for eps in gpu.vaapi_profiles.values() for ep in eps if ep in ENCODE_ENTRYPOINTS]


@pytest.mark.parametrize("name", sorted(VAAPI_PROFILES))
def test_vaapi_hardware_without_ffmpeg_serves_no_vaapi_tier(name, tmp_path):
    rec = copy_profile(name, tmp_path)
    shutil.rmtree(rec / "ffmpeg")
    assert parse_vainfo((rec / "vainfo/renderD128.txt").read_text()).encodes  # vainfo does offer encode
    caps = probe(rec)
    assert not VAAPI_TIERS & set(caps.tiers) and caps.tier is T.CPU_FFMPEG  # cpu_ffmpeg does not need ffmpeg
    [gpu] = caps.gpus
    assert gpu.encoders == () and encode_entrypoints(gpu) == [] and gpu.decoders == tuple(sorted(gpu.decoders))
    assert caps.unserved[VAAPI_PROFILES[name]] == "VA-API encode not proven: no ffmpeg"
    assert not {t for t in caps.capability_tags if t.startswith("encode:")} and "vaapi-encode" not in caps.capability_tags


def test_listed_but_failed_test_encode_is_not_listed_nor_served(tmp_path):
    rec = copy_profile("steamdeck-apu", tmp_path)
    assert "h264_vaapi" in (rec / "ffmpeg/encoders.txt").read_text()
    (rec / "ffmpeg/test-h264_vaapi.txt").write_text("exit=1\n[h264_vaapi @ 0x1] No usable encoding entrypoint found for profile VAProfileH264High (7).\n")
    (rec / "ffmpeg/test-hevc_vaapi.txt").unlink()  # never tested: proves nothing either
    caps = probe(rec)
    assert T.GPU_APU not in caps.tiers and caps.tier is T.CPU_FFMPEG
    assert caps.gpus[0].encoders == () and "h264_vaapi" not in caps.ffmpeg.working
    assert caps.unserved[T.GPU_APU] == ("VA-API encode not proven: test encode h264_vaapi failed (exit=1); "
                                        "no test-encode result for hevc_vaapi")


def test_one_proven_encode_serves_the_tier_and_lists_only_that_codec(tmp_path):
    rec = copy_profile("amd-discrete-vaapi", tmp_path)
    (rec / "ffmpeg/test-h264_vaapi.txt").write_text("exit=1\n[h264_vaapi @ 0x1] Failed to initialise VAAPI connection: -1 (unknown libva error).\n")
    caps = probe(rec)
    assert caps.tier is T.GPU_VAAPI and T.GPU_VAAPI not in caps.unserved
    [gpu] = caps.gpus
    assert gpu.encoders == ("hevc",)
    # the unproven codec's encode entrypoints go too, so nothing derived from them claims it
    assert all(not p.startswith("VAProfileH264") for p, eps in gpu.vaapi_profiles.items() if set(eps) & ENCODE_ENTRYPOINTS)
    assert "encode:hevc" in caps.capability_tags and "encode:h264" not in caps.capability_tags


def test_a_codec_listed_but_never_tested_is_not_an_encoder(tmp_path):
    rec = copy_profile("intel-igpu-nuc", tmp_path)
    (rec / "ffmpeg/test-vp8_vaapi.txt").unlink()
    caps = probe(rec)
    assert caps.tier is T.GPU_APU and caps.gpus[0].encoders == ("h264", "hevc", "jpeg", "mpeg2")


def test_an_ffmpeg_without_vaapi_encoders_proves_none(tmp_path):
    rec = copy_profile("steamdeck-apu", tmp_path)
    encoders = rec / "ffmpeg/encoders.txt"
    encoders.write_text("".join(ln for ln in encoders.read_text().splitlines(keepends=True) if "_vaapi" not in ln))
    caps = probe(rec)
    assert T.GPU_APU not in caps.tiers and caps.gpus[0].encoders == ()
    assert caps.unserved[T.GPU_APU] == "VA-API encode not proven: ffmpeg does not list h264_vaapi, hevc_vaapi"


def test_nvenc_counts_only_when_its_test_encode_ran_and_succeeded(tmp_path):
    rec = copy_profile("gpu-cuda-workstation", tmp_path)
    (rec / "ffmpeg/test-h264_nvenc.txt").unlink()
    caps = probe(rec)
    assert caps.gpus[0].encoders == ("av1", "hevc") and caps.tier is T.GPU_CUDA
    shutil.rmtree(rec / "ffmpeg")
    caps = probe(rec)
    nvidia, amd = caps.gpus
    assert nvidia.cuda and nvidia.encoders == () and caps.tier is T.GPU_CUDA  # gpu_cuda is not about encoders
    assert amd.encoders == () and T.GPU_APU not in caps.tiers
    assert caps.unserved[T.GPU_APU] == "VA-API encode not proven: no ffmpeg"
    assert any("NVENC (av1, h264, hevc) not proven by a test encode: no ffmpeg" in n for n in caps.limitations.notes)


@pytest.mark.parametrize("name", sorted(profiles()))
def test_bundled_profiles_explain_exactly_the_tiers_they_do_not_serve(name):
    caps = probe(profile_path(name))
    assert caps.unserved and not set(caps.unserved) & set(caps.tiers)
    explained = [t for t in T if t in caps.unserved]
    assert list(caps.unserved) == explained  # best tier first
    assert all(reason and "\n" not in reason for reason in caps.unserved.values())


def test_the_reasons_name_what_is_missing():
    deck = probe(profile_path("steamdeck-apu"))
    assert deck.unserved == {
        T.GPU_CUDA: "no NVIDIA GPU (NVML: NVMLError_LibraryNotFound)",
        T.GPU_VAAPI: "no discrete AMD or Intel GPU",
    }
    ws = probe(profile_path("gpu-cuda-workstation"))
    assert ws.unserved == {T.GPU_VAAPI: "no discrete AMD or Intel GPU (VA-API on NVIDIA is decode-only)"}
    relay = probe(profile_path("edge-relay"))
    assert relay.unserved[T.GPU_CUDA] == "no NVIDIA GPU (no NVML)"
    assert relay.unserved[T.CPU_FFMPEG] == "1 usable CPU, 987 MiB: a CPU encode node needs >= 2 CPUs and >= 2048 MiB"
    box = probe_node(RecordedSources(profile_path("cpu-only-box")), roles=["relay"])
    assert box.unserved[T.CPU_FFMPEG] == "the relay role caps this node at relay"


def test_a_vaapi_gpu_whose_vainfo_failed_or_is_decode_only(tmp_path):
    rec = copy_profile("steamdeck-apu", tmp_path)
    (rec / "vainfo/renderD128.txt").write_text("vaInitialize failed with error code 1 (operation failed),exit\n")
    assert probe(rec).unserved[T.GPU_APU] == "no VA-API profiles (vainfo absent or failed)"
    text = (profile_path("steamdeck-apu") / "vainfo/renderD128.txt").read_text()
    (rec / "vainfo/renderD128.txt").write_text("".join(ln for ln in text.splitlines(keepends=True) if "VAEntrypointEnc" not in ln))
    assert probe(rec).unserved[T.GPU_APU] == "VA-API is decode-only here (vainfo lists no encode entrypoint)"


def test_an_nvidia_render_node_without_nvml_says_why_there_is_no_cuda(tmp_path):
    rec = copy_profile("gpu-cuda-workstation", tmp_path)
    (rec / "nvml.json").write_text('{"error": "NVMLError_DriverNotLoaded"}\n')
    caps = probe(rec)
    assert caps.tier is T.GPU_APU and caps.gpus[0].vendor.value == "nvidia" and caps.gpus[0].encoders == ()
    assert caps.unserved[T.GPU_CUDA] == "NVIDIA GPU on renderD128 but no CUDA (NVML: NVMLError_DriverNotLoaded)"


def run_probe_cli(capsys, *argv):
    from fabric.cli import main

    code = main(["probe", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_fabric_probe_says_why_a_tier_is_not_served(capsys, tmp_path, monkeypatch):
    rec = copy_profile("amd-discrete-vaapi", tmp_path)
    shutil.rmtree(rec / "ffmpeg")
    out = run_probe_cli(capsys, "--recording", str(rec))
    assert "  not served  gpu_vaapi: VA-API encode not proven: no ffmpeg\n" in out
    assert "  tier        cpu_ffmpeg\n" in out
    monkeypatch.setenv("COLUMNS", "80")
    out = run_probe_cli(capsys, "--recording", str(rec), "--table")
    assert any(line.split()[:1] == ["gpu_vaapi"] and line.endswith("VA-API encode not proven: no ffmpeg")
               for line in (ln.replace("polaris-box", "", 1) for ln in out.splitlines()))
    assert max(len(line) for line in out.splitlines()) <= 80 and "\x1b" not in out
    import json

    data = json.loads(run_probe_cli(capsys, "--recording", str(rec), "--json"))
    assert data["unserved"]["gpu_vaapi"] == "VA-API encode not proven: no ffmpeg" and data["tier"] == "cpu_ffmpeg"

"""The live probe on this machine (GPU-less: no NVIDIA driver, no /dev/dri, only the bundled
ffmpeg) says cpu_ffmpeg without raising; ``fabric probe`` prints what it promises and its
``--ray-start-args`` parse back into the node's resources and labels."""

import json
import os
import shlex
from pathlib import Path

import pytest
from ray._private.label_utils import parse_node_labels_string

from fabric import ComputeTier, NodeCapabilities
from fabric.cli import main
from probes.profiles import profile_path, profiles
from probes import LiveSources, RecordedSources, probe_node

GPU_LESS = not Path("/dev/dri").exists() and not Path("/dev/nvidia0").exists()


@pytest.fixture(scope="module")
def live_caps():
    return probe_node()


@pytest.mark.skipif(not GPU_LESS, reason="this assertion is about the GPU-less dev/CI machine")
def test_live_probe_here_is_cpu_ffmpeg(live_caps):
    assert live_caps.tier is ComputeTier.CPU_FFMPEG
    assert live_caps.gpus == () and live_caps.source == "live"
    assert "libx264" in live_caps.ffmpeg.working  # the imageio-ffmpeg binary really encodes
    assert not [e for e in live_caps.ffmpeg.working if e.endswith(("_nvenc", "_vaapi", "_qsv", "_amf"))]
    assert live_caps.limitations.max_concurrent_tasks == max(1, int(live_caps.cpu_usable))
    assert not [n for n in live_caps.limitations.notes if n.startswith("internal:")]


def test_live_probe_respects_affinity(live_caps):
    assert live_caps.cpu_usable <= len(os.sched_getaffinity(0))
    assert live_caps.cpu_usable <= live_caps.cpu_logical


def test_live_sources_on_an_empty_root_never_raise(tmp_path):
    src = LiveSources(root=tmp_path)
    assert src.read_file("sys/class/drm/renderD128/device/vendor") is None
    assert src.list_dir("sys/class/drm") == [] and src.resolve_link("sys/block/vda") is None
    assert src.vainfo("renderD128") is None or isinstance(src.vainfo("renderD128"), str)


def run_cli(capsys, *argv):
    code = main(["probe", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_here(capsys):
    code, out, _ = run_cli(capsys, "--json")
    data = json.loads(out)
    assert code == 0 and data["tier"] in {t.value for t in ComputeTier} and data["tiers"][0] == data["tier"]
    if GPU_LESS:
        assert data["tier"] == "cpu_ffmpeg"
    assert NodeCapabilities.model_validate(data).tier.value == data["tier"]


@pytest.mark.parametrize("name", ["gpu-cuda-workstation", "edge-relay"])
def test_cli_ray_start_args_parse_back(capsys, name):
    code, out, _ = run_cli(capsys, "--profile", name, "--ray-start-args", "--pool", "default", "--zone", "home lab")
    assert code == 0
    words = shlex.split(out)
    assert [w.split("=", 1)[0] for w in words] == ["--num-gpus", "--resources", "--labels"]
    resources = json.loads(words[1].split("=", 1)[1])
    labels = parse_node_labels_string(words[2].split("=", 1)[1])
    caps = probe_node(RecordedSources(profile_path(name)))
    assert int(words[0].split("=", 1)[1]) == caps.ray_gpus == (1 if name == "gpu-cuda-workstation" else 0)
    assert resources == caps.to_ray_resources()
    assert labels == caps.to_ray_labels(pool="default", zone="home lab")
    assert labels["fabric.io/zone"] == "home-lab"


def test_cli_label_outputs(capsys):
    code, out, _ = run_cli(capsys, "--profile", "steamdeck-apu", "--ray-labels")
    assert code == 0 and json.loads(out)["fabric.io/tier"] == "gpu_apu"
    code, out, _ = run_cli(capsys, "--profile", "arm64-board", "--k3s-labels")
    assert code == 0 and json.loads(out)["topology.researchstack.io/arm64"] == "true"


@pytest.mark.parametrize("columns", ["80", "40"])  # never narrower than 80
def test_cli_all_is_a_table_of_every_profile_on_80_columns(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    code, out, _ = run_cli(capsys, "--all")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["node", "serves", "machine", "gpus", "hw", "encoders"]
    assert 70 <= max(len(line) for line in lines) <= 80 and "\x1b" not in out  # not a terminal: plain text
    words = out.split()
    assert "live" in words and all(name in words for name in profiles())
    # then why each node does not serve a tier
    why = lines.index(next(line for line in lines if line.split()[:3] == ["node", "not", "served"]))
    assert any(line.split()[:2] == ["edge-relay", "gpu_cuda"] for line in lines[why:])


def test_cli_table_rows_stay_on_one_line_when_the_terminal_is_wide(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_cli(capsys, "--profile", "steamdeck-apu", "--table")
    row = next(line for line in out.splitlines() if line.startswith("steamdeck "))
    assert code == 0 and "gpu_apu cpu_ffmpeg framebuffer relay" in row and "AMD Custom GPU 0405 1G (iGPU)" in row


def test_cli_summary_and_record(capsys, tmp_path):
    code, out, err = run_cli(capsys, "--profile", "gpu-cuda-workstation", "--record", str(tmp_path / "rec"))
    assert code == 0 and "tier        gpu_cuda" in out and "recorded gpu-cuda-workstation" in err
    code, out, _ = run_cli(capsys, "--recording", str(tmp_path / "rec"), "--json", "--name", "copy")
    data = json.loads(out)
    assert data["tier"] == "gpu_cuda" and data["name"] == "copy"


@pytest.mark.parametrize("argv,message", [
    (["--profile", "nope"], "unknown profile 'nope'; profiles: "),
    (["--recording", "/definitely/not/here"], "does not exist"),
    (["--profile", "cpu-only-box", "--role", "superhero"], "unknown role(s) superhero"),
])
def test_cli_errors_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("fabric probe: error: ") and message in err


def test_settings_override_the_derived_slots(capsys, tmp_path):
    from fabric import FabricSettings
    from probes import apply_settings

    caps = probe_node(RecordedSources(profile_path("gpu-cuda-workstation")))
    assert caps.limitations.max_concurrent_tasks == 12
    settings = FabricSettings.load({"nodes": {"qfox-1": {"max_concurrent_tasks": 4}}})
    lowered = apply_settings(caps, settings)
    assert lowered.limitations.max_concurrent_tasks == 4 and lowered.to_ray_resources()["fabric.slots"] == 4.0
    assert apply_settings(caps, FabricSettings.load({"nodes": {"other": {"max_concurrent_tasks": 1}}})) == caps
    config = tmp_path / "fabric.yaml"
    config.write_text("nodes:\n  qfox-1:\n    max_concurrent_tasks: 3\n")
    code, out, _ = run_cli(capsys, "--profile", "gpu-cuda-workstation", "--config", str(config), "--ray-labels")
    assert code == 0 and json.loads(out)["fabric.io/slots"] == "3"
    config.write_text("nodes:\n  qfox-1:\n    max_concurrent_tasks: 0\n")
    code, _, err = run_cli(capsys, "--profile", "gpu-cuda-workstation", "--config", str(config))
    # the problem with its line, then the summary: as fabric settings validate prints it (no traceback)
    assert code == 2 and err.splitlines() == [err.splitlines()[0], f"{config}: invalid, 1 problem"]
    assert err.startswith(f"{config}:3: nodes.qfox-1.max_concurrent_tasks: ")

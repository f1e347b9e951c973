"""Recordings: a missing folder is an error; everything else that is missing, truncated or garbage
is absent (never a crash, never an internal error note); a recording written by RecordingSources
replays to the same capabilities. Includes the real recording of the GPU-less dev VM."""

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabric import ComputeTier, ProbeError
from probes.profiles import profile_path, profiles
from probes import RecordedSources, RecordingSources, probe_node

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "probe"  # verbatim tool outputs (SOURCES.md)


VM = FIXTURES / "recording-gpuless-vm"


def internal(caps):
    return [n for n in caps.limitations.notes if n.startswith("internal:")]


def test_missing_or_non_folder_recording_is_a_probe_error(tmp_path):
    with pytest.raises(ProbeError) as exc:
        RecordedSources(tmp_path / "nope")
    assert exc.value.source == str(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ProbeError):
        RecordedSources(tmp_path / "file")


def test_empty_recording_is_a_machine_with_nothing(tmp_path):
    caps = probe_node(RecordedSources(tmp_path))
    assert caps.tiers == (ComputeTier.RELAY,)
    assert caps.gpus == () and caps.storage == () and caps.ffmpeg.path is None and caps.tailnet is None
    assert caps.name == "unknown" and not internal(caps)


def test_real_gpuless_vm_recording():
    caps = probe_node(RecordedSources(VM))
    assert caps.tier is ComputeTier.CPU_FFMPEG and caps.tiers == (ComputeTier.CPU_FFMPEG, ComputeTier.RELAY)
    assert (caps.arch, caps.cpu_usable, caps.storage_kind.value) == ("x86_64", 2.0, "virtual")
    assert caps.gpus == () and set(caps.ffmpeg.working) == {"libx264", "libx265", "libsvtav1", "libvpx-vp9", "libaom-av1"}
    assert caps.ffmpeg.version == "n9.0.2-17-g2a571b6068-20260930"
    assert not internal(caps)


def copy_profile(name, tmp_path) -> Path:
    dest = tmp_path / name
    shutil.copytree(profile_path(name), dest)
    return dest


@pytest.mark.parametrize("content", [b"", b"\x00\xff\xfe garbage", b'{"devices": [{"name": "NVIDIA GeF', b"[1, 2, 3]", b'"just a string"', b"null"])
def test_garbage_nvml_json_means_no_nvidia_gpus(tmp_path, content):
    rec = copy_profile("gpu-cuda-workstation", tmp_path)
    (rec / "nvml.json").write_bytes(content)
    caps = probe_node(RecordedSources(rec))
    assert not any(g.cuda for g in caps.gpus)
    assert caps.tier is ComputeTier.GPU_APU  # the AMD iGPU still stands
    assert not internal(caps)
    # the NVIDIA render node is still seen, as a GPU without CUDA
    assert any(g.vendor.value == "nvidia" and not g.cuda for g in caps.gpus)


def test_half_a_system_json_and_an_empty_vainfo(tmp_path):
    rec = copy_profile("steamdeck-apu", tmp_path)
    text = (rec / "system.json").read_text()
    (rec / "system.json").write_text(text[: len(text) // 2])
    (rec / "vainfo/renderD128.txt").write_text("")
    src = RecordedSources(rec)
    caps = probe_node(src)
    assert caps.cpu_logical == 1 and caps.memory_mib == 0  # absent system facts
    assert caps.gpus[0].vaapi_profiles == {} and caps.tiers == (ComputeTier.FRAMEBUFFER, ComputeTier.RELAY)
    assert any("system.json is not valid JSON" in n for n in caps.limitations.notes)
    assert not internal(caps)


def test_missing_folders_are_absent(tmp_path):
    rec = copy_profile("gpu-cuda-workstation", tmp_path)
    for sub in ("ffmpeg", "vainfo", "sys"):
        shutil.rmtree(rec / sub)
    caps = probe_node(RecordedSources(rec))
    assert caps.ffmpeg.path is None and caps.framebuffer is None
    # render nodes went with sys/: only NVML's GPU is left
    assert [g.model for g in caps.gpus] == ["NVIDIA GeForce RTX 4070"] and caps.tier is ComputeTier.GPU_CUDA
    assert not internal(caps)


def test_paths_cannot_escape_the_recording(tmp_path):
    rec = copy_profile("cpu-only-box", tmp_path)
    src = RecordedSources(rec)
    assert src.read_file("../../etc/passwd") is None and src.read_file("sys/../../x") is None
    assert src.list_dir("..") == [] and src.read_file("system.json") is None  # only sys/ and proc/ are "files"


def test_a_failed_vaapi_device_is_decode_only(tmp_path):
    rec = copy_profile("steamdeck-apu", tmp_path)
    for enc in ("h264_vaapi", "hevc_vaapi"):
        (rec / f"ffmpeg/test-{enc}.txt").write_text("exit=1\n[h264_vaapi @ 0x1] Failed to open /dev/dri/renderD128: Permission denied\n")
    caps = probe_node(RecordedSources(rec))
    assert ComputeTier.GPU_APU not in caps.tiers and caps.tier is ComputeTier.CPU_FFMPEG
    assert caps.gpus[0].encoders == () and "h264" in caps.gpus[0].decoders
    assert any("treated as decode-only" in n for n in caps.limitations.notes)


def test_failed_nvenc_removes_the_codec_but_keeps_cuda(tmp_path):
    rec = copy_profile("gpu-cuda-workstation", tmp_path)
    shutil.copyfile(FIXTURES / "ffmpeg_h264_nvenc_testencode_no_gpu.txt", rec / "ffmpeg/test-h264_nvenc.txt")
    caps = probe_node(RecordedSources(rec))
    assert caps.tier is ComputeTier.GPU_CUDA
    assert caps.gpus[0].encoders == ("av1", "hevc") and "h264_nvenc" not in caps.ffmpeg.working
    assert any("h264_nvenc listed but its test encode failed: Cannot load libcuda.so.1" in n for n in caps.limitations.notes)


@pytest.mark.parametrize("name", sorted(profiles()))
def test_recording_a_recording_replays_identically(name, tmp_path):
    recorder = RecordingSources(RecordedSources(profile_path(name)))
    first = probe_node(recorder)
    recorder.write(tmp_path / "copy")  # profile.json (declared name and roles) travels too
    again = probe_node(RecordedSources(tmp_path / "copy"))
    assert again.model_dump(exclude={"limitations"}) == first.model_dump(exclude={"limitations"})
    assert again.limitations.max_concurrent_tasks == first.limitations.max_concurrent_tasks


_FILES = {name: sorted(p.relative_to(profile_path(name)).as_posix() for p in profile_path(name).rglob("*") if p.is_file())
          for name in profiles()}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_recordings_never_crash(tmp_path_factory, data):
    name = data.draw(st.sampled_from(sorted(_FILES)))
    rec = tmp_path_factory.mktemp("fuzz") / name
    shutil.copytree(profile_path(name), rec)
    for rel in data.draw(st.lists(st.sampled_from(_FILES[name]), min_size=1, max_size=4, unique=True)):
        target = rec / rel
        original = target.read_bytes()
        mode = data.draw(st.sampled_from(["random", "truncate", "empty", "json"]))
        if mode == "random":
            target.write_bytes(data.draw(st.binary(max_size=200)))
        elif mode == "truncate":
            target.write_bytes(original[: data.draw(st.integers(0, max(0, len(original) - 1)))])
        elif mode == "empty":
            target.write_bytes(b"")
        else:
            value = data.draw(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
                                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=8))
            target.write_text(json.dumps(value))
    caps = probe_node(RecordedSources(rec))
    assert caps.tiers[-1] is ComputeTier.RELAY
    assert not internal(caps), internal(caps)


_ANY = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=6)


def _shaped(keys):
    return st.fixed_dictionaries({}, optional={k: _ANY for k in keys})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    system=_shaped(["machine", "hostname", "cpu_logical", "cpu_physical", "cpu_affinity", "mem_total", "mem", "disks", "parts", "usage_root"]),
    device=_shaped(["index", "name", "memory_total", "pci_bus_id", "bus_type", "compute_capability", "mig_mode", "encoder_capacity", "errors"]),
    tailscale=_shaped(["BackendState", "Self", "TailscaleIPs"]),
)
def test_well_keyed_but_wrongly_typed_json_never_crashes(tmp_path_factory, system, device, tailscale):
    rec = tmp_path_factory.mktemp("shaped") / "rec"
    shutil.copytree(profile_path("gpu-cuda-workstation"), rec)
    (rec / "system.json").write_text(json.dumps(system))
    (rec / "nvml.json").write_text(json.dumps({"devices": [device]}))
    (rec / "tailscale.json").write_text(json.dumps(tailscale))
    caps = probe_node(RecordedSources(rec))
    assert not internal(caps), internal(caps)


# -- what a machine we do not control can put in a recording (issue 12) -------------------------------
def _probe_in_thread(root, seconds: float = 5.0):
    """probe_node(RecordedSources(root)) on a thread; fails the test if it is still running."""
    import threading

    result: list = []
    t = threading.Thread(target=lambda: result.append(_probe_or_error(root)), daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"probing {root} blocked for {seconds} s")
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def _probe_or_error(root):
    try:
        return probe_node(RecordedSources(root))
    except BaseException as exc:  # noqa: BLE001 - handed to the test thread
        return exc


def test_a_fifo_in_place_of_system_json_is_absent_not_a_hang(tmp_path):
    import os

    rec = copy_profile("steamdeck-apu", tmp_path)
    (rec / "system.json").unlink()
    os.mkfifo(rec / "system.json")
    try:
        caps = _probe_in_thread(rec)
    finally:
        with open(os.open(rec / "system.json", os.O_RDWR | os.O_NONBLOCK), "w"):  # release an old-code reader
            pass
    assert caps.cpu_logical == 1 and not internal(caps)
    assert any("system.json is a FIFO, not a regular file" in n for n in caps.limitations.notes)


@pytest.mark.parametrize("name", ["links.json", "profile.json", "system.json", "nvml.json"])
def test_deeply_nested_json_is_absent_not_a_recursion_error(tmp_path, name):
    rec = copy_profile("gpu-cuda-workstation", tmp_path)
    (rec / name).write_text("[" * 100_000 + "]" * 100_000)
    caps = probe_node(RecordedSources(rec))
    assert not internal(caps)
    assert any(f"{name} nests deeper than 32 levels" in n for n in caps.limitations.notes)


def test_json_nested_past_the_limit_but_parseable_is_absent_too(tmp_path):
    rec = copy_profile("steamdeck-apu", tmp_path)
    (rec / "profile.json").write_text('{"name": ' + "[" * 500 + "]" * 500 + "}")
    src = RecordedSources(rec)
    assert src.declared() == {} and any("profile.json nests deeper" in p for p in src.problems)


def test_devices_folders_and_oversized_files_are_absent(tmp_path):
    rec = copy_profile("steamdeck-apu", tmp_path)
    for name in ("nvml.json", "tailscale.json"):
        (rec / name).unlink(missing_ok=True)
    (rec / "nvml.json").symlink_to("/dev/zero")
    (rec / "tailscale.json").mkdir()
    (rec / "sys/class/drm/renderD128/device/vendor").write_text("0x1002\n" + " " * (1 << 20))
    caps = probe_node(RecordedSources(rec))
    assert not internal(caps)
    notes = "\n".join(caps.limitations.notes)
    assert "nvml.json is a character device, not a regular file" in notes
    assert "tailscale.json is a folder, not a regular file" in notes
    assert "renderD128/device/vendor is larger than 1024 KiB" in notes


def test_giant_numbers_in_a_recording_are_absent(tmp_path):
    rec = copy_profile("steamdeck-apu", tmp_path)
    system = json.loads((rec / "system.json").read_text())
    system.update(cpu_logical=10**400, mem_total=10**400, cpu_affinity=10**400)
    system["disks"][0]["total"] = 10**400
    (rec / "system.json").write_text(json.dumps(system))
    (rec / "ffmpeg/test-h264_vaapi.txt").write_text("exit=" + "9" * 5000 + "\n")
    caps = probe_node(RecordedSources(rec))
    assert not internal(caps)
    assert caps.cpu_logical == 1 and caps.memory_mib == 0 and caps.storage[0].size_gib == 0.0
    assert "h264_vaapi" not in caps.ffmpeg.working


@pytest.mark.parametrize("root", [5, None, b"/tmp"])
def test_a_recording_folder_that_is_no_path_is_a_probe_error(root):
    with pytest.raises(ProbeError, match="str or Path"):
        RecordedSources(root)

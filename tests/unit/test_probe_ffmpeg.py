"""ffmpeg: the encoder list and test-encode outputs of the real fixtures, the recording format both
ways round, and real one-frame encodes with the bundled (imageio-ffmpeg) binary."""

import os
import stat
from pathlib import Path

import pytest

from probes.ffmpeg import (
    TIMED_OUT,
    TestEncode,
    encoders_to_test,
    failure_reason,
    find_ffmpeg,
    format_test_encode,
    parse_encoders,
    parse_test_encode,
    parse_version,
    run_test_encodes,
    one_frame_encode_command,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "probe"  # verbatim tool outputs (SOURCES.md)


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_encoder_list_fixture():
    listed = parse_encoders(fixture("ffmpeg-9.0.2-btbn-static_encoders.txt"))
    assert len(listed) == 139  # every "V....." line of the fixture
    assert listed[0] == "a64multi" and listed[-1] == "zmbv"
    for name in ("h264_nvenc", "hevc_vaapi", "av1_qsv", "h264_amf", "h264_v4l2m2m", "libx264", "libsvtav1", "libvpx-vp9"):
        assert name in listed
    assert "aac" not in listed and "srt" not in listed  # audio and subtitle encoders are not video
    assert "=" not in listed  # the legend is not an encoder


def test_encoders_to_test_picks_hardware_and_main_software():
    listed = parse_encoders(fixture("ffmpeg-9.0.2-btbn-static_encoders.txt"))
    chosen = encoders_to_test(listed)
    assert set(chosen) >= {"h264_nvenc", "hevc_nvenc", "av1_nvenc", "h264_vaapi", "mjpeg_vaapi", "h264_qsv", "h264_amf",
                           "h264_v4l2m2m", "libx264", "libx265", "libsvtav1", "libvpx-vp9", "libaom-av1"}
    assert "mjpeg" not in chosen and "h264_vulkan" not in chosen and "libx264rgb" not in chosen


@pytest.mark.parametrize("name,code,reason", [
    ("ffmpeg_h264_nvenc_testencode_no_gpu.txt", 255, "Cannot load libcuda.so.1"),
    ("ffmpeg_h264_vaapi_testencode_no_dri.txt", 234, "No VA display found for device /dev/dri/renderD128."),
])
def test_failed_test_encode_fixtures_with_exit_last(name, code, reason):
    result = parse_test_encode(fixture(name))
    assert result == TestEncode(code, result.stderr)
    assert not result.ok
    assert "exit=" not in result.stderr
    assert failure_reason(result) == reason


def test_recording_format_round_trips_with_exit_first():
    original = TestEncode(171, "[h264_qsv @ 0x55] Error creating a MFX session: -9.\nmore\n")
    text = format_test_encode(original)
    assert text.startswith("exit=171\n")
    assert parse_test_encode(text) == TestEncode(171, original.stderr.rstrip("\n"))
    assert parse_test_encode("exit=0\n") == TestEncode(0, "")
    assert parse_test_encode("exit=0").ok


@pytest.mark.parametrize("text", ["", "Cannot load libcuda.so.1\n", "exit=\n", "exit=abc", "[x @ 0x1] half a li", None])
def test_test_encode_without_exit_line_proves_nothing(text):
    assert parse_test_encode(text) is None


def test_failure_reason_fallbacks():
    assert failure_reason(TestEncode(TIMED_OUT, "")) == "timed out"
    assert failure_reason(TestEncode(3, "  \n")) == "exit code 3"


def test_version_line():
    assert parse_version("ffmpeg version n9.0.2-17-g2a571b6068-20260930 Copyright (c) 2000-2026") == "n9.0.2-17-g2a571b6068-20260930"
    assert parse_version("garbage") is None and parse_version(None) is None


def test_vaapi_command_names_the_render_node():
    cmd = one_frame_encode_command("ffmpeg", "h264_vaapi", "/dev/dri/renderD129")
    assert "vaapi=va:/dev/dri/renderD129" in cmd and "format=nv12,hwupload" in cmd
    assert cmd[-5:] == ["-c:v", "h264_vaapi", "-f", "null", "-"]
    assert "-frames:v" in one_frame_encode_command("ffmpeg", "libx264")


def test_real_one_frame_encodes_with_the_bundled_binary():
    exe = find_ffmpeg()
    assert exe, "imageio-ffmpeg is a dependency, so an ffmpeg is always found"
    results = run_test_encodes(exe, ["libx264", "no_such_encoder"])
    assert results["libx264"].ok, results["libx264"].stderr
    assert not results["no_such_encoder"].ok
    assert "no_such_encoder" in failure_reason(results["no_such_encoder"]) or results["no_such_encoder"].exit_code != 0


def test_a_hanging_encoder_times_out(tmp_path):
    fake = tmp_path / "ffmpeg"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    results = run_test_encodes(str(fake), ["libx264"], timeout=0.3)
    assert results["libx264"].exit_code == TIMED_OUT


def test_missing_binary_is_a_failure_not_an_exception(tmp_path):
    results = run_test_encodes(os.fspath(tmp_path / "nope"), ["libx264"])
    assert results["libx264"].exit_code == 127
    assert run_test_encodes("ffmpeg", []) == {}


def test_an_exit_code_of_thousands_of_digits_is_no_exit_line():
    from probes.ffmpeg import TestEncode

    assert parse_test_encode("exit=" + "9" * 5000 + "\nstderr\n") is None        # int() raised ValueError
    assert parse_test_encode("stderr\nexit=-" + "9" * 5000 + "\n") is None
    assert parse_test_encode("exit=" + "9" * 5000 + "\nstderr\nexit=1\n") == TestEncode(1, "exit=" + "9" * 5000 + "\nstderr")
    assert failure_reason(TestEncode(10**5000)) == "exit code out of range"        # str() raised ValueError

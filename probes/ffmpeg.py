"""ffmpeg on this node: which encoders it lists, and which ones a one-frame encode proves.

Listing is not having. A static ffmpeg build lists NVENC, VA-API, QSV and AMF encoders on every
machine; whether one works depends on the GPU, its driver, device permissions and the libraries
present. So each video encoder of interest gets a one-frame test encode of a synthetic source
(``lavfi color``), with a timeout, and only those that exit 0 count as working. The tests run in
parallel threads so a live probe stays within a few seconds.

Where ffmpeg comes from: ``ffmpeg`` on ``PATH``, else the static binary that the
``imageio-ffmpeg`` wheel ships (a project dependency), so CPU encode works on bare machines.

A recording keeps ``ffmpeg/encoders.txt`` (``-hide_banner -encoders``) and one
``ffmpeg/test-<encoder>.txt`` per test: an ``exit=<code>`` line and the encode's stderr. We write
``exit=`` first; files captured by hand often carry it last, so the reader accepts either.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from probes._numbers import as_int, parse_int

__all__ = [
    "TestEncode", "find_ffmpeg", "parse_encoders", "encoders_to_test", "one_frame_encode_command",
    "run_test_encodes", "parse_test_encode", "format_test_encode", "failure_reason", "is_hardware",
]

#: Hardware encoder families, by name suffix.
HARDWARE_SUFFIXES = ("_nvenc", "_vaapi", "_qsv", "_amf", "_v4l2m2m")
#: Software encoders worth proving (the CPU encode tier's workhorses).
SOFTWARE_ENCODERS = ("libx264", "libx265", "libsvtav1", "libvpx-vp9", "libaom-av1")
TEST_TIMEOUT_S = 10.0
TIMED_OUT = -1
_LINE = re.compile(r"^\s([VAS])[A-Z.]{5}\s+(\S+)\s+(.*)$")
_EXIT = re.compile(r"^exit=(-?\d+)\s*$")
_PREFIX = re.compile(r"^(\[[^\]]*\]\s*)+")


@dataclass(frozen=True)
class TestEncode:
    """One test encode's outcome: the exit code (``TIMED_OUT`` on timeout) and its stderr."""

    __test__ = False  # not a pytest test class, despite the name

    exit_code: int
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def is_hardware(encoder: str) -> bool:
    """True for NVENC, VA-API, QSV, AMF and V4L2 mem2mem encoders."""
    return encoder.endswith(HARDWARE_SUFFIXES)


def find_ffmpeg() -> str | None:
    """``ffmpeg`` on PATH, else imageio-ffmpeg's bundled binary, else None."""
    path = shutil.which("ffmpeg")
    if path:
        return path
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    except Exception:  # noqa: BLE001 - no wheel, or a wheel without a binary for this platform
        return None


def parse_encoders(text: str | None) -> list[str]:
    """Video encoder names from ``ffmpeg -hide_banner -encoders`` (the legend lines are skipped)."""
    if not text:
        return []
    out: list[str] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or m.group(1) != "V":
            continue
        name = m.group(2)  # the legend above "------" (" V..... = Video") parses as name "="
        if name != "=" and name not in out:
            out.append(name)
    return out


def encoders_to_test(listed: list[str]) -> list[str]:
    """The listed encoders worth a test encode: every hardware one, and the main software ones."""
    return [e for e in listed if is_hardware(e) or e in SOFTWARE_ENCODERS]


def one_frame_encode_command(ffmpeg: str, encoder: str, vaapi_device: str | None = None) -> list[str]:
    """A one-frame encode of a synthetic picture to the null muxer."""
    cmd = [ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error"]
    if encoder.endswith("_vaapi"):
        device = vaapi_device or "/dev/dri/renderD128"
        cmd += ["-init_hw_device", f"vaapi=va:{device}", "-filter_hw_device", "va"]
    cmd += ["-f", "lavfi", "-i", "color=c=gray:size=256x256:rate=1", "-frames:v", "1"]
    if encoder.endswith("_vaapi"):
        cmd += ["-vf", "format=nv12,hwupload"]
    elif encoder.endswith("_qsv"):
        cmd += ["-pix_fmt", "nv12"]  # QSV takes NV12 system-memory frames and opens its own session
    else:
        cmd += ["-pix_fmt", "yuv420p"]
    cmd += ["-c:v", encoder, "-f", "null", "-"]
    return cmd


def _run_one(ffmpeg: str, encoder: str, vaapi_device: str | None, timeout: float) -> TestEncode:
    try:
        proc = subprocess.run(
            one_frame_encode_command(ffmpeg, encoder, vaapi_device), capture_output=True, timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return TestEncode(TIMED_OUT, f"test encode timed out after {timeout:g} s")
    except OSError as exc:
        return TestEncode(127, f"cannot run ffmpeg: {exc}")
    return TestEncode(proc.returncode, proc.stderr.decode("utf-8", errors="replace"))


def run_test_encodes(
    ffmpeg: str, encoders: list[str], vaapi_device: str | None = None, *, timeout: float = TEST_TIMEOUT_S, workers: int = 8
) -> dict[str, TestEncode]:
    """Test-encode each encoder (in parallel threads); never raises."""
    if not encoders:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(encoders)))) as pool:
        futures = {e: pool.submit(_run_one, ffmpeg, e, vaapi_device, timeout) for e in encoders}
        return {e: f.result() for e, f in futures.items()}


def parse_test_encode(text: str | None) -> TestEncode | None:
    """A recorded test: ``exit=<code>`` as its first or last line, the rest is stderr. None when the
    text carries no exit line (a truncated or garbled file proves nothing)."""
    if text is None:
        return None
    lines = text.splitlines()
    code: int | None = None
    # An exit code past int64 (a garbled line of digits) is no exit code: parse_int says None.
    if lines and (m := _EXIT.match(lines[0].strip())) and (code := parse_int(m.group(1))) is not None:
        rest = lines[1:]
    elif lines:
        # Last non-empty line.
        idx = max((i for i, ln in enumerate(lines) if ln.strip()), default=None)
        if idx is not None and (m := _EXIT.match(lines[idx].strip())) and (code := parse_int(m.group(1))) is not None:
            rest = lines[:idx]
    if code is None:
        return None
    return TestEncode(code, "\n".join(rest))


def format_test_encode(result: TestEncode) -> str:
    """The recording's text for one test (``exit=`` first)."""
    body = result.stderr if result.stderr.endswith("\n") or not result.stderr else result.stderr + "\n"
    return f"exit={result.exit_code}\n{body}"


def failure_reason(result: TestEncode) -> str:
    """The first meaningful stderr line without ffmpeg's ``[component @ 0x...]`` prefixes."""
    for line in result.stderr.splitlines():
        line = _PREFIX.sub("", line.strip()).strip()
        if line:
            return line[:120]
    code = as_int(result.exit_code)
    if code == TIMED_OUT:
        return "timed out"
    return f"exit code {code}" if code is not None else "exit code out of range"


def parse_version(text: str | None) -> str | None:
    """``ffmpeg version n9.0.2-17-g2a571b6068-20260930 Copyright ...`` -> ``n9.0.2-17-g2a571b6068-20260930``."""
    if not text:
        return None
    m = re.search(r"ffmpeg version (\S+)", text)
    return m.group(1) if m else None

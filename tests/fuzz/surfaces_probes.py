"""Fuzz surfaces over the probe: each public parser, and whole recorded machines mangled on disk.

Every parser's contract is "never raises, absent means absent" (``probes`` package
docstring), so no exception counts as a clean refusal there: ``typed`` is empty. The
file-tree parsers get a fake tree that keeps the ``Sources`` contract (``read_file`` returns text
or None, ``list_dir`` names, ``resolve_link`` a target or None) with hostile contents.

``recordings`` copies a bundled profile, mangles some of its files (deep JSON, giant numbers,
wrong types, binary garbage, a FIFO or a folder where a file should be, files over the size
cap) and runs ``probe_node(RecordedSources(folder))``: it must return (or raise ``ProbeError``)
within its time guard, and no probe section may have failed inside (the probe's per-section
guard turns a parser bug into an ``internal:`` note, which is a crash here).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from fabric.core.errors import ProbeError
from probes.profiles import profile_path, profiles
from fabric.testing.fuzz import Surface, register
from fuzz_values import HUGE_INTS, big_text, digit_strings, json_values, lines_of, mutate, mutations
from probes import RecordedSources, probe_node
from probes.drm import read_render_nodes, same_pci_address
from probes.ffmpeg import TestEncode, failure_reason, parse_encoders, parse_test_encode, parse_version
from probes.framebuffer import parse_framebuffer
from probes.nvml import parse_nvml, snapshot_nvml
from probes.storage import base_device, parse_storage, storage_kind
from probes.system import cgroup_cpu_quota, cgroup_files, cgroup_memory_limit, parse_system
from probes.tailnet import parse_tailscale
from probes.vaapi import codec_of_profile, model_from_driver, parse_vainfo

_text = st.one_of(st.none(), st.text(max_size=80), digit_strings(1, 6000), big_text(1000, 100_000))
_numbers_as_text = st.one_of(
    digit_strings(1, 6000), digit_strings(1, 6000).map(lambda d: "-" + d), st.integers().map(str),
    st.sampled_from(["0", "1", "-1", " 42\n", "1_000", "0x10", "nan", "inf", "1e400", "", "max", "max 100000"]),
)


def _parser(name: str, strategy: st.SearchStrategy[Any], call: Any, description: str) -> None:
    register(Surface(name=name, strategy=strategy, call=call, typed=(), description=description))


# -- text parsers --------------------------------------------------------------------------------
_vainfo_lines = st.one_of(
    st.tuples(st.sampled_from(["VAProfileH264Main", "VAProfileHEVCMain10", "VAProfileNone", "VAProfileAV1Profile0"]),
              st.sampled_from(["VAEntrypointVLD", "VAEntrypointEncSlice", "VAEntrypointEncSliceLP", "VAEntrypointX"]),
              st.sampled_from([" : ", ":", "\t:\t"])).map(lambda t: f"      {t[0]}{t[2]}{t[1]}"),
    big_text(100, 5000).map(lambda s: "VAProfile" + s.replace("\n", "") + " : VAEntrypointVLD"),
    st.text(max_size=40).map(lambda s: f"vainfo: Driver version: {s}"),
    big_text(1000, 200_000).map(lambda s: "vainfo: Driver version: Mesa for " + s.replace("\n", " ")),
    st.just("vaInitialize failed with error code 1 (operation failed),exit"),
)
_vainfo = lines_of(_vainfo_lines)
_parser("parse_vainfo", st.one_of(st.none(), _vainfo, _vainfo.map(lambda s: s.encode("utf-8", "surrogatepass")), st.binary()),
        parse_vainfo, "vainfo's text (str or bytes)")

_encoder_lines = st.one_of(
    st.tuples(st.sampled_from("VASX"), st.text("A.FSXBD", min_size=5, max_size=5), st.text(min_size=1, max_size=20)).map(
        lambda t: f" {t[0]}{t[1]} {t[2]}  some encoder"),
    st.sampled_from([" V..... h264_nvenc           NVIDIA NVENC H.264 encoder", " V..... = Video", "------"]),
)
_parser("parse_encoders", st.one_of(st.none(), lines_of(_encoder_lines)), parse_encoders, "ffmpeg -encoders")

_exit_lines = st.one_of(
    digit_strings(1, 6000).map(lambda d: f"exit={d}"), digit_strings(1, 6000).map(lambda d: f"exit=-{d}"),
    st.sampled_from(["exit=0", "exit=1", "exit=-1", "exit=", "exit=x", "exit=0 trailing"]),
)
_parser("parse_test_encode", st.one_of(st.none(), lines_of(_exit_lines)), parse_test_encode, "a recorded test encode")
_parser("parse_version", st.one_of(st.none(), lines_of(st.text(max_size=20).map(lambda s: f"ffmpeg version {s} Copyright"))),
        parse_version, "ffmpeg -version's first line")
_parser("failure_reason", st.builds(TestEncode, st.one_of(st.integers(), HUGE_INTS), lines_of(st.sampled_from(["[h264 @ 0x55] No device", "[a][b] x"]))),
        failure_reason, "a failed test encode's reason line")
_parser("model_from_driver", st.one_of(st.none(), lines_of(st.text(max_size=30).map(lambda s: f"Mesa Gallium driver for {s} (X, -"),
                                                        st.just("for " * 1000), big_text(1000, 100_000).map(lambda s: "for " + s))),
        lambda text: (model_from_driver(text), codec_of_profile(text or "")), "the GPU model in a VA driver string")


def _device_names(case: tuple[str, str | None, str | None, str | None]) -> None:
    device, rotational, sys_path, other = case
    base = base_device(device)
    storage_kind(base or device, rotational, sys_path)
    same_pci_address(device, other)


_parser("device_names", st.tuples(
    st.one_of(st.text(max_size=40).map(lambda s: "/dev/" + s), st.text(max_size=40), st.sampled_from(["/dev/nvme0n1p2", "/dev/mapper/x"]),
              digit_strings().map(lambda d: f"/dev/nvme{d}n1p1")),
    _text, _text,
    st.one_of(_text, st.tuples(digit_strings(1, 6000), st.text(max_size=5)).map(lambda t: f"{t[0]}:01:00.0{t[1]}")),
), _device_names, "base_device, storage_kind and same_pci_address over device names and PCI addresses")


# -- file-tree parsers -------------------------------------------------------------------------
class FakeTree:
    """A machine's files as a parser sees them through ``Sources``: contents by file name (any
    folder), folder listings by path, symlink targets by file name."""

    def __init__(self, dirs: dict[str, list[str]], files: dict[str, str | None], links: dict[str, str | None]) -> None:
        self.dirs, self.files, self.links = dirs, files, links

    def list_dir(self, path: str) -> list[str]:
        return list(self.dirs.get(path.strip("/"), []))

    def read_file(self, path: str) -> str | None:
        return self.files.get(path, self.files.get(path.rsplit("/", 1)[-1]))

    def resolve_link(self, path: str) -> str | None:
        return self.links.get(path.rsplit("/", 1)[-1])

    def __repr__(self) -> str:
        return f"FakeTree(dirs={self.dirs!r}, files={self.files!r}, links={self.links!r})"


def _names(prefix: str, real: list[str]) -> st.SearchStrategy[list[str]]:
    return st.lists(st.one_of(st.sampled_from(real), digit_strings(1, 6000).map(lambda d: prefix + d), st.text(max_size=12),
                              st.integers(0, 1000).map(lambda n: f"{prefix}{n}")), max_size=6)


_hex = st.one_of(st.sampled_from(["0x1002", "0x8086", "0x10de", "0x163f", "0x56a0", "0x15bf"]), _text, digit_strings().map(lambda d: "0x" + d))
_file_values = st.one_of(_text, _numbers_as_text, _hex)
_cgroup_text = st.one_of(
    lines_of(st.sampled_from(["0::/", "0::/user.slice/app", "4:cpu,cpuacct:/docker/abc", "7:memory:/docker/abc", "0::relative", "::::"]),
             st.integers(100, 200_000).map(lambda n: "0::/" + "/".join(["a"] * n)),
             st.integers(100, 200_000).map(lambda n: "3:cpu:/" + "/".join(["b"] * n))),
    st.integers(1000, 400_000).map(lambda n: "0::/" + "/".join(["a"] * n)),
)
_trees = st.builds(
    FakeTree,
    dirs=st.fixed_dictionaries({"sys/class/drm": _names("renderD", ["renderD128", "renderD129", "card0"]),
                                "sys/class/graphics": _names("fb", ["fb0", "fb1", "fbcon"])}),
    files=st.fixed_dictionaries({}, optional={
        "vendor": _hex, "device": _hex, "mem_info_vram_total": _file_values, "mem_info_gtt_total": _file_values,
        "modes": st.one_of(_file_values, st.sampled_from(["U:1920x1080p-60", "U:99999x99999"]), digit_strings().map(lambda d: f"{d}x{d}")),
        "virtual_size": st.one_of(_file_values, digit_strings().map(lambda d: f"{d},{d}"), st.just("1920,1080")),
        "rotational": _file_values, "proc/self/cgroup": _cgroup_text,
        "cpu.max": st.one_of(_file_values, st.tuples(_numbers_as_text, _numbers_as_text).map(" ".join)),
        "cpu.cfs_quota_us": _file_values, "cpu.cfs_period_us": _file_values, "memory.max": _file_values,
        "memory.limit_in_bytes": _file_values,
    }),
    links=st.fixed_dictionaries({}, optional={
        "driver": st.one_of(_text, st.sampled_from(["/sys/bus/pci/drivers/amdgpu", "/x/panfrost", "/"])),
        "device": st.one_of(_text, st.sampled_from(["/sys/devices/pci0000:00/0000:04:00.0", "/x/virtio1"]),
                            digit_strings().map(lambda d: f"/sys/{d}:00:00.0")),
    }),
)
_parser("parse_framebuffer", _trees, lambda t: parse_framebuffer(t.list_dir, t.read_file), "sys/class/graphics")
_parser("read_render_nodes", _trees, lambda t: read_render_nodes(t.list_dir, t.read_file, t.resolve_link), "sys/class/drm render nodes")


def _cgroups(tree: FakeTree) -> None:
    cgroup_cpu_quota(tree.read_file)
    cgroup_memory_limit(tree.read_file)
    cgroup_files(tree.read_file)


_parser("cgroup_limits", _trees, _cgroups, "cgroup v1/v2 CPU quota and memory limit files")

_json_numbers = st.one_of(st.integers(), HUGE_INTS, st.floats(allow_nan=True, allow_infinity=True), _numbers_as_text, st.none(), st.booleans())
_disk = st.one_of(
    st.fixed_dictionaries({}, optional={"device": st.one_of(st.sampled_from(["/dev/sda1", "/dev/nvme0n1p2", "/dev/vda"]), _text, st.integers()),
                                        "mountpoint": st.one_of(st.just("/"), _text, st.integers()),
                                        "fstype": st.one_of(_text, st.integers()), "total": _json_numbers}),
    json_values,
)
_system_dicts = st.fixed_dictionaries({}, optional={
    "machine": st.one_of(_text, st.integers()), "hostname": st.one_of(_text, st.integers()),
    "cpu_logical": _json_numbers, "cpu_physical": _json_numbers, "cpu_affinity": _json_numbers, "mem_total": _json_numbers,
    "mem": st.one_of(json_values, st.fixed_dictionaries({"total": _json_numbers})),
    "disks": st.one_of(st.lists(_disk, max_size=4), json_values), "parts": st.one_of(st.lists(_disk, max_size=4), json_values),
    "usage_root": st.one_of(json_values, st.fixed_dictionaries({"total": _json_numbers})),
})
_parser("parse_system", st.tuples(st.one_of(_system_dicts, json_values), _trees), lambda t: parse_system(t[0], t[1].read_file),
        "system.json and the cgroup files")
_parser("parse_storage", st.tuples(st.lists(_disk, max_size=5).map(tuple), _trees),
        lambda t: parse_storage(t[0], t[1].read_file, t[1].resolve_link), "mounted disks' sysfs evidence")

_nvml_device = st.fixed_dictionaries({}, optional={
    "index": _json_numbers, "name": st.one_of(_text, st.integers()), "memory_total": _json_numbers, "bus_type": _json_numbers,
    "pci_bus_id": st.one_of(_text, st.integers()),
    "compute_capability": st.one_of(st.lists(_json_numbers, max_size=3), json_values),
    "mig_mode": st.one_of(st.lists(_json_numbers, max_size=3), json_values),
    "encoder_capacity": st.one_of(st.dictionaries(st.sampled_from(["h264", "hevc", "av1", "x"]), _json_numbers), json_values),
    "errors": st.one_of(st.just({"handle": "NVMLError_Unknown"}), json_values),
})
_nvml = st.one_of(
    st.fixed_dictionaries({}, optional={"devices": st.one_of(st.lists(st.one_of(_nvml_device, json_values), max_size=4), json_values),
                                        "error": st.one_of(_text, json_values), "driver_version": _text}),
    json_values,
)
_parser("parse_nvml", _nvml, parse_nvml, "nvml.json (real, recorded or garbage)")
_parser("parse_tailscale", st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "BackendState": st.one_of(st.just("Running"), _text, st.integers()),
    "TailscaleIPs": st.one_of(st.lists(st.one_of(_text, st.integers())), json_values),
    "Self": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "DNSName": st.one_of(_text, st.integers()), "Online": json_values,
        "TailscaleIPs": st.one_of(st.lists(st.one_of(_text, st.integers())), json_values)})),
})), parse_tailscale, "tailscale status --json")


class FakeNvml:
    """A ``pynvml`` stand-in whose every call answers a drawn value or raises a drawn error."""

    class NVMLError(Exception):
        pass

    def __init__(self, answers: dict[str, Any]) -> None:
        self._answers = answers
        self.NVML_ENCODER_QUERY_H264, self.NVML_ENCODER_QUERY_HEVC, self.NVML_ENCODER_QUERY_AV1 = 0, 1, 2

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)
        answer = self._answers.get(name, "missing")

        def call(*args: Any) -> Any:
            if answer == "missing":
                raise AttributeError(name)
            if isinstance(answer, type) and issubclass(answer, BaseException):
                raise answer(name)
            return answer

        return call

    def __repr__(self) -> str:
        return f"FakeNvml({self._answers!r})"


class _Struct:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"_Struct({self.__dict__!r})"


_nvml_answer = st.one_of(
    _json_numbers, _text, st.binary(max_size=20), json_values,
    st.sampled_from([FakeNvml.NVMLError, ValueError, TypeError, OSError, RuntimeError, KeyError, OverflowError, "missing"]),
    st.builds(_Struct, total=_json_numbers, busId=st.one_of(_text, st.binary(max_size=20))),
)
_NVML_CALLS = ["nvmlInit", "nvmlShutdown", "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion", "nvmlDeviceGetCount",
               "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo",
               "nvmlDeviceGetPciInfo", "nvmlDeviceGetBusType", "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetMigMode",
               "nvmlDeviceGetEncoderCapacity"]


def _snapshot(binding: FakeNvml) -> None:
    snap = snapshot_nvml(binding)
    json.dumps(snap)  # the snapshot *is* a recording's nvml.json: it must be plain JSON
    parse_nvml(snap)


_parser("snapshot_nvml", st.builds(FakeNvml, st.fixed_dictionaries({
    "nvmlInit": st.one_of(st.none(), st.none(), _nvml_answer), "nvmlDeviceGetCount": st.one_of(st.integers(0, 3), _nvml_answer),
}, optional={name: _nvml_answer for name in _NVML_CALLS if name not in ("nvmlInit", "nvmlDeviceGetCount")})),
    _snapshot, "snapshot_nvml over a pynvml whose calls answer garbage or raise anything")


# -- recorded machines -----------------------------------------------------------------------------
_PROFILES = profiles()
_TARGETS = [
    "system.json", "nvml.json", "links.json", "profile.json", "tailscale.json", "vainfo/renderD128.txt", "vainfo/renderD129.txt",
    "ffmpeg/encoders.txt", "ffmpeg/path.txt", "ffmpeg/version.txt", "ffmpeg/test-h264_vaapi.txt", "ffmpeg/test-h264_nvenc.txt",
    "ffmpeg/test-libx264.txt", "sys/class/drm/renderD128/device/vendor", "sys/class/drm/renderD128/device/device",
    "sys/class/drm/renderD128/device/mem_info_vram_total", "sys/class/graphics/fb0/modes", "sys/block/nvme0n1/queue/rotational",
    "proc/self/cgroup", "sys/fs/cgroup/cpu.max", "sys/fs/cgroup/memory.max", "sys",
]
_JSON_TARGETS = ["system.json", "nvml.json", "links.json", "profile.json", "tailscale.json"]
_KINDS = ["deep_json", "giant_number", "wrong_type", "mutate_json", "mutate_json", "binary", "fifo", "folder", "over_cap", "empty",
          "delete", "text", "dev_zero", "loop_link"]
_mangle = st.one_of(
    st.tuples(st.sampled_from(_TARGETS), st.sampled_from(_KINDS), st.one_of(json_values, st.binary(max_size=64), _text, st.integers(1, 200_000))),
    st.tuples(st.sampled_from(_JSON_TARGETS), st.sampled_from(["mutate_json", "deep_json", "giant_number"]), st.one_of(mutations(json_values), st.integers(1, 200_000))),
    # (a file name is at most 255 bytes: 240 digits is as long a render node name as a folder can hold)
    st.tuples(st.one_of(digit_strings(1, 240), st.text("0123456789", min_size=1, max_size=6)).map(lambda d: f"sys/class/drm/renderD{d}/device/vendor"),
              st.just("text"), st.sampled_from(["0x1002", "0x8086"])),
)
recording_cases = st.tuples(st.sampled_from(_PROFILES), st.lists(_mangle, min_size=1, max_size=4))


def _deep_json(n: int) -> str:
    n = min(max(n, 2), 200_000)  # the payload may be any drawn int
    return ("[" * n + "]" * n) if n % 2 else ('{"a":' * n + "1" + "}" * n)


def _json_text(value: Any) -> str:
    try:
        return json.dumps(value)
    except (ValueError, RecursionError, TypeError):
        return _deep_json(5000)


def _clear(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _mangle_one(root: Path, target: str, kind: str, payload: Any) -> None:
    path = root / target
    for parent in reversed(path.relative_to(root).parents[:-1]):  # an earlier mangle may have put a file there
        if (root / parent).is_symlink() or ((root / parent).exists() and not (root / parent).is_dir()):
            _clear(root / parent)
    _clear(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "delete":
        return
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        (path / "inside").mkdir(parents=True)
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "loop_link":
        path.symlink_to(path.name)
    elif kind == "over_cap":
        path.write_bytes(b"9" * ((1 << 20) + 1))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "binary":
        path.write_bytes(payload if isinstance(payload, bytes) else os.urandom(64))
    elif kind == "deep_json":
        path.write_text(_deep_json(payload if isinstance(payload, int) else 100_000))
    elif kind == "giant_number":
        n = payload if isinstance(payload, int) else 5000
        path.write_text(json.dumps({"cpu_logical": 1, "mem_total": 0, "devices": [{"memory_total": 0}]}).replace("0", "9" * min(n, 6000)))
    elif kind == "wrong_type":
        path.write_text(_json_text(payload))
    elif kind == "mutate_json":
        original = profile_path(root.name.split("--")[0]) / target
        try:
            doc = json.loads(original.read_text()) if original.is_file() else {}
        except ValueError:
            doc = {}
        is_edits = isinstance(payload, list) and all(isinstance(e, tuple) and len(e) == 4 for e in payload)  # JSON has no tuples
        edits = payload if is_edits else [(1, 0, "replace", payload)]
        path.write_text(_json_text(mutate(copy.deepcopy(doc), edits)))
    else:  # text
        path.write_text(payload if isinstance(payload, str) else str(payload)[:1000], errors="surrogatepass")


class _Recordings:
    """Mangled copies of bundled profiles, one folder per example."""

    def __init__(self) -> None:
        self.base: Path | None = None
        self.n = 0

    def setup(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="fabric-fuzz-rec-"))

    def teardown(self) -> None:
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None

    def __call__(self, case: tuple[str, list[tuple[str, str, Any]]]) -> None:
        if self.base is None:
            self.setup()
        profile, mangles = case
        self.n += 1
        root = self.base / f"{profile}--{self.n}"
        shutil.copytree(profile_path(profile), root)
        try:
            for target, kind, payload in mangles:
                _mangle_one(root, target, kind, payload)
            caps = probe_node(RecordedSources(root))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        failed = [n for n in caps.limitations.notes if n.startswith("internal:")]
        if failed:
            raise AssertionError(f"a probe section failed inside probe_node: {failed[0]}")
        caps.to_ray_resources(), caps.to_ray_labels(), caps.to_k3s_labels(), caps.model_dump_json()


_recordings = _Recordings()
register(Surface(
    name="recordings", strategy=recording_cases, call=_recordings, typed=(ProbeError,), setup=_recordings.setup,
    teardown=_recordings.teardown, timeout_s=5.0,
    description="probe_node(RecordedSources(dir)) over mangled copies of the bundled profiles",
))

"""The one seam between the probe and the machine: ``Sources``.

Every hardware read the probe makes goes through a ``Sources`` object, and every method returns
raw material in exactly the shape a recording stores it: ``system.json`` and
``nvml.json`` as dicts, vainfo's text per render node, sysfs/procfs file contents by path
(relative to ``/``), symlink targets, ffmpeg's encoder list and test encodes, tailscale's JSON.
So a recording is simply what ``LiveSources`` returned, written to disk, and ``RecordedSources``
reads it back: the probe cannot tell the two apart.

``None`` (or an empty list) always means *absent*. ``RecordedSources`` treats unreadable or
malformed files the same way and says so in ``problems``: a FIFO, device or folder where a file
should be, a file over 1 MiB, JSON that is invalid or nested deeper than 32 levels (nothing
blocks, nothing recurses without bound: ``probes._files``). Only a recording folder that does
not exist is an error (``ProbeError``), because that is a mistake of whoever named it.

Recording layout (beyond the files above): ``links.json`` maps a symlink's path to its resolved
target (``sys/class/drm/renderD128/device/driver`` -> ``/sys/bus/pci/drivers/amdgpu``; a symlink
cannot live in the tree because a directory of the same name often must), ``proc/self/cgroup``
and ``sys/fs/cgroup/...`` carry cgroup limits, ``ffmpeg/path.txt`` and ``ffmpeg/version.txt``
say which ffmpeg ran, and a bundled profile's ``profile.json`` declares name and roles.

One reading is not a probe input but what every heartbeat carries: ``utilization()``, the load
now (``probes.utilization``). A recording holds no load, so a recorded node reports the CPU and
memory load of the machine it runs on and no GPUs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from fabric.core.errors import ProbeError
from fabric.core.records import Utilization
from probes._files import MAX_READ, load_json, read_capped
from probes.ffmpeg import TestEncode, find_ffmpeg, format_test_encode, parse_test_encode, run_test_encodes
from probes.libva import query_libva
from probes.utilization import read_utilization
from probes.vaapi import parse_vainfo

__all__ = ["Sources", "LiveSources", "RecordedSources", "RecordingSources"]

_TOOL_TIMEOUT_S = 10.0


@runtime_checkable
class Sources(Protocol):
    """Raw probe inputs for one machine. Implementations never raise for absent things."""

    label: str
    """``live``, or the recording's (profile's) name."""
    problems: list[str]
    """Things a source could not read in a way worth telling (a malformed recorded file)."""

    def system(self) -> dict[str, Any] | None: ...
    def nvml(self) -> dict[str, Any] | None: ...
    def read_file(self, path: str) -> str | None: ...
    def list_dir(self, path: str) -> list[str]: ...
    def resolve_link(self, path: str) -> str | None: ...
    def vainfo(self, render_node: str) -> str | None: ...
    def ffmpeg_path(self) -> str | None: ...
    def ffmpeg_version(self) -> str | None: ...
    def ffmpeg_encoders(self) -> str | None: ...
    def ffmpeg_test_encodes(self, encoders: list[str], vaapi_device: str | None = None) -> dict[str, TestEncode]: ...
    def tailscale_status(self) -> dict[str, Any] | None: ...
    def declared(self) -> dict[str, Any]: ...
    def utilization(self) -> Utilization: ...


def _safe_rel(path: str) -> str | None:
    """``path`` relative to the root, or None when it would escape it."""
    parts = [p for p in path.strip("/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def _read_text(p: Path) -> str | None:
    """A live file's text, or None (missing, not a regular file, over ``MAX_READ``)."""
    return read_capped(p, MAX_READ)[0]


def _run(cmd: list[str], timeout: float = _TOOL_TIMEOUT_S) -> subprocess.CompletedProcess[bytes] | None:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None


class LiveSources:
    """This machine. ``root`` re-roots the file reads (sysfs, procfs, cgroups) for tests;
    ``psutil`` and ``nvml`` stand in for the modules ``utilization()`` reads."""

    def __init__(self, root: str | Path = "/", *, test_timeout_s: float = 10.0, psutil: Any = None, nvml: Any = None) -> None:
        self.root = Path(root)
        self._psutil, self._nvml = psutil, nvml
        self.label = "live"
        self.problems: list[str] = []
        self.test_timeout_s = test_timeout_s
        self._ffmpeg: str | None | bool = False  # False: not looked up yet

    def system(self) -> dict[str, Any] | None:
        from probes.system import read_psutil

        try:
            return read_psutil()
        except Exception as exc:  # noqa: BLE001 - psutil missing or a broken /proc: absent
            self.problems.append(f"psutil failed: {type(exc).__name__}: {exc}")
            return None

    def nvml(self) -> dict[str, Any] | None:
        from probes.nvml import snapshot_nvml

        return snapshot_nvml()

    def read_file(self, path: str) -> str | None:
        rel = _safe_rel(path)
        return None if rel is None else _read_text(self.root / rel)

    def list_dir(self, path: str) -> list[str]:
        rel = _safe_rel(path)
        try:
            return sorted(os.listdir(self.root / rel)) if rel else []
        except OSError:
            return []

    def resolve_link(self, path: str) -> str | None:
        rel = _safe_rel(path)
        if rel is None:
            return None
        full = self.root / rel
        if not full.is_symlink():
            return None
        target = os.path.realpath(full)
        root = os.path.realpath(self.root)
        if root != "/" and (target == root or target.startswith(root + os.sep)):
            target = "/" + os.path.relpath(target, root)
        return target

    def vainfo(self, render_node: str) -> str | None:
        """libva through ctypes (in a child process) first, the ``vainfo`` tool when libva is
        missing or listed nothing; either way vainfo-shaped text."""
        device = f"/dev/dri/{render_node}"
        text = query_libva(device, timeout=_TOOL_TIMEOUT_S)
        if text is not None and parse_vainfo(text).ok:
            return text
        exe = shutil.which("vainfo")
        proc = _run([exe, "--display", "drm", "--device", device]) if exe else None
        if proc is None:
            return text
        fallback = (proc.stdout + proc.stderr).decode("utf-8", errors="replace")
        return fallback if text is None or parse_vainfo(fallback).ok else text

    def ffmpeg_path(self) -> str | None:
        if self._ffmpeg is False:
            self._ffmpeg = find_ffmpeg()
        return self._ffmpeg or None

    def ffmpeg_version(self) -> str | None:
        exe = self.ffmpeg_path()
        proc = _run([exe, "-hide_banner", "-version"]) if exe else None
        if proc is None or proc.returncode != 0:
            return None
        lines = proc.stdout.decode("utf-8", errors="replace").splitlines()
        return lines[0] if lines else None

    def ffmpeg_encoders(self) -> str | None:
        exe = self.ffmpeg_path()
        proc = _run([exe, "-hide_banner", "-encoders"]) if exe else None
        if proc is None or proc.returncode != 0:
            return None
        return proc.stdout.decode("utf-8", errors="replace")

    def ffmpeg_test_encodes(self, encoders: list[str], vaapi_device: str | None = None) -> dict[str, TestEncode]:
        exe = self.ffmpeg_path()
        if not exe:
            return {}
        return run_test_encodes(exe, encoders, vaapi_device, timeout=self.test_timeout_s)

    def tailscale_status(self) -> dict[str, Any] | None:
        exe = shutil.which("tailscale")
        proc = _run([exe, "status", "--json"], timeout=5.0) if exe else None
        if proc is None or not proc.stdout.strip() or len(proc.stdout) > MAX_READ:
            return None
        data, _ = load_json(proc.stdout)
        return data if isinstance(data, dict) else None

    def declared(self) -> dict[str, Any]:
        return {}

    def utilization(self) -> Utilization:
        """CPU and memory from psutil, per-GPU from NVML when it answers."""
        return read_utilization(True, psutil=self._psutil, nvml=self._nvml)


class RecordedSources:
    """A recording folder standing for one machine (see the module docstring for its layout);
    ``psutil`` stands in for the module ``utilization()`` reads."""

    def __init__(self, root: str | Path, *, psutil: Any = None) -> None:
        self._psutil = psutil
        if not isinstance(root, (str, os.PathLike)):
            raise ProbeError(f"a recording folder is a str or Path, got {type(root).__name__}", source=None)
        self.root = Path(root)
        if not self.root.is_dir():
            raise ProbeError(f"recording folder {str(self.root)!r} does not exist or is not a folder", source=str(self.root))
        self.problems: list[str] = []
        links = self._json("links.json")
        self._links: dict[str, str] = (
            {str(k).strip("/"): v for k, v in links.items() if isinstance(v, str)} if isinstance(links, dict) else {}
        )
        declared = self._json("profile.json")
        self._declared: dict[str, Any] = declared if isinstance(declared, dict) else {}
        name = self._declared.get("name")
        self.label = name if isinstance(name, str) and name.strip() else str(self.root)

    # -- helpers ----------------------------------------------------------------------------
    def _text(self, rel: str) -> str | None:
        safe = _safe_rel(rel)
        if safe is None:
            return None
        text, why = read_capped(self.root / safe, MAX_READ)
        if why is not None:
            self.problems.append(f"recording {safe} {why}; treated as absent")
        return text

    def _json(self, rel: str) -> Any:
        text = self._text(rel)
        if text is None:
            return None
        value, why = load_json(text)
        if why is not None:
            self.problems.append(f"recording {rel} {why}; treated as absent")
        return value

    # -- Sources ----------------------------------------------------------------------------
    def system(self) -> dict[str, Any] | None:
        return self._json("system.json")

    def nvml(self) -> dict[str, Any] | None:
        return self._json("nvml.json")

    def read_file(self, path: str) -> str | None:
        rel = _safe_rel(path)
        if rel is None or not (rel.startswith("sys/") or rel.startswith("proc/")):
            return None
        return self._text(rel)

    def list_dir(self, path: str) -> list[str]:
        rel = _safe_rel(path)
        if rel is None:
            return []
        names: set[str] = set()
        try:
            names.update(os.listdir(self.root / rel))
        except OSError:
            pass
        prefix = rel + "/"
        names.update(k[len(prefix):] for k in self._links if k.startswith(prefix) and "/" not in k[len(prefix):])
        return sorted(names)

    def resolve_link(self, path: str) -> str | None:
        rel = _safe_rel(path)
        return self._links.get(rel) if rel else None

    def vainfo(self, render_node: str) -> str | None:
        return self._text(f"vainfo/{render_node}.txt")

    def ffmpeg_path(self) -> str | None:
        text = self._text("ffmpeg/path.txt")
        if text and text.strip():
            return text.strip()
        return "ffmpeg" if (self.root / "ffmpeg" / "encoders.txt").is_file() else None

    def ffmpeg_version(self) -> str | None:
        text = self._text("ffmpeg/version.txt")
        return text.splitlines()[0] if text and text.strip() else None

    def ffmpeg_encoders(self) -> str | None:
        return self._text("ffmpeg/encoders.txt")

    def ffmpeg_test_encodes(self, encoders: list[str], vaapi_device: str | None = None) -> dict[str, TestEncode]:
        out: dict[str, TestEncode] = {}
        for enc in encoders:
            text = self._text(f"ffmpeg/test-{enc}.txt")
            if text is None:
                continue
            result = parse_test_encode(text)
            if result is None:
                self.problems.append(f"recording ffmpeg/test-{enc}.txt has no exit= line; {enc} not proven")
                continue
            out[enc] = result
        return out

    def tailscale_status(self) -> dict[str, Any] | None:
        data = self._json("tailscale.json")
        return data if isinstance(data, dict) else None

    def declared(self) -> dict[str, Any]:
        return dict(self._declared)

    def utilization(self) -> Utilization:
        """The load of the machine this runs on (psutil's CPU and memory) and no GPUs: the
        recorded GPUs are not here to read."""
        return read_utilization(False, psutil=self._psutil)


class RecordingSources:
    """Wraps another ``Sources`` and keeps everything it returned, so ``write(dir)`` can lay it
    down as a recording: what the probe read, and nothing else."""

    def __init__(self, inner: Sources) -> None:
        self.inner = inner
        self.label = inner.label
        self.problems = inner.problems
        self._json: dict[str, Any] = {}
        self._files: dict[str, str] = {}
        self._links: dict[str, str] = {}
        self._tests: dict[str, TestEncode] = {}

    def system(self):
        value = self.inner.system()
        if value is not None:
            self._json["system.json"] = value
        return value

    def nvml(self):
        value = self.inner.nvml()
        if value is not None:
            self._json["nvml.json"] = value
        return value

    def read_file(self, path: str):
        value = self.inner.read_file(path)
        rel = _safe_rel(path)
        if value is not None and rel:
            self._files[rel] = value
        return value

    def list_dir(self, path: str):
        return self.inner.list_dir(path)

    def resolve_link(self, path: str):
        value = self.inner.resolve_link(path)
        rel = _safe_rel(path)
        if value is not None and rel:
            self._links[rel] = value
        return value

    def vainfo(self, render_node: str):
        value = self.inner.vainfo(render_node)
        if value is not None:
            self._files[f"vainfo/{render_node}.txt"] = value
        return value

    def ffmpeg_path(self):
        value = self.inner.ffmpeg_path()
        if value is not None:
            self._files["ffmpeg/path.txt"] = value + "\n"
        return value

    def ffmpeg_version(self):
        value = self.inner.ffmpeg_version()
        if value is not None:
            self._files["ffmpeg/version.txt"] = value + "\n"
        return value

    def ffmpeg_encoders(self):
        value = self.inner.ffmpeg_encoders()
        if value is not None:
            self._files["ffmpeg/encoders.txt"] = value
        return value

    def ffmpeg_test_encodes(self, encoders, vaapi_device=None):
        value = self.inner.ffmpeg_test_encodes(encoders, vaapi_device)
        self._tests.update(value)
        return value

    def tailscale_status(self):
        value = self.inner.tailscale_status()
        if value is not None:
            self._json["tailscale.json"] = value
        return value

    def declared(self):
        value = self.inner.declared()
        if value:
            self._json["profile.json"] = value
        return value

    def utilization(self):
        return self.inner.utilization()  # the load now is not a probe input: never recorded

    def write(self, folder: str | Path) -> Path:
        """Lay the captured inputs down as a recording folder (created if needed)."""
        root = Path(folder)
        root.mkdir(parents=True, exist_ok=True)
        for name, value in self._json.items():
            (root / name).write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")
        for rel, text in self._files.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        for enc, result in self._tests.items():
            target = root / "ffmpeg" / f"test-{enc}.txt"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(format_test_encode(result))
        if self._links:
            (root / "links.json").write_text(json.dumps(self._links, indent=1, sort_keys=True) + "\n")
        return root

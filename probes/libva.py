"""VA-API profiles straight from libva (ctypes), printed the way ``vainfo`` prints them.

Why libva first: ``vainfo`` lives in a separate package (libva-utils) that many machines lack,
while libva itself comes with every VA-enabled ffmpeg or Mesa. Why a child process: a VA driver
is native code that can crash or hang, and the probe must survive both, so ``query_libva`` runs
this file as a script (stdlib only: no package import, fast to start) under a timeout. Why
vainfo's format: one parser (``probes.vaapi.parse_vainfo``) and one recording format
(``vainfo/renderD128.txt``) whichever tool answered.

Exit code 3 from the child means "no libva here": the caller falls back to ``vainfo``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys

NO_LIBVA = 3


def format_vainfo(version: str, vendor: str, pairs: list[tuple[str, str]]) -> str:
    """vainfo-shaped text: the version and driver lines, then one ``profile : entrypoint`` line each."""
    lines = [f"vainfo: VA-API version: {version} (libva via ctypes)", f"vainfo: Driver version: {vendor}",
             "vainfo: Supported profile and entrypoints"]
    lines += [f"      {p:<32}: {e}" for p, e in pairs]
    return "\n".join(lines) + "\n"


def _load(name: str, soname: str) -> ctypes.CDLL | None:
    for candidate in (soname, ctypes.util.find_library(name)):
        if candidate:
            try:
                return ctypes.CDLL(candidate)
            except OSError:
                continue
    return None


def describe_device(device: str) -> tuple[int, str]:
    """(exit code, text) for one render node, in this process. Used by the child."""
    va = _load("va", "libva.so.2")
    va_drm = _load("va-drm", "libva-drm.so.2")
    if va is None or va_drm is None:
        return NO_LIBVA, "libva not found"
    c_int, byref, vp = ctypes.c_int, ctypes.byref, ctypes.c_void_p
    va_drm.vaGetDisplayDRM.restype, va_drm.vaGetDisplayDRM.argtypes = vp, [c_int]
    va.vaInitialize.argtypes = [vp, ctypes.POINTER(c_int), ctypes.POINTER(c_int)]
    va.vaErrorStr.restype, va.vaErrorStr.argtypes = ctypes.c_char_p, [c_int]
    va.vaQueryVendorString.restype, va.vaQueryVendorString.argtypes = ctypes.c_char_p, [vp]
    va.vaMaxNumProfiles.argtypes = va.vaMaxNumEntrypoints.argtypes = va.vaTerminate.argtypes = [vp]
    va.vaQueryConfigProfiles.argtypes = [vp, ctypes.POINTER(c_int), ctypes.POINTER(c_int)]
    va.vaQueryConfigEntrypoints.argtypes = [vp, c_int, ctypes.POINTER(c_int), ctypes.POINTER(c_int)]
    va.vaProfileStr.restype, va.vaProfileStr.argtypes = ctypes.c_char_p, [c_int]
    va.vaEntrypointStr.restype, va.vaEntrypointStr.argtypes = ctypes.c_char_p, [c_int]
    try:
        fd = os.open(device, os.O_RDWR)
    except OSError as exc:
        return 0, f"cannot open {device}: {exc.strerror}"
    try:
        dpy = va_drm.vaGetDisplayDRM(fd)
        if not dpy:
            return 0, f"vaGetDisplayDRM failed for {device}"
        major, minor = c_int(), c_int()
        status = va.vaInitialize(dpy, byref(major), byref(minor))
        if status != 0:
            err = (va.vaErrorStr(status) or b"?").decode(errors="replace")
            return 0, f"vaInitialize failed with error code {status} ({err}),exit"
        try:
            vendor = (va.vaQueryVendorString(dpy) or b"").decode(errors="replace")
            profiles = (c_int * max(1, va.vaMaxNumProfiles(dpy)))()
            count = c_int()
            va.vaQueryConfigProfiles(dpy, profiles, byref(count))
            pairs: list[tuple[str, str]] = []
            for profile in profiles[: count.value]:
                eps = (c_int * max(1, va.vaMaxNumEntrypoints(dpy)))()
                n = c_int()
                if va.vaQueryConfigEntrypoints(dpy, profile, eps, byref(n)) != 0:
                    continue
                pname = (va.vaProfileStr(profile) or b"").decode(errors="replace")
                pairs += [(pname, (va.vaEntrypointStr(e) or b"").decode(errors="replace")) for e in eps[: n.value]]
            return 0, format_vainfo(f"{major.value}.{minor.value}", vendor, pairs)
        finally:
            va.vaTerminate(dpy)
    finally:
        os.close(fd)


def query_libva(device: str, *, timeout: float = 10.0) -> str | None:
    """libva's account of ``device`` as vainfo-shaped text (failures included), or None when
    libva is not installed or the child could not run."""
    env = {**os.environ, "LIBVA_MESSAGING_LEVEL": "1"}  # errors only on stderr
    try:
        proc = subprocess.run([sys.executable, "-I", os.path.abspath(__file__), device], capture_output=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode == NO_LIBVA:
        return None
    text = (proc.stdout + proc.stderr).decode("utf-8", errors="replace")
    if proc.returncode != 0:  # the driver crashed the child: say so, as vainfo's failure would
        text += f"\nlibva child exited with {proc.returncode}\n"
    return text


if __name__ == "__main__":  # the child: python -I libva.py /dev/dri/renderD128
    code, out = describe_device(sys.argv[1] if len(sys.argv) > 1 else "/dev/dri/renderD128")
    sys.stdout.write(out if out.endswith("\n") else out + "\n")
    sys.exit(code)

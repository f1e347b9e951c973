"""Kill a Ray node the hard way, as a crash would: every process naming its temp dir, and theirs.

A Ray node started with ``ray start --temp-dir=DIR`` daemonizes its processes (GCS, raylet,
dashboard, log monitor, ...); each names DIR (or a path under it) on its command line. The finder
never matches by process name, so other clusters on the machine are never touched. Pass a temp
dir unique to the node (a worker's dir must not contain the head's).
"""

from __future__ import annotations

import contextlib
import os
import signal

import psutil  # type: ignore[import-untyped]


def processes_under(marker: str) -> list[psutil.Process]:
    """Every process (not this one) whose command line names ``marker``, and their descendants."""
    found: dict[int, psutil.Process] = {}
    me = os.getpid()
    for p in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if p.pid != me and marker in " ".join(p.info["cmdline"] or []):
                found[p.pid] = p
    for p in list(found.values()):
        with contextlib.suppress(psutil.Error):
            found.update({c.pid: c for c in p.children(recursive=True) if c.pid != me})
    return list(found.values())


def kill_processes(procs: list[psutil.Process], sig: int = signal.SIGKILL, wait_s: float = 10.0) -> list[int]:
    """Send ``sig`` to each process and wait for them to go; the pids signalled."""
    sent = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)
            sent.append(p.pid)
    psutil.wait_procs(procs, timeout=wait_s)
    return sent


def kill_node(temp_dir: str, sig: int = signal.SIGKILL) -> list[int]:
    """SIGKILL (or ``sig``) every process of the node whose temp dir is ``temp_dir``; the pids."""
    return kill_processes(processes_under(str(temp_dir)), sig)


__all__ = ["kill_node", "kill_processes", "processes_under"]

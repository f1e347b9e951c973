"""Process sessions a fabric process started: a ``ray start`` child leads a session of its own
(``start_new_session=True``), and everything it starts (the raylet, its workers, Ray's agents)
stays in that session. Stopping a node is stopping that session, by its leader's pid, never by a
process name.

Used by the local provider (its provisioned nodes) and by ``fabric join --supervise`` (the node
it supervises).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable

__all__ = ["exited", "gone", "session_members", "signal_session", "stop_session", "wait_exited"]


def exited(pid: int) -> bool:
    """Whether our child ``pid`` has ended, without reaping it: while it is an unreaped zombie its
    pid, hence its session and process group id, cannot be reused, so signalling them stays safe."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def gone(pid: int) -> bool:
    """Whether ``pid`` (not necessarily our child: a process an earlier process started) has ended."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def wait_exited(pid: int, timeout_s: float, ended: Callable[[int], bool] | None = None) -> bool:
    """Wait up to ``timeout_s`` for ``ended(pid)`` (default ``exited``); whether it came."""
    ended = ended or exited
    deadline = time.monotonic() + timeout_s
    while not ended(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def session_members(sid: int) -> list[int]:
    """The live (not zombie) processes of session ``sid`` other than its leader."""
    import psutil

    out = []
    for pid in psutil.pids():
        try:
            if pid != sid and os.getsid(pid) == sid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return out


def signal_session(sid: int, sig: int) -> None:
    """Send ``sig`` to every process of the session ``sid`` our child leads: its process group and
    the groups its descendants made inside the session (Ray puts some workers in groups of their
    own). Only processes whose session id is ``sid`` are signalled."""
    try:
        os.killpg(sid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in session_members(sid):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_session(pid: int, grace_s: float, ended: Callable[[int], bool] | None = None) -> None:
    """Stop the session our child ``pid`` leads: SIGTERM, up to ``grace_s`` for the leader to end,
    SIGKILL; then SIGKILL what is left of the session (a worker slow to exit) while the leader,
    not yet reaped, keeps the session id ours. The caller reaps the leader (``Popen.wait``).
    ``ended``: how the leader's end is seen (default ``exited``; ``gone`` for one not our child)."""
    ended = ended or exited
    if not ended(pid):
        signal_session(pid, signal.SIGTERM)
        if not wait_exited(pid, grace_s, ended):
            signal_session(pid, signal.SIGKILL)
            wait_exited(pid, 30.0, ended)
    signal_session(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while session_members(pid) and time.monotonic() < deadline:
        time.sleep(0.02)

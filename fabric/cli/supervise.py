"""``fabric join --supervise``: keep this machine's node in the fleet, whatever happens to it.

``fabric join --supervise`` runs ``ray start --block`` as a child in a session of its own and
looks at it every ``check_every_s``. It stops that node (its whole session, by the pid it holds)
and starts a new one when:

- ``ray start`` exited (its raylet died, or the head was gone too long and the raylet gave up);
- the raylet ended while ``ray start`` still runs;
- the head's node table says the node is dead while its raylet still runs: a node cut off for
  longer than Ray's death detection is declared dead, and when the link heals its raylet runs on,
  orphaned; only a new raylet (a new Ray node id, the same name) brings the machine back;
- the head does not list the node at all for ``unknown_grace_s`` (a head restarted without its
  state);
- with the operator API given (``--api``), the fleet listed the node once and then no longer
  lists it, or lists it dead, for ``fleet_grace_s``.

A head that cannot be reached (a cut link) is never a reason: nothing is known then, and the
raylet decides for itself. Restarts wait a bounded backoff (1, 2, 4, 8, 16, then 30 s), back to
1 s once a node stayed alive ``stable_s``. SIGTERM (or SIGINT) stops the node and ends the
supervisor with exit 0: that is how a service manager stops it (``docs/partitions.md`` has a
systemd unit).

``Supervisor`` holds the rules over a ``NodeSeam`` (start, look, stop, wait); ``ProcessSeam`` is
the real one (a child session, ``psutil`` for the raylet, the head's GCS over gRPC, the operator
API when given). Tests drive ``Supervisor`` with a scripted seam.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Literal, Mapping, Protocol, Sequence, cast

__all__ = ["BACKOFF_S", "NodeSeam", "ProcessSeam", "Sight", "Supervisor", "SupervisePolicy", "restart_reason", "supervise"]

RayState = Literal["alive", "dead", "unknown", "unreachable"]
"""What the head's node table says of a node: listed alive, listed dead, not listed, or not asked
(the head did not answer, or the node's id is not known yet)."""
FleetState = Literal["listed", "gone", "unknown"]
"""What the fleet says: lists the node (not dead), does not (or lists it dead), or not asked."""

BACKOFF_S: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
"""Seconds before each restart in a row; the last repeats."""


@dataclass(frozen=True)
class SupervisePolicy:
    """How the supervisor looks and waits (defaults for a real machine)."""

    check_every_s: float = 2.0
    backoff_s: tuple[float, ...] = BACKOFF_S
    stable_s: float = 60.0
    """A node alive this long resets the backoff."""
    unknown_grace_s: float = 60.0
    """A node the head does not list for this long (after its raylet started) is restarted."""
    fleet_grace_s: float = 30.0
    """A node the fleet listed and then no longer lists for this long is restarted."""
    stop_grace_s: float = 10.0
    """SIGTERM to SIGKILL when stopping the node."""


@dataclass(frozen=True)
class Sight:
    """One look at the supervised node."""

    ray_start_running: bool
    exit_code: int | None = None
    """``ray start``'s exit code once it ended."""
    raylet_pid: int | None = None
    """The raylet's pid once seen (kept after it ended)."""
    raylet_running: bool = False
    node_id: str | None = None
    ray: RayState = "unreachable"
    fleet: FleetState = "unknown"


class NodeSeam(Protocol):
    """What the supervisor does to the machine."""

    def start(self) -> int:
        """Start ``ray start --block`` in a new session; its pid."""

    def look(self) -> Sight:
        """Look at the node started last."""

    def stop(self, grace_s: float) -> None:
        """Stop the node started last (its whole session) and reap it."""

    def wait(self, seconds: float) -> bool:
        """Wait ``seconds``; True when asked to stop meanwhile."""

    def stopping(self) -> bool:
        """Whether the supervisor was asked to stop."""


@dataclass
class _Incarnation:
    """What the supervisor knows of the node it started last."""

    started: float
    pid: int
    node_id: str | None = None
    alive_since: float | None = None
    unknown_since: float | None = None
    listed_once: bool = False
    gone_since: float | None = None
    said_up: bool = False


def restart_reason(sight: Sight, inc: _Incarnation, now: float, policy: SupervisePolicy) -> str | None:
    """Why the node seen as ``sight`` must be restarted, or None; updates ``inc``'s clocks."""
    if not sight.ray_start_running:
        return f"ray start (pid {inc.pid}) exited with code {sight.exit_code}"
    if sight.raylet_pid is not None and not sight.raylet_running:
        return f"the raylet (pid {sight.raylet_pid}) ended while ray start still runs"
    if sight.ray == "dead":
        return (f"the head's node table says node {sight.node_id} is dead while its raylet (pid {sight.raylet_pid}) "
                f"still runs")
    if sight.ray == "alive":
        inc.unknown_since = None
        if inc.alive_since is None:
            inc.alive_since = now
    elif sight.ray == "unknown":
        inc.alive_since = None
        inc.unknown_since = now if inc.unknown_since is None else inc.unknown_since
        if now - inc.unknown_since >= policy.unknown_grace_s:
            return f"the head has not listed node {sight.node_id} for {now - inc.unknown_since:.0f} s"
    else:  # unreachable: nothing is known, nothing is decided
        inc.alive_since = None
    if sight.fleet == "listed":
        inc.listed_once, inc.gone_since = True, None
    elif sight.fleet == "gone" and inc.listed_once:
        inc.gone_since = now if inc.gone_since is None else inc.gone_since
        if now - inc.gone_since >= policy.fleet_grace_s:
            return f"the fleet has not listed node {sight.node_id} as alive for {now - inc.gone_since:.0f} s"
    return None


@dataclass
class Supervisor:
    """The supervision loop over ``seam``; ``say`` prints one line per thing that happens."""

    seam: NodeSeam
    policy: SupervisePolicy = field(default_factory=SupervisePolicy)
    say: Callable[[str], None] = print
    clock: Callable[[], float] = time.monotonic
    restarts: int = 0

    def run(self) -> int:
        """Supervise until asked to stop; 0."""
        in_a_row = 0
        while not self.seam.stopping():
            inc = _Incarnation(started=self.clock(), pid=self.seam.start())
            self.say(f"started ray start --block (pid {inc.pid})")
            reason = self._watch(inc)
            self.seam.stop(self.policy.stop_grace_s)
            if reason is None:  # asked to stop
                break
            stable = inc.alive_since is not None and self.clock() - inc.alive_since >= self.policy.stable_s
            in_a_row = 0 if stable else in_a_row
            delay = self.policy.backoff_s[min(in_a_row, len(self.policy.backoff_s) - 1)]
            in_a_row += 1
            self.restarts += 1
            self.say(f"{reason}: node stopped; starting a new one in {delay:g} s (restart {self.restarts})")
            if self.seam.wait(delay):
                break
        self.say("stopped")
        return 0

    def _watch(self, inc: _Incarnation) -> str | None:
        """Look every ``check_every_s`` until the node must be restarted (why) or a stop is asked (None)."""
        while not self.seam.wait(self.policy.check_every_s):
            sight = self.seam.look()
            if sight.node_id and inc.node_id is None:
                inc.node_id = sight.node_id
            reason = restart_reason(sight, inc, self.clock(), self.policy)
            if reason is not None:
                return reason
            if sight.ray == "alive" and not inc.said_up:
                inc.said_up = True
                self.say(f"node {sight.node_id} is alive (raylet pid {sight.raylet_pid})")
        return None


# -- the real machine ---------------------------------------------------------------------------------------
def _raylet_of(sid: int) -> tuple[int, str] | None:
    """The raylet of session ``sid`` and its Ray node id (from its ``--node_id=`` argument)."""
    import psutil

    from fabric.providers.sessions import session_members

    for pid in session_members(sid):
        try:
            cmdline = psutil.Process(pid).cmdline()
        except psutil.Error:
            continue
        if cmdline and os.path.basename(cmdline[0]) == "raylet":
            node_id = next((a.split("=", 1)[1] for a in cmdline if a.startswith("--node_id=")), None)
            if node_id:
                return pid, node_id
    return None


def _set_parent_death_signal() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies (Linux), so a killed supervisor
    does not leave its node running unsupervised."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class ProcessSeam:
    """The real node: ``argv`` (a ``ray start --block``) in a session of its own, the head's GCS at
    ``gcs`` asked with ``token``, and the fleet through ``fleet`` (a callable answering the Ray ids
    the fleet lists alive, or None when it cannot be asked) when given."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], gcs: str, token: str | None,
                 fleet: Callable[[], set[str] | None] | None = None) -> None:
        from fabric.cli.join_checks import HeadSeam

        self.argv, self.env, self.gcs, self.token, self.fleet = list(argv), dict(env), gcs, token, fleet
        self.head = HeadSeam(timeout_s=3.0, env=env)
        self.proc: subprocess.Popen[bytes] | None = None
        self.raylet: tuple[int, str] | None = None
        self._stop = threading.Event()

    def request_stop(self, *_: object) -> None:
        self._stop.set()

    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait(self, seconds: float) -> bool:
        return self._stop.wait(seconds)

    def start(self) -> int:
        self.raylet = None
        self.proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=_set_parent_death_signal if sys.platform.startswith("linux") else None)
        return self.proc.pid

    def look(self) -> Sight:
        import psutil

        from fabric.providers.sessions import exited

        assert self.proc is not None
        if exited(self.proc.pid):
            return Sight(ray_start_running=False, exit_code=self.proc.wait())
        if self.raylet is None:
            self.raylet = _raylet_of(self.proc.pid)
        if self.raylet is None:
            return Sight(ray_start_running=True)
        pid, node_id = self.raylet
        try:
            running = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            running = False
        ray = cast(RayState, self.head.node_state(self.gcs, self.token, node_id))
        fleet: FleetState = "unknown"
        if self.fleet is not None:
            listed = self.fleet()
            fleet = "unknown" if listed is None else ("listed" if node_id in listed else "gone")
        return Sight(ray_start_running=True, raylet_pid=pid, raylet_running=running, node_id=node_id, ray=ray, fleet=fleet)

    def stop(self, grace_s: float) -> None:
        from fabric.providers.sessions import stop_session

        if self.proc is None:
            return
        stop_session(self.proc.pid, grace_s)
        try:
            self.proc.wait(timeout=30.0)
        except subprocess.TimeoutExpired:
            pass


def fleet_reader(api: str, token_file: str | None) -> Callable[[], set[str] | None]:
    """The Ray ids the fleet lists and does not hold dead, read through the operator API at ``api``
    (None when it does not answer)."""
    from fabric.api.client import ApiClient, ApiError, token_from

    token = token_from(token_file)

    def listed() -> set[str] | None:
        try:
            with ApiClient(api, token) as client:
                return {r.node_id for r in client.nodes() if str(r.status) != "dead"}
        except (ApiError, ValueError, KeyError):
            return None

    return listed


def supervise(argv: Sequence[str], env: Mapping[str, str], gcs: str, token: str | None, *, api: str | None = None,
              api_token_file: str | None = None, policy: SupervisePolicy | None = None) -> int:
    """Run ``argv`` (``ray start --block``) supervised until SIGTERM or SIGINT; 0."""
    fleet = fleet_reader(api, api_token_file) if api else None
    seam = ProcessSeam(argv, env, gcs, token, fleet)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, seam.request_stop)

    def say(line: str) -> None:
        print(f"fabric join --supervise: {line}", flush=True)

    say(f"supervising this node (head {gcs}{', fleet through ' + api if api else ''}); SIGTERM stops it")
    return Supervisor(seam, policy or SupervisePolicy(), say).run()

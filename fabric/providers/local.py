"""The ``local`` provider: real ``ray start --address ... --block`` worker nodes on this machine.

Each provisioned node is one ``ray start --block`` child process leading a session of its own,
with its shape's profile's Ray resources and labels (what ``LocalFabric`` and ``fabric join
--profile`` give a node) plus the labels that say where it belongs: pool, pool
tier, instance id, spare tag, provider and shape. The ``fabric.io/profile`` label makes the
node's ProbeActor replay that profile's recording, so the node registers as the profile's
machine. ``terminate`` sends SIGTERM to that child's session (ray start and everything it
started: raylet, workers, agents; Ray gives some workers process groups of their own, so the
group alone is not enough), waits, and SIGKILLs what is left after a grace period. The provider
signals only the sessions it created, by the pid it holds; it never looks processes up by name
and never runs ``ray stop``.

The argument builders (``fabric.providers.local_args``, re-exported here) are shared with the rest
of the fabric: ``node_args`` probes a profile,
a recording folder or takes probed capabilities and returns the node's CPUs, GPUs, resources,
labels and environment (``NodeArgs.cluster_kwargs()`` is ``Cluster.add_node``'s form, which
``LocalFabric`` uses); ``ray_start_args`` renders a ``NodeArgs`` as a ``ray start`` argv (the
form ``fabric join`` and this provider run).

Ray facts this relies on (Ray 2.60): ``ray start --address`` refuses to
run with ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (the loopback switch tests set), so the child
runs without it and with an explicit ``--node-ip-address`` instead (by default the head's
address when that is a loopback one, e.g. a ``LocalFabric(node_ip_address="127.0.0.2")``:
Ray rewrites ``127.0.0.1`` in a join address to the machine's routable address). Several
raylets on one host need ``--dashboard-agent-listen-port=0``. Token auth: the child inherits
``RAY_AUTH_MODE`` and the token file from this process's environment.
"""

from __future__ import annotations

import atexit
import builtins
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from fabric.core.capabilities import label_value
from fabric.core.names import INSTANCE_LABEL, PROVIDER_LABEL, RAY_EXECUTABLE_ENV, SHAPE_LABEL, SPARE_LABEL
from fabric.core.settings import NodeShape
from fabric.providers.base import NO_TAGS, ProviderError, ProvisionedNode
from fabric.providers.local_args import (  # noqa: F401 - the argument builders, re-exported where they always were
    NodeArgs, find_ray, node_args, profile_for, profile_problems, ray_start_args, tag_labels,
)
from fabric.providers.sessions import (  # the session helpers, under the names this module always used
    exited as _exited, gone as _gone, signal_session as _signal_session, stop_session,
)

__all__ = ["LocalProvider", "sweep", "PID_SUFFIX", "profile_problems", "NodeArgs", "node_args", "ray_start_args", "profile_for", "tag_labels", "find_ray",
           "INSTANCE_LABEL", "SPARE_LABEL", "PROVIDER_LABEL", "SHAPE_LABEL"]

# Labels of provisioned nodes: fabric.core.names (re-exported here, where they are written).

ENABLE_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_START_LOCK = threading.Lock()
"""Held while a child's ``ray start`` brings its node up (every provider in this process)."""
_FAILED_START_GRACE_S = 5.0
"""SIGTERM to SIGKILL for a ``ray start`` that never started its node: nothing there to drain."""
STARTED_MARK = "Ray runtime started"
"""What ``ray start`` prints once its node's processes are up (then ``--block`` blocks)."""



def _unreachable(address: str, timeout_s: float = 3.0) -> str | None:
    """None when something accepts TCP at ``address``, else why not (``ray start`` itself would
    retry for minutes before giving up)."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def _loopback_host(address: str) -> str | None:
    host = address.rpartition(":")[0].strip("[]")
    try:
        return host if ipaddress.ip_address(host).is_loopback else None
    except ValueError:
        return None


# -- sessions we started ---------------------------------------------------------------------------------
def _ray_start_leader(pid: int) -> bool:
    """Whether ``pid`` still leads a session of its own and runs ``ray start`` (a child a provider
    started, not a recycled pid)."""
    import psutil

    try:
        cmdline = psutil.Process(pid).cmdline()
        return os.getsid(pid) == pid and "start" in cmdline and any("ray" in a for a in cmdline[:3])
    except (OSError, psutil.Error):
        return False


class _Adopted:
    """What ``_Child`` needs of a ``Popen`` for a node started by an earlier provider (a restarted
    scheduler adopting it): its pid, no return code until it ended, a wait that polls."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 3600.0)
        while not _gone(self.pid):
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.05)
        self.returncode = -signal.SIGKILL
        return self.returncode


def _ended(proc: Any) -> bool:
    return _gone(proc.pid) if isinstance(proc, _Adopted) else _exited(proc.pid)


PID_SUFFIX = ".pid"
"""``<instance id>.pid`` in a given ``log_dir``: the session leader of each child still running."""


def sweep(log_dir: str | os.PathLike[str], keep: Iterable[str] = ()) -> int:
    """SIGKILL the sessions of children a ``LocalProvider`` with this ``log_dir`` started and never
    stopped (its process died without ``close``: a killed actor); returns how many. Only a pid whose
    process still leads its own session and runs ``ray start`` is signalled; the instance ids in
    ``keep`` (adopted again) are left alone."""
    kept = set(keep)
    n = 0
    for pid_file in sorted(Path(log_dir).glob(f"*{PID_SUFFIX}")):
        if pid_file.name[: -len(PID_SUFFIX)] in kept:
            continue
        try:
            pid = int(pid_file.read_text().strip())
            ours = _ray_start_leader(pid)
        except (ValueError, OSError):
            ours = False
        if ours:
            _signal_session(pid, signal.SIGKILL)
            n += 1
        pid_file.unlink(missing_ok=True)
    return n


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


@dataclass
class _Child:
    node: ProvisionedNode
    proc: subprocess.Popen | _Adopted
    lock: threading.Lock = field(default_factory=threading.Lock)
    returncode: int | None = None
    started: bool = False
    """``ray start`` said its node is up (an adopted node: it was)."""


class LocalProvider:
    """Provision nodes as ``ray start --block`` children of this process, joining ``address``.

    ``node_ip_address``: every child's ``--node-ip-address`` (default: ``address``'s host when it
    is a loopback address, else Ray's choice). ``max_slots``: cap each node's slots (and CPUs).
    ``env``: extra environment for the children (over this process's, less the loopback switch).
    ``ray``: the ``ray`` executable (default: ``$FABRIC_RAY_EXECUTABLE``, else next to this Python, else on PATH). ``log_dir``:
    where each child's output goes (``<instance id>.log``; default: a temporary folder removed by
    ``close``). ``start_timeout_s``: how long ``provision`` waits for ``ray start`` to report its
    node started; ``stop_grace_s``: how long ``terminate`` waits after SIGTERM before SIGKILL.
    ``clock`` (wall seconds) stamps ``started_at``; ``new_id`` makes instance ids.
    Use as a context manager, or call ``close()``: it terminates every child still running.
    """

    name = "local"

    def __init__(self, address: str, *, node_ip_address: str | None = None, max_slots: int | None = None,
                 env: Mapping[str, str] | None = None, ray: str | None = None, log_dir: str | os.PathLike[str] | None = None,
                 start_timeout_s: float = 120.0, stop_grace_s: float = 45.0, clock: Callable[[], float] = time.time,
                 new_id: Callable[[], str] | None = None) -> None:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ProviderError(f"address {address!r} is not HOST:PORT", reason="bad_address", provider=self.name, field="address")
        if max_slots is not None and max_slots < 1:
            raise ProviderError(f"max_slots must be at least 1, got {max_slots}", reason="bad_max_slots", provider=self.name,
                                field="max_slots")
        self.address = address
        self.node_ip_address = node_ip_address or _loopback_host(address)
        self.max_slots = max_slots
        self.env = dict(env or {})
        self.ray = ray if ray is not None else (os.environ.get(RAY_EXECUTABLE_ENV) or None)
        self.start_timeout_s = start_timeout_s
        self.stop_grace_s = stop_grace_s
        self._clock = clock
        self._new_id = new_id or (lambda: f"local-{secrets.token_hex(5)}")
        self._given_log_dir = Path(log_dir) if log_dir is not None else None
        self._temp_log_dir: str | None = None
        self._children: dict[str, _Child] = {}
        self._ended: dict[str, int | None] = {}
        self._lock = threading.Lock()
        self._closed = False
        atexit.register(self.close)

    # -- the protocol --------------------------------------------------------------------------------------
    def provision(self, shape: NodeShape, *, pool: str, pool_tier: str, spare: bool = False,
                  tags: Mapping[str, str] = NO_TAGS) -> ProvisionedNode:
        """Start one node of ``shape`` (its profile) for ``pool`` / ``pool_tier`` and return once
        ``ray start`` reports the node's processes up (its registration with the fabric follows).
        ``ProviderError``: an unknown profile, a bad pool/pool tier/tag, no ``ray`` executable, a
        head nothing answers at (``unreachable``), all before any process starts; or a ``ray
        start`` that exited (``start_failed``) or did not start its node within ``start_timeout_s``
        (``start_timeout``; it is stopped), with the log tail. A failed provision leaves no process."""
        if self._closed:
            raise ProviderError("this local provider is closed", reason="closed", provider=self.name)
        profile = profile_for(shape, self.name)
        for what, value in (("pool", pool), ("pool_tier", pool_tier)):
            if not isinstance(value, str) or not value or label_value(value) != value:
                raise ProviderError(f"{what} {value!r} is not a valid label value", reason="invalid_pool", provider=self.name,
                                    shape=shape.name, field=what)
        try:
            tag_labels(tags)
        except ValueError as exc:
            raise ProviderError(str(exc), reason="invalid_tag", provider=self.name, shape=shape.name, field="tags") from exc
        ray = find_ray(self.ray)
        if ray is None:
            where = f"at {self.ray!r}" if self.ray else "next to this Python or on PATH"
            raise ProviderError(f"the `ray` command was not found {where}", reason="no_ray", provider=self.name, shape=shape.name)
        why = _unreachable(self.address)
        if why is not None:
            raise ProviderError(f"cannot reach the head at {self.address}: {why}", reason="unreachable", provider=self.name,
                                shape=shape.name, field="address")
        instance_id = self._new_id()
        try:
            # the shape says what the node brings: its CPUs cap the profile's slots (as max_slots does)
            caps = [c for c in (self.max_slots, max(1, int(shape.num_cpus))) if c is not None]
            spec = node_args(profile, name=instance_id, max_slots=min(caps), pool=pool, pool_tier=pool_tier, zone=shape.zone,
                             cloud=shape.cloud, instance_id=instance_id, spare=spare, provider=self.name, shape=shape.name, tags=tags)
        except ValueError as exc:
            raise ProviderError(f"shape {shape.name!r}: {exc}", reason="invalid_node", provider=self.name, shape=shape.name,
                                profile=profile) from exc
        argv = ray_start_args(spec, address=self.address, ray=ray, node_ip_address=self.node_ip_address, block=True,
                              dashboard_agent_listen_port=0, extra=["--log-color=false"])
        log_path = self._log_dir() / f"{instance_id}.log"
        with _START_LOCK:  # one raylet starting at a time: started together on a small host they miss their start deadline
            return self._start(shape, spec, argv, log_path, instance_id, profile, pool, pool_tier, spare)

    def _start(self, shape: NodeShape, spec: NodeArgs, argv: builtins.list[str], log_path: Path, instance_id: str,
               profile: str, pool: str, pool_tier: str, spare: bool) -> ProvisionedNode:
        try:
            with open(log_path, "wb") as log:
                # A session of its own: everything the child starts stays in it (ray start makes itself
                # a group leader anyway), so a signal to the session reaches the whole node.
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        env=self._child_env(spec.env), start_new_session=True, close_fds=True)
        except OSError as exc:
            raise ProviderError(f"could not run {argv[0]}: {exc}", reason="start_failed", provider=self.name, shape=shape.name,
                                profile=profile, instance_id=instance_id) from exc
        node = ProvisionedNode(instance_id=instance_id, provider=self.name, pool=pool, pool_tier=pool_tier, shape=shape,
                               spare=spare, started_at=self._clock(), name=instance_id, profile=profile, labels=dict(spec.labels),
                               pid=proc.pid, log_path=str(log_path))
        child = _Child(node, proc)
        if self._given_log_dir is not None:  # so a sweep can find it if this process dies without closing
            (self._given_log_dir / f"{instance_id}{PID_SUFFIX}").write_text(str(proc.pid))
        with self._lock:
            self._children[instance_id] = child
            closed = self._closed
        if closed:  # close() ran meanwhile and did not see this child
            self._stop(child, grace_s=_FAILED_START_GRACE_S)
            raise ProviderError("this local provider was closed while provisioning", reason="closed", provider=self.name,
                                instance_id=instance_id)
        self._wait_started(child, log_path)
        return node

    def terminate(self, instance_id: str) -> None:
        """SIGTERM the session of the node ``instance_id`` (its ``ray start`` and all it started),
        wait ``stop_grace_s``, then SIGKILL what is left; return once it is gone. A node of this
        provider that already ended is a no-op; an id it never made is a ``ProviderError``
        (``unknown_instance``)."""
        with self._lock:
            child = self._children.get(instance_id)
            if child is None:
                if instance_id in self._ended:
                    return
                running = sorted(self._children)
                raise ProviderError(f"no instance {instance_id!r} was started by this local provider; "
                                    f"running: {', '.join(running) or 'none'}", reason="unknown_instance",
                                    provider=self.name, instance_id=instance_id)
        self._stop(child)

    def reclaim(self, instance_id: str, deadline_s: float, notify: Callable[[ProvisionedNode, str, float], Any], *,
                kind: str = "spot-interruption") -> Any:
        """Take back the node ``instance_id`` as a cloud takes a spot node: ``notify(node, kind,
        deadline)`` first (``deadline``: epoch seconds, ``deadline_s`` from now; the caller passes
        the fabric's ``handle_node_interruption``: a provider never imports actors), then the node's
        whole session SIGKILLed at the deadline (a timer thread). Returns what ``notify`` returned.
        An id this provider did not start is a ``ProviderError`` (``unknown_instance``)."""
        if isinstance(deadline_s, bool) or not isinstance(deadline_s, (int, float)) or not deadline_s >= 0:
            raise ProviderError(f"deadline_s must be 0 or more seconds, got {deadline_s!r}", reason="bad_deadline",
                                provider=self.name, field="deadline_s")
        with self._lock:
            child = self._children.get(instance_id)
        if child is None:
            raise ProviderError(f"no running instance {instance_id!r} was started by this local provider",
                                reason="unknown_instance", provider=self.name, instance_id=instance_id)
        answer = notify(child.node, kind, self._clock() + deadline_s)

        def kill() -> None:
            if self._children.get(instance_id) is child:  # not terminated (or closed) meanwhile
                _signal_session(child.proc.pid, signal.SIGKILL)  # abrupt, as a reclaim is
                self._stop(child, grace_s=0.0)

        timer = threading.Timer(deadline_s, kill)
        timer.daemon = True
        timer.start()
        return answer

    def adopt(self, node: ProvisionedNode) -> bool:
        """Take back a node an earlier provider of this fabric started (a restarted scheduler reads
        its instances from the store): True when its ``ray start`` still runs, leading its own
        session; it is then listed, terminated and closed like one started here. False (nothing
        adopted) for a node of another provider, without a pid, or whose process ended."""
        if node.provider != self.name or node.pid is None or not _ray_start_leader(node.pid):
            return False
        with self._lock:
            if node.instance_id in self._children:
                return True
            self._children[node.instance_id] = _Child(node, _Adopted(node.pid), started=True)
        if self._given_log_dir is not None:
            (self._log_dir() / f"{node.instance_id}{PID_SUFFIX}").write_text(str(node.pid))
        return True

    def sweep_unknown(self) -> int:
        """Kill what an earlier provider with this log folder started and nobody adopted (a provision
        its scheduler died in before it answered); how many."""
        if self._given_log_dir is None:
            return 0
        with self._lock:
            keep = set(self._children)
        return sweep(self._given_log_dir, keep)

    def list(self) -> builtins.list[ProvisionedNode]:
        """The nodes started here whose ``ray start`` is still running, oldest first (one that ended
        on its own is reaped and left out)."""
        with self._lock:
            children = builtins.list(self._children.values())
        running = []
        for child in children:
            if _ended(child.proc):
                self._stop(child)
            else:
                running.append(child.node)
        return sorted(running, key=lambda n: (n.started_at, n.instance_id))

    # -- lifecycle -------------------------------------------------------------------------------------------
    def exit_code(self, instance_id: str) -> int | None:
        """The exit status of an instance that ended (negative: the signal that ended it; None: not
        ended, or not one of ours). ``ray start`` exits 1 after a SIGTERM it handled."""
        with self._lock:
            return self._ended.get(instance_id)

    def close(self) -> None:
        """Terminate every child still running (all signalled first, then each waited for) and
        remove the temporary log folder. Idempotent."""
        with self._lock:
            self._closed = True
            children = builtins.list(self._children.values())
        for child in children:
            if not _ended(child.proc):
                _signal_session(child.proc.pid, signal.SIGTERM)
        for child in children:
            self._stop(child)
        if self._temp_log_dir is not None:
            shutil.rmtree(self._temp_log_dir, ignore_errors=True)
            self._temp_log_dir = None
        atexit.unregister(self.close)

    def __enter__(self) -> "LocalProvider":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalProvider({self.address!r}, running={sorted(self._children)})"

    # -- internals -------------------------------------------------------------------------------------------
    def _log_dir(self) -> Path:
        if self._given_log_dir is not None:
            self._given_log_dir.mkdir(parents=True, exist_ok=True)
            return self._given_log_dir
        with self._lock:
            if self._temp_log_dir is None:
                self._temp_log_dir = tempfile.mkdtemp(prefix="fabric-local-provider-")
            return Path(self._temp_log_dir)

    def _child_env(self, node_env: Mapping[str, str]) -> dict[str, str]:
        env = dict(os.environ)
        if env.get(ENABLE_CLUSTER_ENV) == "0":
            env.pop(ENABLE_CLUSTER_ENV)  # ray start --address refuses to run with the loopback-only switch on
        env.update(self.env)
        env.update(node_env)
        return env

    def _wait_started(self, child: _Child, log_path: Path) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if _exited(child.proc.pid):
                self._stop(child, grace_s=0.0)
                raise ProviderError(f"ray start for {child.node.instance_id} (shape {child.node.shape.name!r}) exited with "
                                    f"status {child.returncode} before its node started: {_tail(log_path, 3)}",
                                    reason="start_failed", provider=self.name, shape=child.node.shape.name,
                                    profile=child.node.profile, instance_id=child.node.instance_id, log_tail=_tail(log_path))
            try:
                if STARTED_MARK in log_path.read_text(errors="replace"):
                    child.started = True
                    return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                self._stop(child, grace_s=_FAILED_START_GRACE_S)
                raise ProviderError(f"ray start for {child.node.instance_id} (shape {child.node.shape.name!r}) did not start "
                                    f"its node within {self.start_timeout_s:g} s; stopped it", reason="start_timeout",
                                    provider=self.name, shape=child.node.shape.name, profile=child.node.profile,
                                    instance_id=child.node.instance_id, log_tail=_tail(log_path))
            time.sleep(0.1)

    def _stop(self, child: _Child, grace_s: float | None = None) -> None:
        """Stop ``child``'s session and reap it (SIGTERM, ``grace_s``, SIGKILL); then it is ended.
        ``grace_s`` defaults to ``stop_grace_s`` for a started node, and to a few seconds for one
        still starting: ``ray start`` finishes its start before it heeds SIGTERM (seen: 28 s when
        ``fabric down`` came while a spare was starting), and a node not up yet has nothing to drain."""
        pid = child.proc.pid
        ended = _gone if isinstance(child.proc, _Adopted) else _exited
        with child.lock:
            if child.proc.returncode is None:
                # The leader ends as an unreaped zombie, so its session id stays ours while what is
                # left of the session (Ray's reaper, a worker slow to exit) is swept before reaping it.
                if grace_s is None:
                    grace_s = self.stop_grace_s if child.started else _FAILED_START_GRACE_S
                stop_session(pid, grace_s, ended)
                try:
                    child.proc.wait(timeout=30.0)
                except subprocess.TimeoutExpired:  # not ended even after SIGKILL: leave it listed
                    return
            child.returncode = child.proc.returncode
        if self._given_log_dir is not None:
            (self._given_log_dir / f"{child.node.instance_id}{PID_SUFFIX}").unlink(missing_ok=True)
        with self._lock:
            if self._children.get(child.node.instance_id) is child:
                del self._children[child.node.instance_id]
                self._ended[child.node.instance_id] = child.returncode

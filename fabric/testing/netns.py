"""``NetnsFleet``: a fleet of hosts, one Linux network namespace each, joined the way users join
machines (``fabric start-head`` / ``fabric join`` run inside each namespace), with real partitions.

The fleet takes a free /28 of 198.51.100.0/24 (``fabric.testing.netns_net``), puts a bridge holding
the /28's first address in the root namespace (how the test process reaches the fleet), and gives
each host a namespace ``af-<runid>-<name>`` with a veth pair (the root end on the bridge), its own
address, ``lo`` up and a default route via the bridge. Each host has its own ``HOME``,
``XDG_CACHE_HOME``, ``XDG_DATA_HOME`` and Ray temp dir (``ray start --temp-dir``, which Ray 2.60
honours per node, a worker node included) under one run folder, ``/tmp/afn-<runid>``.

Partitions tell the fabric nothing: ``cut`` takes a host's link down (its veth's root end),
``cut_one_way`` drops its IPv4 packets one way (an nft table of the ``bridge`` family, or an
``iptables`` chain where ``nft`` is missing),
``cut_all_from`` cuts the head from every node, ``heal`` undoes any of them.

A Ray driver must run on a node of the cluster (Ray 2.60 attaches a driver to a raylet with the
driver's node IP), so drivers and ``fabric``/``ray`` commands that connect as drivers run inside a
host's namespace: ``run(name, argv)`` and ``run_python(code)`` (the head's, by default) with the
fleet's environment and token. The node table is asked from the root namespace (the head's GCS
answers on the bridge): ``nodes()``, ``wait_nodes``.

``close()`` (or leaving the ``with`` block, also on an exception) kills every process group it
started, then whatever still lives in its namespaces, and deletes its namespaces, links, nft
tables, iptables chains, run folder and run record. Needs root, ``ip`` and network namespaces
(``netns_problem()`` says what is missing); one-way cuts need ``nft`` or ``iptables`` (``one_way_problem()``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from fabric.testing.netns_net import (
    Names, NetnsError, RunRecord, clean_leftovers, current_networks, drop_iptables_chain, kill_groups, kill_namespace_pids,
    one_way_iptables, one_way_rules, pick_subnet, process_start, records, remove_everything, sh, state_lock,
)

__all__ = ["FAST_HEALTH", "NetnsError", "NetnsFleet", "NetnsHost", "head_argv", "host_env", "join_argv", "netns_problem", "require",
           "one_way_problem"]

FAST_HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_timeout_ms": 1000}
"""The head's Ray health checks unless told otherwise: a cut node is DEAD in Ray's table in seconds."""
GCS_PORT = 6379
"""Each host has a network stack of its own, so Ray's default port is free in every namespace."""
DROPPED_ENV = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE",
               "RAY_TMPDIR")
"""Variables of the calling process a host does not inherit: the loopback switch (it refuses
``ray start --address``), and the caller's Ray address, token and temp dir."""


def netns_problem() -> str | None:
    """Why a ``NetnsFleet`` cannot run on this machine (not root, no ``ip``, namespaces not
    permitted), or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux only (this is {sys.platform})"
    if os.geteuid() != 0:
        return "the namespace fleet needs root (ip netns add, bridges, veths)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"afprobe{os.getpid() % 100000}"
    made = sh(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"network namespaces are not permitted here: {made.stderr.strip()}"
    sh(["ip", "netns", "delete", probe], check=False)
    return None


def require(problem: str | None) -> None:
    """In a test: skip naming ``problem`` (from ``netns_problem`` or ``one_way_problem``); under
    ``CI=true`` a missing tool is a failure instead, never a skip."""
    if problem is None:
        return
    import pytest

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and the namespace fleet cannot run: {problem}")
    pytest.skip(problem)


def one_way_problem() -> str | None:
    """Why ``cut_one_way`` cannot run here (neither ``nft`` nor ``iptables``), or None."""
    if shutil.which("nft") or shutil.which("iptables"):
        return None
    return "neither nft nor iptables is installed (apt-get install nftables)"


def _fabric_command() -> list[str]:
    """The ``fabric`` command of this Python's environment (its console script, else ``-m fabric``)."""
    script = Path(sys.executable).parent / "fabric"
    return [str(script)] if script.exists() else [sys.executable, "-m", "fabric"]


def head_argv(fabric: Sequence[str], *, name: str, address: str, port: int, profile: str, temp_dir: str,
              slots: int | None = None, system_config: Mapping[str, int] | None = None,
              ray_args: Sequence[str] = ()) -> list[str]:
    """``fabric start-head`` for host ``name`` at ``address``: Ray's GCS on ``port``, blocking in
    the foreground, its temp dir ``temp_dir``, no dashboard, the head's Ray ``system_config``."""
    argv = [*fabric, "start-head", "--node-ip-address", address, "--port", str(port), "--profile", profile, "--name", name]
    if slots is not None:
        argv += ["--max-concurrent-tasks", str(slots)]
    argv += ["--", "--block", f"--temp-dir={temp_dir}", "--include-dashboard=false"]
    if system_config:
        argv.append(f"--system-config={json.dumps(dict(system_config), sort_keys=True, separators=(',', ':'))}")
    return argv + list(ray_args)


def join_argv(fabric: Sequence[str], *, name: str, address: str, head: str, profile: str, temp_dir: str,
              slots: int | None = None, supervise: bool = False, ray_args: Sequence[str] = ()) -> list[str]:
    """``fabric join`` of host ``name`` at ``address`` to the head at ``head`` (``HOST:PORT``):
    blocking in the foreground (``-- --block``), or ``--supervise`` instead when asked."""
    argv = [*fabric, "join", "--address", head, "--node-ip-address", address, "--profile", profile, "--name", name]
    if slots is not None:
        argv += ["--max-concurrent-tasks", str(slots)]
    if supervise:
        argv.append("--supervise")
    argv += ["--", *([] if supervise else ["--block"]), f"--temp-dir={temp_dir}"]
    return argv + list(ray_args)


def host_env(base: Mapping[str, str], folder: Path, *, token_file: Path | None) -> dict[str, str]:
    """A host's environment: ``base`` without the caller's Ray address, token, temp dir and loopback
    switch; its own ``HOME``, ``XDG_CACHE_HOME`` and ``XDG_DATA_HOME`` under ``folder``; this
    Python's ``bin`` first on ``PATH``; token auth with ``token_file``, or auth off when None."""
    env = {k: v for k, v in base.items() if k not in DROPPED_ENV}
    env.update(HOME=str(folder / "home"), XDG_CACHE_HOME=str(folder / "cache"), XDG_DATA_HOME=str(folder / "data"),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), base.get("PATH", "/usr/bin:/bin")]))
    if token_file is None:
        env["RAY_AUTH_MODE"] = "disabled"
    else:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file))
    return env


@dataclass
class NetnsHost:
    """One host of a fleet: its namespace, address, links, folders and the process it runs."""

    name: str
    index: int
    address: str
    namespace: str
    veth: str
    """The root namespace's end of its veth pair (on the bridge)."""
    folder: Path
    env: dict[str, str] = field(repr=False, default_factory=dict)
    proc: subprocess.Popen[bytes] | None = field(repr=False, default=None)
    role: str = ""
    """``head`` or ``node`` once started."""
    cut_tables: list[tuple[str, str]] = field(default_factory=list)
    """The one-way cuts in force: (``nft`` or ``iptables``, table or chain name)."""

    @property
    def temp_dir(self) -> Path:
        return self.folder / "r"

    @property
    def log(self) -> Path:
        """What the host's ``fabric`` command printed."""
        return self.folder / "fabric.log"


class NetnsFleet:
    """Hosts in network namespaces on a bridge. Use as a context manager, or call ``close()``.

    ``auth``: token auth for the whole fleet (a token file in the run folder), else auth off.
    ``health_check_period_ms`` / ``health_check_failure_threshold`` / ``health_check_timeout_ms``:
    the head's Ray health checks (``FAST_HEALTH`` by default); ``ray_defaults=True`` leaves Ray's.
    """

    def __init__(self, *, auth: bool = True, health_check_period_ms: int = FAST_HEALTH["health_check_period_ms"],
                 health_check_failure_threshold: int = FAST_HEALTH["health_check_failure_threshold"],
                 health_check_timeout_ms: int = FAST_HEALTH["health_check_timeout_ms"], ray_defaults: bool = False,
                 port: int = GCS_PORT) -> None:
        self.auth = auth
        self.system_config = {} if ray_defaults else {
            "health_check_period_ms": health_check_period_ms,
            "health_check_failure_threshold": health_check_failure_threshold,
            "health_check_timeout_ms": health_check_timeout_ms}
        self.port = port
        self.hosts: dict[str, NetnsHost] = {}
        self.head: NetnsHost | None = None
        self._head_argv: list[str] = []
        """The head's ``fabric start-head`` command line, for ``restart_head``."""
        self.names = Names(secrets.token_hex(3))
        self.record: RunRecord | None = None
        self.subnet: ipaddress.IPv4Network | None = None
        self.folder = Path(f"/tmp/afn-{self.names.run_id}")
        self.token_file: Path | None = None
        self._closed = False

    # -- the network ---------------------------------------------------------------------------------
    def __enter__(self) -> NetnsFleet:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        """Close; a teardown problem while the body's own exception is on its way becomes a note on
        that exception instead of hiding it."""
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except NetnsError as problem:
            exc.add_note(f"and the fleet's teardown failed: {problem}")

    def open(self) -> NetnsFleet:
        """Clean up dead runs' leftovers, take a free /28, make the bridge, run folder and token."""
        problem = netns_problem()
        if problem:
            raise NetnsError(problem)
        try:
            with state_lock():
                clean_leftovers()
                index, net = pick_subnet(current_networks(), [r.index for r in records()])
                self.folder.mkdir(mode=0o700)
                self.record = RunRecord(pid=os.getpid(), run_id=self.names.run_id, index=index, subnet=str(net),
                                        folder=str(self.folder), started=process_start(os.getpid()) or "")
                self.record.save()
            self.subnet = net
            bridge = self.names.bridge
            self.record.links.append(bridge)
            self.record.save()
            sh(["ip", "link", "add", bridge, "type", "bridge"])
            sh(["ip", "addr", "add", f"{self.bridge_address}/{net.prefixlen}", "dev", bridge])
            sh(["ip", "link", "set", bridge, "up"])
            if self.auth:
                self.token_file = self.folder / "auth_token"
                self.token_file.write_text(secrets.token_hex(32))
                self.token_file.chmod(0o600)
        except BaseException:
            self.close()
            raise
        return self

    @property
    def bridge_address(self) -> str:
        """The /28's first address, on the bridge in the root namespace."""
        assert self.subnet is not None, "the fleet is not open"
        return str(self.subnet.network_address + 1)

    def _save(self) -> None:
        if self.record is not None:
            self.record.save()

    def add_host(self, name: str) -> NetnsHost:
        """Make host ``name``: its namespace, veth pair on the bridge, address, routes and folders."""
        assert self.subnet is not None and self.record is not None, "the fleet is not open"
        if name in self.hosts:
            return self.hosts[name]
        index = len(self.hosts) + 1
        if index + 1 >= self.subnet.num_addresses - 1:
            raise NetnsError(f"a /28 holds {self.subnet.num_addresses - 3} hosts; {name!r} would be one more")
        ns, root, peer = self.names.namespace(name), self.names.veth_root(index), self.names.veth_peer(index)
        address = str(self.subnet.network_address + 1 + index)
        folder = self.folder / name
        for sub in ("home", "cache", "data", "r"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        self.record.namespaces.append(ns)
        self.record.links.append(root)
        self._save()
        sh(["ip", "netns", "add", ns])
        sh(["ip", "link", "add", root, "type", "veth", "peer", "name", peer])
        sh(["ip", "link", "set", peer, "netns", ns])
        sh(["ip", "link", "set", root, "master", self.names.bridge])
        sh(["ip", "link", "set", root, "up"])
        inside = ["ip", "netns", "exec", ns]
        sh([*inside, "ip", "link", "set", "lo", "up"])
        sh([*inside, "ip", "link", "set", peer, "name", "eth0"])
        sh([*inside, "ip", "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0"])
        sh([*inside, "ip", "link", "set", "eth0", "up"])
        sh([*inside, "ip", "route", "add", "default", "via", self.bridge_address])
        host = NetnsHost(name=name, index=index, address=address, namespace=ns, veth=root, folder=folder,
                         env=host_env(os.environ, folder, token_file=self.token_file))
        self.hosts[name] = host
        return host

    # -- starting hosts ------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        """The head's Ray (GCS) address, ``HOST:PORT``."""
        if self.head is None:
            raise NetnsError("no head started yet")
        return f"{self.head.address}:{self.port}"

    def spawn(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside host ``name``'s namespace (made if new) in a session of its own,
        with the host's environment, its output in ``host.log``; teardown kills its process group."""
        return self._spawn(self.add_host(name), list(argv))

    def _spawn(self, host: NetnsHost, argv: list[str]) -> subprocess.Popen[bytes]:
        log = open(host.log, "ab")
        try:
            proc = subprocess.Popen(["ip", "netns", "exec", host.namespace, *argv], env=host.env, cwd=host.folder,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        assert self.record is not None
        self.record.pgids.append(proc.pid)  # a new session: its pgid is its pid
        self._save()
        host.proc = proc
        return proc

    def start_head(self, name: str, *, profile: str = "cpu-only-box", slots: int | None = 1,
                   ray_args: Sequence[str] = (), head_flags: Sequence[str] = (), timeout_s: float = 60.0) -> NetnsHost:
        """Run ``fabric start-head [HEAD_FLAGS] ... -- --block`` in host ``name``'s namespace (made if
        new) and wait until its GCS accepts TCP from the root namespace (``NetnsError`` with its log
        if not)."""
        if self.head is not None:
            raise NetnsError(f"the fleet already has a head ({self.head.name})")
        host = self.add_host(name)
        argv = head_argv(_fabric_command(), name=name, address=host.address, port=self.port, profile=profile,
                         temp_dir=str(host.temp_dir), slots=slots, system_config=self.system_config, ray_args=ray_args)
        argv[len(_fabric_command()) + 1:len(_fabric_command()) + 1] = list(head_flags)
        self._head_argv = argv
        self._spawn(host, argv)
        host.role, self.head = "head", host
        self._wait_gcs(host, timeout_s)
        return host

    def crash(self, name: str) -> list[int]:
        """SIGKILL every process host ``name`` runs, all at once, with no grace (a machine that
        lost its power); the pids killed. Its folders (state, Ray's temp dir) stay."""
        host = self.hosts[name]
        killed = kill_namespace_pids(host.namespace)
        if host.proc is not None:
            try:
                host.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return killed

    def restart_head(self, timeout_s: float = 90.0) -> NetnsHost:
        """Run the head's ``fabric start-head`` again, as it was first run (same address, port,
        temp dir and state), after a ``crash``; wait for its GCS as ``start_head`` does."""
        host = self.head
        if host is None or not self._head_argv:
            raise NetnsError("no head was started")
        if host.proc is not None and host.proc.poll() is None:
            raise NetnsError(f"the head {host.name} still runs (pid {host.proc.pid})")
        self._spawn(host, list(self._head_argv))
        self._wait_gcs(host, timeout_s)
        return host

    def _wait_gcs(self, host: NetnsHost, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert host.proc is not None
            if host.proc.poll() is not None:
                raise NetnsError(f"fabric start-head in {host.name} exited ({host.proc.returncode}):\n{self.logs_tail(20)}")
            try:
                with socket.create_connection((host.address, self.port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.2)
        raise NetnsError(f"the head's GCS at {host.address}:{self.port} did not answer in {timeout_s:.0f}s:\n{self.logs_tail(20)}")

    def join(self, name: str, *, profile: str = "cpu-only-box", slots: int | None = 1, supervise: bool = False,
             ray_args: Sequence[str] = ()) -> NetnsHost:
        """Run ``fabric join --address HEAD:PORT ...`` in host ``name``'s namespace (made if new),
        blocking (``-- --block``), or with ``--supervise`` passed through when ``supervise``."""
        host = self.add_host(name)
        if host.proc is not None and host.proc.poll() is None:
            raise NetnsError(f"host {name!r} is already running (pid {host.proc.pid})")
        argv = join_argv(_fabric_command(), name=name, address=host.address, head=self.address, profile=profile,
                         temp_dir=str(host.temp_dir), slots=slots, supervise=supervise, ray_args=ray_args)
        self._spawn(host, argv)
        host.role = "node"
        return host

    def stop(self, name: str) -> None:
        """Stop everything host ``name`` runs: its process group, then whatever lives in its namespace."""
        host = self.hosts[name]
        if host.proc is not None:
            kill_groups([host.proc.pid], grace_s=5.0)
            try:
                host.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        kill_namespace_pids(host.namespace)

    # -- asking the cluster --------------------------------------------------------------------------
    def driver_env(self, host: str | None = None) -> dict[str, str]:
        """The environment a driver or ``fabric``/``ray`` command runs in: host ``host``'s (default:
        the head's), with ``RAY_ADDRESS`` set to the fleet's head and the fleet's token."""
        target = self.hosts[host] if host else self.head
        if target is None:
            raise NetnsError("no head started yet")
        return {**target.env, "RAY_ADDRESS": self.address}

    def run(self, name: str | None, argv: Sequence[str], *, timeout_s: float = 120.0,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside host ``name``'s namespace (default: the head's) with ``driver_env``
        (``env`` over it); ``name`` ``""``: in the root namespace with the same environment."""
        full = {**self.driver_env(name or None), **(env or {})}
        prefix: list[str] = []
        if name != "":
            host = self.hosts[name] if name else self.head
            if host is None:
                raise NetnsError("no head started yet")
            prefix = ["ip", "netns", "exec", host.namespace]
        return subprocess.run([*prefix, *argv], env=full, capture_output=True, text=True, timeout=timeout_s,
                              cwd=str(self.folder))

    def run_python(self, code: str, *, host: str | None = None, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run ``code`` with this Python as a Ray driver inside host ``host``'s namespace (the head's)."""
        return self.run(host, [sys.executable, "-c", code], timeout_s=timeout_s)

    def nodes(self, *, wait: int = 0, timeout_s: float = 30.0) -> list[dict[str, object]]:
        """Ray's node table, asked from the root namespace over the bridge (``netns_gcs``)."""
        proc = self.run("", [sys.executable, "-m", "fabric.testing.netns_gcs", self.address, "--wait", str(wait),
                             "--timeout", str(timeout_s)], timeout_s=timeout_s + 60)
        lines = proc.stdout.strip().splitlines()
        if not lines:
            raise NetnsError(f"asking the GCS at {self.address} printed nothing: {proc.stderr.strip()[-400:]}")
        return json.loads(lines[-1])

    def wait_nodes(self, n: int, timeout_s: float = 60.0) -> list[dict[str, object]]:
        """Wait until Ray's node table lists ``n`` ALIVE nodes; the table. ``NetnsError`` naming
        what it saw, and the hosts' logs' last lines, when ``timeout_s`` passes first."""
        rows = self.nodes(wait=n, timeout_s=timeout_s)
        alive = [r for r in rows if r.get("state") == "ALIVE"]
        if len(alive) < n:
            raise NetnsError(f"{len(alive)} of {n} nodes ALIVE after {timeout_s:.0f}s: {rows}\n{self.logs_tail()}")
        return rows

    def wait_state(self, name: str, state: str, timeout_s: float = 60.0) -> dict[str, object]:
        """Wait until host ``name``'s node (its address) is in ``state`` in Ray's node table: for
        ``ALIVE`` one node there is, for ``DEAD`` none is alive and one is dead (a host that
        joined again is a new node id at the same address); its row. ``NetnsError`` with the table when ``timeout_s`` passes first."""
        address = self.hosts[name].address
        deadline = time.monotonic() + timeout_s
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            rows = self.nodes(timeout_s=5)
            mine = [r for r in rows if r.get("ip") == address]
            alive = [r for r in mine if r.get("state") == "ALIVE"]
            found = alive if state == "ALIVE" else [] if alive else [r for r in mine if r.get("state") == state]
            if found:
                return found[-1]
            time.sleep(0.5)
        raise NetnsError(f"host {name} ({address}) not {state} after {timeout_s:.0f}s: {rows}")

    def logs_tail(self, lines: int = 8) -> str:
        """The last lines each host's ``fabric`` command printed."""
        out = []
        for host in self.hosts.values():
            text = host.log.read_text(errors="replace").splitlines() if host.log.exists() else []
            out.append(f"--- {host.name} ({host.address}):\n" + "\n".join(text[-lines:]))
        return "\n".join(out)

    # -- partitions ----------------------------------------------------------------------------------
    def cut(self, name: str) -> None:
        """Take host ``name``'s link down (its veth's root end): nothing reaches it, nothing leaves."""
        sh(["ip", "link", "set", self.hosts[name].veth, "down"])

    def cut_all_from(self, name: str) -> None:
        """Cut host ``name`` (the head, typically) from every other host and the driver."""
        self.cut(name)

    def cut_one_way(self, name: str, direction: str, *, tool: str | None = None) -> None:
        """Drop host ``name``'s IPv4 packets one way: ``out`` what it sends, ``in`` what is sent to
        it. ``tool``: ``nft`` (a ``bridge`` family table of its own), ``iptables`` (a chain of its
        own, matching the host's address; bridged packets reach it through ``br_netfilter``), or
        None: ``nft`` when installed, else ``iptables``. ``NetnsError`` saying why when neither is."""
        host = self.hosts[name]
        tool = tool or ("nft" if shutil.which("nft") else "iptables" if shutil.which("iptables") else None)
        if tool is None or shutil.which(tool) is None:
            raise NetnsError(one_way_problem() or f"{tool} is not installed")
        assert self.record is not None
        table = self.names.nft_table(host.index)
        if tool == "nft":
            script = one_way_rules(table, host.veth, direction)
            self.record.nft_tables.append(table)
            self._save()
            if sh(["nft", "list", "table", "bridge", table], check=False).returncode == 0:
                sh(["nft", "delete", "table", "bridge", table])
            proc = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True, timeout=30)
            if proc.returncode != 0:
                raise NetnsError(f"nft refused the one-way drop for {name}: {proc.stderr.strip()}")
        elif tool == "iptables":
            commands = one_way_iptables(table, host.address, direction)
            self.record.iptables_chains.append(table)
            self._save()
            drop_iptables_chain(table)
            for argv in commands:
                sh(argv)
        else:
            raise ValueError(f"tool {tool!r}: nft or iptables")
        host.cut_tables.append((tool, table))

    def heal(self, name: str) -> None:
        """Undo every cut of host ``name``: its link up, its one-way tables and chains gone."""
        host = self.hosts[name]
        for tool, table in host.cut_tables:
            if tool == "iptables":
                left = drop_iptables_chain(table)
                if left:
                    raise NetnsError("; ".join(left))
            elif sh(["nft", "list", "table", "bridge", table], check=False).returncode == 0:
                sh(["nft", "delete", "table", "bridge", table])
        host.cut_tables.clear()
        sh(["ip", "link", "set", host.veth, "up"])

    # -- teardown ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Kill every process it started, delete its namespaces, links, nft tables, iptables chains,
        run folder and record. Idempotent; ``NetnsError`` listing what could not be removed."""
        if self._closed:
            return
        self._closed = True
        rec = self.record
        if rec is None:
            shutil.rmtree(self.folder, ignore_errors=True)
            return
        for host in self.hosts.values():
            if host.proc is not None and host.proc.poll() is None:
                try:
                    os.killpg(host.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        problems = remove_everything(rec)
        for host in self.hosts.values():
            if host.proc is not None:
                try:
                    host.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    problems.append(f"host {host.name}: pid {host.proc.pid} still running")
        with state_lock():
            rec.path.unlink(missing_ok=True)
        if problems:
            raise NetnsError("teardown left: " + "; ".join(problems))

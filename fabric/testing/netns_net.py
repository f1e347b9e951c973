"""The network plumbing of ``NetnsFleet``: its /28 inside 198.51.100.0/24, the names it gives its
namespaces, links and nft table, the run records that let a later run clean up after a dead one,
and the ``ip``/``nft`` commands themselves.

Deciding is pure (``pick_subnet``, ``Names``, ``networks_in_use``, ``one_way_rules``); running a
command is ``sh`` (``subprocess.run``, raising ``NetnsError`` with the command's own words).

Two runs at once never share a /28: the choice is made under an ``flock`` on
``/tmp/fabric-netns/lock`` and recorded in ``/tmp/fabric-netns/<index>.json`` with the owner's pid.
A record whose owner pid is dead (or reused: the start time differs) is a leftover: ``clean_leftovers`` removes what it names (its
processes, namespaces, links, nft table and run folder) and the record. A live owner's record, and
everything it names, is never touched.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

__all__ = ["FLEET_RANGE", "Names", "NetnsError", "RunRecord", "STATE_DIR", "clean_leftovers", "current_networks",
           "drop_iptables_chain", "kill_groups", "kill_namespace_pids", "networks_in_use", "one_way_iptables", "one_way_rules",
           "pick_subnet", "pid_alive", "process_start", "records", "remove_everything", "sh", "state_lock", "subnets"]

FLEET_RANGE = ipaddress.IPv4Network("198.51.100.0/24")
"""Every fleet's addresses come from here (TEST-NET-2: never routed on a real network)."""
SUBNET_PREFIX = 28
STATE_DIR = Path("/tmp/fabric-netns")
"""The lock file and one run record per /28 in use."""
DIRECTIONS = ("in", "out")
"""``cut_one_way`` directions: ``out`` drops what the host sends, ``in`` what is sent to it."""


class NetnsError(RuntimeError):
    """A namespace, link or nft command failed, or no /28 is free; the message says which and why."""


def sh(argv: Sequence[str], *, check: bool = True, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and return what it printed; ``NetnsError`` with its stderr when ``check`` and it failed."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc


# -- the /28 -------------------------------------------------------------------------------------------
def subnets() -> list[ipaddress.IPv4Network]:
    """The sixteen /28s of 198.51.100.0/24, in order."""
    return list(FLEET_RANGE.subnets(new_prefix=SUBNET_PREFIX))


def networks_in_use(route_text: str, addr_text: str) -> list[ipaddress.IPv4Network]:
    """The IPv4 networks ``ip -4 route`` and ``ip -4 addr`` name (``default`` is left out: it is
    no claim on the range). An address counts as its own /32 and as its prefix's network."""
    found: list[ipaddress.IPv4Network] = []
    for line in route_text.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("default", "") or word.startswith(("unreachable", "blackhole", "prohibit")):
            if word.startswith(("unreachable", "blackhole", "prohibit")) and len(line.split()) > 1:
                word = line.split()[1]
            else:
                continue
        try:
            found.append(ipaddress.IPv4Network(word, strict=False))
        except ValueError:
            continue
    for line in addr_text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "inet":
            try:
                iface = ipaddress.IPv4Interface(parts[1])
            except ValueError:
                continue
            found.append(iface.network)
            found.append(ipaddress.IPv4Network(f"{iface.ip}/32"))
    return found


def pick_subnet(in_use: Iterable[ipaddress.IPv4Network], taken: Iterable[int]) -> tuple[int, ipaddress.IPv4Network]:
    """The first /28 of 198.51.100.0/24 (its index 0-15 and network) that no network of ``in_use``
    overlaps and whose index is not in ``taken`` (another run's records); ``NetnsError`` when none is."""
    used = list(in_use)
    busy = set(taken)
    for index, net in enumerate(subnets()):
        if index in busy or any(net.overlaps(other) for other in used):
            continue
        return index, net
    raise NetnsError(f"no free /28 in {FLEET_RANGE}: every one has a route or address on this machine or belongs to "
                     f"another run ({len(busy)} recorded in {STATE_DIR})")


def current_networks() -> list[ipaddress.IPv4Network]:
    """The networks this machine's root namespace has routes or addresses for now."""
    return networks_in_use(sh(["ip", "-4", "route", "show", "table", "all"], check=False).stdout,
                           sh(["ip", "-4", "addr"], check=False).stdout)


# -- names ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Names:
    """The names one run gives what it creates (Linux caps link names at 15 characters)."""

    run_id: str
    """Six lowercase hex digits."""

    def __post_init__(self) -> None:
        if len(self.run_id) != 6 or any(c not in "0123456789abcdef" for c in self.run_id):
            raise ValueError(f"run id {self.run_id!r} is not six lowercase hex digits")

    @property
    def bridge(self) -> str:
        return f"afb{self.run_id}"

    def nft_table(self, index: int) -> str:
        """The table in nft's ``bridge`` family that holds host ``index``'s one-way drop."""
        return f"afnet{self.run_id}x{index:02d}"

    def namespace(self, host: str) -> str:
        if not host or not all(c.isalnum() or c in "-_" for c in host):
            raise ValueError(f"host name {host!r}: letters, digits, - and _ only")
        return f"af-{self.run_id}-{host}"

    def veth_root(self, index: int) -> str:
        """The root namespace's end of host ``index``'s veth pair (the end the bridge holds)."""
        return f"afv{self.run_id}x{index:02d}"

    def veth_peer(self, index: int) -> str:
        """The host's end before it moves into the namespace (renamed ``eth0`` there)."""
        return f"afp{self.run_id}x{index:02d}"


# -- run records ---------------------------------------------------------------------------------------
@dataclass
class RunRecord:
    """What one run holds, written to ``STATE_DIR/<index>.json`` as it grows."""

    pid: int
    run_id: str
    index: int
    subnet: str
    folder: str
    namespaces: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    nft_tables: list[str] = field(default_factory=list)
    iptables_chains: list[str] = field(default_factory=list)
    pgids: list[int] = field(default_factory=list)
    started: str = ""
    """The owner's start time (``/proc/<pid>/stat``'s 22nd field): a reused pid is not the owner."""

    def owner_alive(self) -> bool:
        """The process that made this run still lives (its pid alive, with the start time recorded)."""
        return pid_alive(self.pid) and (not self.started or process_start(self.pid) == self.started)

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.index}.json"

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(self.path)

    @classmethod
    def load(cls, path: Path) -> RunRecord | None:
        """The record at ``path``, or None when it is not one (half written, foreign)."""
        try:
            data = json.loads(path.read_text())
            return cls(**data)
        except (OSError, ValueError, TypeError):
            return None


def pid_alive(pid: int) -> bool:
    """``pid`` names a living process (a zombie counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def process_start(pid: int) -> str | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat``), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@contextmanager
def state_lock() -> Iterator[None]:
    """Hold the machine-wide lock over the run records."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / "lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def records() -> list[RunRecord]:
    """Every run record in ``STATE_DIR``."""
    if not STATE_DIR.is_dir():
        return []
    return [r for p in sorted(STATE_DIR.glob("*.json")) if (r := RunRecord.load(p)) is not None]


def kill_namespace_pids(namespace: str) -> list[int]:
    """SIGKILL every process living in ``namespace`` (``ip netns pids``); the pids it signalled."""
    out = sh(["ip", "netns", "pids", namespace], check=False).stdout.split()
    killed = []
    for word in out:
        if word.isdigit() and int(word) != os.getpid():
            try:
                os.kill(int(word), signal.SIGKILL)
                killed.append(int(word))
            except ProcessLookupError:
                pass
    return killed


def kill_groups(pgids: Iterable[int], grace_s: float = 5.0) -> None:
    """SIGTERM each process group, wait up to ``grace_s`` for it to go, then SIGKILL what is left."""
    groups = [g for g in pgids if g > 1 and g != os.getpgrp()]
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    while groups and time.monotonic() < deadline:
        groups = [g for g in groups if _group_alive(g)]
        if groups:
            time.sleep(0.1)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _group_alive(pgid: int) -> bool:
    """Some process of group ``pgid`` is alive (zombies waiting to be reaped do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def remove_everything(rec: RunRecord) -> list[str]:
    """Remove what ``rec`` names: its process groups, the processes in its namespaces, the
    namespaces, links and nft tables, and its run folder. Returns what failed, in words."""
    problems: list[str] = []
    kill_groups(rec.pgids, grace_s=5.0)
    existing = set(sh(["ip", "netns", "list"], check=False).stdout.split())
    for ns in rec.namespaces:
        if ns in existing:
            kill_namespace_pids(ns)
    for ns in rec.namespaces:
        if ns in existing:
            for _ in range(20):  # the kernel lets go of a namespace once its last process is reaped
                proc = sh(["ip", "netns", "delete", ns], check=False)
                if proc.returncode == 0:
                    break
                kill_namespace_pids(ns)
                time.sleep(0.1)
            else:
                problems.append(f"namespace {ns}: {proc.stderr.strip()}")
    for table in rec.nft_tables:
        if shutil.which("nft") and sh(["nft", "list", "table", "bridge", table], check=False).returncode == 0:
            proc = sh(["nft", "delete", "table", "bridge", table], check=False)
            if proc.returncode != 0:
                problems.append(f"nft table {table}: {proc.stderr.strip()}")
    for chain in rec.iptables_chains:
        if shutil.which("iptables"):
            problems.extend(drop_iptables_chain(chain))
    for link in rec.links:
        if sh(["ip", "link", "show", link], check=False).returncode == 0:
            proc = sh(["ip", "link", "delete", link], check=False)
            if proc.returncode != 0 and sh(["ip", "link", "show", link], check=False).returncode == 0:
                problems.append(f"link {link}: {proc.stderr.strip()}")
    if rec.folder and Path(rec.folder).is_dir():
        shutil.rmtree(rec.folder, ignore_errors=True)
    return problems


def clean_leftovers() -> list[str]:
    """Remove every recorded run whose owner pid is dead, with its record (call under
    ``state_lock``). A live owner's run is left alone. Returns the run ids cleaned."""
    cleaned = []
    for rec in records():
        if rec.owner_alive():
            continue
        remove_everything(rec)
        rec.path.unlink(missing_ok=True)
        cleaned.append(rec.run_id)
    return cleaned


# -- one-way drops ------------------------------------------------------------------------------------
def one_way_rules(table: str, link: str, direction: str) -> str:
    """An ``nft -f`` script: the ``bridge`` family table ``table`` dropping the IPv4 packets the
    host behind ``link`` sends (``out``) or is sent (``in``), both between hosts (forward) and
    with the root namespace (input/output). ARP still passes, so only the one way is cut."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r}: one of {', '.join(DIRECTIONS)}")
    match = f'iifname "{link}"' if direction == "out" else f'oifname "{link}"'
    hooks = ("forward", "input") if direction == "out" else ("forward", "output")
    chains = "\n".join(f"  chain {hook} {{ type filter hook {hook} priority 0; policy accept; "
                       f"ether type ip {match} drop; }}" for hook in hooks)
    return f"table bridge {table} {{\n{chains}\n}}\n"


IPTABLES_HOOKS = {"out": ("FORWARD", "INPUT"), "in": ("FORWARD", "OUTPUT")}
"""The built-in chains that jump to a one-way chain: what the host sends is forwarded to another
host (bridged IPv4 passes FORWARD with ``br_netfilter``) or delivered to the root namespace
(INPUT); what it is sent comes from another host (FORWARD) or the root namespace (OUTPUT)."""


def one_way_iptables(chain: str, address: str, direction: str) -> list[list[str]]:
    """The ``iptables`` commands (argv lists, in order) that drop the IPv4 packets from (``out``)
    or to (``in``) ``address`` in a chain ``chain`` of their own, jumped to from the built-in chains."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r}: one of {', '.join(DIRECTIONS)}")
    match = ["-s", address] if direction == "out" else ["-d", address]
    cmds = [["iptables", "-w", "-N", chain], ["iptables", "-w", "-A", chain, *match, "-j", "DROP"]]
    cmds += [["iptables", "-w", "-I", hook, "1", "-j", chain] for hook in IPTABLES_HOOKS[direction]]
    return cmds


def drop_iptables_chain(chain: str) -> list[str]:
    """Remove ``chain`` and every jump to it; what could not be removed, in words (nothing when it is gone)."""
    if sh(["iptables", "-w", "-n", "-L", chain], check=False).returncode != 0:
        return []
    for hook in ("FORWARD", "INPUT", "OUTPUT"):
        for _ in range(10):
            if sh(["iptables", "-w", "-D", hook, "-j", chain], check=False).returncode != 0:
                break
    sh(["iptables", "-w", "-F", chain], check=False)
    proc = sh(["iptables", "-w", "-X", chain], check=False)
    return [] if proc.returncode == 0 else [f"iptables chain {chain}: {proc.stderr.strip()}"]

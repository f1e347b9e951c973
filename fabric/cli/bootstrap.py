"""The machine's own tools that ``fabric join`` drives before Ray starts: ``tailscale`` (bring the
node onto its tailnet), ``kubectl`` (label its Kubernetes node) and ``k3s`` (join a k3s server as an
agent).

**Tailnet.** With a ``tailscale`` command on PATH, ``tailscale status --json`` says whether the node
is connected (``BackendState`` ``Running``). Connected: its first tailnet IPv4 (``Self.TailscaleIPs``)
is the node's address for Ray. Not connected, with an auth key: ``tailscale up
--auth-key=file:PATH [--hostname NAME]``, then the status again. The key is a file
(``--tailscale-auth-key-file``), or ``TS_AUTHKEY`` written to a temporary file only this user can
read (0600) and removed once ``tailscale up`` returns: it is never on a command line, in what the
join prints, or in the environment of anything it starts. Not connected and no key: a warning, and
the join goes on as without a tailnet. No ``tailscale`` command: nothing happens here.

**Kubernetes labels.** ``--apply-k3s-labels`` runs ``kubectl label node NODE k=v ... --overwrite``
(``kubectl``, else ``k3s kubectl``) with the labels ``fabric probe --k3s-labels`` prints. A cluster
that cannot be reached, or no kubectl at all, is a warning: the join goes on.

**k3s agent.** ``--k3s-server URL --k3s-token-file FILE`` starts ``k3s agent --server URL
--token-file FILE`` in the background, in a session of its own, its output in a log file (the
token stays in its file). With ``--apply-k3s-labels`` the agent also gets the labels as
``--node-label`` flags (k3s sets them when the node registers). An agent that exits at once is a
warning.

Each step decides from what the tools printed and returns an ``Outcome`` (lines to print,
warnings, an error that stops the join, the tailnet address); the tools are behind one seam,
``Tools`` (find a command, run it, start one in the background). Tests put stand-in executables
first on PATH (``fabric.testing.standins``) or pass a fake.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from probes.tailnet import backend_state, self_ipv4

__all__ = ["AUTHKEY_ENV", "Outcome", "Ran", "Tools", "add_bootstrap_flags", "apply_node_labels", "bootstrap_problems",
           "bring_up_tailnet", "cluster_steps", "join_k3s", "k3s_agent_argv", "kubectl_command", "label_argv",
           "tailnet_step"]

AUTHKEY_ENV = "TS_AUTHKEY"
"""Tailscale's auth key in the environment (what its container image reads); written to a 0600 file here."""
STATUS_TIMEOUT_S = 10.0
UP_TIMEOUT_S = 120.0
LABEL_TIMEOUT_S = 30.0
CONNECTED_WAIT_S = 15.0
"""How long the status may take to say ``Running`` after ``tailscale up`` returned."""
AGENT_SETTLE_S = 1.0
"""How long a k3s agent just started must live to count as started."""


@dataclass(frozen=True)
class Ran:
    """What one command did: its exit code and its output."""

    code: int
    out: str
    err: str


class Tools:
    """The machine's commands: found on PATH, run with this environment less ``TS_AUTHKEY``."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = {k: v for k, v in (os.environ if env is None else env).items() if k != AUTHKEY_ENV}

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.env.get("PATH"))

    def run(self, argv: Sequence[str], timeout_s: float) -> Ran:
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, env=self.env,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Ran(124, "", f"timed out after {timeout_s:g} s")
        except OSError as exc:
            return Ran(127, "", f"{type(exc).__name__}: {exc}")
        return Ran(proc.returncode, proc.stdout or "", proc.stderr or "")

    def spawn(self, argv: Sequence[str], log: Path, settle_s: float) -> tuple[int, int | None]:
        """Start ``argv`` in the background (a session of its own, output to ``log``): its pid, and
        its exit code when it ended within ``settle_s`` (None: still running)."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                    start_new_session=True)
        try:
            return proc.pid, proc.wait(timeout=settle_s)
        except subprocess.TimeoutExpired:
            return proc.pid, None


@dataclass
class Outcome:
    """What a step did: ``said`` (printed), ``warnings`` (printed, the join goes on), ``error`` (the
    join stops, nothing started), ``address`` (the node's tailnet IPv4)."""

    said: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    address: str | None = None

    def add(self, other: Outcome) -> Outcome:
        self.said += other.said
        self.warnings += other.warnings
        self.error = self.error or other.error
        self.address = self.address or other.address
        return self


def _shown(argv: Sequence[str]) -> str:
    return shlex.join(list(argv))


def _last_line(*texts: str) -> str:
    lines = [ln.strip() for text in texts for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# -- flags ------------------------------------------------------------------------------------------------
def add_bootstrap_flags(p: argparse.ArgumentParser) -> None:
    """``fabric join``'s flags for a real machine: tailnet, Kubernetes labels, k3s, readiness."""
    g = p.add_argument_group("bootstrap (a real machine: tailnet, Kubernetes, readiness)")
    g.add_argument("--tailscale-auth-key-file", metavar="FILE",
                   help=f"when tailscale is installed but not connected: run tailscale up --auth-key=file:FILE (default: "
                        f"${AUTHKEY_ENV}, written to a 0600 temporary file); the key is never on a command line")
    g.add_argument("--tailscale-hostname", metavar="NAME", help="with tailscale up: --hostname NAME")
    g.add_argument("--apply-k3s-labels", action="store_true",
                   help="label this node's Kubernetes node (kubectl label node NODE k=v ... --overwrite) with the labels "
                        "fabric probe --k3s-labels prints; a cluster that cannot be reached is a warning")
    g.add_argument("--k8s-node-name", metavar="NAME", help="this node's Kubernetes node name (default: the hostname)")
    g.add_argument("--k3s-server", metavar="URL",
                   help="join this k3s server as an agent (k3s agent --server URL --token-file FILE, in the background)")
    g.add_argument("--k3s-token-file", metavar="FILE", help="with --k3s-server: a file holding the server's node token")
    g.add_argument("--ready-timeout", type=float, default=120.0, metavar="SECONDS",
                   help="after ray start: wait this long for the fabric's registry to list the node as active, then print "
                        "one ready line (else say why, exit 1); default 120")
    g.add_argument("--no-wait", action="store_true",
                   help="do not wait for the fabric's registry after ray start (as with --block and --supervise)")


def _readable(path: str) -> bool:
    try:
        with open(path, "rb"):
            return True
    except OSError:
        return False


def bootstrap_problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the bootstrap flags (each one line; any means exit 2, nothing done)."""
    out = []
    key = getattr(args, "tailscale_auth_key_file", None)
    if key and not _readable(key):
        out.append(f"--tailscale-auth-key-file {key}: missing or unreadable")
    server, token = getattr(args, "k3s_server", None), getattr(args, "k3s_token_file", None)
    if server and not token:
        out.append("--k3s-server needs --k3s-token-file FILE (the server's /var/lib/rancher/k3s/server/node-token, copied here)")
    if token and not server:
        out.append("--k3s-token-file needs --k3s-server URL")
    if server and not server.startswith("https://"):
        out.append(f"--k3s-server {server!r} is not a URL like https://SERVER:6443")
    if token and not _readable(token):
        out.append(f"--k3s-token-file {token}: missing or unreadable")
    timeout = getattr(args, "ready_timeout", 120.0)
    if timeout is not None and not timeout > 0:
        out.append(f"--ready-timeout must be more than 0 seconds (got {timeout:g})")
    return out


# -- tailnet ----------------------------------------------------------------------------------------------
def _status(tools: Tools, exe: str) -> tuple[dict[str, Any] | None, str]:
    """tailscale's status document, or None and why not."""
    ran = tools.run([exe, "status", "--json"], STATUS_TIMEOUT_S)
    try:
        data = json.loads(ran.out)
    except ValueError:
        data = None
    if isinstance(data, dict):
        return data, ""
    return None, _last_line(ran.err, ran.out) or f"exit {ran.code}"


@contextmanager
def _key_file(key_file: str | None, env: Mapping[str, str]) -> Iterator[str]:
    """The auth key as a file: ``key_file`` as it is, else ``TS_AUTHKEY`` in a 0600 temporary file
    that is removed on the way out."""
    if key_file:
        yield str(Path(key_file).resolve())
        return
    fd, path = tempfile.mkstemp(prefix="fabric-ts-authkey-")  # mkstemp: mode 0600, this user only
    try:
        with os.fdopen(fd, "w") as out:
            out.write(env[AUTHKEY_ENV].strip() + "\n")
        yield path
    finally:
        Path(path).unlink(missing_ok=True)


def bring_up_tailnet(tools: Tools, *, key_file: str | None, env: Mapping[str, str], hostname: str | None = None,
                     dry_run: bool = False, wait_s: float = CONNECTED_WAIT_S,
                     sleep: Callable[[float], None] = time.sleep) -> Outcome:
    """Connect this node to its tailnet when tailscale is installed and not connected; the outcome
    carries its tailnet IPv4 once connected."""
    exe = tools.which("tailscale")
    if exe is None:  # no tailnet here: the join goes on as it always did
        return Outcome(warnings=["--tailscale-auth-key-file: tailscale is not on PATH: joining without the tailnet"]
                       if key_file else [])
    data, why = _status(tools, exe)
    state = backend_state(data)
    if state == "Running" and self_ipv4(data):
        ip = self_ipv4(data)
        return Outcome(said=[f"tailnet: connected, this node is {ip}"], address=ip)
    has_key = bool(key_file) or bool(env.get(AUTHKEY_ENV, "").strip())
    now = f"BackendState {state}" if state else f"no status: {why}"
    if not has_key:
        return Outcome(warnings=[f"tailscale is installed but not connected ({now}) and there is no auth key "
                                 f"(--tailscale-auth-key-file FILE, or {AUTHKEY_ENV}): joining without the tailnet"])
    extra = ["--hostname", hostname] if hostname else []
    if dry_run:
        shown_key = str(Path(key_file).resolve()) if key_file else f"<a 0600 temporary file holding ${AUTHKEY_ENV}>"
        return Outcome(said=[f"tailnet: not connected ({now})",
                             f"would run: {_shown([exe, 'up', f'--auth-key=file:{shown_key}', *extra])}"])
    out = Outcome(said=[f"tailnet: not connected ({now})"])
    with _key_file(key_file, env) as path:
        argv = [exe, "up", f"--auth-key=file:{path}", *extra]
        out.said.append(f"running: {_shown(argv)}")
        ran = tools.run(argv, UP_TIMEOUT_S)
    if ran.code != 0:
        out.error = f"tailscale up failed (exit {ran.code}): {_last_line(ran.err, ran.out) or 'no output'}"
        return out
    deadline = time.monotonic() + wait_s
    while True:
        data, why = _status(tools, exe)
        ip = self_ipv4(data) if backend_state(data) == "Running" else None
        if ip is not None or time.monotonic() >= deadline:
            break
        sleep(0.5)
    if ip is None:
        state = backend_state(data)
        hint = ": approve the machine in the tailnet's admin console" if state == "NeedsMachineAuth" else ""
        out.error = (f"tailscale up returned but the node is not connected "
                     f"({f'BackendState {state}' if state else f'no status: {why}'}){hint}")
        return out
    out.said.append(f"tailnet: connected, this node is {ip}")
    out.address = ip
    return out


def tailnet_step(args: argparse.Namespace, env: Mapping[str, str], tools: Tools | None = None) -> Outcome:
    """Step 1 of ``fabric join``: the tailnet, from its flags."""
    return bring_up_tailnet(tools or Tools(env), key_file=getattr(args, "tailscale_auth_key_file", None), env=env,
                            hostname=getattr(args, "tailscale_hostname", None), dry_run=bool(args.dry_run))


# -- Kubernetes labels ------------------------------------------------------------------------------------
def kubectl_command(tools: Tools) -> list[str] | None:
    """``kubectl``, else ``k3s kubectl``; None when neither is on PATH."""
    exe = tools.which("kubectl")
    if exe:
        return [exe]
    k3s = tools.which("k3s")
    return [k3s, "kubectl"] if k3s else None


def label_argv(kubectl: Sequence[str], node: str, labels: Mapping[str, str]) -> list[str]:
    return [*kubectl, "label", "node", node, *(f"{k}={v}" for k, v in sorted(labels.items())), "--overwrite"]


def apply_node_labels(tools: Tools, node: str, labels: Mapping[str, str], *, dry_run: bool = False) -> Outcome:
    """Label Kubernetes node ``node``; a cluster that cannot be reached is a warning."""
    kubectl = kubectl_command(tools)
    if kubectl is None:
        return Outcome(warnings=["--apply-k3s-labels: neither kubectl nor k3s is on PATH: the node's Kubernetes labels "
                                 "were not applied"])
    argv = label_argv(kubectl, node, labels)
    if dry_run:
        return Outcome(said=[f"would run: {_shown(argv)}"])
    out = Outcome(said=[f"running: {_shown(argv)}"])
    ran = tools.run(argv, LABEL_TIMEOUT_S)
    if ran.code == 0:
        out.said.append(f"labelled Kubernetes node {node}: {_last_line(ran.out) or 'done'}")
    else:
        out.warnings.append(f"could not label Kubernetes node {node} ({_last_line(ran.err, ran.out) or f'exit {ran.code}'}): "
                            f"the join goes on without its Kubernetes labels")
    return out


# -- k3s agent --------------------------------------------------------------------------------------------
def k3s_agent_argv(k3s: str, server: str, token_file: str, *, node_name: str | None = None, node_ip: str | None = None,
                   labels: Mapping[str, str] | None = None) -> list[str]:
    argv = [k3s, "agent", "--server", server, "--token-file", token_file]
    if node_name:
        argv += ["--node-name", node_name]
    if node_ip:
        argv += ["--node-ip", node_ip]
    for k, v in sorted((labels or {}).items()):
        argv += ["--node-label", f"{k}={v}"]
    return argv


def agent_log() -> Path:
    """Where the k3s agent this join starts writes its output."""
    return Path(tempfile.gettempdir()) / f"fabric-k3s-agent-{os.getuid()}.log"


def join_k3s(tools: Tools, server: str, token_file: str, *, node_name: str | None = None, node_ip: str | None = None,
             labels: Mapping[str, str] | None = None, dry_run: bool = False, log: Path | None = None,
             settle_s: float = AGENT_SETTLE_S) -> Outcome:
    """Start a k3s agent that joins ``server``; one that cannot start is a warning."""
    exe = tools.which("k3s")
    if exe is None:
        return Outcome(warnings=[f"--k3s-server: k3s is not on PATH: not joined to {server}"])
    argv = k3s_agent_argv(exe, server, str(Path(token_file).resolve()), node_name=node_name, node_ip=node_ip, labels=labels)
    if dry_run:
        return Outcome(said=[f"would run: {_shown(argv)} &"])
    log = log or agent_log()
    out = Outcome(said=[f"running: {_shown(argv)} &"])
    try:
        pid, code = tools.spawn(argv, log, settle_s)
    except OSError as exc:
        out.warnings.append(f"could not start the k3s agent ({type(exc).__name__}: {exc}): not joined to {server}")
        return out
    if code is None:
        out.said.append(f"started the k3s agent (pid {pid}), its output in {log}")
    else:
        try:
            tail = _last_line(log.read_text(errors="replace")[-4000:])
        except OSError:
            tail = ""
        out.warnings.append(f"the k3s agent exited at once (exit {code}{f': {tail}' if tail else ''}; its output in {log}): "
                            f"not joined to {server}")
    return out


def cluster_steps(args: argparse.Namespace, caps: Any, node_ip: str | None, tools: Tools | None = None) -> Outcome:
    """Steps 3 and 4 of ``fabric join``, once the head said yes: the k3s agent, then the labels."""
    tools = tools or Tools()
    labels = caps.to_k3s_labels() if args.apply_k3s_labels else {}
    out = Outcome()
    if args.k3s_server:
        out.add(join_k3s(tools, args.k3s_server, args.k3s_token_file, node_name=args.k8s_node_name, node_ip=node_ip,
                         labels=labels, dry_run=bool(args.dry_run)))
    if args.apply_k3s_labels:
        out.add(apply_node_labels(tools, args.k8s_node_name or socket.gethostname(), labels, dry_run=bool(args.dry_run)))
    return out

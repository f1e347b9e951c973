"""What ``fabric join`` checks before it runs ``ray start``, and what ``fabric start-head`` records for it.

**Versions.** A node whose Python (major.minor), Ray or fabric differs from the head's joins Ray
and then fails in ways far from the cause (pickled functions, protocol errors). So ``start-head``
records the head's versions in Ray's GCS internal KV (namespace ``fabric``, key
``fabric.head.versions``, JSON), written over gRPC once the head answers; ``join`` reads them
before anything starts and refuses a mismatch with one line per differing version, naming this
node's and the head's. A head that recorded nothing (an older fabric, or a plain ``ray start``)
gets a warning and the join goes on. ``FABRIC_TEST_LOCAL_VERSIONS`` (``ray=X,fabric=Y,python=Z``)
makes this node report other versions than its own: how a test shows a refusal.

**Tokens.** With token auth on (``RAY_AUTH_MODE=token``), a node with a missing or wrong token
waits in ``ray start`` for Ray's long timeout. So ``join`` asks the head's GCS ``GetClusterId``
itself (as ``fabric.cli.connect`` does for drivers: without a token, then with this node's), and
refuses at once, naming the problem. The token is this node's ``--token-file FILE``, else
``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH`` names, else ``~/.ray/auth_token`` (Ray's
order). It reaches ``ray start`` through the environment only (``RAY_AUTH_TOKEN_PATH`` for a file,
``RAY_AUTH_TOKEN`` as it was), with ``RAY_AUTH_MODE=token`` when the head requires a token (Ray
turns token auth on for a joining node only when told to).

Deciding is pure (``version_mismatches``, ``join_token``, ``token_problem``, ``head_token_lines``);
the GCS is behind one seam, ``HeadSeam``. ``python -m fabric.cli.join_checks record HOST:PORT``
records the versions once the head there answers: ``start-head -- --block`` starts it just before it
becomes ``ray start``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable, Mapping, Sequence

from fabric.cli.connect import MODE_ENV, TOKEN_ENV, TOKEN_PATH_ENV, client_token_from

__all__ = ["HeadSeam", "JoinToken", "JoinVerdict", "PRETEND_ENV", "Versions", "check_join", "head_token_lines", "join_token",
           "local_versions", "record_head_versions", "token_problem", "version_mismatches"]

KV_NAMESPACE = b"fabric"
KV_KEY = b"fabric.head.versions"
PRETEND_ENV = "FABRIC_TEST_LOCAL_VERSIONS"
"""``ray=X,fabric=Y,python=Z`` (any of them): the versions this node reports instead of its own."""
Reader = Callable[[Path], "str | None"]


@dataclass(frozen=True)
class Versions:
    """A node's Python (as ``platform.python_version()``), Ray and fabric versions."""

    python: str
    ray: str
    fabric: str

    def to_json(self) -> str:
        return json.dumps({"python": self.python, "ray": self.ray, "fabric": self.fabric}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Versions:
        """``ValueError`` when ``text`` is not such a record."""
        data = json.loads(text)
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("python", "ray", "fabric")):
            raise ValueError(f"not a versions record: {text!r}")
        return cls(python=data["python"], ray=data["ray"], fabric=data["fabric"])

    def summary(self) -> str:
        return f"Python {self.python}, Ray {self.ray}, fabric {self.fabric}"


def _installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def local_versions(env: Mapping[str, str] | None = None) -> Versions:
    """This node's versions (Ray's and fabric's as installed for this Python), with
    ``FABRIC_TEST_LOCAL_VERSIONS`` applied."""
    import fabric

    env = os.environ if env is None else env
    found = {"python": platform.python_version(), "ray": _installed("ray"), "fabric": fabric.__version__}
    for item in env.get(PRETEND_ENV, "").split(","):
        name, sep, value = item.partition("=")
        if sep and name.strip() in found and value.strip():
            found[name.strip()] = value.strip()
    return Versions(**found)


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def version_mismatches(here: Versions, head: Versions, head_address: str) -> list[str]:
    """One line per version that differs: Python on major.minor, Ray and fabric exactly."""
    out = []
    if _major_minor(here.python) != _major_minor(head.python):
        out.append(f"Python differs: this node has {here.python}, the head at {head_address} has {head.python} "
                   f"(major.minor must match)")
    for name, mine, theirs in (("Ray", here.ray, head.ray), ("fabric", here.fabric, head.fabric)):
        if mine != theirs:
            out.append(f"{name} differs: this node has {mine}, the head at {head_address} has {theirs}")
    return out


# -- tokens -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JoinToken:
    """The token a joining node will send, where it comes from, and how ``ray start`` gets it."""

    token: str | None
    """None: no token found (or the file is missing or empty)."""
    where: str
    """Where it was looked for, in words (``--token-file F``, ``RAY_AUTH_TOKEN``, a path)."""
    env: dict[str, str] = field(default_factory=dict)
    """Set in ``ray start``'s environment."""
    unset: tuple[str, ...] = ()
    """Removed from ``ray start``'s environment."""
    problem: str | None = None
    """A given ``--token-file`` that cannot be used (missing or empty)."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def join_token(env: Mapping[str, str], home: Path, token_file: str | None, read: Reader = _read) -> JoinToken:
    """The token of a joining node with environment ``env``: ``--token-file`` first (given to ``ray
    start`` as ``RAY_AUTH_TOKEN_PATH``, ``RAY_AUTH_TOKEN`` removed so that it wins), else Ray's own
    order (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``'s file, ``~/.ray/auth_token``), left as it is."""
    if token_file:
        path = Path(token_file).expanduser().resolve()
        text = read(path)
        token = text.strip() if text is not None and text.strip() else None
        problem = None if token else f"the token file {path} (--token-file) is {'empty' if text is not None else 'missing or unreadable'}"
        return JoinToken(token=token, where=f"{path} (--token-file)", env={TOKEN_PATH_ENV: str(path)}, unset=(TOKEN_ENV,),
                         problem=problem)
    client = client_token_from(env, home, auto=False, read=read)
    return JoinToken(token=client.token, where=client.where())


def token_problem(address: str, tok: JoinToken, without: str | None, with_token: str | None) -> str | None:
    """Why this node cannot join the head at ``address`` with ``tok``, given the GCS's answers to a call
    without a token (``without``) and with ``tok`` (``with_token``); None: go ahead."""
    fix = (f"copy the head's token file (its ~/.ray/auth_token, or where fabric start-head said) to this machine and "
           f"pass --token-file FILE, or set {TOKEN_ENV} to its contents")
    if tok.problem is not None:
        return f"{tok.problem}: {fix}"
    if without != "unauthenticated":
        return None  # no token required (or the head could not be asked this way: ray start will say)
    if tok.token is None:
        return (f"the head at {address} requires a token and this node has none (no --token-file, {TOKEN_ENV} unset, "
                f"nothing in {tok.where}): {fix}")
    if with_token == "unauthenticated":
        return f"the head at {address} refused this node's token (from {tok.where}): it is not the head's token: {fix}"
    return None


def head_token_lines(env: Mapping[str, str], home: Path, read: Reader = _read) -> list[str]:
    """What ``start-head`` says about the cluster token: where it is and how the other machines use it."""
    client = client_token_from(env, home, auto=True, read=read)
    if client.mode != "token":
        shown = f"{MODE_ENV}={client.mode}" if client.mode_set else f"{MODE_ENV} unset and no token in {client.path}"
        return [f"token auth is off ({shown}): anyone who reaches this head's port can run code on the cluster"]
    if client.token is None:
        return [f"token auth is on ({MODE_ENV}=token) but there is no token in {client.where()}: ray start will refuse; "
                f"`ray get-auth-token --generate` writes one to ~/.ray/auth_token"]
    if client.source == TOKEN_ENV:
        return [f"token auth is on: the cluster token is this shell's {TOKEN_ENV} (no file): give the other machines "
                f"the same {TOKEN_ENV}, or save it to a file there and join with --token-file FILE"]
    return [f"token auth is on: the cluster token is in {client.path}: copy that file to each other machine and join with "
            f"--token-file FILE (or put it at ~/.ray/auth_token there, or its contents in {TOKEN_ENV})"]


# -- the head's GCS ---------------------------------------------------------------------------------------
class HeadSeam:
    """The head's GCS over gRPC: ``GetClusterId`` and the internal KV. Tests pass a fake."""

    def __init__(self, timeout_s: float = 3.0, env: Mapping[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.env = os.environ if env is None else env

    def _usable(self) -> bool:
        return self.env.get("RAY_USE_TLS", "0").lower() in ("0", "", "false")

    @staticmethod
    def _meta(token: str | None) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {token}"),) if token else ()

    def ask(self, gcs: str, token: str | None) -> str | None:
        """``ok``, ``unauthenticated`` or another gRPC status (lower case); None when it cannot be asked (TLS)."""
        if not self._usable():
            return None
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

        with grpc.insecure_channel(gcs, options=[("grpc.enable_http_proxy", 0)]) as channel:
            stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
            try:
                stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), metadata=self._meta(token), timeout=self.timeout_s)
            except grpc.RpcError as exc:
                return str(exc.code().name).lower()
        return "ok"

    def kv_get(self, gcs: str, token: str | None) -> tuple[str, bytes | None]:
        """(``ok`` or why not, the recorded value or None when there is none)."""
        if not self._usable():
            return "tls", None
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

        with grpc.insecure_channel(gcs, options=[("grpc.enable_http_proxy", 0)]) as channel:
            stub = gcs_service_pb2_grpc.InternalKVGcsServiceStub(channel)
            try:
                reply = stub.InternalKVGet(gcs_service_pb2.InternalKVGetRequest(namespace=KV_NAMESPACE, key=KV_KEY),
                                           metadata=self._meta(token), timeout=self.timeout_s)
            except grpc.RpcError as exc:
                return str(exc.code().name).lower(), None
        return "ok", (bytes(reply.value) if reply.status.code == 0 else None)

    def node_state(self, gcs: str, token: str | None, node_id: str) -> str:
        """What the head's node table says of ``node_id`` (hex): ``alive``, ``dead``, ``unknown``
        (not listed) or ``unreachable`` (no answer, or TLS)."""
        if not self._usable():
            return "unreachable"
        from fabric.rayio.gcs_nodes import node_state

        return node_state(gcs, token, node_id, self.timeout_s)

    def kv_put(self, gcs: str, token: str | None, value: bytes) -> str:
        """``ok`` or why not."""
        if not self._usable():
            return "tls"
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

        with grpc.insecure_channel(gcs, options=[("grpc.enable_http_proxy", 0)]) as channel:
            stub = gcs_service_pb2_grpc.InternalKVGcsServiceStub(channel)
            try:
                reply = stub.InternalKVPut(gcs_service_pb2.InternalKVPutRequest(namespace=KV_NAMESPACE, key=KV_KEY, value=value,
                                                                                overwrite=True),
                                           metadata=self._meta(token), timeout=self.timeout_s)
            except grpc.RpcError as exc:
                return str(exc.code().name).lower()
        return "ok" if reply.status.code == 0 else f"status {reply.status.code}: {reply.status.message}"


@dataclass(frozen=True)
class JoinVerdict:
    """What ``check_join`` found: refusals (each one line; any means exit 1, nothing started),
    warnings (printed, the join goes on) and the environment ``ray start`` gets."""

    problems: list[str]
    warnings: list[str]
    env: dict[str, str]
    unset: tuple[str, ...]


def check_join(address: str, tok: JoinToken, seam: HeadSeam, here: Versions) -> JoinVerdict:
    """Ask the head at ``address`` (``HOST:PORT``, known to accept TCP) whether this node may join:
    its token first, then the versions the head recorded."""
    try:
        without = seam.ask(address, None)
        with_token = seam.ask(address, tok.token) if without == "unauthenticated" and tok.token else None
    except ImportError:  # no gRPC stubs: nothing can be asked, ray start will say
        return JoinVerdict([], [f"could not ask the head at {address} (no gRPC here): token and versions not checked"],
                           dict(tok.env), tok.unset)
    problem = token_problem(address, tok, without, with_token)
    if problem is not None:
        return JoinVerdict([problem], [], {}, ())
    env = dict(tok.env)
    if without == "unauthenticated":
        env[MODE_ENV] = "token"  # a joining node sends its token only with token auth on
    status, value = seam.kv_get(address, tok.token if without == "unauthenticated" else None)
    if status != "ok":
        return JoinVerdict([], [f"could not read the head's versions ({status}): not checked"], env, tok.unset)
    if value is None:
        return JoinVerdict([], [f"the head at {address} recorded no versions (an older fabric, or a plain ray start): "
                                f"not checked; this node has {here.summary()}"], env, tok.unset)
    try:
        head = Versions.from_json(value)
    except ValueError:
        return JoinVerdict([], [f"the head at {address} recorded versions this node cannot read: not checked"], env, tok.unset)
    return JoinVerdict(version_mismatches(here, head, address), [], env, tok.unset)


def record_head_versions(gcs: str, versions: Versions, env: Mapping[str, str], home: Path, seam: HeadSeam,
                         wait_s: float = 30.0, still_wanted: Callable[[], bool] = lambda: True) -> str | None:
    """Write ``versions`` to the head's GCS at ``gcs`` once it answers (with the head's token when it
    has one), trying for up to ``wait_s``; None when written, else why not."""
    token = client_token_from(env, home, auto=True, read=_read).token
    deadline, why = time.monotonic() + wait_s, "it did not answer"
    while still_wanted():
        try:
            why = seam.kv_put(gcs, token, versions.to_json().encode())
        except Exception as exc:  # noqa: BLE001 - not up yet, or no gRPC: tried again, then said
            why = f"{type(exc).__name__}: {exc}"
        if why == "ok":
            return None
        if time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    return why


def main(argv: Sequence[str] | None = None) -> int:
    """``record HOST:PORT [--wait S]``: record this node's versions at the head there, while the
    process that started this one lives (it becomes ``ray start --block``)."""
    p = argparse.ArgumentParser(prog="python -m fabric.cli.join_checks")
    p.add_argument("what", choices=["record"])
    p.add_argument("gcs", metavar="HOST:PORT")
    p.add_argument("--wait", type=float, default=120.0, metavar="SECONDS")
    args = p.parse_args(argv)
    parent = os.getppid()
    why = record_head_versions(args.gcs, local_versions(), os.environ, Path.home(), HeadSeam(), args.wait,
                               still_wanted=lambda: os.getppid() == parent)
    if why is not None:
        print(f"fabric start-head: could not record the head's versions at {args.gcs}: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

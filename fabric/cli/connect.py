"""Connecting a ``fabric`` command to a Ray cluster, and saying why it could not.

Every command that talks to a cluster connects through ``connect``. Against a cluster with token
authentication on (``RAY_AUTH_MODE=token``), what Ray 2.60's ``ray.init(address=...)`` tells a
client is rarely the cause (measured on a local head):

- token auth on here and no token found: ``ray.exceptions.AuthenticationError`` at once, "Token
  authentication is enabled but no authentication token was found" (or "RAY_AUTH_TOKEN_PATH is set
  but file cannot be opened or is empty: PATH");
- a wrong token, or token auth off here (the client sends none): after about 20 s only
  ``ConnectionError("Failed to connect to Ray cluster at ADDR")``; the cause, "Unauthenticated:
  ... InvalidAuthToken: Authentication token is missing or incorrect", is only in Ray's log.

So before ``ray.init`` this asks the GCS one cheap question itself (``GetClusterId``, without a
token and with the one this client would send). When the GCS refuses, the command says at once
which token problem it is and what fixes it; otherwise ``ray.init`` runs, and if it fails the same
facts explain it (else Ray's own first line is shown).

Deciding the message is pure (``explain_failure`` over ``ConnectFacts``); the outside world (the
environment, the token file, TCP, the GCS, ``ray.init``) is behind one seam, ``RaySeam``.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from fabric.core.names import RAY_AUTH_MODE_ENV, RAY_AUTH_TOKEN_ENV, RAY_AUTH_TOKEN_PATH_ENV

__all__ = ["ClientToken", "ConnectFacts", "RaySeam", "client_token_from", "connect", "explain_failure", "parse_address"]

# Ray's token sources, highest precedence first (docs.ray.io, ray-core/internals/token-authentication).
TOKEN_ENV, TOKEN_PATH_ENV, MODE_ENV = RAY_AUTH_TOKEN_ENV, RAY_AUTH_TOKEN_PATH_ENV, RAY_AUTH_MODE_ENV
LOCAL_ADDRESSES = ("auto", "local")


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ``ValueError`` saying what is wrong."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {address!r} is not HOST:PORT (e.g. 10.0.0.5:6379)")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class ClientToken:
    """What this client will send: its auth mode and the token Ray would find, and where."""

    mode: str
    """``token``, ``disabled``, or another mode Ray knows (then nothing here is diagnosed)."""
    mode_set: bool
    """``RAY_AUTH_MODE`` is set; otherwise ``mode`` is what Ray picks for this address."""
    source: str
    """Where the token is looked for: ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``file``."""
    path: str | None
    """The token file looked at (``RAY_AUTH_TOKEN_PATH``'s, or ``~/.ray/auth_token``)."""
    token: str | None
    """The token, or None when there is none (or the file is missing or empty)."""

    def where(self) -> str:
        if self.source == TOKEN_ENV:
            return TOKEN_ENV
        if self.source == TOKEN_PATH_ENV:
            return f"{self.path}, named by {TOKEN_PATH_ENV}"
        return str(self.path)


def client_token_from(env: Mapping[str, str], home: Path, *, auto: bool, read: Callable[[Path], str | None]) -> ClientToken:
    """The token Ray would use for a client with environment ``env``: ``RAY_AUTH_TOKEN``, else the
    file ``RAY_AUTH_TOKEN_PATH`` names, else ``~/.ray/auth_token``. With ``RAY_AUTH_MODE`` unset, Ray
    turns token auth on only for ``address="auto"`` and only when a token is found."""
    if env.get(TOKEN_ENV, "").strip():
        source, path, token = TOKEN_ENV, None, env[TOKEN_ENV].strip()
    else:
        source = TOKEN_PATH_ENV if env.get(TOKEN_PATH_ENV) else "file"
        file = Path(env[TOKEN_PATH_ENV]) if source == TOKEN_PATH_ENV else home / ".ray" / "auth_token"
        text = read(file)
        path, token = str(file), (text.strip() or None) if text is not None else None
    raw_mode = env.get(MODE_ENV)
    if raw_mode is not None:
        mode, mode_set = raw_mode.strip().lower(), True
    else:
        mode, mode_set = ("token" if auto and token else "disabled"), False
    return ClientToken(mode=mode, mode_set=mode_set, source=source, path=path, token=token)


@dataclass(frozen=True)
class ConnectFacts:
    """What is known about one connection attempt."""

    address: str
    """The address as given (``HOST:PORT`` or ``auto``)."""
    gcs: str | None
    """The GCS's ``HOST:PORT`` (``auto`` resolved), None when unknown."""
    client: ClientToken
    reachable: str | None = None
    """None: something accepts TCP at ``gcs`` (or it was not tried); else why not."""
    without_token: str | None = None
    """The GCS's answer to a call without a token: ``ok``, ``unauthenticated``, another gRPC status
    (lower case), or None when not asked."""
    with_token: str | None = None
    """Its answer to a call with this client's token (asked only when it refused none)."""
    ray_error: str | None = None
    """What ``ray.init`` raised (type and first line), None before it ran or when it did not raise."""


def _fix_for(client: ClientToken) -> str:
    """How to give this client the head's token, given where it looks for one."""
    if client.source == TOKEN_ENV:
        return f"set {TOKEN_ENV} to the head's token (the contents of its ~/.ray/auth_token), or unset it and copy that file to ~/.ray/auth_token on this machine"
    if client.source == TOKEN_PATH_ENV:
        return f"point {TOKEN_PATH_ENV} at a copy of the head's ~/.ray/auth_token, or set {TOKEN_ENV} to its contents"
    return f"copy the head's ~/.ray/auth_token to {client.path} on this machine, or set {TOKEN_ENV} to its contents"


def explain_failure(facts: ConnectFacts) -> str | None:
    """The cause and the fix, in one phrase; None when the facts show nothing wrong (before
    ``ray.init``: go ahead). After a failed ``ray.init`` it falls back to Ray's own words."""
    client = facts.client
    if facts.reachable is not None:
        return f"nothing answers there ({facts.reachable}): is the head up and the address right?"
    if client.mode == "token" and client.token is None:
        if client.source == TOKEN_PATH_ENV:
            return (f"this client has token auth on ({MODE_ENV}=token) but {TOKEN_PATH_ENV} names {client.path}, which is "
                    f"missing or empty: {_fix_for(client)}")
        if facts.without_token == "ok":
            return (f"this client has token auth on ({MODE_ENV}=token) but no token ({TOKEN_ENV} unset, no {client.path}), and "
                    f"the cluster does not require one: set {MODE_ENV}=disabled, or {_fix_for(client)}")
        lead = "the cluster requires a token and this client has none" if facts.without_token == "unauthenticated" \
            else "this client has token auth on but no token"
        return f"{lead} ({MODE_ENV}=token; {TOKEN_ENV} unset, no {client.path}): {_fix_for(client)}"
    if facts.without_token == "unauthenticated":
        if client.mode == "disabled":
            shown = f"{MODE_ENV}={client.mode}" if client.mode_set else f"{MODE_ENV} unset"
            lead = f"the cluster requires a token and this client sends none (token auth is off here: {shown}): set {MODE_ENV}=token"
            if facts.with_token == "ok":
                return f"{lead}; the token in {client.where()} is the head's"
            if facts.with_token == "unauthenticated":
                return f"{lead}, and give it the head's token ({client.where()} holds another): {_fix_for(client)}"
            return f"{lead}, and give it the head's token: {_fix_for(client)}"
        if client.mode == "token" and facts.with_token == "unauthenticated":
            return f"the cluster refused this client's token (from {client.where()}): it is not the head's token: {_fix_for(client)}"
    return facts.ray_error


class RaySeam:
    """Every outside fact ``connect`` needs, and ``ray.init`` itself. Tests pass a fake."""

    def __init__(self, env: Mapping[str, str] | None = None, home: Path | None = None, probe_timeout_s: float = 3.0) -> None:
        self.env = os.environ if env is None else env
        self.home_dir = home
        self.probe_timeout_s = probe_timeout_s

    @property
    def ray(self) -> Any:
        import ray

        return ray

    def is_initialized(self) -> bool:
        return bool(self.ray.is_initialized())

    def client_token(self, address: str) -> ClientToken:
        def read(path: Path) -> str | None:
            try:
                return path.read_text()
            except OSError:
                return None

        return client_token_from(self.env, self.home_dir or Path.home(), auto=address == "auto", read=read)

    def resolve(self, address: str) -> str | None:
        """``HOST:PORT`` of the GCS ``address`` means (``auto``: the cluster this machine joined)."""
        if address not in LOCAL_ADDRESSES:
            return address
        if address == "local":
            return None
        try:
            from ray._private.services import canonicalize_bootstrap_address

            return canonicalize_bootstrap_address(address)
        except Exception:  # no cluster found, or several: ray.init will say so in its own words
            return None

    def reachable(self, host: str, port: int) -> str | None:
        try:
            with socket.create_connection((host, port), timeout=self.probe_timeout_s):
                return None
        except OSError as exc:
            return exc.strerror or type(exc).__name__

    def ask_gcs(self, gcs: str, token: str | None) -> str | None:
        """The GCS's answer to ``GetClusterId`` (``ok``, ``unauthenticated``, ...); None when it
        cannot be asked this way (TLS, no gRPC stubs)."""
        if self.env.get("RAY_USE_TLS", "0").lower() not in ("0", "", "false"):
            return None
        try:
            import grpc
            from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
        except ImportError:
            return None
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        with grpc.insecure_channel(gcs) as channel:
            stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
            try:
                stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), metadata=metadata, timeout=self.probe_timeout_s)
            except grpc.RpcError as exc:
                return exc.code().name.lower()
        return "ok"

    def init(self, address: str, node_ip_address: str | None) -> None:
        extra = {"_node_ip_address": node_ip_address} if node_ip_address else {}
        self.ray.init(address=address, log_to_driver=False, logging_level="ERROR", **extra)


def _node_ip_for(gcs: str | None) -> str | None:
    # A cluster on another loopback address (LocalFabric(node_ip_address="127.0.0.2")): this driver
    # is on that machine, so it must use that address as its own.
    if gcs is None:
        return None
    host = gcs.rpartition(":")[0].strip("[]")
    return host if host.startswith("127.") and host != "127.0.0.1" else None


def gather_facts(address: str, seam: RaySeam) -> ConnectFacts:
    """Everything knowable before ``ray.init``: the client's token, TCP, the GCS's answers."""
    facts = ConnectFacts(address=address, gcs=seam.resolve(address), client=seam.client_token(address))
    if facts.gcs is None:
        return facts
    host, port = parse_address(facts.gcs)
    why = seam.reachable(host, port)
    if why is not None:
        return replace(facts, reachable=why)
    without = seam.ask_gcs(facts.gcs, None)
    # asked even when token auth is off here: a token on this machine that the head accepts is half the fix
    with_token = seam.ask_gcs(facts.gcs, facts.client.token) if without == "unauthenticated" and facts.client.token else None
    return replace(facts, without_token=without, with_token=with_token)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def connect(address: str, command: str, *, seam: RaySeam | None = None) -> Any | None:
    """Connect this process to the Ray cluster at ``address`` (``HOST:PORT`` or ``auto``). Returns
    the ``ray`` module, or None after printing one line on stderr that says why not and what fixes it."""
    seam = seam or RaySeam()
    if seam.is_initialized():
        return seam.ray
    if address not in LOCAL_ADDRESSES:
        try:
            parse_address(address)
        except ValueError as exc:
            print(f"fabric {command}: error: {exc}", file=sys.stderr)
            return None
    try:
        facts = gather_facts(address, seam)
    except Exception:  # a diagnosis must never be why a connection fails: let ray.init try
        facts = ConnectFacts(address=address, gcs=None, client=ClientToken("unknown", False, "file", None, None))
    shown = address if facts.gcs in (None, address) else f"{address} ({facts.gcs})"
    cause = explain_failure(facts)
    if cause is None:
        try:
            seam.init(address, _node_ip_for(facts.gcs))
            return seam.ray
        except Exception as exc:
            cause = explain_failure(replace(facts, ray_error=_first_line(exc))) or _first_line(exc)
    print(f"fabric {command}: cannot connect to Ray at {shown}: {cause}", file=sys.stderr)
    return None

"""GCS fault tolerance for ``fabric start-head``; the head-outage window for ``fabric join``.

``start-head`` turns Ray's GCS fault tolerance on by default, so that a head that crashed and is
started again with the same command (same address, same state folder) brings the cluster back:
worker nodes keep their node id and raylet, detached actors keep their id and process. Two stores:

- embedded (default): ``RAY_gcs_storage=rocksdb RAY_gcs_storage_path=DIR`` in the head's
  environment, DIR = ``gcs`` beside the registry's SQLite (``default_store_path(gcs_address)``'s
  folder). Ray 2.60 calls this store alpha.
- redis: ``--redis-address HOST:PORT --redis-password-file FILE``: ``RAY_REDIS_ADDRESS`` in the
  environment; the password reaches ``ray start`` through ``fabric.cli.ray_start_env`` (a shim that
  takes it from the environment), never through an argv the fabric spawns or prints.

``--no-fault-tolerance`` keeps a head without a GCS store. Before ``ray start`` a stale
``<temp dir>/ray_current_cluster`` naming this address is removed when nothing answers there (Ray
refuses to start a head "already running" at an address a live worker raylet still names); after
it, a head whose store held an earlier cluster says how many of its worker nodes came back.

``join --head-outage-tolerance S`` sets ``RAY_gcs_rpc_server_reconnect_timeout_s`` for the node's
raylet: how long it waits for a head that went away before it exits (Ray's default: 60 s).
"""

from __future__ import annotations

import argparse
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from fabric.cli.ray_start_env import PASSWORD_ENV
from fabric.store.paths import default_store_path

DEFAULT_OUTAGE_TOLERANCE_S = 600
"""``join``'s default raylet wait for a head that went away: long enough for a head machine's reboot."""
RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
CURRENT_CLUSTER_FILE = "ray_current_cluster"
DEFAULT_TEMP_DIR = "/tmp/ray"
SESSION_FILE = "session_name"
"""What Ray's embedded GCS store keeps in its folder once a cluster ran on it."""
RECOVERY_WAIT_S = 30.0
MASK = "***"


@dataclass(frozen=True)
class FaultTolerance:
    """How the head's GCS keeps its state: ``mode`` is ``off``, ``embedded`` or ``redis``."""

    mode: str
    store_dir: Path | None = None
    redis_address: str | None = None
    password: str | None = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        """The head's extra environment (the password under ``PASSWORD_ENV``, for the shim)."""
        if self.mode == "embedded" and self.store_dir is not None:
            return {"RAY_gcs_storage": "rocksdb", "RAY_gcs_storage_path": str(self.store_dir)}
        if self.mode == "redis" and self.redis_address:
            return {"RAY_REDIS_ADDRESS": self.redis_address, **({PASSWORD_ENV: self.password} if self.password else {})}
        return {}

    def shown_env(self) -> dict[str, str]:
        """``env()`` as it may be printed: the password masked."""
        return {k: (MASK if k == PASSWORD_ENV else v) for k, v in self.env().items()}

    def wrap(self, argv: Sequence[str], python: str) -> list[str]:
        """The command to run for ``argv`` (``[ray, "start", ...]``): through the password shim when
        a Redis password is given, so no spawned argv holds it; else ``argv`` unchanged."""
        if self.mode == "redis" and self.password:
            return [python, "-m", "fabric.cli.ray_start_env", *argv[1:]]
        return list(argv)

    def describe(self, fresh: bool = True) -> str:
        """``GCS fault tolerance: ...`` for the operator."""
        if self.mode == "embedded":
            return f"GCS fault tolerance: embedded store {self.store_dir}" + (" (new)" if fresh else "")
        if self.mode == "redis":
            return f"GCS fault tolerance: redis {self.redis_address}"
        return "GCS fault tolerance: off"

    def where(self) -> str:
        """The store, as the recovery line names it."""
        return f"embedded store {self.store_dir}" if self.mode == "embedded" else f"redis {self.redis_address}"


def add_head_flags(p: argparse.ArgumentParser) -> None:
    """``start-head``'s fault-tolerance flags."""
    p.add_argument("--no-fault-tolerance", action="store_true",
                   help="start the head without a GCS store (a head restart then loses the cluster); default: GCS fault "
                        "tolerance on, with an embedded RocksDB store in the cluster's state folder (beside the registry)")
    p.add_argument("--redis-address", metavar="HOST:PORT",
                   help="keep the GCS state in this external Redis instead of the embedded store (make Redis itself "
                        "persistent: appendonly yes)")
    p.add_argument("--redis-password-file", metavar="FILE",
                   help="with --redis-address: a file whose first line is Redis's password; it reaches ray start through "
                        "the environment, never the fabric's command lines or output (the command lines of Ray's own "
                        "gcs_server and raylet do show it: outside the fabric's reach)")


def add_join_flags(p: argparse.ArgumentParser) -> None:
    """``join``'s head-outage flag."""
    p.add_argument("--head-outage-tolerance", type=int, default=DEFAULT_OUTAGE_TOLERANCE_S, metavar="SECONDS",
                   help="how long this node's raylet waits for a head that went away (crash, reboot) before it exits "
                        f"(RAY_gcs_rpc_server_reconnect_timeout_s; default {DEFAULT_OUTAGE_TOLERANCE_S}, Ray's own is 60)")


def join_env(args: argparse.Namespace) -> tuple[dict[str, str], str | None]:
    """``join``'s extra environment for the raylet's head-outage window, or why the flag is refused."""
    seconds = getattr(args, "head_outage_tolerance", DEFAULT_OUTAGE_TOLERANCE_S)
    if seconds is None:
        return {}, None
    if seconds < 1:
        return {}, f"--head-outage-tolerance: must be at least 1 second, not {seconds}"
    return {RECONNECT_ENV: str(seconds)}, None


def _host_port(text: str) -> tuple[str, int] | None:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def read_password(path: str) -> tuple[str | None, str | None]:
    """(the first line of ``path``, None) or (None, why not)."""
    try:
        text = Path(path).expanduser().read_text()
    except OSError as exc:
        return None, f"--redis-password-file: cannot read {path}: {exc.strerror or type(exc).__name__}"
    first = text.splitlines()[0].strip() if text.strip() else ""
    if not first:
        return None, f"--redis-password-file: {path} is empty (its first line is the password)"
    return first, None


def fault_tolerance(args: argparse.Namespace, gcs_address: str,
                    environ: Mapping[str, str] | None = None) -> tuple[FaultTolerance | None, str | None]:
    """The head's GCS store from its flags, or (None, a one-line refusal naming the flag)."""
    redis_address = getattr(args, "redis_address", None)
    password_file = getattr(args, "redis_password_file", None)
    if getattr(args, "no_fault_tolerance", False):
        given = "--redis-address" if redis_address else "--redis-password-file" if password_file else None
        if given:
            return None, f"{given}: cannot be combined with --no-fault-tolerance"
        return FaultTolerance("off"), None
    if redis_address is None:
        if password_file:
            return None, "--redis-password-file: needs --redis-address"
        return FaultTolerance("embedded", store_dir=default_store_path(gcs_address, environ).parent / "gcs"), None
    if _host_port(redis_address) is None:
        return None, f"--redis-address: {redis_address!r} is not HOST:PORT"
    password = None
    if password_file is not None:
        password, why = read_password(password_file)
        if why:
            return None, why
    return FaultTolerance("redis", redis_address=redis_address, password=password), None


def head_gcs_address(ip: str | None, port: int | None) -> str:
    """``ip:port`` the fabric's actors see: ``ip`` (the flag, the tailnet), else Ray's own pick."""
    if ip is None:
        from ray._private.services import get_node_ip_address

        ip = get_node_ip_address()
    return f"{ip}:{port or 6379}"


def temp_dir(extra: Sequence[str]) -> Path:
    """The head's Ray temp dir: ``--temp-dir`` among the extra ray start arguments, else Ray's default."""
    for i, arg in enumerate(extra):
        if arg.startswith("--temp-dir="):
            return Path(arg.split("=", 1)[1])
        if arg == "--temp-dir" and i + 1 < len(extra):
            return Path(extra[i + 1])
    return Path(DEFAULT_TEMP_DIR)


def answers(address: str, timeout_s: float = 1.0) -> bool:
    """True when something accepts TCP at ``address`` (``HOST:PORT``)."""
    hp = _host_port(address)
    if hp is None:
        return False
    try:
        with socket.create_connection(hp, timeout=timeout_s):
            return True
    except OSError:
        return False


def clear_stale_current_cluster(tmp: Path, gcs_address: str, alive: Callable[[str], bool] = answers) -> bool:
    """Remove ``<tmp>/ray_current_cluster`` when it names ``gcs_address`` and nothing answers there
    (a crashed head's leftover, which makes ``ray start --head`` refuse); never when a GCS answers.
    True when it was removed."""
    path = tmp / CURRENT_CLUSTER_FILE
    try:
        named = path.read_text().strip()
    except OSError:
        return False
    if named != gcs_address or alive(gcs_address):
        return False
    path.unlink(missing_ok=True)
    return True


def held_earlier_cluster(ft: FaultTolerance) -> bool:
    """Before ``ray start``: does the embedded store hold an earlier cluster? (Redis is asked after.)"""
    return ft.mode == "embedded" and ft.store_dir is not None and (ft.store_dir / SESSION_FILE).exists()


NodeRow = tuple[str, bool, bool]
"""(node id hex, alive, is head) from the GCS node table."""


def node_table(gcs: str, token: str | None, timeout_s: float = 3.0) -> list[NodeRow] | None:
    """The GCS's node table over gRPC (no Ray driver), or None when it does not answer."""
    import grpc
    from ray.core.generated import gcs_pb2, gcs_service_pb2, gcs_service_pb2_grpc

    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(gcs, options=[("grpc.enable_http_proxy", 0)]) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            reply = stub.GetAllNodeInfo(gcs_service_pb2.GetAllNodeInfoRequest(), metadata=metadata, timeout=timeout_s)
        except grpc.RpcError:
            return None
    return [(n.node_id.hex(), n.state == gcs_pb2.GcsNodeInfo.ALIVE, bool(n.is_head_node)) for n in reply.node_info_list]


Table = Callable[[], "list[NodeRow] | None"]


def earlier_workers(rows: list[NodeRow]) -> list[str]:
    """The worker nodes a restarted GCS reloaded: every node that is not a head (the dead old head
    and the new one both are)."""
    return [node for node, _, head in rows if not head]


def recovery_line(ft: FaultTolerance, table: Table, held: bool, wait_s: float = RECOVERY_WAIT_S,
                  poll_s: float = 0.5, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> str:
    """After ``ray start``: ``recovered the cluster (STORE): N of M worker nodes came back`` when
    the store held an earlier cluster (polling the node table up to ``wait_s`` for its workers to be
    ALIVE), else the fresh start's ``GCS fault tolerance: ...`` line."""
    if ft.mode == "off":
        return ft.describe()
    rows = table()
    earlier = earlier_workers(rows or [])
    if not held and not earlier:
        return ft.describe(fresh=True)
    deadline = clock() + wait_s
    alive: set[str] = set()
    while True:
        alive = {node for node, up, _ in rows or [] if up and node in earlier}
        if len(alive) == len(earlier) or clock() >= deadline:
            break
        sleep(poll_s)
        rows = table() or rows
    return f"recovered the cluster ({ft.where()}): {len(alive)} of {len(earlier)} worker nodes came back"


def report_after_start(ft: FaultTolerance, gcs: str, token: str | None, held: bool, table: Table | None = None,
                       sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> str:
    """``recovery_line`` against the live head at ``gcs`` (or ``table``, its node table)."""
    if ft.mode == "off":
        return ft.describe()
    try:
        return recovery_line(ft, table if table is not None else (lambda: node_table(gcs, token)), held,
                             sleep=sleep, clock=clock)
    except Exception as exc:  # noqa: BLE001 -- a report must never fail the start
        return f"{ft.describe()} (could not read the node table: {type(exc).__name__})"


def report_when_up(ft: FaultTolerance, gcs: str, token: str | None, held: bool, wait_s: float = 120.0,
                   table: Table | None = None, sleep: Callable[[float], None] = time.sleep,
                   clock: Callable[[], float] = time.monotonic) -> str | None:
    """``report_after_start`` for a head whose ``ray start`` stays in the foreground (``--block``):
    once its GCS answers (at most ``wait_s``), the recovery line when the store held a cluster (the
    embedded store says so before the start, ``held``; Redis's node table after), else None (a
    fresh start, said before ``ray start`` began)."""
    read = table if table is not None else (lambda: node_table(gcs, token))
    deadline = clock() + wait_s
    while read() is None:
        if clock() >= deadline:
            return f"{ft.describe()} (the head's GCS at {gcs} did not answer in {wait_s:.0f} s: no recovery report)"
        sleep(0.5)
    line = report_after_start(ft, gcs, token, held, table=read, sleep=sleep, clock=clock)
    return line if line.startswith(("recovered", ft.describe() + " (could not")) else None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fabric.cli.head_ft report GCS MODE STORE HELD``: ``start-head --block`` runs this
    beside its ``ray start`` (which it becomes) to print the recovery line of a restarted head
    (STORE: the embedded store's folder, or the Redis address; HELD: 1 when the embedded store held
    a cluster). Reading the node table needs no password: it goes through the GCS, with the token in
    this process's environment."""
    import os
    import sys

    from fabric.cli.join_checks import join_token

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 5 or args[0] != "report" or args[2] not in ("embedded", "redis") or args[4] not in ("0", "1"):
        print("usage: python -m fabric.cli.head_ft report GCS embedded|redis STORE 0|1", file=sys.stderr)
        return 2
    gcs, mode, where, held = args[1:]
    ft = FaultTolerance(mode, store_dir=Path(where)) if mode == "embedded" else FaultTolerance(mode, redis_address=where)
    line = report_when_up(ft, gcs, join_token(os.environ, Path.home(), None).token, held == "1")
    if line is not None:
        print(line, flush=True)
    return 0


def head_start_env(ft: FaultTolerance, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without a store another shell named, plus this head's store."""
    dropped = ("RAY_gcs_storage", "RAY_gcs_storage_path", "RAY_REDIS_ADDRESS", PASSWORD_ENV)
    return {**{k: v for k, v in base.items() if k not in dropped}, **ft.env()}


def scrub(text: str, ft: FaultTolerance | None) -> str:
    """``text`` with the Redis password masked (ray start's messages, before they are printed)."""
    return text.replace(ft.password, MASK) if ft is not None and ft.password else text


__all__ = ["DEFAULT_OUTAGE_TOLERANCE_S", "FaultTolerance", "RECONNECT_ENV", "add_head_flags", "add_join_flags", "answers",
           "clear_stale_current_cluster", "earlier_workers", "fault_tolerance", "head_gcs_address", "head_start_env",
           "held_earlier_cluster", "join_env", "node_table", "recovery_line", "report_after_start", "report_when_up", "scrub", "temp_dir"]



if __name__ == "__main__":
    raise SystemExit(main())

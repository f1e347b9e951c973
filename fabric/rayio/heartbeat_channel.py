"""Heartbeats as signed UDP datagrams: the registry's second way in, for fleets of thousands.

A heartbeat sent as a Ray actor call costs the registry what Ray costs per call (on the 2-core
development machine about 640 µs of the receiving actor's CPU, whatever the method does:
``scripts/bench_control_plane.py`` measures it as ``ray_floor``), so one registry actor takes at
most about 1,500 heartbeats a second on a whole core. A datagram costs it tens of microseconds.
With ``health.heartbeat_transport: udp`` the registry opens this channel and a probe, once
registered, sends most of its heartbeats here; every ``RAY_BEAT_EVERY``-th beat still goes as a Ray
call, which also tells a probe that the registry lost its node (it registers again) and refreshes
the channel.

A datagram is ``MAGIC`` + HMAC-SHA256 (32 bytes) + a JSON body ``{"n": node id, "t": the sender's
epoch seconds, "u": utilisation}``. The key is the node's own (``node_key``: derived from the
registry's secret and the node id), handed to the probe over a Ray call (which Ray authenticates),
so a node can sign only its own heartbeats. The receiver refuses (and counts, by reason) a datagram
that is too big, not ours, badly signed, malformed, from a time further than ``CLOCK_WINDOW_S``
from its own, or not newer than the last one it took from that node (a replay). The registry's
secret and port are kept in its store, so a restarted registry answers the same channel at once.
A lost datagram is a missed heartbeat, which the health rules already tolerate (offline after
several).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import math
import socket
from typing import Any, Callable

MAGIC = b"FHB1"
MAX_DATAGRAM = 2048
"""The biggest datagram taken (a heartbeat is about 150 bytes)."""
CLOCK_WINDOW_S = 120.0
"""A datagram's time may differ from the receiver's by this much (clock skew between hosts)."""
RAY_BEAT_EVERY = 10
"""A probe on the channel sends every this-many-th heartbeat as a Ray call (the others as datagrams)."""
BLOCKED_RETRY_S = 600.0
"""A probe whose datagrams were not taken beats over Ray calls this long before it tries the channel again."""
REFUSALS = ("too_big", "not_ours", "bad_signature", "malformed", "clock", "replayed", "refused")

__all__ = ["BLOCKED_RETRY_S", "CLOCK_WINDOW_S", "ChannelRefusal", "HeartbeatReceiver", "HeartbeatSender", "MAGIC", "RAY_BEAT_EVERY",
           "REFUSALS", "decode", "encode", "node_key"]


class ChannelRefusal(Exception):
    """Why a datagram was not taken (``reason`` is one of ``REFUSALS``)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def node_key(secret: bytes, node_id: str) -> bytes:
    """The key node ``node_id`` signs its heartbeats with."""
    return hmac.new(secret, node_id.encode(), hashlib.sha256).digest()


def encode(key: bytes, node_id: str, sent_at: float, utilization: dict[str, Any]) -> bytes:
    body = json.dumps({"n": node_id, "t": sent_at, "u": utilization}, separators=(",", ":")).encode()
    return MAGIC + hmac.new(key, body, hashlib.sha256).digest() + body


def decode(datagram: bytes, key_for: Callable[[str], bytes]) -> tuple[str, float, dict[str, Any]]:
    """(node id, sent at, utilisation) of a datagram signed with ``key_for(node id)``;
    ``ChannelRefusal`` otherwise."""
    if len(datagram) > MAX_DATAGRAM:
        raise ChannelRefusal("too_big", f"{len(datagram)} bytes")
    if not datagram.startswith(MAGIC) or len(datagram) < len(MAGIC) + 32 + 2:
        raise ChannelRefusal("not_ours")
    mac, body = datagram[len(MAGIC):len(MAGIC) + 32], datagram[len(MAGIC) + 32:]
    try:
        doc = json.loads(body)
        node_id, sent_at, util = doc["n"], doc["t"], doc["u"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ChannelRefusal("malformed", type(exc).__name__) from None
    if not isinstance(node_id, str) or not node_id or not isinstance(util, dict) \
            or isinstance(sent_at, bool) or not isinstance(sent_at, (int, float)) or not math.isfinite(sent_at):
        raise ChannelRefusal("malformed", "n, t or u of the wrong type")
    if not hmac.compare_digest(mac, hmac.new(key_for(node_id), body, hashlib.sha256).digest()):
        raise ChannelRefusal("bad_signature", node_id[:12])
    return node_id, float(sent_at), util


class HeartbeatReceiver(asyncio.DatagramProtocol):
    """The registry's end: each datagram decoded, checked and handed to ``take(node_id, utilization)``
    (the registry's ``heartbeat``: what raises there is counted as ``refused``). ``clock``: epoch
    seconds. ``counts``: datagrams received, taken, and refused by reason."""

    def __init__(self, secret: bytes, take: Callable[[str, dict[str, Any]], Any], clock: Callable[[], float]) -> None:
        self.secret, self.take, self.clock = secret, take, clock
        self.last: dict[str, float] = {}
        """Per node: the time of the last datagram taken (newer ones only are taken)."""
        self.taken_from: dict[str, int] = {}
        """Per node: datagrams taken (a probe compares it with what it sent: a blocked path shows)."""
        self.counts: dict[str, int] = {"received": 0, "taken": 0, **{r: 0 for r in REFUSALS}}
        self.last_refusal: str | None = None
        self._keys: dict[str, bytes] = {}

    def key(self, node_id: str) -> bytes:
        k = self._keys.get(node_id)
        if k is None:
            if len(self._keys) > 100_000:
                self._keys.clear()
            k = self._keys[node_id] = node_key(self.secret, node_id)
        return k

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.counts["received"] += 1
        try:
            self.receive(data)
            self.counts["taken"] += 1
        except ChannelRefusal as exc:
            self.counts[exc.reason] += 1
            self.last_refusal = str(exc)

    def receive(self, data: bytes) -> None:
        node_id, sent_at, util = decode(data, self.key)
        if abs(sent_at - self.clock()) > CLOCK_WINDOW_S:
            raise ChannelRefusal("clock", f"{node_id[:12]} sent at {sent_at:.0f}")
        if sent_at <= self.last.get(node_id, -math.inf):
            raise ChannelRefusal("replayed", node_id[:12])
        try:
            self.take(node_id, util)
        except Exception as exc:  # the registry refused it (unregistered, a bad load): counted, not raised
            raise ChannelRefusal("refused", f"{type(exc).__name__}: {exc}") from None
        self.last[node_id] = sent_at
        self.taken_from[node_id] = self.taken_from.get(node_id, 0) + 1


class HeartbeatSender:
    """A probe's end: one non-blocking UDP socket; ``send`` never waits and never raises for a lost
    datagram (a lost heartbeat is a missed one)."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self.sent = 0
        self.errors = 0

    def send(self, address: tuple[str, int], key: bytes, node_id: str, sent_at: float, utilization: dict[str, Any]) -> bool:
        try:
            if self._sock is None:
                family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
                self._sock = socket.socket(family, socket.SOCK_DGRAM)
                self._sock.setblocking(False)
            self._sock.sendto(encode(key, node_id, sent_at, utilization), address)
            self.sent += 1
            return True
        except OSError:
            self.errors += 1
            return False

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

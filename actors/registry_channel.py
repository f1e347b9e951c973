"""The registry actor's heartbeat channel (``fabric.rayio.heartbeat_channel``): opened on the first
probe that asks, when the settings in force say ``health.heartbeat_transport: udp``.

Its secret and port are kept in the registry's store (state key ``registry.heartbeat_channel``),
so a restarted registry listens where its probes already send, with the keys they already hold.
It binds the head node's address (the one Ray gave this node); the port is the kept one, else any
free one (then kept)."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

from fabric.core.errors import RegistrationError
from fabric.core.names import SETTINGS_KEY
from fabric.rayio.heartbeat_channel import HeartbeatReceiver, node_key

CHANNEL_KEY = "registry.heartbeat_channel"
"""The registry state key holding the channel's secret and port."""

RCVBUF_BYTES = 8 * 2**20
"""The receive buffer asked for (the kernel caps it at ``net.core.rmem_max`` unless the registry may
force it): a burst of heartbeats waits there instead of being shed while the registry is busy."""


class HeartbeatChannelHost:
    """Opens the channel once and answers each probe its address and its node's key."""

    def __init__(self, registry: Any, host: str | None = None) -> None:
        self.registry = registry
        self.host = host
        self.receiver: HeartbeatReceiver | None = None
        self.address: tuple[str, int] | None = None
        self._transport: Any = None
        self._wanted: bool | None = None
        self._opening: asyncio.Lock | None = None
        self._inode: int | None = None
        self._rcvbuf = 0

    def wanted(self) -> bool:
        """Whether the settings in force ask for the channel (read once they are there)."""
        if self._wanted is None:
            doc = self.registry.store.get_json(SETTINGS_KEY)
            if doc is None:
                return False  # not brought up yet: ask again next time
            self._wanted = (doc.get("health") or {}).get("heartbeat_transport") == "udp"
        return self._wanted

    async def offer(self, node_id: str) -> dict[str, Any] | None:
        """``{"address": [host, port], "key": hex, "taken": datagrams taken from it so far}`` for a
        registered node, None when the channel is
        not wanted; ``RegistrationError`` (field ``node_id``) for a node the registry does not hold."""
        if not isinstance(node_id, str) or self.registry.store.get(node_id) is None:
            raise RegistrationError(f"heartbeat channel asked by unregistered node {node_id}", node_id=str(node_id),
                                    field="node_id")
        if not self.wanted():
            return None
        await self._open()
        assert self.address is not None and self.receiver is not None
        return {"address": list(self.address), "key": node_key(self.receiver.secret, node_id).hex(),
                "taken": self.receiver.taken_from.get(node_id, 0)}

    async def _open(self) -> None:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._transport is not None:
                return
            kept = self.registry.store.get_json(CHANNEL_KEY) or {}
            secret = bytes.fromhex(kept["secret"]) if kept.get("secret") else secrets.token_bytes(32)
            host = self.host or _node_ip()
            receiver = HeartbeatReceiver(secret, self.registry.heartbeat, time.time)
            loop = asyncio.get_running_loop()
            transport = None
            for _ in range(20 if kept.get("port") else 0):  # the kept port (an old socket may linger a moment)
                try:
                    transport, _ = await loop.create_datagram_endpoint(lambda: receiver, local_addr=(host, int(kept["port"])))
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            if transport is None:  # none kept, or it stays taken: any free one
                transport, _ = await loop.create_datagram_endpoint(lambda: receiver, local_addr=(host, 0))
            self._inode, self._rcvbuf = _tune(transport.get_extra_info("socket"))
            port = transport.get_extra_info("sockname")[1]
            self.registry.store.put_json(CHANNEL_KEY, {"secret": secret.hex(), "port": port})
            self._transport, self.receiver, self.address = transport, receiver, (host, port)

    def stats(self) -> dict[str, Any] | None:
        """What the channel took and refused, and what the kernel shed (None: not open). ``shed``:
        datagrams dropped before the registry read them (its receive buffer was full: the registry
        is past its wall). A node's next beat carries its whole load again, so a shed beat delays
        that node's update by one interval and loses nothing else; its probe keeps the channel
        while any of its beats arrive."""
        if self.receiver is None:
            return None
        return {"address": list(self.address or ()), **self.receiver.counts, "last_refusal": self.receiver.last_refusal,
                "shed": kernel_drops(self._inode), "rcvbuf": self._rcvbuf}

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None


def _tune(sock: Any) -> tuple[int | None, int]:
    """Ask for ``RCVBUF_BYTES`` of receive buffer (forced when allowed); the socket's inode (to find
    its drop count) and the buffer the kernel gave."""
    import os
    import socket

    if sock is None:
        return None, 0
    for opt in (getattr(socket, "SO_RCVBUFFORCE", None), socket.SO_RCVBUF):
        if opt is None:
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, RCVBUF_BYTES)
            break
        except OSError:  # not allowed to force it: the capped one
            continue
    try:
        return os.fstat(sock.fileno()).st_ino, int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
    except OSError:
        return None, 0


def kernel_drops(inode: int | None, tables: tuple[str, ...] = ("/proc/net/udp", "/proc/net/udp6")) -> int | None:
    """Datagrams the kernel dropped for the socket with ``inode`` (the last column of Linux's UDP
    tables); None where that cannot be read (not Linux, or the socket is gone)."""
    if inode is None:
        return None
    for table in tables:
        try:
            with open(table) as f:
                next(f, None)  # the header
                for line in f:
                    cols = line.split()
                    if len(cols) >= 13 and cols[9] == str(inode):
                        return int(cols[-1])
        except OSError:
            continue
    return None


def _node_ip() -> str:
    import ray

    return str(ray.util.get_node_ip_address())


__all__ = ["CHANNEL_KEY", "HeartbeatChannelHost", "RCVBUF_BYTES", "kernel_drops"]

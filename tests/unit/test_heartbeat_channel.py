"""Heartbeats as signed datagrams (``fabric.rayio.heartbeat_channel``, ``actors.registry_channel``):
what a datagram is and what the receiver refuses, a real UDP round trip on loopback into a real
registry, the channel kept across a registry restart, and a probe that sends nine beats in ten as
datagrams once the registry offers the channel (and every beat as a Ray call when it does not)."""

from __future__ import annotations

import asyncio
import time

import pytest

from actors.probe import Probe
from actors.registry import Registry
from actors.registry_channel import CHANNEL_KEY, HeartbeatChannelHost
from fabric.core.errors import RegistrationError
from fabric.core.health import ManualClock
from fabric.core.names import LABEL_PREFIX, PROFILE_LABEL, REGISTRY, SETTINGS_KEY
from fabric.rayio.heartbeat_channel import (CLOCK_WINDOW_S, MAGIC, RAY_BEAT_EVERY, ChannelRefusal, HeartbeatReceiver,
                                            HeartbeatSender, decode, encode, node_key)
from fabric.store import FabricStore
from fabric.testing.fake_ray import FakeHandle, FakeRayAdapter
from probes import RecordedSources
from probes.profiles import profile_path

from test_registry import A, B, FakeRay, caps, view

SECRET = b"s" * 32
UTIL = {"cpu_percent": 42.0, "memory_percent": 40.0, "gpus": []}


def test_a_datagram_carries_its_node_time_and_load_signed_with_the_nodes_key():
    data = encode(node_key(SECRET, A), A, 1000.5, UTIL)
    assert data.startswith(MAGIC) and len(data) < 300
    assert decode(data, lambda n: node_key(SECRET, n)) == (A, 1000.5, UTIL)


@pytest.mark.parametrize("data,reason", [
    (encode(node_key(SECRET, B), A, 1.0, UTIL), "bad_signature"),  # B's key cannot sign for A
    (encode(node_key(b"x" * 32, A), A, 1.0, UTIL), "bad_signature"),  # another registry's secret
    (b"GET / HTTP/1.1\r\n\r\n" + b"x" * 40, "not_ours"),
    (MAGIC + b"\0" * 32 + b"{not json", "malformed"),
    (MAGIC + b"\0" * 32 + b'{"n": 5, "t": 1, "u": {}}', "malformed"),
    (MAGIC + b"\0" * 32 + b'{"n": "a", "t": NaN, "u": {}}', "malformed"),
    (MAGIC + b"\0" * 32 + b"x" * 3000, "too_big"),
])
def test_what_is_not_a_heartbeat_of_ours_is_refused_by_reason(data, reason):
    with pytest.raises(ChannelRefusal) as err:
        decode(data, lambda n: node_key(SECRET, n))
    assert err.value.reason == reason


def test_the_receiver_refuses_a_replay_a_time_off_its_clock_and_what_the_registry_refuses():
    took: list[tuple[str, dict]] = []
    now = [10_000.0]

    def take(node_id, util):
        if node_id == B:
            raise RegistrationError("heartbeat from unregistered node", node_id=B, field="node_id")
        took.append((node_id, util))

    r = HeartbeatReceiver(SECRET, take, lambda: now[0])
    key = node_key(SECRET, A)
    r.datagram_received(encode(key, A, 10_000.0, UTIL), None)
    r.datagram_received(encode(key, A, 10_000.0, UTIL), None)  # the same one again: a replay
    r.datagram_received(encode(key, A, 9_999.0, UTIL), None)  # older than the last one taken
    r.datagram_received(encode(key, A, 10_000.0 + CLOCK_WINDOW_S + 1, UTIL), None)  # from too far ahead
    r.datagram_received(encode(node_key(SECRET, B), B, 10_001.0, UTIL), None)  # signed, but the registry says no
    r.datagram_received(encode(key, A, 10_005.0, UTIL), None)
    assert took == [(A, UTIL), (A, UTIL)]
    assert {k: v for k, v in r.counts.items() if v} == {"received": 6, "taken": 2, "replayed": 2, "clock": 1, "refused": 1}
    assert "unregistered" in r.last_refusal


def _registry(tmp_path, transport="udp"):
    clock = ManualClock(1000.0)
    store = FabricStore(tmp_path / "fabric.db", heartbeat_flush_s=0.5)
    store.put_json(SETTINGS_KEY, {"health": {"heartbeat_transport": transport}})
    reg = Registry(store, FakeRay(view(A), view(B, name="other")), clock=clock)
    reg.register(A, caps(), utilization={"cpu_percent": 1})
    return reg, clock


def test_a_datagram_sent_on_loopback_reaches_the_registry_and_the_channel_outlives_a_restart(tmp_path):
    reg, clock = _registry(tmp_path)

    async def go():
        host = HeartbeatChannelHost(reg, host="127.0.0.1")
        with pytest.raises(RegistrationError):
            await host.offer(B)  # not registered: it registers first
        offer = await host.offer(A)
        address, key = tuple(offer["address"]), bytes.fromhex(offer["key"])
        assert address[0] == "127.0.0.1" and key == node_key(host.receiver.secret, A)
        sender = HeartbeatSender()
        clock.advance(5)
        assert sender.send(address, key, A, time.time(), {"cpu_percent": 77.0})
        for _ in range(200):
            if host.receiver.counts["taken"]:
                break
            await asyncio.sleep(0.01)
        assert host.stats()["taken"] == 1 and host.stats()["address"] == list(address)
        assert reg.store.get(A).utilization.cpu_percent == 77.0 and reg.store.get(A).last_seen == clock()
        kept = reg.store.get_json(CHANNEL_KEY)
        host.close()
        again = HeartbeatChannelHost(reg, host="127.0.0.1")  # a restarted registry: same secret, same port
        offer2 = await again.offer(A)
        assert tuple(offer2["address"]) == address and offer2["key"] == offer["key"] and reg.store.get_json(CHANNEL_KEY) == kept
        sender.send(address, key, A, time.time(), {"cpu_percent": 12.0})
        for _ in range(200):
            if again.receiver.counts["taken"]:
                break
            await asyncio.sleep(0.01)
        assert reg.store.get(A).utilization.cpu_percent == 12.0
        again.close()
        sender.close()

    asyncio.run(go())
    reg.store.close()


def test_with_ray_heartbeats_the_registry_offers_no_channel(tmp_path):
    reg, _ = _registry(tmp_path, transport="ray")
    assert asyncio.run(HeartbeatChannelHost(reg, host="127.0.0.1").offer(A)) is None
    reg.store.close()


class _Registry:
    """A registry for a probe: answers register and heartbeat, and offers ``channel`` with what
    ``taken()`` says was taken from the node."""

    def __init__(self, channel, taken=lambda: 0):
        self.channel, self.taken = channel, taken

    def register(self, *a):
        return None

    def heartbeat(self, *a):
        return 0.0

    def report_warmth(self, *a):
        return None

    def heartbeat_channel(self, node_id):
        return None if self.channel is None else {**self.channel, "taken": self.taken()}


def _probe(channel, taken=lambda: 0):
    adapter = FakeRayAdapter()
    registry = adapter.actors[REGISTRY] = FakeHandle(_Registry(channel, taken), name=REGISTRY)
    labels = {PROFILE_LABEL: "cpu-only-box", f"{LABEL_PREFIX}slots": "2"}
    probe = Probe(A, name="cpu-only-box", labels=labels, heartbeat_interval_s=1.0, reprobe_interval_s=1e9, adapter=adapter,
                  sources=RecordedSources(profile_path("cpu-only-box")), source="cpu-only-box", clock=ManualClock(0.0))
    return probe, registry


def test_a_probe_offered_the_channel_sends_nine_beats_in_ten_as_datagrams():
    got: list[tuple[str, dict]] = []

    async def go():
        receiver = HeartbeatReceiver(SECRET, lambda n, u: got.append((n, u)), time.time)
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(lambda: receiver, local_addr=("127.0.0.1", 0))
        port = transport.get_extra_info("sockname")[1]
        probe, registry = _probe({"address": ["127.0.0.1", port], "key": node_key(SECRET, A).hex()},
                                 taken=lambda: receiver.taken_from.get(A, 0))
        for _ in range(1 + 2 * RAY_BEAT_EVERY):  # the registration, then twenty beats
            await probe.beat()
            for _ in range(100):  # the datagram is on its way: let the receiver take it
                if receiver.counts["received"] >= probe.sender.sent:
                    break
                await asyncio.sleep(0.002)
        for _ in range(200):
            if len(got) >= 2 * RAY_BEAT_EVERY - 2:
                break
            await asyncio.sleep(0.01)
        transport.close()
        return probe, registry

    probe, registry = asyncio.run(go())
    assert len(registry.called("register")) == 1
    assert len(registry.called("heartbeat")) == 2  # beats 10 and 20: Ray calls, which refresh the channel
    assert len(registry.called("heartbeat_channel")) == 3
    assert len(got) == 2 * RAY_BEAT_EVERY - 2 and {n for n, _ in got} == {A}
    assert probe.info()["heartbeat_transport"] == "udp" and probe.info()["datagrams_sent"] == len(got)
    assert probe.last_error is None


def test_a_probe_whose_datagrams_are_not_taken_goes_back_to_ray_calls():
    probe, registry = _probe({"address": ["127.0.0.1", 9], "key": node_key(SECRET, A).hex()})  # nobody takes them

    async def go():
        for _ in range(1 + 2 * RAY_BEAT_EVERY):
            await probe.beat()

    asyncio.run(go())
    # nine datagrams, then the Ray beat hears that none arrived: every beat after it is a Ray call
    assert probe.sender.sent == RAY_BEAT_EVERY - 1 and len(registry.called("heartbeat")) == 1 + RAY_BEAT_EVERY
    assert probe.info()["heartbeat_transport"] == "ray" and "were not taken" in probe.info()["channel_note"]
    assert probe.last_error is None


def test_a_probe_not_offered_the_channel_beats_over_ray_every_time():
    probe, registry = _probe(None)

    async def go():
        for _ in range(1 + RAY_BEAT_EVERY):
            await probe.beat()

    asyncio.run(go())
    assert len(registry.called("heartbeat")) == RAY_BEAT_EVERY and len(registry.called("heartbeat_channel")) == 1
    assert probe.info()["heartbeat_transport"] == "ray" and probe.info()["datagrams_sent"] == 0


def test_past_its_wall_the_channel_sheds_in_the_kernel_and_says_how_many():
    """A registry too busy to read: datagrams beyond its receive buffer are dropped by the kernel,
    and ``kernel_drops`` (the channel's ``shed``) counts them; its buffer is the one asked for, or
    what the kernel allows."""
    import os
    import socket

    from actors.registry_channel import RCVBUF_BYTES, _tune, kernel_drops

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        inode, rcvbuf = _tune(rx)
        assert inode == os.fstat(rx.fileno()).st_ino and rcvbuf > 0
        assert kernel_drops(inode) == 0
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small buffer nobody reads
        for _ in range(2000):
            tx.sendto(b"x" * 150, rx.getsockname())
        assert kernel_drops(inode) > 0
        assert kernel_drops(None) is None and kernel_drops(inode, ("/nonexistent",)) is None
    finally:
        rx.close()
        tx.close()
    assert RCVBUF_BYTES >= 2**20


def test_the_channels_stats_say_what_was_shed(tmp_path):
    reg, _ = _registry(tmp_path)

    async def go():
        host = HeartbeatChannelHost(reg, host="127.0.0.1")
        await host.offer(A)
        st = host.stats()
        assert st["shed"] == 0 and st["rcvbuf"] > 0
        host.close()

    asyncio.run(go())
    reg.store.close()

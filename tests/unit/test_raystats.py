"""Reading a core worker's RPC counts from its event-stats log blocks (fabric.testing.raystats)."""

from __future__ import annotations

import datetime
from pathlib import Path

from fabric.testing.raystats import LEASE_REQUESTS, parse_event_stats

FIXTURE = Path(__file__).parent.parent / "fixtures" / "ray" / "core_worker_event_stats.log"


def test_the_newest_block_is_read():
    when, counts = parse_event_stats(FIXTURE.read_text())
    assert datetime.datetime.fromtimestamp(when) == datetime.datetime(2026, 11, 30, 13, 50, 37, 389000)
    assert counts[LEASE_REQUESTS] == 5399  # the first block said 3,446
    assert counts["CoreWorkerService.grpc_client.PushTask"] == 1067
    assert counts["NodeManagerService.grpc_client.RequestWorkerLease.OnReplyReceived"] > 0


def test_a_block_ends_at_its_separator():
    text = FIXTURE.read_text()
    first_block_only = text[: text.rindex("[2026-11-30 13:50:37")]
    _, counts = parse_event_stats(first_block_only)
    assert counts[LEASE_REQUESTS] == 3446
    assert not any(name.startswith("Task") for name in counts)  # the task sections below the separator


def test_no_block_is_none():
    assert parse_event_stats("") is None
    assert parse_event_stats("[2026-11-30 13:50:36,313 I 1 2] core_worker.cc:1: Constructing\n") is None

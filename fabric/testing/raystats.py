"""How many RPCs of each kind this process's Ray core worker has sent: read from the event stats
it writes to its own log (Ray prints them every ``event_stats_print_interval_ms``; a
``LocalFabric`` started with ``system_config={"event_stats_print_interval_ms": 500}`` prints
them twice a second). Ray offers no API for these counts; the log format is Ray 2.60's.

The count that matters for dispatch is ``RequestWorkerLease``: a caller asks a raylet for a
worker once per lease, and a lease runs many calls back to back, unless lease requests are
refused and sent again (see ``SchedulerCore.spill_target``)."""

from __future__ import annotations

import datetime
import glob
import os
import re
import time

LEASE_REQUESTS = "NodeManagerService.grpc_client.RequestWorkerLease"

_BLOCK = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) [A-Z] \d+ \d+\] core_worker\.cc:\d+: Event stats:$", re.M)
_LINE = re.compile(r"^\t(\S+) - (\d+) total", re.M)


def parse_event_stats(text: str) -> tuple[float, dict[str, int]] | None:
    """The newest event-stats block in a core worker's log text: (when it was written, as a Unix
    time in this machine's zone, and each event's total count). None when there is none."""
    heads = list(_BLOCK.finditer(text))
    if not heads:
        return None
    head = heads[-1]
    body = text[head.end():]
    end = body.find("\n-----")
    counts = {m.group(1): int(m.group(2)) for m in _LINE.finditer(body if end < 0 else body[:end])}
    when = datetime.datetime.strptime(head.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return when, counts


def driver_log() -> str | None:
    """This process's core worker log (a driver's), or None when it cannot be found."""
    import ray

    node = ray._private.worker._global_node
    if node is None:
        return None
    found = glob.glob(os.path.join(node.get_logs_dir_path(), f"python-core-*_{os.getpid()}.log"))
    return found[0] if found else None


def rpc_counts(timeout_s: float = 5.0) -> dict[str, int] | None:
    """This process's RPC counts from the first event-stats block written from now on, waiting
    for it up to ``timeout_s``. None when Ray does not write them (the print interval is off, or
    longer than the wait)."""
    path = driver_log()
    if path is None:
        return None
    after = time.time()
    deadline = time.monotonic() + timeout_s
    while True:
        with open(path, errors="replace") as f:
            f.seek(max(0, os.path.getsize(path) - 400_000))
            got = parse_event_stats(f.read())
        if got is not None and got[0] > after:
            return got[1]
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)

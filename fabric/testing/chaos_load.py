"""The load of a chaos scenario, on Ray: ``started`` (the call every scenario sends: it appends its
call id, its node and the time to a run log on a disk every host shares, then sleeps) and ``Load``
(``n`` calls spread over a duration from a thread, and what came of them). ``fabric.testing.chaos``
scores what they recorded. Used by ``scripts/chaos.py`` on a local fleet and by
``fabric.testing.chaos_driver`` on the network-namespace fleet.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import ray

__all__ = ["Load", "started"]


def started(call_id: str, log: str, seconds: float) -> str:
    with open(log, "a") as f:  # every host of the fleet sees this disk
        f.write(f"{call_id} {ray.get_runtime_context().get_node_id()} {time.time()}\n")
    time.sleep(seconds)
    return call_id


class Load:
    """``n`` calls spread over ``duration_s`` from a thread; which were accepted, which refused."""

    def __init__(self, fn, log: Path, n: int, duration_s: float, seconds: float = 0.05) -> None:
        self.fn, self.log, self.n, self.seconds = fn, str(log), n, seconds
        self.pace = duration_s / max(1, n)
        self.accepted: dict[str, object] = {}
        self.submitted: dict[str, float] = {}
        """Call id -> when it was handed to ``.remote()`` (epoch seconds, like the run log)."""
        self.refused = 0
        self.refusals: dict[str, int] = {}
        """The refused calls by the error's class name (typed at once: nothing was accepted)."""
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        for i in range(self.n):
            call_id = uuid.uuid4().hex[:16]
            try:
                at = time.time()
                self.accepted[call_id] = self.fn.remote(call_id, self.log, self.seconds)
                self.submitted[call_id] = at
            except Exception as exc:  # typed, at once: the caller knows; nothing was accepted
                self.refused += 1
                kind = type(exc).__name__
                self.refusals[kind] = self.refusals.get(kind, 0) + 1
            delay = t0 + (i + 1) * self.pace - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def start(self) -> "Load":
        self.thread.start()
        return self

    def collect(self, timeout_s: float) -> tuple[set[str], dict[str, str]]:
        self.thread.join()
        ids, refs = list(self.accepted), list(self.accepted.values())
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s, fetch_local=False) if refs else ([], [])
        ready_set = set(ready)
        done, failed = set(), {}
        for call_id, ref in zip(ids, refs):
            if ref not in ready_set:
                failed[call_id] = "not finished"
                continue
            try:
                ray.get(ref, timeout=30)
                done.add(call_id)
            except Exception as exc:
                failed[call_id] = type(getattr(exc, "cause", None) or exc).__name__
        return done, failed

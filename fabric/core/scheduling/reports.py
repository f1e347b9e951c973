"""When counted calls are reported to the scheduler: ``CallCounts`` (pure; the caller's clock)."""

from __future__ import annotations


class CallCounts:
    """Calls (and fallbacks among them) counted and not yet reported to the scheduler.

    A worker counts its spilled calls in one, a driver its calls on leased slots. Every report
    is an actor call, which costs this machine about a third of a tiny task's CPU, so counts are
    reported once the calls go quiet (none for ``QUIET_S``: the burst is over), and during a long
    burst every ``EVERY_S``. Under load a worker often waits 50 ms or
    more between two calls of one burst: with a 50 ms ``QUIET_S``, workers sent one report for
    every eleven calls."""

    QUIET_S = 0.5
    EVERY_S = 2.0
    POLL_S = 0.1

    def __init__(self) -> None:
        self.placed = self.fallbacks = 0
        self.first = self.last = 0.0

    def count(self, fallback: bool, now: float) -> None:
        if not self.placed:
            self.first = now
        self.placed += 1
        self.fallbacks += fallback
        self.last = now

    def take(self, now: float) -> tuple[int, int] | None:
        """What to report now, if anything (and forget it)."""
        if not self.placed or (now - self.last < self.QUIET_S and now - self.first < self.EVERY_S):
            return None
        out = (self.placed, self.fallbacks)
        self.placed = self.fallbacks = 0
        return out

    def take_all(self) -> tuple[int, int] | None:
        """Everything counted, quiet or not (and forget it): for a report that must go now."""
        if not self.placed:
            return None
        out = (self.placed, self.fallbacks)
        self.placed = self.fallbacks = 0
        return out

    def put_back(self, report: tuple[int, int]) -> None:
        """A report that could not be sent: counted again, for the next one."""
        self.placed += report[0]
        self.fallbacks += report[1]


class SpillTally:
    """Per Ray job, how many of its spilled calls its workers have reported (ran or refused), for
    the job's driver to wait on at exit: a driver's workers die with it, and a worker's last report
    is an actor call that a busy machine may take seconds to send. Keeps the ``MAX_JOBS`` jobs
    reported most recently (a scheduler lives through many jobs)."""

    MAX_JOBS = 1024

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def add(self, job_id: str, calls: int) -> None:
        seen = self.seen.pop(job_id, 0) + calls  # re-inserted: the newest report last
        self.seen[job_id] = seen
        while len(self.seen) > self.MAX_JOBS:
            del self.seen[next(iter(self.seen))]

    def of(self, job_id: str) -> int:
        return self.seen.get(job_id, 0)

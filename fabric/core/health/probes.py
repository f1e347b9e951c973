"""When to start a node's probe actor again: backoff, reset once stable (pure, clock injected)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from fabric.core.clock import Clock


@dataclass
class ProbeWatch:
    """What the monitor knows about one node's probe actor."""

    restarts: int = 0
    """Times the probe was started again because it was missing (however many times it died)."""
    attempts: int = 0
    """Restarts since the probe was last up for ``stable_after_s``: they set the backoff."""
    next_restart_at: float = 0.0
    """The earliest time of the next restart."""
    up_since: float | None = None
    """Since when the probe has been seen present, without a gap."""
    last_restart_at: float | None = None


class ProbeRestarts:
    """When to start a node's probe actor again (pure, clock injected; the monitor acts on it).

    A probe that dies past its Ray restart budget stays dead and nothing else restarts it; its node
    then stops heartbeating and leaves placement for good (issue 12). So the monitor looks for the
    probe of every live node that has gone quiet, and when it is missing starts it again: at once
    the first time, then no sooner than ``initial_backoff_s`` after the last restart, doubling up to
    ``max_backoff_s``, however many times it died. A probe up for ``stable_after_s`` resets the
    backoff. Only quiet nodes are looked up: a beating node's probe is alive by definition, so a
    healthy fleet costs no Ray calls."""

    def __init__(self, *, clock: Clock, initial_backoff_s: float = 1.0, max_backoff_s: float = 60.0,
                 stable_after_s: float = 60.0) -> None:
        if not 0 < initial_backoff_s <= max_backoff_s:
            raise ValueError(f"backoff must satisfy 0 < initial ({initial_backoff_s}) <= max ({max_backoff_s})")
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self.stable_after_s = stable_after_s
        self.clock = clock
        self.watches: dict[str, ProbeWatch] = {}

    def quiet(self, last_beats: Mapping[str, float], quiet_after_s: float) -> list[str]:
        """The node ids (of ``last_beats``: node id -> latest beat) silent for over ``quiet_after_s``:
        the ones whose probe is worth looking up."""
        now = self.clock()
        return sorted(n for n, at in last_beats.items() if now - at > quiet_after_s)

    def observe(self, node_id: str, present: bool) -> bool:
        """The probe of ``node_id`` is (or is not) there now; True when the caller should start it
        again now (the restart is counted, and the next one backed off)."""
        now = self.clock()
        watch = self.watches.setdefault(node_id, ProbeWatch())
        if present:
            if watch.up_since is None:
                watch.up_since = now
            elif watch.attempts and now - watch.up_since >= self.stable_after_s:
                watch.attempts = 0
                watch.next_restart_at = 0.0
            return False
        watch.up_since = None
        if now < watch.next_restart_at:
            return False
        watch.next_restart_at = now + self.backoff_s(watch.attempts)
        watch.attempts += 1
        watch.restarts += 1
        watch.last_restart_at = now
        return True

    def backoff_s(self, attempts: int) -> float:
        """The wait after the restart number ``attempts + 1`` since the probe was last stable."""
        return min(self.max_backoff_s, self.initial_backoff_s * 2.0 ** min(attempts, 64))

    def keep_only(self, node_ids: Iterable[str]) -> None:
        """Forget the nodes not in ``node_ids`` (dead, collected): their probes are not coming back."""
        keep = set(node_ids)
        for node_id in [n for n in self.watches if n not in keep]:
            del self.watches[node_id]

    @property
    def total_restarts(self) -> int:
        return sum(w.restarts for w in self.watches.values())

    def status(self) -> dict[str, dict[str, Any]]:
        """Per node id: restarts, current backoff attempts, next allowed restart, last restart."""
        return {n: {"restarts": w.restarts, "attempts": w.attempts, "next_restart_at": w.next_restart_at,
                    "last_restart_at": w.last_restart_at} for n, w in self.watches.items()}

"""Marking nodes unhealthy after repeated failed starts, on the scheduler's side.

``NodeStrikes`` is one object of ``actors.scheduler.Scheduler``. The job runner tells it of each
rejection (a job instance that ended on its node before it ran) and of each job that reached
running; the scheduler's loop asks it every tick for cooldowns that ran out. The counting is pure
(``fabric.core.scheduling.rejections.Strikes``, sized by the ``rejections:`` settings); this writes
the verdict into the scheduler's fleet (``NodeChanged(unhealthy=...)``: placement, the spill
targets and scaling leave an unhealthy node out) and into the event log (``node_unhealthy``
with the reason ``rejections``, then ``node_healthy`` with ``job_ran`` or ``cooldown``)."""

from __future__ import annotations

from typing import Any

from fabric.core.scheduling import NodeChanged
from fabric.core.scheduling.rejections import Strikes


class NodeStrikes:
    """``host``: the scheduler (its ``core`` for the clock and the fleet, ``settings``,
    ``handle_stimulus`` and ``record_event``)."""

    def __init__(self, host: Any) -> None:
        self.host = host
        self.strikes = Strikes(host.settings.rejections)

    def _now(self) -> float:
        self.strikes.settings = self.host.settings.rejections  # a live settings update applies at once
        return float(self.host.core.clock())

    def _set(self, node_id: str, unhealthy: bool, cause: str) -> dict[str, Any] | None:
        counters = self.host.core.counters
        counters["nodes_unhealthy"] = len(self.strikes.unhealthy)  # a gauge beside the core's counters
        rec = self.host.core.fleet.get(node_id)
        if rec is None:
            return None
        counters["nodes_marked_unhealthy"] += 1 if unhealthy else 0
        self.host.handle_stimulus(NodeChanged(node_id, {"unhealthy": unhealthy}, cause))
        return {"node_id": node_id, "name": rec.name}

    def rejected(self, node_id: str, job_id: str, reason: str) -> bool:
        """A job instance ended on ``node_id`` before it ran; whether that made the node unhealthy."""
        marked = self.strikes.rejected(node_id, self._now())
        if marked is None:
            return False
        base = self._set(node_id, True, f"{marked.rejections} failed starts in {marked.window_s:g} s")
        if base is None:  # the node left meanwhile
            self.strikes.forget(node_id)
            return False
        self.host.record_event("node_unhealthy", {
            **base, "reason": "rejections", "rejections": marked.rejections, "window_s": marked.window_s,
            "cooldown_s": round(marked.until - self._now(), 3), "last_job_id": job_id, "last_reason": reason})
        return True

    def ran(self, node_id: str) -> None:
        """A job reached running on ``node_id``: its rejections are forgotten, and it is healthy."""
        if self.strikes.ran(node_id):
            base = self._set(node_id, False, "a job ran on it")
            if base is not None:
                self.host.record_event("node_healthy", {**base, "reason": "job_ran"})

    def tick(self) -> None:
        """Every scheduler tick: the nodes whose cooldown ran out are healthy again."""
        if not self.strikes.unhealthy:
            return
        for node_id in self.strikes.expired(self._now()):
            base = self._set(node_id, False, "unhealthy cooldown ended")
            if base is not None:
                self.host.record_event("node_healthy", {**base, "reason": "cooldown"})

    def tags(self, node_id: str) -> dict[str, Any]:
        """What a node that comes back into the fleet keeps: ``unhealthy`` while it is marked."""
        return {"unhealthy": True} if self.strikes.is_unhealthy(node_id) else {}

    def forget(self, node_id: str) -> None:
        self.strikes.forget(node_id)
        self.host.core.counters["nodes_unhealthy"] = len(self.strikes.unhealthy)


__all__ = ["NodeStrikes"]

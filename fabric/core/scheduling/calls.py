"""The scheduler core's call-style entry points, each a thin wrapper over ``handle``.

``SchedulerCore.handle(stimulus)`` is the way in; these build the stimulus, call it, and give back
what the entry point always gave: the reply (or raise the error of a ``Refused``) and the
instructions for other callers (queued calls placed or expired, drains handed off). The registry
writes a cordon asks for (``SetCordoned``) are left out here: the actor, which carries them out,
calls ``handle`` itself. Tests and the fuzz surfaces use these for brevity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping

from fabric.core.placement import PlacementContext, Requirement
from fabric.core.tiers import ComputeTier

from fabric.core.scheduling import stimuli as st
from fabric.core.scheduling.instructions import Answer, Instruction, Refused, SetCordoned, reply
from fabric.core.scheduling.replies import LeaseGrant, NodeAssignment

if TYPE_CHECKING:
    from fabric.core.scheduling.queue import DeferredQueue


def _others(out: list[Instruction], sid: str) -> list[Instruction]:
    """``out`` without the stimulus's own reply and the cordon writes; a ``Refused`` is raised."""
    reply(out, sid)
    return [i for i in out if not isinstance(i, (Answer, Refused, SetCordoned))]


class LegacyCalls:
    """Mixed into ``SchedulerCore``."""

    queue: "DeferredQueue"

    def handle(self, stimulus: st.Stimulus) -> list[Instruction]:  # pragma: no cover - SchedulerCore's
        raise NotImplementedError

    def _ask(self, stimulus: st.Stimulus) -> Any:
        return reply(self.handle(stimulus), stimulus.stimulus_id)

    def place(self, req: Requirement, ctx: PlacementContext | None = None, *, request_id: str | None = None,
              queue: bool = False, priority: int = 0, timeout_s: float | None = None) -> NodeAssignment:
        """Place ``req`` now and reserve the node; deferred work with ``queue`` waits under
        ``request_id``. ``CapacityError`` for a hard requirement no node serves (``PlaceRequested``)."""
        return self._ask(st.PlaceRequested(req, ctx, request_id, queue, priority, timeout_s))

    def select_worker(self, req: Requirement) -> NodeAssignment:
        return self._ask(st.SelectRequested(req))

    def grant_lease(self, lease_id: str, req: Requirement, holding: Mapping[str, int] | None = None, want: int = 64,
                    release: Iterable[str] = ()) -> tuple[LeaseGrant, list[Instruction]]:
        """The grant and what the releases let run (``LeaseRequested``); ``CapacityError`` for a
        hard requirement no node of its pool serves."""
        s = st.LeaseRequested(lease_id, req, dict(holding or {}), want, tuple(release))
        out = self.handle(s)
        grant = reply(out, s.stimulus_id)
        return grant, _others(out, s.stimulus_id)

    def lease(self, lease_id: str, req: Requirement, holding: Mapping[str, int] | None = None, want: int = 64) -> LeaseGrant:
        """``grant_lease`` with nothing given back first: the grant alone."""
        return self.grant_lease(lease_id, req, holding, want)[0]

    def end_lease(self, lease_id: str) -> list[Instruction]:
        return self.handle(st.LeaseEnded(lease_id))

    def report_calls(self, placed: int = 0, fallbacks: int = 0) -> None:
        self.handle(st.CallsReported(placed, fallbacks))

    def release(self, allocation_ids: Iterable[int]) -> list[Instruction]:
        return self.handle(st.SlotsReleased(tuple(allocation_ids)))

    def cancel(self, request_id: str) -> bool:
        """Forget a queued request; False when it was not queued."""
        queued = request_id in self.queue
        self.handle(st.Cancelled(request_id))
        return queued

    def node_joined(self, rec: Any) -> list[Instruction]:
        return self.handle(st.NodeJoined(rec))

    def node_changed(self, node_id: str, **changes: Any) -> list[Instruction]:
        return self.handle(st.NodeChanged(node_id, changes))

    def node_lost(self, node_id: str) -> list[Instruction]:
        return self.handle(st.NodeLost(node_id))

    def ray_outsiders(self, nodes: Mapping[str, ComputeTier]) -> None:
        self.handle(st.OutsidersSeen(dict(nodes)))

    def cordon(self, node_id: str) -> None:
        s = st.Cordoned(node_id)
        _others(self.handle(s), s.stimulus_id)

    def uncordon(self, node_id: str) -> list[Instruction]:
        s = st.Uncordoned(node_id)
        return _others(self.handle(s), s.stimulus_id)

    def drain(self, node_id: str, grace_s: float | None = None) -> list[Instruction]:
        s = st.DrainRequested(node_id, grace_s)
        return _others(self.handle(s), s.stimulus_id)

    def tick(self) -> list[Instruction]:
        return self.handle(st.Tick())

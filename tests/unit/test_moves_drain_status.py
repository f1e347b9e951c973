"""``SchedulerMoves.drain_status`` (the scheduler's side) over a real core and drains book, no Ray:
a node Ray drained leaves the fleet as its drain ends, and reading the drain back by id must still
answer (the clean-clone CI run's ``test_drain_live`` read it just after the node left and got
``NodeNotFoundError``, failing that test and, with its node never replaced, the three after it)."""

from __future__ import annotations

import types

import pytest

from actors.moves import MoveRequests
from fabric.core.errors import NodeNotFoundError
from fabric.core.jobs.drains import NodeDrainPhase, NodeDrains
from fabric.core.scheduling import NodeJoined, NodeLost, SchedulerCore
from test_scheduling import Clock, rec


class Moves(MoveRequests):
    def __init__(self) -> None:
        super().__init__(SchedulerCore(clock=Clock()), lambda: self.runner)
        self.core.handle(NodeJoined(rec("node-a", "cpu_ffmpeg", slots=2)))
        self.runner = types.SimpleNamespace(drains=types.SimpleNamespace(drains=NodeDrains()))
        self.runner.drains.status = self.runner.drains.drains.status


def test_a_drain_reads_back_by_id_after_ray_took_its_node_away():
    m = Moves()
    book = m.runner.drains.drains
    book.start("node-a", (), 10.0, timeout_s=60.0, force=False, strategy=None)
    book.step(10.0)  # no jobs: Ray is asked at once
    book.ray_answered("node-a", True, "", 11.0)
    assert m.drain_status("node-a").phase is NodeDrainPhase.DONE
    m.core.handle(NodeLost("node-a", cause="ray: node dead"))  # the drained raylet exits
    assert m.drain_status("node-a").phase is NodeDrainPhase.DONE and m.drain_status("node-a").ray_drain == "accepted"


def test_a_node_neither_in_the_fleet_nor_ever_drained_is_not_found():
    m = Moves()
    with pytest.raises(NodeNotFoundError):
        m.drain_status("node-b")
    assert m.drain_status("node-a") is None  # known, never drained: no drain

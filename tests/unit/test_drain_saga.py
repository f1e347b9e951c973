"""The drain saga: DrainPhase's table, the book's moves (cordoned, waiting, handed off; cancelled
by an uncordon; abandoned when the node leaves), and the core keeping a draining node cordoned
against a stale feed read."""

import pytest

from fabric.core.errors import TransitionError
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import Requirement
from fabric.core.scheduling import DRAIN_LIFECYCLE, DrainPhase, DrainRequested, MarkDraining, SchedulerCore, SetCordoned
from fabric.core.scheduling.drain import DrainBook

from test_scheduling import Clock, rec

P = DrainPhase
CUDA_ONLY = Requirement(min_tier="gpu_cuda", fallback=False)


def phases(d):
    return [p.value for p, _ in d.history]


def test_the_table_goes_forward_only_and_ends_in_three_terminals():
    assert DRAIN_LIFECYCLE.terminal == {P.HANDED_OFF, P.CANCELLED, P.ABANDONED}
    assert DRAIN_LIFECYCLE.allows(P.CORDONED, P.HANDED_OFF) and DRAIN_LIFECYCLE.allows(P.WAITING, P.CANCELLED)
    for frm, to in ((P.WAITING, P.CORDONED), (P.HANDED_OFF, P.CANCELLED), (P.REQUESTED, P.HANDED_OFF)):
        with pytest.raises(TransitionError):
            DRAIN_LIFECYCLE.check("drain", frm, to)


def test_the_book_hands_off_once_the_work_ends_or_the_grace_runs_out():
    book = DrainBook()
    running = {"a": 1, "b": 1}
    book.start("a", deadline=100, now=0, stimulus_id="s1")
    book.start("b", deadline=10, now=0, stimulus_id="s2")
    assert book.advance(5, running.get, lambda n: True) == [] and book.get("a").phase is P.WAITING
    (b,) = book.advance(10, running.get, lambda n: True)  # b's grace ran out
    running["a"] = 0
    (a,) = book.advance(11, running.get, lambda n: True)
    assert (a.node_id, b.node_id) == ("a", "b") and len(book) == 0
    assert phases(a) == ["requested", "cordoned", "waiting", "handed_off"]
    assert [d.node_id for d in book.recent()] == ["b", "a"]


def test_a_drain_is_cancelled_by_an_uncordon_abandoned_with_its_node_and_restarted_by_another_drain():
    book = DrainBook()
    book.start("a", 100, 0, "s1")
    assert phases(book.withdraw("a", 1)) == ["requested", "cordoned", "cancelled"]
    assert book.withdraw("a", 2) is None
    book.start("b", 100, 0, "s2")
    book.advance(1, lambda n: 1, lambda n: False)  # its node left the fleet
    assert book.recent()[-1].phase is P.ABANDONED and "b" not in book
    book.start("c", 100, 0, "s3")
    book.start("c", 200, 5, "s4")
    assert book.recent()[-1].phase is P.CANCELLED and book.get("c").stimulus_id == "s4"
    assert book.problems(lambda n: True, lambda n: True) == []
    assert any("not cordoned" in p for p in book.problems(lambda n: True, lambda n: False))


@pytest.fixture
def core():
    c = SchedulerCore(clock=Clock())
    c.node_joined(rec("cuda", "gpu_cuda"))
    return c


def test_handle_writes_the_cordon_then_marks_draining_with_its_causes(core):
    a = core.place(CUDA_ONLY)
    s = DrainRequested("cuda", 300)
    out = core.handle(s)
    assert out == [SetCordoned("cuda", True)] and out[0].stimulus_id == s.stimulus_id
    assert out[0].reason == "operator drain"
    assert core.drains.get("cuda").phase is P.WAITING
    (mark,) = core.release([a.allocation_id])
    assert mark == MarkDraining("cuda") and mark.reason == "drained: no fabric work left"
    assert core.node("cuda").status is NodeStatus.DRAINING and "cuda" not in core.drains


def test_a_grace_that_runs_out_says_so(core):
    core.place(CUDA_ONLY)
    core.drain("cuda", grace_s=1)
    core.clock.t += 2
    (mark,) = core.tick()
    assert mark.reason == "drain grace ran out with 1 call(s) running"


def test_a_stale_feed_read_does_not_uncordon_a_draining_node(core):
    core.place(CUDA_ONLY)
    core.drain("cuda", grace_s=300)
    core.node_changed("cuda", cordoned=False, utilization=0.5)  # read before the drain's cordon landed
    assert core.node("cuda").cordoned and core.node("cuda").utilization == 0.5
    core.node_joined(rec("cuda", "gpu_cuda"))  # a full record without the cordon: still cordoned
    assert core.node("cuda").cordoned
    core.uncordon("cuda")  # only an uncordon withdraws the drain
    assert not core.node("cuda").cordoned and core.drains.recent()[-1].phase is P.CANCELLED


def test_a_drain_of_a_node_the_core_does_not_hold_is_refused(core):
    from fabric.core.errors import NodeNotFoundError

    with pytest.raises(NodeNotFoundError):
        core.drain("nope")
    assert len(core.drains) == 0

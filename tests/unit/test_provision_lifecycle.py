"""Every provision goes through one transition table (issue 21), without Ray.

- The table: ``PROVISION_LIFECYCLE`` allows exactly asked -> started -> registered | failed |
  abandoned (and asked -> an end); each allowed move is made through ``PendingProvision.move``,
  and a forbidden one raises ``TransitionError`` naming the provision.
- The task core's book moves each provision through it (open asked, started, closed in an end
  phase), leaves itself unchanged when a move is refused, and says in ``problems`` when a phase
  does not fit; the core's view shows the phase.
- A spare's kept provision and the reconciler's ``SpareState`` use the same table.
- Rows keep the phase; a row written before it was kept reads back as its instance id says; a
  phase that is unknown, ended or contradicted by the instance id is refused.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fabric.core.errors import TransitionError
from fabric.core.provision_phase import IN_FLIGHT, PROVISION_LIFECYCLE, ProvisionPhase, phase_for
from fabric.core.scheduling import NodeJoined, ProvisionFailed, ProvisionNode, ProvisionStarted, SchedulerCore
from fabric.core.scheduling.provision_rows import (
    PROVISION_KIND, ProvisionRowError, provision_from_row, provision_row,
)
from fabric.core.scheduling.provisions import PendingProvision, ProvisionBook
from fabric.core.settings import NodeShape
from fabric.core.spares import SpareState, validate_state
from fabric.core.spares.rows import (
    SPARE_PROVISION_KIND, KeptSpareProvision, in_flight_of, spare_provision_from_row, spare_provision_row,
)

from test_cascade import burst, cascade_settings
from test_scheduling import Clock, rec

P = ProvisionPhase
SHAPE = NodeShape(name="cpu-box", tier="cpu_ffmpeg", num_cpus=2, memory_mib=2048, profile="cpu-only-box")
WALL = 1_700_000_000.0
ALLOWED = {
    (P.ASKED, P.STARTED), (P.ASKED, P.REGISTERED), (P.ASKED, P.FAILED), (P.ASKED, P.ABANDONED),
    (P.STARTED, P.REGISTERED), (P.STARTED, P.FAILED), (P.STARTED, P.ABANDONED),
}


def pending(phase: ProvisionPhase = P.ASKED, instance_id: str | None = None) -> PendingProvision:
    return PendingProvision("p7", "default", "burst", "local", SHAPE, 1000.0, 1030.0, instance_id=instance_id,
                            phase=phase)


def json_round(row: dict) -> dict:
    return json.loads(json.dumps(row))


# -- the table -------------------------------------------------------------------------------------
def test_the_table_is_asked_then_started_then_one_end_and_the_ends_are_terminal():
    assert PROVISION_LIFECYCLE.allowed == ALLOWED
    assert PROVISION_LIFECYCLE.terminal == {P.REGISTERED, P.FAILED, P.ABANDONED}
    assert IN_FLIGHT == {P.ASKED, P.STARTED}
    assert (phase_for(None), phase_for("local-1")) == (P.ASKED, P.STARTED)


@pytest.mark.parametrize("frm, to", sorted(ALLOWED))
def test_every_allowed_move_is_made(frm, to):
    p = pending(frm)
    p.move(to)
    assert p.phase is to


@pytest.mark.parametrize("frm, to", sorted((a, b) for a in P for b in P if a != b and (a, b) not in ALLOWED))
def test_every_forbidden_move_raises_naming_the_provision(frm, to):
    p = pending(frm)
    with pytest.raises(TransitionError, match=f"provision p7: cannot go from {frm.value} to {to.value}") as err:
        p.move(to)
    assert (err.value.what, err.value.from_state, err.value.to_state) == ("provision p7", frm.value, to.value)
    assert p.phase is frm  # unchanged


def test_a_provision_built_with_an_instance_id_is_started():
    assert pending(instance_id="local-1").phase is P.STARTED
    assert pending().phase is P.ASKED


# -- the task core's book --------------------------------------------------------------------------
def test_the_book_moves_each_provision_through_the_table():
    book = ProvisionBook()
    a = book.open("default", "burst", "local", SHAPE, 10.0, 30.0)
    b = book.open("default", "burst", "local", SHAPE, 10.0, 30.0)
    c = book.open("default", "burst", "local", SHAPE, 10.0, 30.0)
    assert {p.phase for p in book} == {P.ASKED}
    got, registered = book.started(a.provision_id, "local-1")
    assert got is a and not registered and (a.phase, a.instance_id) == (P.STARTED, "local-1")
    assert book.close(a.provision_id, P.REGISTERED) is a and a.phase is P.REGISTERED
    assert book.close(b.provision_id, P.FAILED) is b and b.phase is P.FAILED
    assert book.abandon(c.provision_id) is c and c.phase is P.ABANDONED and book.take_abandoned(c.provision_id)
    assert len(book) == 0 and book.problems([]) == []
    with pytest.raises(ValueError, match="end phase"):
        book.close("p0", P.STARTED)


def test_a_move_the_table_refuses_leaves_the_book_as_it_was_and_problems_say_so():
    book = ProvisionBook()
    p = book.open("default", "burst", "local", SHAPE, 10.0, 30.0)
    book.take_changes()
    p.phase = P.REGISTERED  # a bug elsewhere
    with pytest.raises(TransitionError, match=f"provision {p.provision_id}: cannot go from registered to started"):
        book.started(p.provision_id, "local-1")
    with pytest.raises(TransitionError, match=f"provision {p.provision_id}: cannot go from registered to failed"):
        book.close(p.provision_id, P.FAILED)
    assert book.get(p.provision_id) is p and p.instance_id is None and not book.changed
    assert book.problems([p.node_id]) == [f"provisions: {p.provision_id} is open but registered"]
    p.phase = P.STARTED
    assert book.problems([p.node_id]) == [f"provisions: {p.provision_id} is started with instance id None"]


def test_an_ended_provision_is_not_adopted():
    book = ProvisionBook()
    assert not book.adopt(pending(P.ABANDONED))
    assert book.adopt(pending(instance_id="local-1")) and next(iter(book)).phase is P.STARTED


def test_the_core_moves_its_provisions_and_its_view_shows_the_phase():
    core = SchedulerCore(cascade_settings(), clock=Clock())
    core.handle(NodeJoined(rec("fixed-1", "cpu_ffmpeg", slots=2)))
    asks = [i for i in burst(core, 8) if isinstance(i, ProvisionNode)]
    assert len(asks) >= 2
    assert {p["phase"] for p in core.provisions_view()["pending"]} == {"asked"}
    core.handle(ProvisionStarted(asks[0].provision_id, "local-abc", "local"))
    core.handle(ProvisionFailed(asks[1].provision_id, "no capacity"))
    core.validate_state()
    phases = {p["provision_id"]: p["phase"] for p in core.provisions_view()["pending"]}
    assert phases[asks[0].provision_id] == "started" and asks[1].provision_id not in phases


# -- spare provisions ------------------------------------------------------------------------------
def test_a_kept_spare_provision_moves_through_the_same_table():
    asked = KeptSpareProvision("default", "spare-default-9-1", "local", "burst", SHAPE, WALL)
    assert asked.phase is P.ASKED and asked.answered("local-7", WALL + 1).phase is P.STARTED
    assert KeptSpareProvision("default", "s", "local", "burst", SHAPE, WALL, "local-7", WALL).phase is P.STARTED
    ended = asked.moved(P.FAILED)
    with pytest.raises(TransitionError, match="spare provision spare-default-9-1: cannot go from failed to started"):
        ended.answered("local-7", WALL + 1)


def test_the_spare_state_refuses_a_forbidden_move_naming_the_spare_provision():
    state = SpareState("default", id_prefix="spare-default-1")
    entry = state.ask("burst", SHAPE, 0.0)
    state.in_flight[entry.provision_id] = replace(entry, phase=P.REGISTERED)  # a bug elsewhere
    with pytest.raises(TransitionError, match=f"spare provision {entry.provision_id}: cannot go from registered"):
        state.provision_failed(entry.provision_id, 1.0)
    assert validate_state(state)  # and the state's check sees it


# -- rows ------------------------------------------------------------------------------------------
def test_a_provision_row_keeps_the_phase():
    for p in (pending(), pending(instance_id="local-abc")):
        row = json_round(provision_row(p, WALL - 1000.0))
        assert row["schema"] == 1 and row["phase"] == p.phase.value
        assert provision_from_row(row, WALL - 1000.0) == p


def test_a_provision_row_written_before_phases_reads_back_as_its_instance_id_says():
    for iid, phase in ((None, P.ASKED), ("local-abc", P.STARTED)):
        row = json_round(provision_row(pending(instance_id=iid), 0.0))
        del row["phase"]
        assert provision_from_row(row, 0.0).phase is phase


@pytest.mark.parametrize("change, message", [
    ({"phase": "later"}, "phase must be one of"),
    ({"phase": 3}, "phase must be one of"),
    ({"phase": "registered"}, "ended provision"),
    ({"phase": "started"}, "does not fit its instance id"),
    ({"phase": "asked", "instance_id": "local-1"}, "does not fit its instance id"),
])
def test_a_provision_row_with_a_phase_that_cannot_be_is_refused(change, message):
    row = {**provision_row(pending(), 0.0), **change}
    with pytest.raises(ProvisionRowError, match=message) as err:
        provision_from_row(row, 0.0)
    assert (err.value.kind, err.value.key) == (PROVISION_KIND, "p7")


def test_a_spare_provision_row_keeps_the_phase_and_an_old_one_is_derived():
    asked = KeptSpareProvision("default", "spare-default-9-1", "local", "burst", SHAPE, WALL)
    answered = asked.answered("local-7", WALL + 4)
    for k in (asked, answered):
        row = json_round(spare_provision_row(k))
        assert row["phase"] == k.phase.value and spare_provision_from_row(row) == k
        del row["phase"]
        assert spare_provision_from_row(row) == k
        assert in_flight_of(k, WALL - 50.0).phase is k.phase
    with pytest.raises(ProvisionRowError, match="ended provision") as err:
        spare_provision_from_row({**spare_provision_row(answered), "phase": "abandoned"})
    assert (err.value.kind, err.value.key) == (SPARE_PROVISION_KIND, "spare-default-9-1")

"""The chaos scenarios on network-namespace hosts, the suite's small profile (``chaos_netns.SUITE``:
Ray's health checks scaled down, the windows in the same order as with the defaults). One fleet
for the module: a head and two nodes joined with ``fabric join --supervise``, token auth on, two
jobs that count their own output, a stream of calls during each scenario.

Each scenario must lose no call, run none below its floor, have no job output written twice and
lose no registry record; each shows its window existed (a short cut never took the node offline,
a medium one did but Ray never declared it dead, a long one did both and the node came back by
itself; the flaps got the node held; a killed node joins again; a killed scheduler restarts). The
full run is ``scripts/chaos.py --hosts netns --json``.
"""

from __future__ import annotations


import pytest

from fabric.testing.chaos_netns import SUITE, NetnsChaos
from fabric.testing.netns import netns_problem, one_way_problem, require

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def chaos():
    require(netns_problem())
    with NetnsChaos(SUITE) as c:
        yield c


def clean(doc: dict) -> None:
    assert (doc["lost"], doc["below_floor"], doc["job_duplicates"], doc["records_lost"]) == (0, 0, 0, 0), doc


def test_link_cut_short_changes_nothing(chaos):
    doc = chaos.scenario("link_cut_short")
    clean(doc)
    w = doc["windows"]
    assert w["cut_s"] < w["offline_after_s"] and w["offline_seen_s"] is None and w["ray_dead_seen_s"] is None, doc


def test_link_cut_medium_takes_the_node_offline_but_not_dead_to_ray(chaos):
    doc = chaos.scenario("link_cut_medium")
    clean(doc)
    w = doc["windows"]
    assert w["offline_seen_s"] is not None and w["ray_dead_seen_s"] is None, doc
    assert doc["rejoin_s"] is not None, doc


def test_link_cut_long_the_node_is_dead_to_ray_and_rejoins_by_itself(chaos):
    doc = chaos.scenario("link_cut_long")
    clean(doc)
    w = doc["windows"]
    assert w["offline_seen_s"] is not None and w["ray_dead_seen_s"] is not None, doc
    assert doc["rejoin_s"] is not None, doc
    assert doc["victim_active_records"] == 1, doc  # a new Ray id, the same name: one active node


def test_head_cut_from_every_node(chaos):
    clean(chaos.scenario("head_cut"))


def test_one_way_drop(chaos):
    require(one_way_problem())
    doc = chaos.scenario("one_way")
    clean(doc)
    assert doc["rejoin_s"] is not None, doc


def test_link_flap_gets_the_node_held(chaos):
    doc = chaos.scenario("link_flap")
    clean(doc)
    assert doc["held"] is True, doc


def test_node_kill_the_job_moves_and_the_node_joins_again(chaos):
    doc = chaos.scenario("node_kill")
    clean(doc)
    assert doc["rejoin_s"] is not None, doc


def test_scheduler_sigkill_loses_no_call_and_runs_no_job_twice(chaos):
    clean(chaos.scenario("scheduler_sigkill"))

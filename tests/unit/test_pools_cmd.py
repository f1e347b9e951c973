"""``fabric pools`` (issue 15): pool tiers with nodes up / launching / max, hot spares (target /
live, warm for what), prospective nodes; readable on 80 columns."""

from fabric.cli.pools_cmd import format_pools, pools_view
from fabric.core.placement import NodeRecord
from fabric.core.scheduling.provisions import shape_record
from fabric.core.settings import FabricSettings, NodeShape

from test_scheduling import caps

SETTINGS = FabricSettings.load({"pools": [{"name": "default", "tiers": [
    {"name": "onprem"},
    {"name": "burst", "scale_out": "elastic", "provider": "local", "max_nodes": 2, "launch_mode": "spot",
     "candidate_shapes": [{"name": "cpu-box", "profile": "cpu-only-box"}]},
]}]})


def test_the_view_counts_nodes_launching_spares_and_holds_per_pool_tier():
    nodes = [NodeRecord("a", "a", caps("cpu_ffmpeg", 2, "a"), pool="default", pool_tier="onprem"),
             NodeRecord("b", "b", caps("cpu_ffmpeg", 2, "b"), pool="default", pool_tier="burst", spare=True),
             shape_record("prospective:p1", NodeShape(name="cpu-box"), "default", "burst")]
    provisions = {"pending": [{"provision_id": "p1", "pool": "default", "pool_tier": "burst", "shape": "cpu-box",
                               "age_s": 3.2, "timeout_in_s": 596.8}],
                  "held": [{"pool": "default", "pool_tier": "burst", "until_s": 42.0}], "instances": []}
    spares = [{"pool": "default", "target": 2, "live": ["b"], "pending": ["x"], "consumed": [], "warm_for": ["encoder"],
               "reserved_for": [], "exclusive": False, "backing_off": True}]
    view = pools_view(SETTINGS, nodes, provisions, spares)
    onprem, burst = view["pools"][0]["tiers"]
    assert (onprem["nodes"], onprem["launching"], onprem["max_nodes"]) == (1, 0, None)
    assert (burst["nodes"], burst["launching"], burst["max_nodes"], burst["spares"], burst["held_s"]) == (1, 1, 2, 1, 42.0)
    assert view["pools"][0]["spares"] == {"target": 2, "live": 1, "pending": 1, "consumed": 0, "warm_for": ["encoder"],
                                          "reserved_for": [], "exclusive": False, "backing_off": True}
    text = format_pools(view)
    assert "hot spares: 1/2 live, 1 pending, warm for encoder (backing off)" in text
    assert "held 42s (failed)" in text and "prospective nodes" in text and "p1" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_each_provision_in_flight_shows_its_phase_the_spare_reconcilers_too():
    provisions = {"pending": [
        {"provision_id": "p1", "pool": "default", "pool_tier": "burst", "shape": "cpu-box", "age_s": 3.2,
         "timeout_in_s": 596.8, "instance_id": None, "phase": "asked"},
        {"provision_id": "p2", "pool": "default", "pool_tier": "burst", "shape": "cpu-box", "age_s": 9.0,
         "timeout_in_s": 591.0, "instance_id": "local-3"}],  # a view without the phase: its instance id says it
        "held": [], "instances": [],
        "spare_provisions": [{"schema": 1, "pool": "default", "provision_id": "spare-default-4", "provider": "local",
                              "pool_tier": "burst", "shape": {"name": "cpu-box"}, "asked_at": 100.0,
                              "instance_id": "local-5", "started_at": 104.0, "phase": "started"}]}
    view = pools_view(SETTINGS, [], provisions, [])
    assert [p["phase"] for p in view["prospective"]] == ["asked", "started"]
    assert view["spare_provisions"][0]["phase"] == "started" and view["spare_provisions"][0]["instance_id"] == "local-5"
    lines = format_pools(view).splitlines()
    assert any(line.split()[:2] == ["p1", "asked"] for line in lines)
    assert any(line.split()[:2] == ["p2", "started"] for line in lines)
    assert "spare provisions in flight" in lines
    assert any(line.split()[:3] == ["spare-default-4", "started", "default/burst"] for line in lines)
    assert max(len(line) for line in lines) <= 80

"""The simulated node table the control-plane benchmark's actors read (``SimNodeTable``): a base
file and a small delta, so a reader follows churn at the cost of what changed; readers always see
what was last written."""

from __future__ import annotations

import dataclasses
import os

from fabric.core.health import RayNodeView
from fabric.testing.sim_fleet import SimNodeTable


def row(i: int, alive: bool = True) -> RayNodeView:
    return RayNodeView(node_id=f"{i:056x}", alive=alive, labels={"fabric.io/name": f"sim-{i}"}, resources={"CPU": 1.0})


def test_a_reader_follows_small_changes_through_the_delta_and_big_ones_through_a_new_base(tmp_path):
    writer, reader = SimNodeTable(tmp_path / "nodes"), SimNodeTable(tmp_path / "nodes")
    assert reader.rows() == {} and reader.listed() == []
    rows = {r.node_id: r for r in map(row, range(1000))}
    writer.write(rows)
    assert reader.rows() == rows and len(reader.listed()) == 1000
    base = os.stat(writer.path).st_ino
    rows[row(3).node_id] = row(3, alive=False)  # a leave
    del rows[row(7).node_id]
    rows[row(5000).node_id] = row(5000)  # a join
    writer.write(rows)
    assert os.stat(writer.path).st_ino == base  # the base stays: only the delta was written
    assert reader.rows() == rows and not reader.rows()[row(3).node_id].alive and row(7).node_id not in reader.rows()
    again = SimNodeTable(tmp_path / "nodes")  # a reader that starts now sees the same
    assert again.rows() == rows
    for i in range(300):  # more than the delta holds: a new base
        rows[row(i).node_id] = dataclasses.replace(row(i), hostname="moved")
    writer.write(rows)
    assert os.stat(writer.path).st_ino != base
    assert reader.rows() == rows and again.rows() == rows and len(reader.listed()) == len(rows)
    writer.write({})
    assert reader.rows() == {}

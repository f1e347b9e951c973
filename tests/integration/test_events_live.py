"""The fabric's one event log on a real local fleet (issue 17).

One module-scoped LocalFabric (2-core machine): two small raylets. A job's events and the
fleet's node events land in one log, numbered in order, each with a ``stimulus_id``; a node
killed and added back is ``node_lost`` then ``node_joined`` (its new id); ``fabric.on`` delivers
them in the driver in order, and a callback that raises on every event is reported, counted and
keeps being called. A job's placement is on the record: after the fleet changed, ``fabric explain
--event SEQ`` still explains it with the fleet as it was and ``--replay`` decides the same; after a
``fabric down`` and an ``up`` with a per-node cap that would move it, ``--replay --settings-now``
says it would now decide differently and why (this test runs last: it leaves the fabric up with the
new settings). No wall-clock assertions: waits are bounded polls.
"""

from __future__ import annotations

import io
import sys
import threading

import pytest

ray = pytest.importorskip("ray")

import fabric  # noqa: E402
from fabric import JobState, adaptive  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.local import with_fast_fence  # noqa: E402

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0, "reprobe_interval_s": 600.0, "flap_toggles": 50},
            "failure": {"min_recovery_interval_s": 0.5}}


@adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60)
class Ticker:
    def __init__(self) -> None:
        self.n = 0

    def incr(self) -> int:
        self.n += 1
        return self.n


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(["cpu-only-box", "cpu-only-box"], settings=SETTINGS, max_slots=2, timeout_s=120) as fabric_:
        yield fabric_


def test_node_and_job_events_in_one_ordered_log_and_fabric_on_delivers_them(lf):
    h = lf.handle
    start = (h.events(limit=-1) or [{"seq": 0}])[-1]["seq"]
    got: list[dict] = []
    lock = threading.Lock()

    def collect(e):
        with lock:
            got.append(e)

    calls: list[int] = []

    def bad(e):
        calls.append(e["seq"])
        raise RuntimeError("this callback always fails")

    everything = fabric.on("*", collect, interval_s=0.1)
    failing = fabric.on("*", bad, interval_s=0.1)
    failing.err = io.StringIO()  # keep the report for the assertions below (and out of the test's stderr)
    try:
        # a job: its placement and states, numbered after what was there, each with a stimulus id
        job = Ticker.remote()
        assert ray.get(job.wait_running(90).incr.remote(), timeout=60) == 1
        lf.wait_until(lambda: lf.handle.job(job.job_id).state == JobState.RUNNING, "the job running", timeout_s=60)
        mine = [e for e in h.events(start, ["job_state", "placement_decision"]) if e["data"].get("job_id") == job.job_id]
        assert [e["kind"] for e in mine][:1] == ["placement_decision"] and mine[-1]["data"]["to"] == "running"
        assert all(e["stimulus_id"] for e in mine)
        job_node = mine[0]["data"]["node_id"]
        # the node without the job is killed and added back: lost, then joined under its new id
        victim = next(n for n in lf.nodes if n.node_id != job_node)
        old_id = victim.node_id
        lf.kill_node(victim.name)
        lost = lf.wait_until(lambda: [e for e in h.events(start, ["node_lost"]) if e["data"]["node_id"] == old_id],
                             "node_lost for the killed node", timeout_s=60)
        back = lf.add_node(victim.name)
        joined = lf.wait_until(lambda: [e for e in h.events(start, ["node_joined"]) if e["data"]["node_id"] == back.node_id],
                               "node_joined for the node added back", timeout_s=60)
        assert lost[0]["seq"] < joined[0]["seq"] and lost[0]["stimulus_id"] and joined[0]["stimulus_id"]
        assert lost[0]["data"]["name"] == victim.name == joined[0]["data"]["name"]
        log = h.events(start)
        seqs = [e["seq"] for e in log]
        assert seqs == sorted(set(seqs)) and all(e["stimulus_id"] for e in log)
        # fabric.on saw the same events in the same order, and the failing callback kept being called
        last = joined[0]["seq"]
        lf.wait_until(lambda: got and got[-1]["seq"] >= last and calls and calls[-1] >= last,
                      "both subscriptions to reach node_joined", timeout_s=30)
        with lock:
            seen = [e["seq"] for e in got if e["seq"] <= last]
        assert seen == [s for s in seqs if s <= last] and seen == sorted(set(seen))
        assert {lost[0]["seq"], joined[0]["seq"]} <= set(calls)
        assert failing.alive and failing.errors == len(calls) >= 2
        assert failing.err.getvalue().count("this callback always fails") == 1  # reported once
        assert everything.errors == 0 and everything.alive
        job.stop()
    finally:
        everything.cancel()
        failing.cancel()
    assert not everything.alive and not failing.alive


def test_a_job_placement_on_the_record_is_explained_with_the_old_fleet_and_replayed(lf, capsys):
    from fabric.cli import main

    h = lf.handle
    start = (h.events(limit=-1) or [{"seq": 0}])[-1]["seq"]
    jobs = []
    for _ in range(3):  # two nodes: the third job at the latest lands where one of these already runs
        jobs.append(Ticker.remote())
        jobs[-1].wait_running(90)
    ours = {j.job_id for j in jobs}
    placed = [e for e in h.events(start, ["placement_decision"]) if e["data"]["job_id"] in ours]
    seen: set[str] = set()
    for event in placed:  # the first placement onto a node that already held one of them
        if event["data"]["node_id"] in seen:
            break
        seen.add(event["data"]["node_id"])
    seq, node_id, name = event["seq"], event["data"]["node_id"], event["data"]["node"]

    h.cordon(node_id)  # the fleet changes: the recorded decision still reads the fleet as it was
    try:
        capsys.readouterr()
        assert main(["explain", "--event", str(seq), "--wide"]) == 0
        text = capsys.readouterr().out
        assert f"event {seq}: job {event['data']['job_id']} decision recorded (job)" in text
        assert f"placed on {node_id}" in text and "filter cordoned" not in text  # the fleet as it was
        assert main(["explain", "--min-tier", "cpu_ffmpeg", "--wide"]) == 0
        assert "filter cordoned        removed 1 node" in capsys.readouterr().out  # the fleet as it is
        assert main(["explain", "--event", str(seq), "--replay", "--wide"]) == 0
        assert "replay (recorded settings): decides the same" in capsys.readouterr().out
    finally:
        h.uncordon(node_id)

    fabric.down()  # and up again with a cap of one slot on that node: the decision would move
    fabric.up(with_fast_fence({**SETTINGS, "nodes": {name: {"max_concurrent_tasks": 1}}}), timeout_s=90)
    assert main(["explain", "--event", str(seq), "--replay", "--wide"]) == 0
    assert "replay (recorded settings): decides the same" in capsys.readouterr().out
    assert main(["explain", "--event", str(seq), "--replay", "--settings-now", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "replay (today's settings): would now decide differently" in out
    assert f"settings nodes.{name}: None -> {{'max_concurrent_tasks': 1}}" in out
    assert f"node {node_id} now fails filter concurrency" in out

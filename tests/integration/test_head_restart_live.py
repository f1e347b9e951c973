"""A SIGKILLed head, started again with the same ``fabric start-head``, brings the whole fabric back:
on the embedded GCS store and on a real Redis, with jobs on worker nodes and a stream of calls.

Per backend, one ``HeadFleet`` (``fabric.testing.head_fleet``): the head on 127.0.0.6 (profile
``edge-relay``: no job or call lands on it), two workers joined with ``fabric join``, ``fabric up``,
four counter jobs on the workers. ``fabric.testing.chaos_head.head_restart`` sends calls from a
driver attached to the first worker (a driver on the head's raylet would die with it), SIGKILLs
every process of the head mid-burst (found by its temp dir), runs the same command again and lets
the calls finish. Then: the same four instances (Ray actor id and worker pid, before and after), no
restart counted, no tick written twice, no gap in the ticks beyond the outage's own, every registry
record and job back, no call lost, calls placed after the kill; the restart said how many worker
nodes came back, and the Redis password is in none of the head's output.

On the embedded store, a migration (``handover``, its cut made slow) and a drain of a third worker
are in flight at the kill: both finish after the restart, and the four jobs stay as they were.
The migration's and the drain's jobs tick in a folder of their own (a handover's cut is a gap of
its own, not the outage's).

On Redis, a third worker runs under ``fabric join --supervise`` with a ``--head-outage-tolerance``
(4 s) that the outage (8 s before the restart) outlasts: its raylet gives the head up and exits, and
the supervisor starts a new node, which joins the recovered cluster by itself (a new Ray node id,
the same name, active).
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("ray")

from fabric.core import errors  # noqa: E402
from fabric.testing.chaos_head import HeadRestart, head_restart  # noqa: E402
from fabric.testing.head_fleet import REDIS_PASSWORD, HeadFleet  # noqa: E402
from fabric.testing.redis import redis_problem, require  # noqa: E402

pytestmark = pytest.mark.integration

TYPED = {name for name, c in vars(errors).items() if isinstance(c, type) and issubclass(c, errors.FabricError)}

SETTINGS = {
    "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 5.0, "monitor_interval_s": 0.25, "join_timeout_s": 90.0},
    "failure": {"min_recovery_interval_s": 0.5},
    # the leases outlast the outage (the head down, then its GCS and the fabric's actors back)
    "fence": {"lease_ttl_s": 60.0, "renew_every_s": 2.0, "margin_s": 1.0},
}
TOLERANCE_S = 4
"""The supervised node's ``--head-outage-tolerance`` (the Redis run): its raylet exits during the outage."""
SCENARIO = HeadRestart(calls=100, load_s=12.0, ramp_s=3.0, outage_s=3.0, period_ms=50.0)
PERIOD_MS = "50"

ATTACH = """
import json, os, sys, time
import ray
import fabric
ray.init(address=os.environ["RAY_ADDRESS"], _node_ip_address=os.environ["NODE_IP"], log_to_driver=False)
handle = fabric.up()
def node(name, timeout_s=120):
    deadline = time.time() + timeout_s
    while True:  # a node that just joined registers within seconds
        found = [r.node_id for r in handle.records(["active"]) if r.name == name]
        if found or time.time() > deadline:
            return found[0]
        time.sleep(0.25)
"""

MOVES = ATTACH + textwrap.dedent("""
    from fabric import adaptive
    from fabric.testing.counter import CounterJob
    folder, w1, w2, w3 = sys.argv[1], node("w1"), node("w2"), node("w3")
    job = adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1, name="moved", max_restarts_per_hour=1000,
                          call_timeout_s=120)(CounterJob)
    for n in (w1, w2):
        handle.cordon(n)
    drained = job.remote(folder + "/drained", float(sys.argv[2]), cut_delay_s=12.0).wait_running(180)
    for n in (w1, w2):
        handle.uncordon(n)
    handle.cordon(w3)
    moved = job.remote(folder + "/migrated", float(sys.argv[2]), cut_delay_s=12.0).wait_running(180)
    source = moved.status().node_id
    target = w2 if source == w1 else w1
    mid = handle.migrate_job(moved.job_id, strategy="handover", target_node=target)
    handle.drain(w3, timeout_s=300, strategy="handover")
    print("chaos-result: " + json.dumps({"migration": mid, "migrated": moved.job_id, "drained": drained.job_id,
                                        "source": source, "target": target, "w3": w3,
                                        "drained_on": drained.status().node_id}))
""")

CORDON = ATTACH + textwrap.dedent("""
    n = node(sys.argv[1])
    deadline = time.time() + 60
    while True:  # nothing lands there: its raylet is to exit during the outage
        try:
            handle.cordon(n)
            break
        except Exception:  # the scheduler's view of the fleet lags the registry's by a tick or so
            if time.time() > deadline:
                raise
            time.sleep(0.25)
    print("chaos-result: " + json.dumps({"node": n}))
""")

REJOINED = ATTACH + textwrap.dedent("""
    name, old = sys.argv[1], sys.argv[2]
    deadline = time.time() + 180
    while True:
        found = [r.node_id for r in handle.records(["active"]) if r.name == name and r.node_id != old]
        if found or time.time() > deadline:
            break
        time.sleep(0.5)
    print("chaos-result: " + json.dumps({"node": found[0] if found else None,
                                        "records": [[r.name, r.node_id[:12], r.status.value] for r in handle.records()]}))
""")

MOVES_ENDED = ATTACH + textwrap.dedent("""
    mid, drained_job, w3 = sys.argv[1], sys.argv[2], sys.argv[3]
    deadline = time.time() + 240
    while True:
        m, d = handle.migration(mid), handle.drain_status(w3)
        if m.terminal and d is not None and d.terminal:
            break
        if time.time() > deadline:
            raise SystemExit(f"not ended: {m.phase} / {d and d.phase}")
        time.sleep(0.5)
    drain_moves = [x for x in handle.migrations() if x.job_id == drained_job]
    out = {"migration": {"phase": m.phase.value, "started_at": m.started_at, "ended_at": m.history[-1][1],
                         "target_node": m.target_node, "target_key": m.target_key},
           "drain": {"phase": d.phase.value, "started": d.started, "ray_drain": d.ray_drain},
           "drain_moves": [{"phase": x.phase.value, "started_at": x.started_at, "ended_at": x.history[-1][1],
                            "target_key": x.target_key} for x in drain_moves]}
    for job_id in (m.job_id, drained_job, *sys.argv[4:]):
        s = handle.job(job_id)
        out[job_id] = {"state": s.state.value, "key": s.instance_key, "node": s.node_id, "restarts": s.restarts_last_hour}
    print("chaos-result: " + json.dumps(out))
""")


@pytest.fixture(scope="module", params=["embedded", "redis"])
def fleet(request: pytest.FixtureRequest) -> Iterator[HeadFleet]:
    if request.param == "redis":
        require(redis_problem())
    with HeadFleet(request.param, workers=2, worker_cpus=2, outage_tolerance_s=300) as f:
        f.up(SETTINGS)
        yield f


def test_a_killed_head_comes_back_with_the_same_jobs_and_places_again(fleet: HeadFleet, tmp_path: Path) -> None:
    first = fleet.outputs[0]
    expected = "GCS fault tolerance: embedded store" if fleet.backend == "embedded" else "GCS fault tolerance: redis 127.0.0.1:"
    assert expected in first, first
    ticks, moves_dir = tmp_path / "ticks", tmp_path / "moves"
    jobs = fleet.driver("jobs", str(ticks), "4", PERIOD_MS, "--spread", "w1,w2")["jobs"]
    moves: dict[str, Any] | None = None
    if fleet.backend == "embedded":  # a migration and a drain in flight at the kill
        fleet.join()
        moves = fleet.python(MOVES, str(moves_dir), PERIOD_MS)
        assert moves["drained_on"] == moves["w3"], moves

    supervised: str | None = None
    scenario = SCENARIO
    if fleet.backend == "redis":  # a supervised node whose outage tolerance the outage outlasts
        fleet.join(supervise=True, outage_tolerance_s=TOLERANCE_S)
        supervised = fleet.python(CORDON, "w3")["node"]
        scenario = replace(SCENARIO, outage_s=2 * TOLERANCE_S)

    doc = head_restart(fleet, jobs, ticks, tmp_path / "work", scenario, name=f"head_restart_{fleet.backend}")

    placed = [doc["instances"]["before"][j]["node"] for j in jobs]
    assert len(set(placed)) == 2 and None not in placed, placed  # 4 jobs on 2 worker nodes
    again = fleet.outputs[-1]
    assert f"removed a stale {fleet.head_tmp / 'ray_current_cluster'} naming {fleet.address}" in again, again
    workers = len(fleet.workers)
    came_back = [f"{workers} of {workers}"] if supervised is None else [f"{workers - 1} of {workers}", f"{workers} of {workers}"]
    assert "recovered the cluster" in again and any(f"{n} worker nodes came back" in again for n in came_back), again
    assert all(REDIS_PASSWORD not in out for out in fleet.outputs)
    summary = {k: doc[k] for k in ("lost", "calls_run_twice", "job_duplicates", "job_gap_ms", "records_lost", "recovery_s",
                                   "outage_s", "same_instances", "job_restarts", "refused", "refusals", "failures")}
    assert doc["same_instances"] == "4/4", (summary, doc["instances"])  # by actor id and worker pid
    assert all(before == after for before, after in doc["job_restarts"].values()), summary
    assert doc["jobs_running"] == 4, summary
    assert doc["lost"] == 0 and doc["calls_run_twice"] == 0 and doc["below_floor"] == 0, summary
    assert doc["job_duplicates"] == 0, summary
    assert doc["job_gap_ms"] <= doc["outage_s"] * 1000, summary  # no gap beyond the outage's own
    assert doc["records_lost"] == 0, summary
    assert doc["recovery_s"] is not None, summary  # a call sent after the kill was placed and answered
    assert set(doc["refusals"]) <= TYPED, summary  # a call refused during the outage: the fabric's typed error

    if supervised is not None:  # its raylet gave the head up; the supervisor started a new node, which joined
        rejoined = fleet.python(REJOINED, "w3", supervised)
        assert rejoined["node"] not in (None, supervised), rejoined
        said = (fleet.root / "w3.supervise.log").read_text()
        assert "node stopped; starting a new one" in said, said[-2000:]

    if moves is not None:
        ended = fleet.python(MOVES_ENDED, moves["migration"], moves["drained"], moves["w3"], *jobs)
        m, d = ended["migration"], ended["drain"]
        assert m["phase"] == "done" and m["started_at"] < doc["cut_at"] < m["ended_at"], (m, doc["cut_at"])
        assert ended[moves["migrated"]] == {"state": "running", "key": m["target_key"], "node": moves["target"],
                                            "restarts": 0}, ended
        assert d["phase"] == "done" and d["started"] < doc["cut_at"], d
        assert [x["phase"] for x in ended["drain_moves"]] == ["done"], ended
        assert ended["drain_moves"][0]["ended_at"] > doc["cut_at"], ended  # the drain was in flight at the kill
        assert ended[moves["drained"]]["node"] != moves["w3"] and ended[moves["drained"]]["state"] == "running", ended
        before = doc["instances"]["before"]
        assert {j: (ended[j]["state"], ended[j]["key"], ended[j]["restarts"]) for j in jobs} == \
            {j: ("running", before[j]["key"], before[j]["restarts"]) for j in jobs}, ended  # the four untouched


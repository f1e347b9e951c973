"""Adaptive dispatch on a real local fleet (issue 5): tier order, fallback, bursts that never
oversubscribe, waiting vs spilling, hard-fail, queue timeout, cordon/drain, the
verification script, the operator CLI, and metrics.

One module-scoped LocalFabric (2-core machine). Tests run in file order; each puts the fleet back
as it found it. No wall-clock assertions: waits are bounded polls.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray")

import fabric  # noqa: E402
from fabric import CapacityError, Requirement, adaptive  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.spans import max_overlap  # noqa: E402

pytestmark = pytest.mark.integration

PROFILES = ["gpu-cuda-workstation", "steamdeck-apu", "cpu-only-box", "edge-relay"]
SLOTS = {"gpu-cuda-workstation": 2, "steamdeck-apu": 2, "cpu-only-box": 2, "edge-relay": 1}
SETTINGS = {"drain": {"ask_ray": False},  # these drains are withdrawn later: Ray has no undrain
            "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 30.0,
                       "monitor_interval_s": 0.25}}


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(PROFILES, settings=SETTINGS, max_slots=2, timeout_s=90) as fabric_:
        yield fabric_


@pytest.fixture(scope="module")
def names(lf):
    return {n.node_id: n.name for n in lf.nodes}


@adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")
def span(seconds: float = 0.0):
    """Where and when the call ran."""
    start = time.time()
    time.sleep(seconds)
    return ray.get_runtime_context().get_node_id(), start, time.time()


def one_tick():
    """Let one health tick pass: placement leases are renewed every tick, so an operator's cordon or
    drain binds every call submitted after it (issue 6: "respected within one health tick")."""
    time.sleep(2 * SETTINGS["health"]["monitor_interval_s"])


def ran_on(lf, names, refs, timeout=180):
    return [names[n] for n, _, _ in ray.get(refs, timeout=timeout)]


def test_a_call_lands_on_the_best_tier_available(lf, names):
    assert ran_on(lf, names, [span.remote()]) == ["gpu-cuda-workstation"]


def test_burst_of_ten_times_the_slots_spills_down_never_oversubscribes_and_comes_back(lf, names):
    h = lf.handle
    before = h.fallback_count
    slots_in_floor = SLOTS["gpu-cuda-workstation"] + SLOTS["steamdeck-apu"] + SLOTS["cpu-only-box"]
    n = 10 * sum(SLOTS.values())
    results = ray.get([span.remote(0.3) for _ in range(n)], timeout=300)
    assert len(results) == n
    per_node = collections.defaultdict(list)
    for node_id, start, end in results:
        per_node[names[node_id]].append((start, end))
    assert "edge-relay" not in per_node  # below the floor: never used
    assert set(per_node) == {"gpu-cuda-workstation", "steamdeck-apu", "cpu-only-box"}  # spilled down the tiers
    for name, spans in per_node.items():
        assert max_overlap(spans) <= SLOTS[name], f"{name} ran {max_overlap(spans)} at once, slots {SLOTS[name]}"
    assert max_overlap([s for spans in per_node.values() for s in spans]) <= slots_in_floor
    lf.wait_until(lambda: h.fallback_count > before, "the workers to report their spilled calls' fallbacks")
    # the burst has passed: work returns to the best tier
    assert ran_on(lf, names, [span.remote()]) == ["gpu-cuda-workstation"]


def test_when_full_wait_keeps_a_burst_at_the_best_level(lf, names):
    waiting = span.options(when_full="wait")
    got = collections.Counter(ran_on(lf, names, [waiting.remote(0.2) for _ in range(12)]))
    assert set(got) <= {"gpu-cuda-workstation", "steamdeck-apu"}, got  # both serve the gpu_apu level


def test_a_class_that_stopped_calling_does_not_keep_the_best_nodes_from_the_next(lf, names):
    hog = adaptive.remote(min_tier="gpu_cuda", floor="cpu_ffmpeg")(span.function)  # a class of its own
    ray.get([hog.remote(0.2) for _ in range(20)], timeout=180)
    one_tick()
    ray.get(hog.remote(), timeout=60)  # its next grant asks for what the burst used: every free slot in the floor
    time.sleep(0.1)  # no call for a quarter of a tick: the lease is idle (its grant lives on for two ticks)
    encode = adaptive.remote(operation="vaapi_encode")(span.function)
    assert ran_on(lf, names, [encode.remote()]) == ["gpu-cuda-workstation"]
    assert sum(r.running for r in lf.handle.nodes()) <= 1  # the idle lease was given back: one slot, encode's own


def test_vaapi_encode_falls_back_tier_by_tier_to_cpu(lf, names):
    encode = adaptive.remote(operation="vaapi_encode")(span.function)
    h = lf.handle
    assert ran_on(lf, names, [encode.remote()]) == ["gpu-cuda-workstation"]  # gpu_cuda serves the gpu_vaapi level
    h.cordon("gpu-cuda-workstation")
    try:
        lf.wait_until(lambda: any(r.cordoned for r in h.nodes() if r.name == "gpu-cuda-workstation"), "cordon recorded")
        one_tick()
        assert ran_on(lf, names, [encode.remote()]) == ["steamdeck-apu"]
        h.cordon("steamdeck-apu")
        one_tick()
        assert ran_on(lf, names, [encode.remote()]) == ["cpu-only-box"]
    finally:
        h.uncordon("gpu-cuda-workstation")
        h.uncordon("steamdeck-apu")
    one_tick()
    assert ran_on(lf, names, [encode.remote()]) == ["gpu-cuda-workstation"]


def test_queued_call_times_out_with_capacity_error(lf, names):
    h = lf.handle
    h.cordon("gpu-cuda-workstation")
    one_tick()
    try:
        lupine = adaptive.remote(operation="lupine", queue_timeout_s=1.5)(span.function)
        ref = lupine.remote()  # a CUDA node exists (cordoned): the call waits, then times out
        with pytest.raises(CapacityError) as exc:
            ray.get(ref, timeout=60)
        assert "gpu_cuda" in str(exc.value)
        now = adaptive.remote(operation="lupine", on_no_capacity="raise")(span.function)
        with pytest.raises(CapacityError):
            now.remote()
    finally:
        h.uncordon("gpu-cuda-workstation")


def test_queued_call_runs_when_capacity_appears(lf, names):
    h = lf.handle
    h.cordon("gpu-cuda-workstation")
    one_tick()
    lupine = adaptive.remote(operation="lupine", queue_timeout_s=60)(span.function)
    ref = lupine.remote()
    ready, _ = ray.wait([ref], timeout=1.0)
    assert not ready  # waiting in the deferred queue
    h.uncordon("gpu-cuda-workstation")  # a capacity event: the queue drains onto it
    assert names[ray.get(ref, timeout=60)[0]] == "gpu-cuda-workstation"


def test_seed_002_verification(lf, names):
    """The verification script, against a live fabric: cordon, uncordon, burst."""
    h = lf.handle
    # Simulate node loss: kubectl cordon qfox-1 -> the scheduler falls back to the next tier
    h.cordon("gpu-cuda-workstation")
    cuda_or_less = Requirement(min_tier="gpu_cuda", floor="cpu_ffmpeg")
    a = h.select_worker(cuda_or_less)
    assert a.status == "assigned" and a.node_name == "steamdeck-apu" and a.fallback_levels == 2
    # Simulate node join: kubectl uncordon qfox-1 -> the scheduler recognises the capacity
    h.uncordon("gpu-cuda-workstation")
    assert h.select_worker(cuda_or_less).node_name == "gpu-cuda-workstation"
    assert len([r for r in h.nodes() if r.status.value == "active"]) == len(PROFILES)
    # Simulate burst (the verification script, with the live handle as the scheduler)
    s = h
    before = s.fallback_count
    assignments = []
    h.cordon("gpu-cuda-workstation")
    h.cordon("steamdeck-apu")
    try:
        for i in range(100):
            req = Requirement(min_tier="gpu_apu", payload_size=1024)
            assignments.append(s.select_worker(req))
    finally:
        h.uncordon("gpu-cuda-workstation")
        h.uncordon("steamdeck-apu")
    assert all(x.status == "assigned" for x in assignments)
    assert s.fallback_count - before == 100  # every one fell back past the cordoned GPU tiers


def test_drain_lets_running_work_finish_then_marks_draining(lf, names, tmp_path):
    h = lf.handle
    marks = tmp_path / "started"

    def hold(seconds: float):
        with open(marks, "a") as f:  # every node of this fabric is on this machine
            f.write("started\n")
        time.sleep(seconds)
        return ray.get_runtime_context().get_node_id(), 0.0, 0.0

    lupine = adaptive.remote(operation="lupine", queue_timeout_s=60)(hold)
    running = [lupine.remote(3.0) for _ in range(2)]
    lf.wait_until(lambda: marks.exists() and len(marks.read_text().splitlines()) == 2, "two calls running on the workstation")
    h.drain("gpu-cuda-workstation")
    one_tick()
    late = lupine.remote(0.0)
    assert {names[n] for n, _, _ in ray.get(running, timeout=60)} == {"gpu-cuda-workstation"}  # they finished
    lf.wait_until(lambda: h.node("gpu-cuda-workstation").status.value == "draining", "node marked draining")
    ready, _ = ray.wait([late], timeout=1.0)
    assert not ready  # nothing new lands on a draining node
    h.uncordon("gpu-cuda-workstation")
    assert names[ray.get(late, timeout=60)[0]] == "gpu-cuda-workstation"
    lf.wait_until(lambda: h.node("gpu-cuda-workstation").status.value == "active", "node active again")


def test_operator_cli_explain_and_cordon(lf, names):
    env = {**os.environ, "RAY_ADDRESS": lf.address}
    cli = [sys.executable, "-m", "fabric"]
    out = subprocess.run(cli + ["explain", "--min-tier", "gpu_apu", "--floor", "cpu_ffmpeg", "--json"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["decision"]["status"] == "placed" and doc["decision"]["node_name"] == "gpu-cuda-workstation"
    relay = [v for k, v in doc["verdicts"].items() if k.startswith("edge-relay")]
    assert relay and "level" in relay[0]  # the relay node fails the compute-level filter, named
    text = subprocess.run(cli + ["explain", "--operation", "lupine"], env=env, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "gpu-cuda-workstation" in text.stdout
    c = subprocess.run(cli + ["cordon", "steamdeck-apu"], env=env, capture_output=True, text=True, timeout=120)
    assert c.returncode == 0, c.stderr
    assert lf.handle.node("steamdeck-apu").cordoned
    u = subprocess.run(cli + ["uncordon", "steamdeck-apu"], env=env, capture_output=True, text=True, timeout=120)
    assert u.returncode == 0 and not lf.handle.node("steamdeck-apu").cordoned
    bad = subprocess.run(cli + ["cordon", "no-such-node"], env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no-such-node" in bad.stderr
    typo = subprocess.run(cli + ["explain", "--min-tier", "gpu_cuad"], env=env, capture_output=True, text=True, timeout=120)
    assert typo.returncode == 2 and "min_tier" in typo.stderr


def test_metrics_count_placements_and_fallbacks(lf, names):
    h = lf.handle
    time.sleep(1.0)  # earlier calls' workers have reported (they report once quiet for 0.5 s)
    before = h.metrics()
    h.cordon("gpu-cuda-workstation")
    h.cordon("steamdeck-apu")
    try:
        one_tick()
        ran = collections.Counter(ran_on(lf, names, [span.remote() for _ in range(10)]))
    finally:
        h.uncordon("gpu-cuda-workstation")
        h.uncordon("steamdeck-apu")
    assert ran == {"cpu-only-box": 10}  # every call ran below its min_tier gpu_apu
    lf.wait_until(lambda: h.metrics()["placements_succeeded"] - before["placements_succeeded"] >= 10, "the workers' reports")
    time.sleep(1.0)  # a late or double report would land by now
    m = h.metrics()
    assert m["placements_succeeded"] - before["placements_succeeded"] == 10
    assert m["fallbacks"] - before["fallbacks"] == 10
    assert m["placements_succeeded"] > 0 and m["fallbacks"] == lf.handle.fallback_count
    assert m["tiers"]["gpu_cuda"]["nodes"] == 1 and m["tiers"]["relay"]["nodes"] == 1
    assert m["queue_depth"] == 0


def test_all_gpu_nodes_lost_falls_back_to_cpu_and_cuda_only_hard_fails(lf, names):
    lf.kill_node("gpu-cuda-workstation")
    lf.kill_node("steamdeck-apu")
    sched = ray.get_actor("fabric.scheduler", namespace="fabric")
    lf.wait_until(lambda: ray.get(sched.sync_now.remote()) == 2, "the scheduler to drop both GPU nodes")
    assert ran_on(lf, names, [span.remote()]) == ["cpu-only-box"]
    lupine = adaptive.remote(operation="lupine")(span.function)
    with pytest.raises(CapacityError) as exc:
        lupine.remote()
    assert "gpu_cuda" in str(exc.value)

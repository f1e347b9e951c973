"""The task path keeps its promises on a real local fleet (issue 11).

- Safety: a demoted node, a node offline by missed heartbeats (its ProbeActor SIGSTOPped while Ray
  still runs it) and a drained node that comes back from a partition take none of a burst of 10x
  the fleet's slots after the next tick; GPU work holds its GPUs in Ray.
- Truthful counts: a lease granted under another lease's release is filed under its own id;
  renewals are not calls; ``fallback_count`` and ``placements_succeeded`` move by the calls that
  ran, as the calls themselves report; ``nodes()[i].running`` is what runs, not what is reserved.
- Validated at the scheduler: an unknown pool is an error there, not a silent ``deferred``.
- Callers never hang: a scheduler that does not answer gives a typed error.

One module-scoped LocalFabric (2-core machine): five raylets, two of them from recordings made
here (a CUDA node whose GPU will vanish, a node with two CUDA GPUs). Tests run in file order; each
puts the fleet back as it found it. No wall-clock assertions: waits are bounded polls.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import signal
import sys
import time

import pytest

ray = pytest.importorskip("ray")

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from fabric import Requirement, RequirementError, SchedulerUnavailableError, adaptive  # noqa: E402
from fabric.runtime import session  # noqa: E402
from probes.profiles import profile_path  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.spans import max_overlap  # noqa: E402

pytestmark = pytest.mark.integration
# Workers cannot import this test module: ship its functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

PROFILES = ["gpu-cuda-workstation", "steamdeck-apu", "cpu-only-box"]
SLOTS = 2
FLEET_SLOTS = SLOTS * (len(PROFILES) + 2)
BURST = 10 * FLEET_SLOTS
TICK_S = 0.25
SETTINGS = {"drain": {"ask_ray": False},  # these drains are withdrawn later: Ray has no undrain
            "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "drain_grace_s": 120.0,
                       "monitor_interval_s": TICK_S, "join_timeout_s": 60.0, "reprobe_interval_s": 600.0,
                       "flap_toggles": 50}}
A4000 = "NVIDIA RTX A4000"


def _recordings(base):
    """Two recordings made from the workstation's profile: ``fragile`` (its NVIDIA GPU will
    vanish) and ``dual`` (two CUDA GPUs of another model, so GPU work can be pinned to it)."""
    fragile, dual = base / "fragile-gpu", base / "dual-gpu"
    shutil.copytree(profile_path("gpu-cuda-workstation"), fragile)
    shutil.copytree(profile_path("gpu-cuda-workstation"), dual)
    nvml = json.loads((dual / "nvml.json").read_text())
    first = nvml["devices"][0]
    nvml["devices"] = [{**first, "index": i, "name": A4000, "uuid": f"GPU-00000000-0000-0000-0000-00000000a40{i}",
                        "pci_bus_id": f"00000000:0{i + 1}:00.0"} for i in range(2)]
    nvml["device_count"] = 2
    (dual / "nvml.json").write_text(json.dumps(nvml))
    return {"fragile": fragile, "dual": dual}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    return _recordings(tmp_path_factory.mktemp("recordings"))


@pytest.fixture(scope="module")
def lf(recordings):
    with LocalFabric(PROFILES, settings=SETTINGS, max_slots=SLOTS, timeout_s=120) as fabric_:
        fabric_.add_node("fragile-gpu", recording=str(recordings["fragile"]))
        fabric_.add_node("dual-gpu", recording=str(recordings["dual"]))
        yield fabric_


@pytest.fixture(scope="module")
def names(lf):
    return {n.node_id: n.name for n in lf.nodes}


@pytest.fixture(scope="module")
def sched(lf):
    return ray.get_actor("fabric.scheduler", namespace="fabric")


def where(seconds: float = 0.0):
    time.sleep(seconds)
    return ray.get_runtime_context().get_node_id()


cuda_only = adaptive.remote(min_tier="gpu_cuda", fallback=False)(where)
apu_down = adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")(where)


def one_tick():
    """Leases are renewed every tick: a change binds every call submitted after the next one."""
    time.sleep(2 * TICK_S)


def burst(fn, names, n=BURST, seconds=0.05):
    return collections.Counter(names[i] for i in ray.get([fn.remote(seconds) for _ in range(n)], timeout=300))


def probe_pid(lf, name):
    probe = ray.get_actor(f"fabric.probe.{lf.node(name).node_id}", namespace="fabric")
    return ray.get(probe.info.remote(), timeout=30)["pid"]


def scheduler_view(sched):
    return {r.name: r for r in ray.get(sched.nodes.remote(), timeout=30)}


def status(lf, name):
    return lf.handle.node(name).status.value


def ray_alive(lf, name):
    return any(row["NodeID"] == lf.node(name).node_id and row["Alive"] for row in ray.nodes())


# -- safety ------------------------------------------------------------------------------------------
def test_a_demoted_node_takes_no_call_below_its_floor(lf, names, sched, recordings):
    """Its GPU vanished (the re-probe says so): its Ray label still says gpu_cuda, so the spill
    selector must exclude it by node id, or CUDA-only calls run on a node without CUDA."""
    (recordings["fragile"] / "nvml.json").write_text(json.dumps({"error": "NVMLError_LibraryNotFound"}))
    probe = ray.get_actor(f"fabric.probe.{lf.node('fragile-gpu').node_id}", namespace="fabric")
    assert ray.get(probe.reprobe_now.remote(), timeout=60)  # the production path: a re-probe reports the loss
    lf.wait_until(lambda: scheduler_view(sched)["fragile-gpu"].tier.value != "gpu_cuda", "the scheduler to demote fragile-gpu")
    one_tick()
    got = burst(cuda_only, names)
    assert "fragile-gpu" not in got, got
    assert set(got) <= {"gpu-cuda-workstation", "dual-gpu"}, got
    got = burst(apu_down, names)
    assert sum(got.values()) == BURST and "fragile-gpu" in scheduler_view(sched)  # still a member, at its new tier


def test_a_node_offline_by_missed_heartbeats_takes_no_call(lf, names, sched):
    """A partition: the node's ProbeActor is stopped (SIGSTOP), Ray still sees the raylet alive."""
    pid = probe_pid(lf, "cpu-only-box")
    os.kill(pid, signal.SIGSTOP)
    try:
        lf.wait_until(lambda: status(lf, "cpu-only-box") == "offline", "cpu-only-box offline by missed heartbeats")
        assert ray_alive(lf, "cpu-only-box")  # Ray still runs it: only the registry knows
        lf.wait_until(lambda: "cpu-only-box" not in scheduler_view(sched), "the scheduler to drop cpu-only-box")
        one_tick()
        got = burst(apu_down, names)
        assert "cpu-only-box" not in got, got
        assert sum(got.values()) == BURST
    finally:
        os.kill(pid, signal.SIGCONT)
    lf.wait_until(lambda: status(lf, "cpu-only-box") == "active", "cpu-only-box back after the partition")
    lf.wait_until(lambda: "cpu-only-box" in scheduler_view(sched), "the scheduler to take cpu-only-box again")


def test_a_drain_survives_a_partition(lf, names, sched):
    h = lf.handle
    h.drain("cpu-only-box")
    lf.wait_until(lambda: status(lf, "cpu-only-box") == "draining", "cpu-only-box draining")
    pid = probe_pid(lf, "cpu-only-box")
    os.kill(pid, signal.SIGSTOP)
    try:
        lf.wait_until(lambda: status(lf, "cpu-only-box") == "offline", "cpu-only-box offline while draining")
    finally:
        os.kill(pid, signal.SIGCONT)
    lf.wait_until(lambda: status(lf, "cpu-only-box") != "offline", "cpu-only-box heard from again")
    assert status(lf, "cpu-only-box") == "draining"  # the operator's drain still holds
    one_tick()
    got = burst(apu_down, names)
    assert "cpu-only-box" not in got, got
    h.uncordon("cpu-only-box")  # only an uncordon withdraws a drain
    lf.wait_until(lambda: status(lf, "cpu-only-box") == "active", "cpu-only-box active after uncordon")
    lf.wait_until(lambda: scheduler_view(sched).get("cpu-only-box") is not None and scheduler_view(sched)["cpu-only-box"].placeable,
                  "the scheduler to take cpu-only-box again")


def test_gpu_work_holds_its_gpus_in_ray(lf, names, tmp_path):
    """The dual-GPU node joined Ray with its two CUDA devices; a call asking for a whole GPU holds
    one in Ray (its own CUDA_VISIBLE_DEVICES), so a plain Ray task wanting a GPU waits for it."""
    dual = lf.node("dual-gpu").node_id
    assert ray.cluster_resources().get("GPU", 0) >= 2
    marks = tmp_path / "started"

    def on_gpu(seconds: float):
        start = time.time()
        with open(marks, "a") as f:  # every node of this fabric is on this machine
            f.write("x\n")
        time.sleep(seconds)
        return ray.get_runtime_context().get_node_id(), os.environ.get("CUDA_VISIBLE_DEVICES"), start, time.time()

    whole = adaptive.remote(min_tier="gpu_cuda", fallback=False, num_gpus=1, gpu_model=A4000)(on_gpu)
    refs = [whole.remote(2.0) for _ in range(2)]
    lf.wait_until(lambda: marks.exists() and len(marks.read_text().splitlines()) == 2, "two GPU calls running")

    @ray.remote(num_gpus=1, num_cpus=0)
    def plain_gpu_task():
        return time.time(), os.environ.get("CUDA_VISIBLE_DEVICES")

    plain = plain_gpu_task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(dual, soft=False)).remote()
    results = ray.get(refs, timeout=120)
    plain_start, _ = ray.get(plain, timeout=120)
    assert {names[n] for n, _, _, _ in results} == {"dual-gpu"}
    devices = [d for _, d, _, _ in results]
    assert sorted(devices) == ["0", "1"], devices  # one device each, never the same one
    assert plain_start >= min(end for _, _, _, end in results)  # both devices were held: it waited
    # fractional: two half-GPU calls hold one GPU's worth in Ray while they run
    marks.unlink()
    half = whole.options(num_gpus=0.5)
    refs = [half.remote(2.0) for _ in range(2)]
    lf.wait_until(lambda: marks.exists() and len(marks.read_text().splitlines()) == 2, "two half-GPU calls running")
    from ray._private import state

    lf.wait_until(lambda: state.available_resources_per_node()[dual].get("GPU", 0.0) == pytest.approx(1.0),
                  "Ray to hold one GPU's worth on dual-gpu")
    assert all(d in ("0", "1") for _, d, _, _ in ray.get(refs, timeout=120))


# -- truthful counts and records -----------------------------------------------------------------
def _reserved(sched):
    return sum(r.running for r in ray.get(sched.nodes.remote(), timeout=30))


def test_a_lease_granted_while_releasing_another_is_filed_under_its_own_id(lf, sched):
    req = Requirement(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.5)  # a class of its own
    lf.wait_until(lambda: _reserved(sched) == 0, "earlier leases to be taken back")
    ray.get(sched.lease.remote("test:a", req, None, 2), timeout=30)
    grant = ray.get(sched.lease.remote("test:b", req, None, 2, ["test:a"]), timeout=30)
    assert grant.lease_id == "test:b"
    assert _reserved(sched) == 2  # a's slots given back, b's held
    ray.get(sched.end_lease.remote("test:b"), timeout=30)
    assert _reserved(sched) == 0  # ending b frees what was granted to b


def test_renewals_are_not_calls(lf, sched):
    req = Requirement(min_tier="gpu_cuda", floor="cpu_ffmpeg", num_cpus=0.5)
    before = lf.handle.metrics()
    for _ in range(5):
        grant = ray.get(sched.lease.remote("test:renew", req, None, 8), timeout=30)
    assert any(s.fallback_levels > 0 for s in grant.slots)  # the grant did reach below min_tier
    ray.get(sched.end_lease.remote("test:renew"), timeout=30)
    after = lf.handle.metrics()
    assert after["fallbacks"] == before["fallbacks"]
    assert after["placements_succeeded"] == before["placements_succeeded"]


def test_fallbacks_and_placements_count_the_calls_that_ran(lf, names):
    """Compared with what the calls report: where each ran, and that node's tier now."""
    h = lf.handle
    tier = {n.name: n.tier for n in h.nodes(["active"])}
    time.sleep(1.0)  # earlier calls' workers have reported (they report once quiet for 0.5 s)
    before = h.metrics()
    n = 6 * FLEET_SLOTS
    ran = burst(apu_down, names, n=n, seconds=0.1)
    below = sum(k for name, k in ran.items() if tier[name].rank < Requirement(min_tier="gpu_apu").min_tier.rank)
    assert below > 0, ran  # the burst did spill below gpu_apu
    lf.wait_until(lambda: h.metrics()["placements_succeeded"] - before["placements_succeeded"] >= n, "the workers' reports")
    time.sleep(1.5)  # any late or double report would land by now
    after = h.metrics()
    assert after["placements_succeeded"] - before["placements_succeeded"] == n
    assert after["fallbacks"] - before["fallbacks"] == below
    assert h.fallback_count == after["fallbacks"]


def test_running_is_what_runs_not_what_is_reserved(lf, sched, tmp_path):
    req = Requirement(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.5)
    ray.get(sched.lease.remote("test:hold", req, None, 6), timeout=30)  # six slots reserved, no call
    try:
        assert _reserved(sched) >= 6
        lf.wait_until(lambda: sum(n.running for n in lf.handle.nodes()) == 0, "nothing running")
        marks = tmp_path / "started"

        def hold(seconds: float):
            with open(marks, "a") as f:
                f.write("x\n")
            time.sleep(seconds)

        slow = adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")(hold)
        refs = [slow.remote(3.0) for _ in range(2)]
        lf.wait_until(lambda: marks.exists() and len(marks.read_text().splitlines()) == 2, "two calls running")
        lf.wait_until(lambda: sum(n.running for n in lf.handle.nodes()) == 2, "nodes() to show the two running calls")
        ray.get(refs, timeout=60)
        lf.wait_until(lambda: sum(n.running for n in lf.handle.nodes()) == 0, "nodes() to show nothing running")
    finally:
        ray.get(sched.end_lease.remote("test:hold"), timeout=30)


# -- validated where the scheduler receives it -------------------------------------------------------
def test_an_unknown_pool_is_an_error_at_the_scheduler(lf, sched):
    req = Requirement(min_tier="cpu_ffmpeg", pool="no-such-pool")
    with pytest.raises(RequirementError) as exc:
        lf.handle.select_worker(req)
    assert exc.value.field == "pool" and "no-such-pool" in str(exc.value)
    with pytest.raises(RequirementError):
        ray.get(sched.explain.remote(req), timeout=30)
    with pytest.raises(RequirementError):
        ray.get(sched.lease.remote("test:pool", req, None, 1), timeout=30)


# -- callers never hang ---------------------------------------------------------------------------------
def test_a_scheduler_that_does_not_answer_gives_a_typed_error(lf, names, sched):
    pid = ray.get(sched.pid.remote(), timeout=30)
    conn = session.current()
    fresh = adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.25)(where)  # no lease yet
    old, conn.answer_timeout_s = conn.answer_timeout_s, 2.0
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(SchedulerUnavailableError) as exc:
            fresh.remote()
        assert "did not answer" in str(exc.value) and exc.value.waited_s == 2.0
    finally:
        os.kill(pid, signal.SIGCONT)
        conn.answer_timeout_s = old
    assert names[ray.get(fresh.remote(), timeout=60)] in {"gpu-cuda-workstation", "steamdeck-apu", "cpu-only-box",
                                                          "fragile-gpu", "dual-gpu"}

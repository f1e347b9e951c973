"""``scripts/bench_spares.py`` keeps to its budget: a ray-autoscaler phase still running when the
budget ends is cut, its cluster closed, and what it did not time is named (no Ray started here:
the phase is replaced by one that hangs until its cluster is closed)."""

import importlib.util
import threading
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_spares.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_spares_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class HangingCluster:
    def __init__(self) -> None:
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


def test_a_phase_past_the_budget_is_cut_and_its_cluster_closed(bench, monkeypatch):
    cluster = HangingCluster()

    def phase(trials, deadline, out, holder):
        holder["cluster"] = cluster
        out.append(12.5)  # one provision timed, then the next never ends
        cluster.closed.wait(60)
        raise RuntimeError("the cluster went away")  # what a cut phase sees; not reported as its fault

    monkeypatch.setattr(bench, "PHASE_FLOOR_S", 0.05)
    monkeypatch.setattr(bench, "_autoscaler_phase", phase)
    unmeasured: list[str] = []
    t0 = time.monotonic()
    got = bench.autoscaler_serving(3, time.monotonic() + 0.5, unmeasured)
    assert time.monotonic() - t0 < 30 and cluster.closed.is_set()
    assert got == [12.5]
    assert unmeasured == ["ray-autoscaler: 1 of 3 provision(s) timed before the budget ended"]


def test_a_phase_that_ends_in_time_is_not_cut_and_its_failure_is_named(bench, monkeypatch):
    def phase(trials, deadline, out, holder):
        out.extend([3.0, 4.0])
        raise TimeoutError("timed out waiting for the idle node given back")

    monkeypatch.setattr(bench, "PHASE_FLOOR_S", 0.05)
    monkeypatch.setattr(bench, "_autoscaler_phase", phase)
    unmeasured: list[str] = []
    assert bench.autoscaler_serving(3, time.monotonic() + 30, unmeasured) == [3.0, 4.0]
    assert unmeasured == ["ray-autoscaler: TimeoutError: timed out waiting for the idle node given back"]


def test_no_phase_starts_without_the_budget_for_one_provision(bench, monkeypatch):
    monkeypatch.setattr(bench, "_autoscaler_phase", lambda *a: pytest.fail("the phase started"))
    unmeasured: list[str] = []
    assert bench.autoscaler_serving(2, time.monotonic() + 1, unmeasured) == []
    assert unmeasured == ["ray-autoscaler: 0 of 2 provision(s) timed (budget spent before the phase)"]

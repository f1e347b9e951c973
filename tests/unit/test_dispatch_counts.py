"""What a call carries and how it counts itself (issue 11): every call under a lease counts once,
where it ran, as a fallback when it ran below its ``min_tier``; GPU work asks Ray for its GPUs."""

import pytest

from fabric import CapacityError, Requirement
from fabric.rayio import tasks, worker_calls
from fabric.core.tiers import ComputeTier


@pytest.fixture
def counts(monkeypatch):
    fresh = worker_calls.SpillCounts()
    monkeypatch.setattr(worker_calls, "_spill_counts", fresh)
    monkeypatch.setattr(worker_calls, "_spill_flusher", object())  # no reporting thread in a unit test
    monkeypatch.setattr(worker_calls, "_node_rank", ComputeTier.CPU_FFMPEG.rank)  # this worker's node label
    return fresh


def test_calls_on_leased_slots_count_with_their_slots_fallback(counts):
    double = lambda x: x * 2  # noqa: E731
    assert worker_calls.wrap_leased(double, False)(2) == 4  # a slot at min_tier
    assert worker_calls.wrap_leased(double, True)(3) == 6  # a slot below it (say, on a node the engine demoted)
    assert (counts.placed, counts.fallbacks) == (2, 1)


def test_spilled_calls_count_by_their_nodes_label_and_refuse_to_start_late(counts):
    run = worker_calls.wrap_spilled(lambda: "ran", ComputeTier.GPU_APU.rank, "f")
    assert run(float("inf")) == "ran"  # on a cpu_ffmpeg node: below gpu_apu
    low = worker_calls.wrap_spilled(lambda: "ran", ComputeTier.CPU_FFMPEG.rank, "g")
    assert low(float("inf")) == "ran"  # at its min_tier
    with pytest.raises(CapacityError):
        run(0.0)  # its queue deadline passed before a node took it
    assert (counts.placed, counts.fallbacks) == (2, 1)  # the refused call did not run, so it does not count


def test_gpu_work_asks_ray_for_the_gpus_the_scheduler_says():
    req = Requirement(min_tier="gpu_cuda", fallback=False, num_gpus=0.5)
    assert "num_gpus" not in tasks.base_options(req, 3, "t")
    assert tasks.base_options(req, 3, "t", 0.5)["num_gpus"] == 0.5
    opts = tasks.base_options(Requirement(min_tier="relay", memory_mib=64), 3, "t")
    assert opts["resources"] == {"fabric.slots": 1} and opts["memory"] == 64 * 1024 * 1024

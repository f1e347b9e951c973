"""ComputeTier: the eleven tiers, ranked, ordered by rank, parsed with clear errors."""

import pytest

from fabric import ComputeTier
from fabric.core.tiers import TIERS_BEST_FIRST

SEED_002 = [
    ("gpu_cuda", 10), ("gpu_vaapi", 9), ("gpu_apu", 8), ("cpu_ffmpeg", 7), ("batch", 6),
    ("ethernet", 5), ("framebuffer", 4), ("wasm", 3), ("dsp", 2), ("esp32", 1), ("relay", 0),
]


@pytest.mark.parametrize("name,rank", SEED_002)
def test_every_seed_tier_has_its_rank(name, rank):
    tier = ComputeTier.parse(name)
    assert tier.value == name
    assert tier.rank == rank
    assert ComputeTier.from_rank(rank) is tier


def test_exactly_eleven_tiers_best_first():
    assert [t.value for t in TIERS_BEST_FIRST] == [n for n, _ in SEED_002]
    assert len(ComputeTier) == 11


def test_ordering_is_by_rank_not_by_name():
    assert ComputeTier.GPU_CUDA > ComputeTier.CPU_FFMPEG  # "g" < "c" is false by name; rank decides
    assert ComputeTier.RELAY < ComputeTier.BATCH
    assert ComputeTier.GPU_APU >= ComputeTier.GPU_APU
    assert max(ComputeTier) is ComputeTier.GPU_CUDA
    assert sorted([ComputeTier.BATCH, ComputeTier.GPU_CUDA, ComputeTier.RELAY]) == [
        ComputeTier.RELAY, ComputeTier.BATCH, ComputeTier.GPU_CUDA]


def test_parse_is_case_insensitive_and_idempotent():
    assert ComputeTier.parse(" GPU_APU ") is ComputeTier.GPU_APU
    assert ComputeTier.parse(ComputeTier.DSP) is ComputeTier.DSP


@pytest.mark.parametrize("bad", ["gpu", "", "cuda", None, 7])
def test_parse_unknown_names_the_valid_tiers(bad):
    with pytest.raises(ValueError) as exc:
        ComputeTier.parse(bad)
    assert "gpu_cuda" in str(exc.value) and "relay" in str(exc.value)


def test_below_steps_one_tier_down():
    assert ComputeTier.GPU_CUDA.below() is ComputeTier.GPU_VAAPI
    assert ComputeTier.RELAY.below() is None


def test_tier_is_a_str_and_hashes_like_its_value():
    assert ComputeTier.GPU_CUDA == "gpu_cuda"
    assert {ComputeTier.GPU_CUDA: 1}["gpu_cuda"] == 1
    assert str(ComputeTier.BATCH) == "batch"
    with pytest.raises(TypeError):
        ComputeTier.GPU_CUDA < "relay"  # noqa: B015  ordering against plain strings is refused

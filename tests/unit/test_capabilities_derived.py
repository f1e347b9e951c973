"""NodeCapabilities derives its tiers and tags once per instance (issue 13): a copy with an update
derives them again, and the cache changes neither equality, nor dumps, nor what a pickle restores."""

import pickle

from fabric.core.capabilities import GpuInfo, GpuVendor, NodeCapabilities
from fabric.core.tiers import ComputeTier

CUDA = GpuInfo(index=0, vendor=GpuVendor.NVIDIA, model="NVIDIA GeForce RTX 4070", discrete=True, cuda=True)


def test_a_copy_with_an_update_derives_its_tiers_again():
    gpu = NodeCapabilities(name="box", cpu_logical=8, cpu_physical=4, cpu_usable=8, memory_mib=16384, gpus=(CUDA,))
    assert gpu.tier is ComputeTier.GPU_CUDA and "cuda" in gpu.capability_tags  # derived (and kept)
    lost = gpu.model_copy(update={"gpus": ()})  # the GPU vanished
    assert lost.tier is ComputeTier.CPU_FFMPEG and "cuda" not in lost.capability_tags
    assert gpu.tier is ComputeTier.GPU_CUDA


def test_the_cache_changes_no_equality_dump_or_pickle():
    a = NodeCapabilities(name="box", cpu_logical=4, cpu_physical=2, cpu_usable=4, memory_mib=8192)
    b = NodeCapabilities(name="box", cpu_logical=4, cpu_physical=2, cpu_usable=4, memory_mib=8192)
    a.capability_tags  # noqa: B018 (a has derived, b has not)
    assert a == b and b == a and a.model_dump() == b.model_dump() and "_derived" not in a.model_dump()
    again = pickle.loads(pickle.dumps(a))
    assert again == a and again.tiers == a.tiers and again.capability_tags == a.capability_tags
    assert NodeCapabilities.model_validate(a.model_dump()) == a

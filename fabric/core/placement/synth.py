"""Synthetic fleets and requests: for the property tests and ``scripts/bench_placement.py``.

``node_capabilities(kind, ...)`` builds the capabilities a probe would report for one hardware
class (so the tier is *derived*, as on a real node). ``random_fleet`` draws small adversarial
fleets (every filter has something to say); ``realistic_fleet`` draws large, plausible ones
(mostly CPU boxes, a few GPU nodes, spares, cordons, partial utilisation).
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

from fabric.core.capabilities import FfmpegInfo, FramebufferInfo, GpuInfo, GpuVendor, Limitations, NodeCapabilities
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement.context import Peer, PlacementContext
from fabric.core.placement.records import NodeRecord
from fabric.core.placement.requirement import Requirement
from fabric.core.settings import FabricSettings, NodeShape, Pool, PoolTier
from fabric.core.tiers import ComputeTier

KINDS = ("cuda", "vaapi", "apu", "cpu", "batch", "ethernet", "framebuffer", "wasm", "dsp", "esp32", "relay")
GPU_MODELS = {"cuda": ("NVIDIA GeForce RTX 4070", "NVIDIA A100-SXM4-40GB"), "vaapi": ("AMD Radeon RX 7600",), "apu": ("AMD Custom GPU 0405",)}
_VAAPI_ENC = {"VAProfileH264Main": ("VAEntrypointVLD", "VAEntrypointEncSlice")}


@lru_cache(maxsize=4096)
def node_capabilities(kind: str, cpus: int = 8, memory_mib: int = 16384, *, arch: str = "x86_64", gpus: int = 1,
                      gpu_model: str | None = None, slots: int | None = None) -> NodeCapabilities:
    """Capabilities of one hardware class (cached: records may share them, they are immutable)."""
    gpu_list: list[GpuInfo] = []
    working: tuple[str, ...] = ("libx264",) if cpus >= 2 else ()
    roles: tuple[str, ...] = ()
    framebuffer = None
    if kind == "cuda":
        model = gpu_model or GPU_MODELS["cuda"][0]
        gpu_list = [GpuInfo(index=i, vendor=GpuVendor.NVIDIA, model=model, discrete=True, cuda=True, encoders=("h264", "hevc"))
                    for i in range(gpus)]
        working += ("h264_nvenc",)
    elif kind in ("vaapi", "apu"):
        model = gpu_model or GPU_MODELS[kind][0]
        gpu_list = [GpuInfo(index=i, vendor=GpuVendor.AMD, model=model, discrete=(kind == "vaapi"), encoders=("h264",),
                            vaapi_profiles=_VAAPI_ENC) for i in range(gpus)]
        working += ("h264_vaapi",)
    elif kind in ("batch", "ethernet", "wasm", "dsp", "esp32", "relay"):
        roles = (kind,)
    elif kind == "framebuffer":
        framebuffer = FramebufferInfo()
    limitations = Limitations(max_concurrent_tasks=slots if slots is not None else max(1, cpus))
    return NodeCapabilities(
        name=f"{kind}-{cpus}c", arch=arch, cpu_logical=cpus, cpu_physical=max(1, cpus // 2) if cpus > 1 else 1,
        cpu_usable=float(cpus), memory_mib=memory_mib, gpus=tuple(gpu_list), ffmpeg=FfmpegInfo(working=working),
        framebuffer=framebuffer, roles=roles, limitations=limitations,
    )


def mixed_settings() -> FabricSettings:
    """Two pools: ``default`` (fixed spread, elastic binpack ``burst`` capped at 3 nodes) and ``edge``."""
    return FabricSettings(pools=(
        Pool(name="default", tiers=(
            PoolTier(name="fixed", packing="spread"),
            PoolTier(name="burst", provider="local", packing="binpack", scale_out="elastic", max_nodes=3, candidate_shapes=(
                NodeShape(name="small-cpu", tier=ComputeTier.CPU_FFMPEG, num_cpus=2, memory_mib=4096, capabilities=("arch:x86_64",)),
                NodeShape(name="gpu-box", tier=ComputeTier.GPU_CUDA, num_cpus=8, memory_mib=32768, gpus=1,
                          gpu_model="GeForce-RTX-4070", capabilities=("arch:x86_64", "cuda")),
            )),
        )),
        Pool(name="edge", tiers=(PoolTier(name="fixed", packing="binpack"),)),
    ))


TAGS = ("arch:x86_64", "arch:aarch64", "ffmpeg:h264_vaapi", "ffmpeg:h264_nvenc", "cuda", "framebuffer", "role:batch")
PORTS = ("1935/tcp", "8080/tcp", "5004/udp")
TEMPLATES = ("enc", "mux")
ZONES = ("a", "b", "c")


def random_record(rnd: random.Random, i: int) -> NodeRecord:
    """One node with random hardware and random live state (every filter has something to say)."""
    kind = rnd.choice(KINDS)
    cpus = rnd.choice((1, 2, 4, 8))
    gpus = rnd.choice((1, 1, 2)) if kind in ("cuda", "vaapi", "apu") else 0
    model = rnd.choice(GPU_MODELS[kind]) if gpus else None
    caps = node_capabilities(kind, cpus, rnd.choice((1024, 4096, 16384)), arch=rnd.choice(("x86_64", "x86_64", "aarch64")),
                             gpus=gpus or 1, gpu_model=model, slots=rnd.choice((1, 2, cpus)))
    slots = caps.limitations.max_concurrent_tasks
    running = rnd.randint(0, slots)
    spare = rnd.random() < 0.2
    jobs = frozenset(f"j{i}-{k}" for k in range(rnd.randint(0, min(1, running))))
    return NodeRecord(
        node_id=f"n{i:03d}", name=f"host-{i}", capabilities=caps,
        status=rnd.choice((NodeStatus.ACTIVE,) * 6 + (NodeStatus.DRAINING, NodeStatus.OFFLINE)),
        tier=rnd.choice((None,) * 5 + (ComputeTier.CPU_FFMPEG,)) if caps.tier > ComputeTier.CPU_FFMPEG else None,
        utilization=rnd.choice((0.0, 0.0, 0.1, 0.5, 0.9)), running=running,
        cordoned=rnd.random() < 0.1, flap_held=rnd.random() < 0.05, unhealthy=rnd.random() < 0.05,
        utilization_cap=rnd.choice((1.0, 1.0, 0.5, 0.0, 1.5)),
        reserved_cpus=rnd.choice((0.0, 0.5, 1.0, 2.0)) if running else 0.0,
        reserved_memory_mib=rnd.choice((0, 512, 2048)) if running else 0,
        gpu_reserved=tuple(rnd.choice((0.0, 0.0, 0.25, 0.5, 1.0)) for _ in caps.gpus),
        ports=frozenset(p for p in PORTS if rnd.random() < 0.2),
        jobs=jobs, exclusive_job=next(iter(jobs)) if jobs and rnd.random() < 0.3 else None,
        spare=spare, spare_reserved_for=frozenset(t for t in TEMPLATES if spare and rnd.random() < 0.4),
        spare_exclusive=spare and rnd.random() < 0.5,
        warm=frozenset(t for t in TEMPLATES if rnd.random() < 0.3),
        zone=rnd.choice(ZONES), cloud=rnd.choice(("aws", "oci")),
        pool=rnd.choice(("default", "default", "default", "edge", "nowhere")),
        pool_tier=rnd.choice(("fixed", "fixed", "burst", None)),
        launching=rnd.random() < 0.1,
        **_random_ray_terms(random.Random(hash(rnd.getstate()))),
    )


RACKS = ("r1", "r2", "r3")
RESOURCES = ("x", "y")
ACCELERATORS = ("A100", "T4")


def _random_ray_terms(extra: random.Random) -> dict:
    """A node's Ray labels and custom resources, drawn from their own generator (``extra``) so
    that the fleets drawn before they existed stay the same."""
    labels = {"rack": extra.choice(RACKS)} if extra.random() < 0.7 else {}
    resources = {r: float(extra.choice((0.5, 1, 2))) for r in RESOURCES if extra.random() < 0.3}
    if extra.random() < 0.3:
        resources[f"accelerator_type:{extra.choice(ACCELERATORS)}"] = 1.0
    return {"ray_labels": labels, "ray_resources": resources}


def _random_ray_asks(extra: random.Random) -> dict:
    """A requirement's Ray terms (``resources``, ``label_selector``, ``accelerator_type``), mostly none."""
    out: dict = {}
    if extra.random() < 0.15:
        out["resources"] = {extra.choice(RESOURCES): extra.choice((0.5, 1, 2))}
    if extra.random() < 0.1:
        out["accelerator_type"] = extra.choice(ACCELERATORS)
    if extra.random() < 0.2:
        out["label_selector"] = {"rack": extra.choice(("r1", "!r2", "in(r1,r3)", "!in(r1,r2)"))}
    return out


def random_requirement(rnd: random.Random) -> Requirement:
    extra = random.Random(hash(rnd.getstate()))
    ranks = sorted(rnd.sample(range(11), 2))
    hard = rnd.random() < 0.2
    gpus = rnd.choice((0, 0, 0, 0.25, 0.5, 1, 2))
    return Requirement(
        min_tier=ComputeTier.from_rank(ranks[1]), floor=None if hard else ComputeTier.from_rank(ranks[0]), fallback=not hard,
        num_cpus=rnd.choice((0, 0.5, 1, 1, 2, 4)), memory_mib=rnd.choice((0, 0, 512, 4096)), num_cores=rnd.choice((0, 0, 1, 4)),
        num_gpus=gpus, gpu_model=rnd.choice((None, None, "GeForce-RTX-4070", "NVIDIA A100-SXM4-40GB")) if gpus else None,
        capabilities=tuple(t for t in TAGS if rnd.random() < 0.1), ports=tuple(p for p in PORTS if rnd.random() < 0.15),
        pool=rnd.choice((None, None, "default", "edge")), prefer=rnd.choice(("highest", "highest", "lowest")),
        exclusive=rnd.random() < 0.1, when_full=rnd.choice(("spill", "spill", "wait")),
        scale=rnd.choice(("degrade_first", "provision_first")),
        **_random_ray_asks(extra),
    )


def random_context(rnd: random.Random, node_ids: list[str]) -> PlacementContext:
    if rnd.random() < 0.4 or not node_ids:
        return PlacementContext()
    pick = lambda: rnd.choice(node_ids)  # noqa: E731
    peers = tuple(Peer(job=f"p{k}", node_id=pick(), zone=rnd.choice(ZONES + (None,)), rule_less=rnd.random() < 0.5)
                  for k in range(rnd.choice((0, 0, 1, 2))))
    recovering = rnd.random() < 0.3
    return PlacementContext(
        replica_index=rnd.choice((0, 1)),
        other_node=pick() if rnd.random() < 0.5 else None, other_zone=rnd.choice(ZONES), other_cloud=rnd.choice(("aws", "oci")),
        same_node=rnd.choice(("allow", "forbid")), same_az=rnd.choice(("allow", "forbid")), same_cloud=rnd.choice(("allow", "forbid")),
        job="me", job_id=f"job-{rnd.randint(0, 9999)}",
        co_locate_with=tuple(p.job for p in peers if rnd.random() < 0.3),
        separate_from=tuple(p.job for p in peers if rnd.random() < 0.3),
        same_node_default=rnd.random() < 0.2, intra_zone=rnd.choice(("hard", "soft", "off")), peers=peers,
        target_node=pick() if rnd.random() < 0.1 else None,
        exclude_nodes=frozenset(pick() for _ in range(rnd.choice((0, 0, 1, 3)))),
        recovering=recovering, on_runtime_failure=rnd.choice(("prefer_spare", "avoid_spare")),
        launch_policy=rnd.choice(("avoid_spare", "allow_spare")), override_reservation=rnd.random() < 0.2,
        template=rnd.choice((None,) + TEMPLATES), template_images=(),
    )


# -- realistic fleets for the benchmark ------------------------------------------------------------
def bench_settings() -> FabricSettings:
    """One pool: ``onprem`` (fixed, spread), ``cloud`` (elastic, binpack, capped)."""
    return FabricSettings(pools=(Pool(name="default", tiers=(
        PoolTier(name="onprem", packing="spread"),
        PoolTier(name="cloud", provider="ray-autoscaler", packing="binpack", scale_out="elastic", max_nodes=10_000,
                 candidate_shapes=(NodeShape(name="c8", tier=ComputeTier.CPU_FFMPEG, num_cpus=8, memory_mib=32768),)),
    )),))


_MIX = (("cpu", 50), ("apu", 10), ("vaapi", 6), ("cuda", 6), ("batch", 10), ("framebuffer", 4), ("wasm", 4),
        ("ethernet", 3), ("dsp", 2), ("esp32", 2), ("relay", 3))


def realistic_fleet(n: int, seed: int = 0) -> list[NodeRecord]:
    """``n`` nodes: half CPU boxes, a fifth GPU nodes, edge devices; 70 % on-prem, 30 % cloud
    (binpack); 2 % spares; 1 % cordoned; 1 % draining; 3 % launching; some aarch64."""
    rnd = random.Random(seed)
    kinds = [k for k, w in _MIX for _ in range(w)]
    out = []
    for i in range(n):
        kind = rnd.choice(kinds)
        cpus = rnd.choice((2, 4, 8, 16)) if kind not in ("esp32", "dsp", "relay") else rnd.choice((1, 2))
        caps = node_capabilities(kind, cpus, cpus * 4096, arch="aarch64" if rnd.random() < 0.15 else "x86_64",
                                 gpus=rnd.choice((1, 1, 2)) if kind in ("cuda", "vaapi", "apu") else 1)
        slots = caps.limitations.max_concurrent_tasks
        running = rnd.randint(0, slots // 2)
        out.append(NodeRecord(
            node_id=f"node-{i:05d}", name=f"host-{i:05d}", capabilities=caps,
            status=NodeStatus.DRAINING if rnd.random() < 0.01 else NodeStatus.ACTIVE,
            utilization=round(rnd.random() * 0.5, 2), running=running, reserved_cpus=float(running),
            cordoned=rnd.random() < 0.01, spare=rnd.random() < 0.02, zone=rnd.choice(ZONES),
            cloud="onprem" if i % 10 < 7 else "aws", pool_tier="onprem" if i % 10 < 7 else "cloud",
            launching=rnd.random() < 0.03,
        ))
    return out


_REQ_MIX: tuple[tuple[dict[str, Any], int], ...] = (
    (dict(min_tier="cpu_ffmpeg", num_cpus=1), 35),
    (dict(min_tier="gpu_apu", floor="cpu_ffmpeg", num_cpus=1, payload_size=1024), 20),  # a burst
    (dict(min_tier="gpu_cuda", fallback=False, num_gpus=0.25), 5),
    (dict(min_tier="gpu_vaapi", floor="cpu_ffmpeg", num_cpus=2), 8),
    (dict(min_tier="relay", num_cpus=0.5), 10),
    (dict(min_tier="batch", floor="relay", num_cpus=1), 8),
    (dict(min_tier="cpu_ffmpeg", num_cpus=1, capabilities=("arch:aarch64",)), 5),
    (dict(min_tier="cpu_ffmpeg", num_cpus=1, ports=("1935/tcp",)), 3),
    (dict(min_tier="cpu_ffmpeg", num_cpus=4, memory_mib=4096, prefer="lowest"), 6),
)


def realistic_requests(count: int, seed: int = 1) -> list[Requirement]:
    """A mixed stream of task requirements (built once; the engine is timed, not construction)."""
    rnd = random.Random(seed)
    protos = [Requirement(**kw) for kw, w in _REQ_MIX for _ in range(w)]
    return [rnd.choice(protos) for _ in range(count)]

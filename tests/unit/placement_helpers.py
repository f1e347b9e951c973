"""Hand-built fleets for the placement unit tests."""

from fabric.core.placement import FleetView, NodeRecord, place, reference
from fabric.core.placement.synth import node_capabilities, mixed_settings

KIND_OF = {"gpu_cuda": "cuda", "gpu_vaapi": "vaapi", "gpu_apu": "apu", "cpu_ffmpeg": "cpu", "relay": "relay", "batch": "batch"}


def node(node_id: str, kind: str = "cpu", *, cpus: int = 8, memory_mib: int = 16384, gpus: int = 1, arch: str = "x86_64",
         gpu_model: str | None = None, slots: int | None = None, **kw) -> NodeRecord:
    caps = node_capabilities(KIND_OF.get(kind, kind), cpus, memory_mib, arch=arch, gpus=gpus, gpu_model=gpu_model, slots=slots)
    return NodeRecord(node_id=node_id, name=f"host-{node_id}", capabilities=caps, **kw)


def fleet(*nodes: NodeRecord, settings=None) -> FleetView:
    f = FleetView(nodes, settings if settings is not None else mixed_settings())
    f.validate()
    return f


def both(f: FleetView, req, ctx=None):
    """Decide with both engines (with traces); assert they agree; return the reference decision."""
    ref = reference.place(f, req, ctx, trace=True)
    fast = place(f, req, ctx, trace=True)
    assert fast.same_outcome(ref), f"fast {fast} != reference {ref}"
    assert fast.trace == ref.trace
    return ref

"""``RegistryRecord.to_node_record(previous=...)``: the feed's fast path equals a build from scratch."""

from fabric.core.capabilities import Limitations, NodeCapabilities
from fabric.core.lifecycle import NodeStatus
from fabric.core.records import RegistryRecord, Utilization

CAPS = NodeCapabilities(name="box", arch="x86_64", cpu_logical=8, cpu_physical=4, cpu_usable=8.0, memory_mib=16384,
                        limitations=Limitations(max_concurrent_tasks=4))
LABELS = {"fabric.io/tier": "cpu_ffmpeg", "fabric.io/zone": "home"}

DERIVED = ("_rank", "_tags", "_slots", "_cpu_total", "_cores", "_mem_total", "_gpu_models", "_util", "_load", "_eligible")


def registry_record(**kw):
    base = dict(node_id="a" * 56, name="box", capabilities=CAPS, labels=LABELS, last_seen=10.0,
                utilization=Utilization(cpu_percent=10.0))
    return RegistryRecord(**{**base, **kw})


def test_live_changes_copy_equals_a_fresh_build():
    first = registry_record()
    prev = first.to_node_record(10.0)
    for update in ({"utilization": Utilization(cpu_percent=80.0)}, {"status": NodeStatus.DRAINING},
                   {"cordoned": True}, {"held_until": 50.0}, {"last_seen": 20.0}):
        newer = first.model_copy(update=update)
        fast = newer.to_node_record(20.0, previous=prev)
        slow = newer.to_node_record(20.0)
        assert fast is not prev and fast == slow, update
        assert {k: getattr(fast, k) for k in DERIVED} == {k: getattr(slow, k) for k in DERIVED}, update
        assert fast._gen != prev._gen and fast._bk is None


def test_identity_changes_build_from_scratch():
    prev = registry_record().to_node_record(10.0)
    other_caps = registry_record(capabilities=CAPS.model_copy(update={"cpu_usable": 4.0}))
    assert other_caps.to_node_record(10.0, previous=prev)._cpu_total == 4.0
    relabelled = registry_record(labels={**LABELS, "fabric.io/zone": "cloud"})
    assert relabelled.to_node_record(10.0, previous=prev).zone == "cloud"
    assert registry_record().to_node_record(10.0, max_concurrent_tasks=1, previous=prev)._slots == 1

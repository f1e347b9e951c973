"""An adaptive-fabric job for ``ray job submit``.

    ray job submit --address http://HEAD:8265 -- python examples/adaptive_job.py

It connects to the cluster the job runs on, finds the fabric (``fabric.up()`` is idempotent: it
joins the detached actors that are already there, or brings them up), and runs a small burst of
``@adaptive.remote`` work that prefers a GPU tier and may degrade to CPU. It prints where the work
ran, by tier, and a last line ``FABRIC_RESULT {json}`` for scripts to read.
"""

from __future__ import annotations

import collections
import hashlib
import json
import sys

import ray

import fabric
from fabric import adaptive


@adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")
def checksum(seq: int) -> tuple[int, str, str]:
    """A small CPU kernel standing in for a transcode; returns where it ran."""
    h = b"%d" % seq
    for _ in range(20_000):
        h = hashlib.sha256(h).digest()
    return seq, ray.get_runtime_context().get_node_id(), h.hex()[:12]


def main(n: int = 24) -> int:
    ray.init()  # inside `ray job submit`: the job's cluster
    handle = fabric.up()
    tier_of = {r.node_id: r.tier.value for r in handle.nodes()}
    before = handle.fallback_count
    results = ray.get([checksum.remote(i) for i in range(n)])
    by_tier = collections.Counter(tier_of.get(node, "unknown") for _, node, _ in results)
    for tier, count in by_tier.most_common():
        print(f"{tier:<12} {count} tasks")
    summary = {"tasks": len(results), "complete": sorted(s for s, _, _ in results) == list(range(n)),
               "by_tier": dict(by_tier), "fallbacks": handle.fallback_count - before}
    print("FABRIC_RESULT " + json.dumps(summary, sort_keys=True))
    return 0 if summary["complete"] else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 24))

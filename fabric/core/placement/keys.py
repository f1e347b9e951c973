"""The ranking key: ten components compared lexicographically, smaller wins, no weights.

Each component decides only when every component above it tied (the tier
preference is component 4).
"""

from __future__ import annotations

from fabric.core.placement.filters import Query
from fabric.core.placement.records import NodeRecord

KEY_COMPONENTS: tuple[str, ...] = (
    "resilience_violations",  # 1 fewer `forbid` domains shared with the other replica
    "launching",              # 2 booted (0) over still launching (1)
    "avoided_spare",          # 3 an unconsumed spare when the policy in force says avoid (1)
    "tier",                   # 4 higher tier first (-rank), or lowest that serves (rank)
    "warmth",                 # 5 more template images held (-count)
    "reservation",            # 6 a still-empty spare reserved for this template (0)
    "preferred_spare",        # 7 an unconsumed spare when the recovering job prefers spares (0)
    "packing",                # 8 load under spread, -load under binpack
    "same_zone",              # 9 shares a zone with a placed same-replica peer (soft rule) (0)
    "node_id",                # 10 determinism
)


def resilience_violations(rec: NodeRecord, q: Query) -> tuple[str, ...]:
    """The ``forbid`` failure domains ``rec`` shares with the other replica (best-effort rule)."""
    ctx = q.ctx
    if ctx.other_node is None:
        return ()
    out = []
    if ctx.same_node == "forbid" and rec.node_id == ctx.other_node:
        out.append("same_node")
    if ctx.same_az == "forbid" and rec.zone is not None and rec.zone == ctx.other_zone:
        out.append("same_az")
    if ctx.same_cloud == "forbid" and rec.cloud is not None and rec.cloud == ctx.other_cloud:
        out.append("same_cloud")
    return tuple(out)


def placement_key(rec: NodeRecord, q: Query) -> tuple:
    """The node's key at this step; the survivor with the smallest key wins."""
    ctx = q.ctx
    unconsumed = rec.unconsumed_spare
    template = ctx.template
    return (
        len(resilience_violations(rec, q)),
        1 if rec.launching else 0,
        1 if (unconsumed and ctx.avoid_spares) else 0,
        -rec._rank if q.req.prefer == "highest" else rec._rank,
        -sum(1 for image in q.images if image in rec.warm),
        0 if (unconsumed and template is not None and template in rec.spare_reserved_for) else 1,
        0 if (unconsumed and ctx.prefer_spares) else 1,
        rec.load if q.packing == "spread" else -rec.load,
        0 if (ctx.intra_zone == "soft" and q.peer_zones and rec.zone in q.peer_zones) else 1,
        rec.node_id,
    )

"""The pools view: what ``fabric pools`` prints (and ``fabric status`` after its node table), as
plain data, from the scheduler's answers; and that view as the operator API's ``PoolsReply`` and
back.

``pools_view(settings, nodes, provisions, spares)`` is the one builder, used where the answers are:
the CLI through Ray (``fabric.cli.pools_cmd``, with ``FabricHandle``'s) and the ``Inspect.ListPools``
RPC on the head (``fabric.api.inspect``, with the scheduler actor's and the spare reconcilers').
``pools_message`` and ``view_from_message`` carry it over gRPC unchanged: a view read back equals
the view sent, so ``--api`` prints the same text and ``--json`` as the Ray path. No gRPC is
imported until a message is built or read.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from fabric.api import inspect_pb2
    from fabric.core.settings import FabricSettings

__all__ = ["pools_message", "pools_view", "spare_provisions", "view_from_message"]


def pools_view(settings: FabricSettings, nodes: Sequence[Any], provisions: Mapping[str, Any],
               spares: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The pools as plain data (``nodes``: the scheduler's records, prospective ones included;
    ``provisions``: the scheduler's ``provisions()``; ``spares``: each spare reconciler's ``status()``)."""
    held = {(h["pool"], h["pool_tier"]): h["until_s"] for h in provisions.get("held", ())}
    by_pool = {s["pool"]: s for s in spares}
    pools = []
    for pool in settings.pools:
        fixed = next((t.name for t in pool.tiers if t.scale_out == "fixed"), pool.tiers[0].name)
        tiers = []
        for t in pool.tiers:
            mine = [n for n in nodes if (n.pool or settings.default_pool.name) == pool.name and (n.pool_tier or fixed) == t.name
                    and str(getattr(n.status, "value", n.status)) != "dead"]
            tiers.append({"pool_tier": t.name, "scale_out": t.scale_out, "provider": t.provider, "launch_mode": t.launch_mode,
                          "nodes": sum(1 for n in mine if not n.launching), "launching": sum(1 for n in mine if n.launching),
                          "max_nodes": t.max_nodes, "spares": sum(1 for n in mine if n.spare and not n.launching),
                          "held_s": held.get((pool.name, t.name))})
        s = by_pool.get(pool.name)
        pools.append({"pool": pool.name, "tiers": tiers, "spares": None if s is None else {
            "target": s["target"], "live": len(s["live"]), "pending": len(s["pending"]), "consumed": len(s["consumed"]),
            "warm_for": list(s["warm_for"]), "reserved_for": list(s["reserved_for"]), "exclusive": s["exclusive"],
            "backing_off": s["backing_off"]}})
    prospective = [{**p, "phase": p.get("phase") or ("started" if p.get("instance_id") else "asked")}
                   for p in provisions.get("pending", ())]
    return {"pools": pools, "prospective": prospective, "spare_provisions": spare_provisions(provisions),
            "instances": list(provisions.get("instances", ()))}


def spare_provisions(provisions: Mapping[str, Any], now: float | None = None) -> list[dict[str, Any]]:
    """The spare reconcilers' provisions in flight (the scheduler's kept rows, read by their own
    reader): id, pool, pool tier, shape, phase, instance id (None until answered) and age in seconds."""
    from fabric.core.spares.rows import spare_provision_from_row

    at = time.time() if now is None else now
    out = []
    for row in provisions.get("spare_provisions", ()):
        k = spare_provision_from_row(row)
        out.append({"provision_id": k.provision_id, "pool": k.pool, "pool_tier": k.pool_tier, "shape": k.shape.name,
                    "phase": k.phase.value, "instance_id": k.instance_id, "age_s": round(max(0.0, at - k.asked_at), 1)})
    return out


# -- over the wire ------------------------------------------------------------------------------------------
_PROSPECTIVE_TEXT = ("provision_id", "pool", "pool_tier", "provider", "shape", "phase", "node_id", "reason")
_SPARE_TEXT = ("provision_id", "pool", "pool_tier", "shape", "phase")
_INSTANCE_TEXT = ("provider", "instance_id", "pool", "pool_tier", "shape")


def _texts(row: Mapping[str, Any], keys: Sequence[str]) -> dict[str, str]:
    return {k: str(row.get(k) or "") for k in keys}


def _given(**values: Any) -> dict[str, Any]:
    """The keyword arguments that are not None (an unset optional field)."""
    return {k: v for k, v in values.items() if v is not None}


def pools_message(view: Mapping[str, Any]) -> inspect_pb2.PoolsReply:
    """``view`` (``pools_view``'s) as a ``PoolsReply``."""
    from fabric.api import inspect_pb2 as pb

    pools = []
    for pool in view["pools"]:
        tiers = [pb.PoolTier(pool_tier=str(t["pool_tier"]), scale_out=str(t["scale_out"]), provider=str(t["provider"] or ""),
                             launch_mode=str(t["launch_mode"] or ""), nodes=int(t["nodes"]), launching=int(t["launching"]),
                             spares=int(t["spares"]), **_given(max_nodes=t["max_nodes"], held_s=t["held_s"]))
                 for t in pool["tiers"]]
        s = pool["spares"]
        spares = None if s is None else pb.HotSpares(
            target=int(s["target"]), live=int(s["live"]), pending=int(s["pending"]), consumed=int(s["consumed"]),
            warm_for=[str(w) for w in s["warm_for"]], reserved_for=[str(r) for r in s["reserved_for"]],
            exclusive=bool(s["exclusive"]), backing_off=bool(s["backing_off"]))
        pools.append(pb.Pool(pool=str(pool["pool"]), tiers=tiers, **_given(spares=spares)))
    return pb.PoolsReply(
        pools=pools,
        prospective=[pb.ProspectiveNode(**_texts(p, _PROSPECTIVE_TEXT), age_s=float(p.get("age_s") or 0.0),
                                        timeout_in_s=float(p.get("timeout_in_s") or 0.0), **_given(instance_id=p.get("instance_id")))
                     for p in view["prospective"]],
        spare_provisions=[pb.SpareProvision(**_texts(p, _SPARE_TEXT), age_s=float(p.get("age_s") or 0.0),
                                            **_given(instance_id=p.get("instance_id")))
                          for p in view.get("spare_provisions", ())],
        instances=[pb.ProviderInstance(**_texts(i, _INSTANCE_TEXT), spare=bool(i.get("spare")),
                                       **_given(serving_s=i.get("serving_s")))
                   for i in view.get("instances", ())],
    )


def _optional(message: Any, field: str) -> Any:
    return getattr(message, field) if message.HasField(field) else None


def view_from_message(reply: inspect_pb2.PoolsReply) -> dict[str, Any]:
    """A ``PoolsReply`` back as the view ``pools_view`` made (the same keys and values)."""
    pools = []
    for pool in reply.pools:
        tiers = [{"pool_tier": t.pool_tier, "scale_out": t.scale_out, "provider": t.provider, "launch_mode": t.launch_mode,
                  "nodes": t.nodes, "launching": t.launching, "max_nodes": _optional(t, "max_nodes"), "spares": t.spares,
                  "held_s": _optional(t, "held_s")} for t in pool.tiers]
        s = pool.spares
        pools.append({"pool": pool.pool, "tiers": tiers, "spares": None if not pool.HasField("spares") else {
            "target": s.target, "live": s.live, "pending": s.pending, "consumed": s.consumed, "warm_for": list(s.warm_for),
            "reserved_for": list(s.reserved_for), "exclusive": s.exclusive, "backing_off": s.backing_off}})
    prospective = [{"provision_id": p.provision_id, "pool": p.pool, "pool_tier": p.pool_tier, "provider": p.provider,
                    "shape": p.shape, "instance_id": _optional(p, "instance_id"), "age_s": p.age_s,
                    "timeout_in_s": p.timeout_in_s, "node_id": p.node_id, "reason": p.reason, "phase": p.phase}
                   for p in reply.prospective]
    spares = [{"provision_id": p.provision_id, "pool": p.pool, "pool_tier": p.pool_tier, "shape": p.shape, "phase": p.phase,
               "instance_id": _optional(p, "instance_id"), "age_s": p.age_s} for p in reply.spare_provisions]
    instances = [{"provider": i.provider, "instance_id": i.instance_id, "pool": i.pool, "pool_tier": i.pool_tier,
                  "shape": i.shape, "spare": i.spare, "serving_s": _optional(i, "serving_s")} for i in reply.instances]
    return {"pools": pools, "prospective": prospective, "spare_provisions": spares, "instances": instances}

"""``fabric pools``: the pools as the scheduler sees them (also the second half of ``fabric status``).

For each pool, its pool tiers in cost order (scale-out, provider, nodes up / launching / max,
held after a failed provision), its hot spares (target / live, pending, warm for what, backing
off) and the provisions in flight: the task core's prospective nodes (phase, shape, age, time left
before abandoned) and the spare reconcilers' (phase, shape, age). A phase is ``asked`` (the
provider has not answered) or ``started`` (it answered an instance id; the node has not joined).
``--json`` prints the same as one object.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from fabric.cli.common import EXIT_FAILED, EXIT_USAGE, address_parent, bad_address, json_parent
from fabric.cli.tables import NARROW, add_width_flag, fit_lines, output_width


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("pools", help="pools, pool tiers, hot spares and prospective nodes, as the scheduler sees them",
                              parents=[address_parent(), json_parent("one JSON object: pools, spares, prospective")])
    add_width_flag(p)
    p.set_defaults(func=run_pools)


def pools_view(settings: Any, nodes: Sequence[Any], provisions: dict, spares: Sequence[dict]) -> dict:
    """What ``fabric pools`` prints, as plain data (``nodes``: the scheduler's records, prospective ones included)."""
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


def spare_provisions(provisions: dict, now: float | None = None) -> list[dict]:
    """The spare reconcilers' provisions in flight (the scheduler's kept rows, read by their own
    reader): id, pool, pool tier, shape, phase, instance id (None until answered) and age in seconds."""
    import time

    from fabric.core.spares.rows import spare_provision_from_row

    at = time.time() if now is None else now
    out = []
    for row in provisions.get("spare_provisions", ()):
        k = spare_provision_from_row(row)
        out.append({"provision_id": k.provision_id, "pool": k.pool, "pool_tier": k.pool_tier, "shape": k.shape.name,
                    "phase": k.phase.value, "instance_id": k.instance_id, "age_s": round(max(0.0, at - k.asked_at), 1)})
    return out


def format_pools(view: dict, width: int | None = NARROW) -> str:
    """The view as lines that fit ``width`` columns (80 by default; None: long names whole)."""
    lines: list[str] = []
    for pool in view["pools"]:
        lines.append(f"pool {pool['pool']}")
        lines.append(f"  {'POOL TIER':<12} {'SCALE':<7} {'PROVIDER':<14} {'UP':>3} {'LAUNCH':>6} {'MAX':>4} {'SPARE':>5} NOTE")
        for t in pool["tiers"]:
            note = f"held {t['held_s']:.0f}s (failed)" if t["held_s"] else ("spot" if t["launch_mode"] == "spot" else "")
            cap = "-" if t["max_nodes"] is None else str(t["max_nodes"])
            lines.append(f"  {t['pool_tier'][:12]:<12} {t['scale_out']:<7} {t['provider'][:14]:<14} {t['nodes']:>3} "
                         f"{t['launching']:>6} {cap:>4} {t['spares']:>5} {note}".rstrip())
        s = pool["spares"]
        if s is not None:
            warm = ", ".join(s["warm_for"]) or "-"
            extra = " (backing off)" if s["backing_off"] else ""
            lines.append(f"  hot spares: {s['live']}/{s['target']} live, {s['pending']} pending, warm for {warm}{extra}")
    if view["prospective"]:
        lines.append("prospective nodes (provisioning)")
        for p in view["prospective"]:
            where = f"{p['pool']}/{p['pool_tier']}"
            lines.append(f"  {p['provision_id']:<6} {p['phase']:<7} {where[:22]:<22} {p['shape'][:12]:<12} {p['age_s']:>6.1f}s old, "
                         f"{p['timeout_in_s']:.0f}s left")
    if view.get("spare_provisions"):
        lines.append("spare provisions in flight")
        for p in view["spare_provisions"]:
            where = f"{p['pool']}/{p['pool_tier']}"
            lines.append(f"  {p['provision_id'][:20]:<20} {p['phase']:<7} {where[:22]:<22} {p['shape'][:12]:<12} "
                         f"{p['age_s']:>6.1f}s old")
    return fit_lines("\n".join(lines), width)


def fetch_view(handle: Any) -> dict:
    """The view from a running fabric (``FabricHandle``)."""
    return pools_view(handle.settings_in_force(), handle.scheduler_nodes(), handle.provisions(), handle.spares())


def run_pools(args: argparse.Namespace) -> int:
    from fabric.cli.connect import connect
    from fabric.runtime.control import FabricHandle

    if bad_address(args.address, "pools"):
        return EXIT_USAGE
    ray = connect(args.address, "pools")
    if ray is None:
        return EXIT_FAILED
    try:
        try:
            view = fetch_view(FabricHandle())
        except RuntimeError as exc:
            print(f"fabric pools: {exc}", file=sys.stderr)
            return 1
        print(json.dumps(view, indent=2, default=str) if args.json else format_pools(view, output_width(args)))
        return 0
    finally:
        ray.shutdown()


__all__ = ["add_parser", "fetch_view", "format_pools", "pools_view", "run_pools", "spare_provisions"]

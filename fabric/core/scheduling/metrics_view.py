"""The fabric's metrics, assembled (pure): the placement and job counters and per-pool gauges, plus per-tier
node counts and utilisation, from plain inputs; and the series they are exported as.

``metrics_view`` builds the dict ``h.metrics()`` returns: every figure the scheduler core and the
job runner already keep, plus

- ``placements_attempted`` / ``placements_succeeded`` / ``placements_failed`` /
  ``placements_dispatch_failed`` (tasks and jobs together). A placement that was made
  but whose start then failed (a job instance that could not be created, a queued task placed for
  a caller that had gone) counts under ``placements_dispatch_failed`` *instead of* succeeded, so
  ``placements_succeeded`` is the core's placed count less the dispatch failures.
  ``dispatch_failed`` splits them by kind (``tasks``, ``jobs``).
- ``jobs_rejected``, ``bundles_broken``, ``jobs_dropped`` (0 without a job runner) and
  ``broken_bundle_ids``;
- ``pools``: per pool ``nodes``, ``live_spares`` (tagged spare, carrying no work),
  ``spare_target`` (its hot-spare entry's ``target_count``), ``used_capacity_fraction`` (slots
  in use over slots, nodes still launching left out) and ``broken_bundle_ids``;
- ``tiers`` (the core's: per tier nodes, placeable, running, slots, utilization), ``fallbacks``;
- ``nodes_unhealthy`` (nodes kept off placement now for failed starts) and
  ``nodes_marked_unhealthy`` (how often a node was marked so, since start);
- ``job_starts``: per job that ever ran and has not ended, ``started_at`` (its current instance's
  start, None while none runs) and ``first_started_at`` (epoch seconds).

``series`` turns such a dict into the exported series: counters (cumulative figures, which the
sink is sent as deltas) and gauges, each keyed ``(name, tags)``. A gauge whose tag set is absent
this time (a pool with no nodes left, a bundle no longer broken) is the exporter's to zero.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from fabric.core.placement import NodeRecord

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]

PLACEMENT_OUTCOMES = ("attempted", "succeeded", "failed", "dispatch_failed", "deferred")
"""The ``outcome`` tag values of the ``fabric_placements`` counter."""

JOB_COUNTERS = ("jobs_rejected", "bundles_broken", "jobs_dropped", "job_restarts")
"""Job-runner counters exported one counter each (``fabric_<name>``)."""


def _pools_view(records: Iterable[NodeRecord], pools: Iterable[str], default_pool: str,
                spare_targets: Mapping[str, int], broken_by_pool: Mapping[str, list[str]],
                group_sums: Mapping[tuple[str, str], tuple[int, ...]] | None = None) -> dict[str, dict[str, Any]]:
    acc: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        return acc.setdefault(name, {"nodes": 0, "live_spares": 0, "spare_target": 0, "running": 0, "slots": 0})

    for name in pools:
        entry(name)
    for name in spare_targets:
        entry(name)
    for name in broken_by_pool:
        entry(name)
    if group_sums is not None:  # the fleet's running sums (FleetView.group_sums): what the loop below adds up
        for (_tier, pool), (nodes, _placeable, _running, _slots, spares, running, slots, *_rest) in group_sums.items():
            e = entry(pool)
            e["nodes"] += nodes
            e["live_spares"] += spares
            e["running"] += running
            e["slots"] += slots
        records = ()
    for rec in records:
        e = entry(rec.pool or default_pool)
        e["nodes"] += 1
        e["live_spares"] += int(rec.unconsumed_spare)
        if not rec.launching:
            e["running"] += rec.running
            e["slots"] += rec.slots
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(acc):
        e = acc[name]
        used = min(1.0, e["running"] / e["slots"]) if e["slots"] else 0.0
        out[name] = {"nodes": e["nodes"], "live_spares": e["live_spares"],
                     "spare_target": int(spare_targets.get(name, 0)), "used_capacity_fraction": round(used, 4),
                     "broken_bundle_ids": sorted(broken_by_pool.get(name, ()))}
    return out


def metrics_view(core: Mapping[str, Any], records: Iterable[NodeRecord], *, jobs: Mapping[str, Any] | None = None,
                 pools: Iterable[str] = (), default_pool: str = "default", spare_targets: Mapping[str, int] | None = None,
                 bundle_pools: Mapping[str, str] | None = None, tasks_dispatch_failed: int = 0,
                 jobs_dispatch_failed: int = 0, uptime_s: float = 0.0,
                 group_sums: Mapping[tuple[str, str], tuple[int, ...]] | None = None) -> dict[str, Any]:
    """``h.metrics()``: ``core`` is ``SchedulerCore.metrics()``, ``records`` the fleet's node
    records, ``jobs`` ``JobRunner.metrics()`` (None: no job runner), ``pools`` the configured pool
    names, ``spare_targets`` pool -> hot-spare target, ``bundle_pools`` bundle id -> its pool (for
    the broken ones' per-pool lists), the dispatch failures of tasks and of jobs, ``uptime_s``.
    Negative dispatch counts are read as 0; every figure of ``core`` and ``jobs`` is kept.
    ``group_sums`` (``FleetView.group_sums``), when given, stands for ``records``: the same per-pool
    figures, already summed."""
    tasks_failed, jobs_failed = max(0, int(tasks_dispatch_failed)), max(0, int(jobs_dispatch_failed))
    dispatch_failed = tasks_failed + jobs_failed
    jobs = dict(jobs or {})
    m: dict[str, Any] = {**core, **jobs}
    placed = int(core.get("placements_succeeded", 0))
    m["placements_attempted"] = int(core.get("placements_attempted", 0))
    m["placements_succeeded"] = max(0, placed - dispatch_failed)
    m["placements_failed"] = int(core.get("placements_failed", 0))
    m["placements_dispatch_failed"] = dispatch_failed
    m["dispatch_failed"] = {"tasks": tasks_failed, "jobs": jobs_failed}
    for name in ("jobs_rejected", "bundles_broken", "jobs_dropped"):
        m[name] = int(jobs.get(name, 0))
    broken = sorted(jobs.get("broken_bundle_ids", ()))
    m["broken_bundle_ids"] = broken
    by_pool: dict[str, list[str]] = {}
    for bundle_id in broken:
        by_pool.setdefault((bundle_pools or {}).get(bundle_id, default_pool), []).append(bundle_id)
    m["pools"] = _pools_view(records, pools, default_pool, spare_targets or {}, by_pool, group_sums)
    m["tiers"] = {tier: dict(t) for tier, t in (core.get("tiers") or {}).items()}
    m["fallbacks"] = int(core.get("fallbacks", 0))
    m["uptime_s"] = round(float(uptime_s), 3)
    return m


def scheduler_metrics(core: Any, settings: Any, jobs: Any, *, tasks_dispatch_failed: int, uptime_s: float) -> dict[str, Any]:
    """``metrics_view`` of a running scheduler: ``core`` its ``SchedulerCore``, ``settings`` its
    ``FabricSettings``, ``jobs`` its job runner (None: it runs no jobs; read for ``metrics()``, its
    book's bundles and its dispatch-failure counter)."""
    fleet = core.fleet
    bundles = getattr(getattr(jobs, "book", None), "bundles", None) or {}
    return metrics_view(
        core.metrics(), (), group_sums=fleet.group_sums(), jobs=jobs.metrics() if jobs is not None else None,
        pools=[p.name for p in settings.pools], default_pool=fleet.default_pool,
        spare_targets={e.pool: e.target_count for e in settings.hot_spares},
        bundle_pools={bid: getattr(b.bundle, "pool", None) or fleet.default_pool for bid, b in bundles.items()},
        tasks_dispatch_failed=tasks_dispatch_failed,
        jobs_dispatch_failed=getattr(jobs, "counters", {}).get("dispatch_failed", 0), uptime_s=uptime_s)


def _key(name: str, **tags: str) -> SeriesKey:
    return name, tuple(sorted(tags.items()))


def series(view: Mapping[str, Any]) -> tuple[dict[SeriesKey, float], dict[SeriesKey, float]]:
    """The exported series of a ``metrics_view`` dict: ``(counters, gauges)``, each
    ``{(name, tags): value}``. Counters hold the cumulative figures (the exporter sends deltas)."""
    counters: dict[SeriesKey, float] = {}
    gauges: dict[SeriesKey, float] = {}
    for outcome in PLACEMENT_OUTCOMES:
        counters[_key("fabric_placements", outcome=outcome)] = float(view.get(f"placements_{outcome}", 0))
    for kind, n in (view.get("dispatch_failed") or {}).items():
        counters[_key("fabric_dispatch_failed", kind=str(kind))] = float(n)
    counters[_key("fabric_fallbacks")] = float(view.get("fallbacks", 0))
    for name in JOB_COUNTERS:
        counters[_key(f"fabric_{name}")] = float(view.get(name, 0))
    for tier, t in (view.get("tiers") or {}).items():
        gauges[_key("fabric_nodes", tier=str(tier))] = float(t.get("nodes", 0))
        gauges[_key("fabric_utilization", tier=str(tier))] = float(t.get("utilization", 0.0))
    for pool, p in (view.get("pools") or {}).items():
        gauges[_key("fabric_pool_nodes", pool=str(pool))] = float(p["nodes"])
        gauges[_key("fabric_pool_live_spares", pool=str(pool))] = float(p["live_spares"])
        gauges[_key("fabric_pool_spare_target", pool=str(pool))] = float(p["spare_target"])
        gauges[_key("fabric_pool_used_capacity_fraction", pool=str(pool))] = float(p["used_capacity_fraction"])
        gauges[_key("fabric_pool_broken_bundles", pool=str(pool))] = float(len(p["broken_bundle_ids"]))
    for bundle_id in view.get("broken_bundle_ids") or ():
        gauges[_key("fabric_bundle_broken", bundle_id=str(bundle_id))] = 1.0
    for job_id, starts in (view.get("job_starts") or {}).items():
        for name in ("started_at", "first_started_at"):
            if starts.get(name) is not None:
                gauges[_key(f"fabric_job_{name}_seconds", job_id=str(job_id))] = float(starts[name])
    counters[_key("fabric_nodes_marked_unhealthy")] = float(view.get("nodes_marked_unhealthy", 0))
    for name in ("queue_depth", "running", "leases", "drains", "provisions_pending", "nodes_unhealthy"):
        if name in view:
            gauges[_key(f"fabric_{name}")] = float(view[name])
    return counters, gauges


DESCRIPTIONS = {
    "fabric_placements": "placements by outcome (tasks and jobs; dispatch_failed: placed, start failed)",
    "fabric_dispatch_failed": "placements whose start failed, by kind (tasks, jobs)",
    "fabric_fallbacks": "placements made below their min_tier",
    "fabric_jobs_rejected": "job instances rejected (invalid spec)",
    "fabric_bundles_broken": "bundles marked broken",
    "fabric_jobs_dropped": "jobs dropped rather than restarted",
    "fabric_job_restarts": "job recoveries",
    "fabric_nodes": "nodes per compute tier",
    "fabric_nodes_unhealthy": "nodes kept off placement for repeated failed starts",
    "fabric_nodes_marked_unhealthy": "times a node was marked unhealthy for repeated failed starts",
    "fabric_utilization": "running / slots per compute tier",
    "fabric_pool_nodes": "nodes per pool",
    "fabric_pool_live_spares": "unconsumed hot spares per pool",
    "fabric_pool_spare_target": "hot-spare target per pool",
    "fabric_pool_used_capacity_fraction": "slots in use / slots per pool",
    "fabric_pool_broken_bundles": "broken bundles per pool",
    "fabric_bundle_broken": "1 while the bundle is broken",
    "fabric_queue_depth": "calls waiting for capacity",
    "fabric_running": "reservations held",
    "fabric_leases": "placement leases held",
    "fabric_drains": "drains in progress",
    "fabric_provisions_pending": "provisions not yet registered",
    "fabric_job_started_at_seconds": "when the job's current instance started (epoch seconds)",
    "fabric_job_first_started_at_seconds": "when the job's first instance started (epoch seconds)",
}
"""One line per exported series name (Prometheus HELP)."""

__all__ = ["DESCRIPTIONS", "JOB_COUNTERS", "PLACEMENT_OUTCOMES", "SeriesKey", "metrics_view", "scheduler_metrics", "series"]

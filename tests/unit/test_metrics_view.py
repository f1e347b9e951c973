"""The fabric's metrics (issue 17): ``metrics_view`` assembles the placement and job counters and per-pool
gauges from plain inputs; ``series`` names what is exported; ``MetricsExporter`` sends counters as
deltas (the exported counter equals the figure) and gauges every time (zeroing a tag set that
went away); the scheduler exports on every tick and counts a placement nobody claimed as a
dispatch failure."""

import asyncio

from fabric.core.scheduling import SchedulerCore
from fabric.core.scheduling.metrics_view import PLACEMENT_OUTCOMES, metrics_view, series
from fabric.rayio.metrics import MetricsExporter, RecordingMetrics

from test_scheduler_actor import CPU_ONLY, joined, scheduler
from test_scheduling import Clock, rec


def core_with(*records):
    c = SchedulerCore(clock=Clock())
    for r in records:
        c.node_joined(r)
    return c


def test_dispatch_failures_count_instead_of_succeeded_and_job_counters_default_to_zero():
    core = {"placements_attempted": 10, "placements_succeeded": 7, "placements_failed": 1, "placements_deferred": 2,
            "fallbacks": 3, "tiers": {}}
    m = metrics_view(core, [], tasks_dispatch_failed=1, jobs_dispatch_failed=2, uptime_s=1.23456)
    assert (m["placements_attempted"], m["placements_succeeded"], m["placements_failed"]) == (10, 4, 1)
    assert m["placements_dispatch_failed"] == 3 and m["dispatch_failed"] == {"tasks": 1, "jobs": 2}
    assert (m["jobs_rejected"], m["bundles_broken"], m["jobs_dropped"], m["broken_bundle_ids"]) == (0, 0, 0, [])
    assert m["placements_deferred"] == 2 and m["fallbacks"] == 3 and m["uptime_s"] == 1.235
    assert metrics_view({"placements_succeeded": 1}, [], jobs_dispatch_failed=5)["placements_succeeded"] == 0
    assert metrics_view({}, [], tasks_dispatch_failed=-4)["placements_dispatch_failed"] == 0


def test_per_pool_gauges_nodes_live_spares_target_used_fraction_and_broken_bundles():
    a = rec("a", "cpu_ffmpeg", 4).evolve(pool="edge", running=3)
    spare = rec("s", "cpu_ffmpeg", 2).evolve(pool="edge", spare=True)
    used_spare = rec("u", "cpu_ffmpeg", 2).evolve(pool="edge", spare=True, running=1)  # took work: not a live spare
    booting = rec("b", "cpu_ffmpeg", 8).evolve(pool="edge", launching=True)  # no capacity yet
    plain = rec("d", "cpu_ffmpeg", 2)  # no pool: the default one
    jobs = {"jobs_rejected": 1, "jobs_dropped": 2, "bundles_broken": 2, "broken_bundle_ids": ["z", "y"], "jobs": {}}
    m = metrics_view({}, [a, spare, used_spare, booting, plain], jobs=jobs, pools=["default", "edge", "empty"],
                     spare_targets={"edge": 2, "other": 1}, bundle_pools={"y": "edge"})
    edge = m["pools"]["edge"]
    assert (edge["nodes"], edge["live_spares"], edge["spare_target"]) == (4, 1, 2)
    assert edge["used_capacity_fraction"] == round(4 / 8, 4)  # (3 + 0 + 1) of (4 + 2 + 2); the booting node left out
    assert edge["broken_bundle_ids"] == ["y"]
    assert m["pools"]["default"] == {"nodes": 1, "live_spares": 0, "spare_target": 0, "used_capacity_fraction": 0.0,
                                     "broken_bundle_ids": ["z"]}  # a bundle of no known pool: the default
    assert m["pools"]["empty"]["nodes"] == 0 and m["pools"]["other"]["spare_target"] == 1
    assert (m["jobs_rejected"], m["jobs_dropped"], m["bundles_broken"], m["broken_bundle_ids"]) == (1, 2, 2, ["y", "z"])


def test_the_cores_figures_and_tiers_are_kept():
    core = core_with(rec("cuda", "gpu_cuda"), rec("cpu", "cpu_ffmpeg", 4))
    m = metrics_view(core.metrics(), core.fleet.records())
    assert m["tiers"]["cpu_ffmpeg"]["nodes"] == 1 and m["tiers"]["gpu_cuda"]["nodes"] == 1
    assert m["nodes"] == 2 and m["queue_depth"] == 0 and "stimuli_handled" in m


def test_series_names_every_counter_and_gauge():
    m = metrics_view({"placements_attempted": 4, "placements_succeeded": 3, "fallbacks": 1,
                      "tiers": {"cpu_ffmpeg": {"nodes": 2, "utilization": 0.5}}, "queue_depth": 1},
                     [rec("a", "cpu_ffmpeg")], jobs={"bundles_broken": 1, "broken_bundle_ids": ["b1"]}, pools=["default"])
    counters, gauges = series(m)
    assert {tags[0][1] for name, tags in counters if name == "fabric_placements"} == set(PLACEMENT_OUTCOMES)
    assert counters[("fabric_placements", (("outcome", "attempted"),))] == 4
    assert counters[("fabric_fallbacks", ())] == 1 and counters[("fabric_bundles_broken", ())] == 1
    assert gauges[("fabric_nodes", (("tier", "cpu_ffmpeg"),))] == 2
    assert gauges[("fabric_utilization", (("tier", "cpu_ffmpeg"),))] == 0.5
    assert gauges[("fabric_pool_nodes", (("pool", "default"),))] == 1
    assert gauges[("fabric_pool_broken_bundles", (("pool", "default"),))] == 1
    assert gauges[("fabric_bundle_broken", (("bundle_id", "b1"),))] == 1
    assert gauges[("fabric_queue_depth", ())] == 1


def test_the_exporter_sends_deltas_so_the_counter_equals_the_figure_and_zeroes_vanished_gauges():
    sink = RecordingMetrics()
    ex = MetricsExporter(sink)
    attempted = ("fabric_placements", (("outcome", "attempted"),))
    view = {"placements_attempted": 3, "broken_bundle_ids": ["b1"], "pools": {}, "tiers": {}}
    ex.export(view)
    ex.export(view)  # nothing new: the counter stays
    assert sink.counters[attempted] == 3
    ex.export({**view, "placements_attempted": 5, "broken_bundle_ids": []})
    assert sink.counters[attempted] == 5
    assert sink.gauges[("fabric_bundle_broken", (("bundle_id", "b1"),))] == 0.0  # repaired: zeroed, not stale
    ex.export({**view, "placements_attempted": 2})  # a reset figure sends nothing and is the new baseline
    ex.export({**view, "placements_attempted": 4})
    assert sink.counters[attempted] == 7


def test_the_scheduler_exports_every_tick_and_counts_an_unclaimed_placement_as_dispatch_failed():
    sched, feed = scheduler([joined("cpu", "cpu_ffmpeg", slots=1)])
    sink = sched.metrics_sink
    nodes = ("fabric_pool_nodes", (("pool", "default"),))
    used = ("fabric_pool_used_capacity_fraction", (("pool", "default"),))

    async def go():
        await sched._step()
        assert sink.gauges[nodes] == 1 and sink.gauges[used] == 0.0
        first = await sched.place_task(CPU_ONLY)
        await sched._step()  # no fleet change: the gauges move anyway
        assert sink.gauges[used] == 1.0
        waiting = asyncio.ensure_future(sched.wait_for_placement("w1", CPU_ONLY, timeout_s=60))
        await asyncio.sleep(0)
        waiting.cancel()
        feed.batches.append([joined("cpu2", "cpu_ffmpeg")])
        await sched._step()  # places w1 on cpu2; nobody claims it
        sched.release([first.allocation_id])
        await sched._step()

    asyncio.run(go())
    m = sched.metrics()
    assert m["dispatch_failed"] == {"tasks": 1, "jobs": 0} and m["placements_dispatch_failed"] == 1
    assert m["placements_succeeded"] == sched.core.counters["placements_succeeded"] - 1 == 1
    for outcome in PLACEMENT_OUTCOMES:
        assert sink.counters.get(("fabric_placements", (("outcome", outcome),)), 0) == m[f"placements_{outcome}"], outcome
    assert sink.gauges[nodes] == 2 and sink.gauges[used] == 0.0

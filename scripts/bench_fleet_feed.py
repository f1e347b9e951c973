#!/usr/bin/env python
"""Benchmark the scheduler's fleet feed: following the registry's change feed against a full poll.

For each fleet size: a real ``Registry`` over a real ``FabricStore`` in a temporary folder, a
fake Ray node table, and that many nodes registered with realistic capabilities (the bundled
probe recordings, ``probes/profiles``, probed as on a real node: mostly CPU boxes, some CUDA,
VA-API and APU machines, ARM boards, relays). Then, per tick, ``--change-pct`` of the nodes
change the way a fleet does (a heartbeat with a new load most often; a node lost by missed
heartbeats or back again, a cordon or an uncordon, a flap hold or its end), written through the
registry, outside the timing, and the scheduler's view is brought up to date two ways, both timed,
in the same run, on the same store:

- ``tick`` (the feed now): the registry computes the changes after the feed's sequence number
  (``Registry.changes``), they are pickled across the actor boundary as Ray would
  (``ray.cloudpickle``), and ``FleetMirror.apply`` rebuilds only the changed ``NodeRecord``s and
  diffs them;
- ``full_poll`` (the feed before, kept here as the reference implementation): list the store,
  pickle every record across, rebuild every ``NodeRecord``, diff the whole fleet.

Every tick checks that both produce the same fleet changes and the same fleet. ``tick_ms`` and
``full_poll_ms`` are milliseconds of this thread's CPU time per tick, median over the ticks (on a
shared machine other processes must not count against either way); ``*_wall_ms`` are wall-clock.
The collector is off while a way is timed (as ``timeit`` does): this one process holds the
registry's, the reference's and the feed's heaps, which no real process does.

Usage: scripts/bench_fleet_feed.py [--sizes 1000,10000] [--ticks 8] [--change-pct 1] [--json]
With ``--json`` the last line is ``{"sizes": {"1000": {"tick_ms": ..., "full_poll_ms": ...}, ...}}``.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray.cloudpickle as cloudpickle  # noqa: E402  (the serializer Ray uses; importing it starts nothing)

from actors.fleet_feed import FleetMirror  # noqa: E402
from actors.registry import Registry  # noqa: E402
from fabric.core import names  # noqa: E402
from fabric.core.events import NodeFlapHeld, NodeFlapReleased, NodeLost, NodeRecovered  # noqa: E402
from fabric.core.health import ManualClock, RayNodeView  # noqa: E402
from fabric.core.lifecycle import NodeStatus  # noqa: E402
from fabric.core.names import NAME_LABEL, POOL_LABEL, TIER_LABEL, TIER_RESOURCE_PREFIX, ZONE_LABEL  # noqa: E402
from fabric.core.settings import FabricSettings  # noqa: E402
from fabric.store import FabricStore  # noqa: E402
from fabric.testing.sim_fleet import PROFILE_MIX  # noqa: E402  (a plausible fleet's mix of the bundled profiles)
from probes import RecordedSources  # noqa: E402
from probes.node import probe_node  # noqa: E402
from probes.profiles import profile_path  # noqa: E402

START = 1_700_000_000.0


# -- the reference: the feed's poll before the change feed (actors/fleet_feed.py until issue 13) ----------
_IN_FLEET = (NodeStatus.ACTIVE, NodeStatus.DRAINING)
_FACT_FIELDS = ("name", "capabilities", "status", "tier", "utilization", "last_seen", "cordoned", "flap_held",
                "max_concurrent_tasks", "zone", "pool", "pool_tier")


def reference_diff_fleet(known: dict, wanted: dict) -> list[tuple[str, str, Any, dict]]:
    """The old ``diff_fleet``, verbatim but for returning tuples: (kind, node id, record, fields)."""
    out: list[tuple[str, str, Any, dict]] = []
    for node_id in known.keys() - wanted.keys():
        out.append(("lost", node_id, None, {}))
    for node_id, rec in wanted.items():
        old = known.get(node_id)
        if old is None:
            out.append(("joined", node_id, rec, {}))
            continue
        changed = {f: getattr(rec, f) for f in _FACT_FIELDS if getattr(rec, f) != getattr(old, f)}
        if "utilization" in changed and abs(rec.utilization - old.utilization) < 0.05:
            del changed["utilization"]
        changed.pop("last_seen", None)
        if changed:
            out.append(("changed", node_id, rec, changed))
    return out


class ReferencePoll:
    """The old ``FleetFeed.poll`` over the same registry: every record, every tick."""

    def __init__(self, registry: Registry, settings: FabricSettings, alive: set[str]) -> None:
        self.registry, self.settings, self.alive = registry, settings, alive
        self.known: dict = {}
        self.bytes = 0

    def poll(self, now: float) -> list[tuple[str, str, Any, dict]]:
        records = self.registry.records()  # what RegistryActor.records returned: the whole store, listed
        blob = cloudpickle.dumps(records)  # ... and moved across the actor boundary
        self.bytes = len(blob)
        records = cloudpickle.loads(blob)
        wanted = {}
        for rec in records:
            if rec.node_id in self.alive and rec.status in _IN_FLEET:
                override = self.settings.nodes.get(rec.name)
                wanted[rec.node_id] = rec.to_node_record(
                    now, max_concurrent_tasks=override.max_concurrent_tasks if override is not None else None)
        changes = reference_diff_fleet(self.known, wanted)
        self.known = wanted
        return changes


# -- the fleet -----------------------------------------------------------------------------------------------
class FakeRay:
    """Ray's node table for the registry: every node alive, labelled and with its tier resources."""

    def __init__(self) -> None:
        self.nodes: dict[str, RayNodeView] = {}

    def add(self, node_id: str, name: str, caps: Any, zone: str) -> None:
        labels = {TIER_LABEL: caps.tier.value, NAME_LABEL: name, ZONE_LABEL: zone, POOL_LABEL: "default"}
        resources = {names.SLOTS_RESOURCE: float(caps.limitations.max_concurrent_tasks),
                     **{f"{TIER_RESOURCE_PREFIX}{t.value}": 1.0 for t in caps.tiers}}
        self.nodes[node_id] = RayNodeView(node_id=node_id, alive=True, labels=labels, resources=resources)

    def alive_node(self, node_id: str) -> RayNodeView | None:
        n = self.nodes.get(node_id)
        return n if n is not None and n.alive else None

    def list_nodes(self) -> list[RayNodeView]:
        return list(self.nodes.values())


def profile_capabilities() -> list[tuple[Any, int]]:
    """Each bundled profile's capabilities, probed from its recording, with its weight in the mix."""
    return [(probe_node(RecordedSources(profile_path(name))), weight) for name, weight in PROFILE_MIX]


def build_fleet(size: int, folder: Path, rnd: random.Random, profiles: list[tuple[Any, int]]):
    clock = ManualClock(START)
    ray = FakeRay()
    registry = Registry(FabricStore(folder / f"fleet-{size}.db"), ray, clock=clock)
    choices = [caps for caps, w in profiles for _ in range(w)]
    ids = []
    for i in range(size):
        node_id = f"{i:056x}"
        name = f"node-{i:05d}"
        caps = rnd.choice(choices).model_copy(update={"name": name})
        ray.add(node_id, name, caps, "abc"[i % 3])
        registry.register(node_id, caps.model_dump(mode="json"), utilization={"cpu_percent": rnd.uniform(0, 100)})
        ids.append(node_id)
    return registry, clock, ray, ids


def change_some(registry: Registry, clock: ManualClock, ids: list[str], count: int, rnd: random.Random, tick: int) -> None:
    """``count`` nodes change as a fleet's do (written through the registry; not timed)."""
    clock.advance(0.5)
    now = clock()
    for node_id in rnd.sample(ids, count):
        rec = registry.store.get(node_id)
        roll = rnd.random()
        name = rec.name
        if roll < 0.6:  # a heartbeat with a new load (the busiest of CPU and GPUs moves)
            registry.heartbeat(node_id, {"cpu_percent": round(rnd.uniform(0, 100), 3) + tick * 1e-6})
        elif roll < 0.8:  # lost by missed heartbeats, or back
            if rec.status is NodeStatus.OFFLINE:
                registry.apply([NodeRecovered(node_id=node_id, name=name, at=now, stimulus_id=f"tick-{tick}",
                                              status=NodeStatus.ACTIVE, reason="heartbeats resumed")])
            else:
                registry.apply([NodeLost(node_id=node_id, name=name, at=now, stimulus_id=f"tick-{tick}",
                                         reason="missed heartbeats for 3.2 s")])
        elif roll < 0.9:  # an operator cordon or uncordon
            registry.set_cordoned(node_id, not rec.cordoned)
        elif rec.held_until is None:  # a flap hold (ending within a few ticks) or its end
            registry.apply([NodeFlapHeld(node_id=node_id, name=name, at=now, stimulus_id=f"tick-{tick}",
                                         until=now + rnd.choice([0.7, 1.2, 600.0]), toggles=3)])
        else:
            registry.apply([NodeFlapReleased(node_id=node_id, name=name, at=now, stimulus_id=f"tick-{tick}")])


def as_tuples(changes: list[Any]) -> list[tuple[str, str, Any, dict]]:
    return [(c.kind, c.node_id, c.record, c.fields) for c in changes]


def same(a: list[tuple[str, str, Any, dict]], b: list[tuple[str, str, Any, dict]]) -> bool:
    key = lambda c: (c[0], c[1])  # noqa: E731
    return sorted(a, key=key) == sorted(b, key=key)


def bench_size(size: int, ticks: int, pct: float, seed: int, profiles: list[tuple[Any, int]]) -> dict[str, Any]:
    rnd = random.Random(seed)
    settings = FabricSettings()
    with tempfile.TemporaryDirectory(prefix="bench-fleet-feed-") as tmp:
        t0 = time.perf_counter()
        registry, clock, ray, ids = build_fleet(size, Path(tmp), rnd, profiles)
        setup_s = time.perf_counter() - t0
        reference = ReferencePoll(registry, settings, set(ray.nodes))
        reference.poll(clock())
        mirror = FleetMirror(settings)
        t0 = time.perf_counter()
        snapshot = cloudpickle.loads(cloudpickle.dumps(registry.snapshot()))
        mirror.resync(snapshot, clock())
        resync_ms = (time.perf_counter() - t0) * 1e3
        assert mirror.known == reference.known, "the feed's first fleet differs from the full poll's"
        count = max(1, round(size * pct / 100))
        tick_ms, poll_ms, tick_wall, poll_wall, tick_bytes, fleet_changes, node_changes = [], [], [], [], [], [], []
        for tick in range(ticks):
            change_some(registry, clock, ids, count, rnd, tick)
            now = clock()
            gc.collect()
            gc.disable()  # as timeit does: one process holds both ways' heaps, and the registry's
            t0, c0 = time.perf_counter(), time.thread_time()
            page = registry.changes(mirror.seq, mirror.epoch)
            blob = cloudpickle.dumps(page)
            got = mirror.apply(cloudpickle.loads(blob), now)
            tick_ms.append((time.thread_time() - c0) * 1e3)
            tick_wall.append((time.perf_counter() - t0) * 1e3)
            gc.enable()
            assert got is not None, "the feed was sent back to a resync"
            gc.collect()
            gc.disable()
            t0, c0 = time.perf_counter(), time.thread_time()
            want = reference.poll(now)
            poll_ms.append((time.thread_time() - c0) * 1e3)
            poll_wall.append((time.perf_counter() - t0) * 1e3)
            gc.enable()
            if not same(as_tuples(got), want) or mirror.known != reference.known:
                raise AssertionError(f"tick {tick} at {size} nodes: the feed's changes differ from the full poll's")
            tick_bytes.append(len(blob))
            fleet_changes.append(len(got))
            node_changes.append(len(page.changes or ()))
        tick, full = statistics.median(tick_ms), statistics.median(poll_ms)
        return {
            "tick_ms": round(tick, 3), "full_poll_ms": round(full, 3), "speedup": round(full / tick, 1) if tick else None,
            "tick_ms_max": round(max(tick_ms), 3), "full_poll_ms_max": round(max(poll_ms), 3),
            "tick_wall_ms": round(statistics.median(tick_wall), 3), "full_poll_wall_ms": round(statistics.median(poll_wall), 3),
            "tick_bytes": int(statistics.median(tick_bytes)), "full_poll_bytes": reference.bytes,
            "nodes_changed_per_tick": statistics.median(node_changes), "fleet_changes_per_tick": statistics.median(fleet_changes),
            "resync_ms": round(resync_ms, 1), "ticks": ticks, "same_result": True, "setup_s": round(setup_s, 1),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000", help="fleet sizes, comma-separated")
    ap.add_argument("--ticks", type=int, default=8, help="ticks per size (both ways each tick)")
    ap.add_argument("--change-pct", type=float, default=1.0, help="percent of the nodes changing per tick")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--json", action="store_true", help="end with one JSON line: {\"sizes\": {...}}")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    profiles = profile_capabilities()
    results = {}
    print(f"{'nodes':>7} {'changed':>8} {'tick ms':>9} {'full poll ms':>13} {'speedup':>8} {'tick KB':>8} {'poll KB':>9} {'resync ms':>10}")
    for size in sizes:
        r = bench_size(size, args.ticks, args.change_pct, args.seed, profiles)
        results[str(size)] = r
        print(f"{size:>7} {r['nodes_changed_per_tick']:>8} {r['tick_ms']:>9.2f} {r['full_poll_ms']:>13.1f} {r['speedup']:>7}x "
              f"{r['tick_bytes'] / 1024:>8.1f} {r['full_poll_bytes'] / 1024:>9.0f} {r['resync_ms']:>10.0f}", flush=True)
    print("every tick: the feed's fleet changes and fleet equal the full poll's")
    if args.json:
        print(json.dumps({"sizes": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Benchmark hot spares and providers (issue 15): a job's failover onto a hot spare, onto a node
provisioned for it, and onto an ordinary busy node, in the same run on the same fabric; and the
time from ``provision`` to the node serving work for each provider.

The fabric is a real ``LocalFabric`` (head on 127.0.0.2, Ray's health checks at 500 ms x 3): a
pool ``onprem`` (fixed: ``cpu-only-box`` nodes added by hand) -> ``spares`` (elastic, the
``local`` provider: real ``ray start --block`` children of the scheduler, shape ``cpu-box``).
Every trial starts a fresh job (``Encoder``, min_tier ``cpu_ffmpeg``), waits for it to answer on
a fixed node that has been up ``SETTLE_S``, SIGKILLs that node (``LocalFabric.kill_node``) and
times until the job answers again from another node (``kill_and_time`` of ``bench_jobs``, which
also times Ray's death detection: the killed node ``Alive: false`` in ``ray.nodes()``):

- ``spare``: one hot spare is live (``hot_spares`` target 1); the job is ``prefer_spare``: it lands
  on the spare (which then stops being one); the target goes back to 0 as soon as the job
  answered again (the next trial, ``busy``, wants no spares: a replacement spare would only be
  provisioned to be reaped);
- ``busy``: no spares (target 0); a second fixed node carries another job; the failing job
  (``avoid_spare``) lands on that busy node;
- ``provisioned``: no spares, and the killed node was the only fixed node: nothing fits, so the
  recovery's placement provisions a node (the cascade) and the job waits for it.

The killed fixed node is replaced by a new one before the next trial. ``provision_to_serving_s``: per
provider, the median seconds from the scheduler asking the provider for a node to that node
registering with the fabric (``h.provisions()["serving_s"]``): ``local`` from every provision of
this run; ``ray-autoscaler`` from a second fabric on Ray's autoscaler v2 over the fake multi-node
provider (``fabric.testing.fake_autoscaler``), ``--autoscaler-trials`` provisions of a call that
no node fits (skip it with ``--providers local``).

Goal: ``spare_failover_s <= death_detection_s + 1 s``.

The whole run keeps to ``--budget`` seconds (default 900): a failover trial that cannot start in
time is not run, and the ray-autoscaler phase (left ``AUTOSCALER_SHARE_S`` of it) is cut at the end
of the budget, its cluster closed; either way ``unmeasured`` says what was not measured.

Usage: scripts/bench_spares.py [--trials 3] [--providers local,ray-autoscaler] [--budget 900] [--json]
With ``--json`` the last line is one object: ``spare_failover_s``, ``provisioned_failover_s``,
``busy_node_failover_s``, ``death_detection_s`` (medians), ``provision_to_serving_s`` (per
provider), ``spare_margin_s`` (spare failover - death detection), ``budget_s``, ``unmeasured`` and
the per-trial figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from bench_jobs import SETTLE_S, kill_and_time, median, secs  # noqa: E402
from fabric import adaptive  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

IP = "127.0.0.2"
SHAPE = {"name": "cpu-box", "profile": "cpu-only-box", "tier": "cpu_ffmpeg", "num_cpus": 2}
CALL_TIMEOUT_S = 5.0
PHASE_FLOOR_S = 90.0
"""Budget a failover trial or an autoscaler provision needs at least to be started."""
AUTOSCALER_SHARE_S = 300.0
"""Budget the failover trials leave for the ray-autoscaler phase."""
SETTINGS: dict[str, Any] = {
    "health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 30.0, "monitor_interval_s": 0.25,
               "join_timeout_s": 90.0, "flap_toggles": 50},
    "failure": {"min_recovery_interval_s": 0.5, "max_restarts_per_hour": 100},
    # idle provisioned nodes (a spare that took a job, a node provisioned for one) go between trials
    "scaling": {"burst_queue_depth": 100000, "low_window_s": 2.0, "high_window_s": 86400.0},
    "pools": [{"name": "default", "tiers": [
        {"name": "onprem"},
        {"name": "spares", "scale_out": "elastic", "provider": "local", "max_nodes": 4, "provision_timeout_s": 180,
         "candidate_shapes": [SHAPE]},
    ]}],
    "hot_spares": [{"pool": "default", "target_count": 0, "provision_backoff_s": 5}],
}


def encoder(policy: str) -> Any:
    @adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.5, call_timeout_s=60, on_runtime_failure=policy)
    class Encoder:
        def where(self) -> str:
            return ray.get_runtime_context().get_node_id()

    return Encoder


class Bench:
    def __init__(self, timeout_s: float) -> None:
        self.count = 0
        self.born: dict[str, float] = {}
        self.lf = LocalFabric([], settings=SETTINGS, max_slots=2, timeout_s=timeout_s, node_ip_address=IP)
        self.h = self.lf.handle

    def add_fixed(self) -> str:
        """A new fixed node, started once no provisioned node is starting: two raylets starting at
        once on a 2-core machine miss Ray's start deadline (the local provider serialises its own
        starts, but this one starts in the driver's process)."""
        self.count += 1
        name = f"onprem-{self.count}"
        for attempt in (1, 2):
            self.quiet()
            try:
                self.lf.add_node(name, profile="cpu-only-box")
                break
            except Exception:  # the raylet missed its start deadline: once more, when all is quiet
                if attempt == 2:
                    raise
        self.born[name] = time.monotonic()
        return name

    def quiet(self) -> None:
        """Wait until no provision (the cascade's or a spare's) is in flight."""
        self.lf.wait_until(lambda: not self.h.provisions()["pending"] and not any(p["pending"] for p in self.h.spares()),
                           "no node starting", timeout_s=240)

    def fixed_alive(self) -> list[str]:
        return [n.name for n in self.lf.nodes if n.alive and n.name in self.born]

    def spares(self, target: int) -> None:
        self.h.update_hot_spares([{"pool": "default", "target_count": target, "provision_backoff_s": 5}])
        self.lf.wait_until(lambda: len(self.h.spares()[0]["live"]) == target and not self.h.spares()[0]["pending"],
                           f"{target} live spare(s)", timeout_s=240)
        if target == 0:  # and every node the reconciler reaped is gone
            self.lf.wait_until(lambda: not [n for n in self.h.nodes(["active"]) if n.pool_tier == "spares"],
                               "no node in the spares pool tier", timeout_s=120)

    def settle(self, name: str) -> None:
        time.sleep(max(0.0, self.born[name] + SETTLE_S - time.monotonic()))

    def trial(self, policy: str, before_kill: Callable[[], Any] | None = None) -> dict[str, Any]:
        """One failover; ``before_kill()`` (if given) runs once the job is settled, just before the kill."""
        cls = encoder(policy)
        job = cls.remote()
        home = job.result(job.wait_running(120).where.remote(), timeout_s=60)
        name = next(n.name for n in self.lf.nodes if n.node_id == home and n.alive)
        if name not in self.born:
            raise RuntimeError(f"the job started on {name}, not on a fixed node")
        self.settle(name)
        if before_kill:
            before_kill()
        out = kill_and_time(self.lf, name, lambda: job.result(job.where.remote(), timeout_s=CALL_TIMEOUT_S))
        landed = next((n for n in self.h.nodes() if n.node_id == out["new_node"]), None)
        out.update(killed=name, landed_on=landed.name if landed else out["new_node"][:12],
                   landed_pool_tier=(landed.pool_tier if landed else None) or "onprem")
        job.stop()
        return out


def spare_trial(b: Bench) -> dict[str, Any]:
    b.spares(1)

    spares: list[str] = []

    def live_spares() -> None:  # read at the kill: a spare that died meanwhile has been replaced
        b.lf.wait_until(lambda: len(b.h.spares()[0]["live"]) == 1, "a live spare at the kill", timeout_s=240)
        spares.extend(b.h.spares()[0]["live"])

    out = b.trial("prefer_spare", before_kill=live_spares)
    b.h.update_hot_spares([{"pool": "default", "target_count": 0, "provision_backoff_s": 5}])  # no replacement spare
    if out["new_node"] not in spares:
        raise RuntimeError(f"the job recovered onto {out['landed_on']}, not onto the spare {spares[0][:12]}")
    return out


def busy_trial(b: Bench) -> dict[str, Any]:
    b.spares(0)
    while len(b.fixed_alive()) < 2:
        b.add_fixed()
    b.lf.wait_registered()
    other = encoder("avoid_spare").remote()  # the other fixed node carries work: a busy, ordinary node
    other.wait_running(120)
    try:
        out = b.trial("avoid_spare")
    finally:
        other.stop()
    if out["landed_pool_tier"] != "onprem":
        raise RuntimeError(f"the job recovered onto {out['landed_on']} ({out['landed_pool_tier']}), not the busy fixed node")
    return out


def provisioned_trial(b: Bench) -> dict[str, Any]:
    b.spares(0)
    alive = b.fixed_alive()
    for extra in alive[1:]:  # one fixed node only: once it dies nothing fits and the cascade provisions
        b.lf.kill_node(extra)
    if not alive:
        b.add_fixed()
    b.lf.wait_until(lambda: len([n for n in b.h.nodes(["active"]) if (n.pool_tier or "onprem") == "onprem"]) == 1,
                    "one fixed node", timeout_s=60)
    out = b.trial("avoid_spare")
    if out["landed_pool_tier"] != "spares":
        raise RuntimeError(f"the job recovered onto {out['landed_on']}, not a provisioned node")
    return out  # the killed fixed node is replaced before the next trial (main's loop), not after the last


def autoscaler_serving(trials: int, deadline: float, unmeasured: list[str]) -> list[float]:
    """Provision-to-serving through ``ray-autoscaler``, ended at ``deadline`` (``time.monotonic``):
    the phase runs here (Ray's signal handlers need the main thread); a watchdog thread cuts one
    that has not ended by then (its cluster closed, so the wait in progress fails) and what it left
    unmeasured is named in ``unmeasured`` instead of holding the run."""
    out: list[float] = []
    holder: dict[str, Any] = {}
    if deadline - time.monotonic() < PHASE_FLOOR_S:
        unmeasured.append(f"ray-autoscaler: 0 of {trials} provision(s) timed (budget spent before the phase)")
        return out
    ended, cut = threading.Event(), threading.Event()

    def watchdog() -> None:
        if ended.wait(max(0.0, deadline - time.monotonic())):
            return
        cut.set()
        cluster = holder.get("cluster")
        if cluster is not None:
            cluster.close()  # its head, its monitor and the nodes it launched: nothing is left running

    guard = threading.Thread(target=watchdog, name="ray-autoscaler budget", daemon=True)
    guard.start()
    error: BaseException | None = None
    try:
        _autoscaler_phase(trials, deadline, out, holder)
    except Exception as exc:  # noqa: BLE001 - reported below (a cut phase's failure is the cut's)
        error = exc
    finally:
        ended.set()
        guard.join(30)
    if error is not None and not cut.is_set():
        unmeasured.append(f"ray-autoscaler: {type(error).__name__}: {error}"[:300])
    elif len(out) < trials:
        unmeasured.append(f"ray-autoscaler: {len(out)} of {trials} provision(s) timed before the budget ended")
    return list(out)


def _autoscaler_phase(trials: int, deadline: float, out: list[float], holder: dict[str, Any]) -> None:
    """Provision-to-serving through ``ray-autoscaler`` on a second fabric (autoscaler v2, fake provider)."""
    import fabric
    from fabric.core.settings import FabricSettings
    from fabric.providers import node_types_for
    from fabric.testing.fake_autoscaler import FakeAutoscalingCluster

    settings = FabricSettings.load({
        "health": SETTINGS["health"], "queue_timeout_s": 240.0,
        "scaling": {"burst_queue_depth": 1000, "low_window_s": 2.0, "high_window_s": 3600.0},
        "pools": [{"name": "default", "tiers": [
            {"name": "fixed"},
            {"name": "cloud", "scale_out": "elastic", "provider": "ray-autoscaler", "max_nodes": 1, "provision_timeout_s": 180,
             "candidate_shapes": [SHAPE]}]}]})
    call = adaptive.remote(min_tier="cpu_ffmpeg", fallback=False, num_cpus=1)(_where)
    with FakeAutoscalingCluster(node_types_for(settings), head_cpus=1, update_interval_s=1, idle_timeout_minutes=0.03) as c:
        holder["cluster"] = c
        h = fabric.up(settings, timeout_s=90)
        try:
            for i in range(trials):
                if deadline - time.monotonic() < PHASE_FLOOR_S:
                    break  # not enough budget left for one more: named as unmeasured by the caller
                seen = set(h.provisions()["serving_s"])
                ray.get(call.remote(), timeout=min(240, max(1.0, deadline - time.monotonic())))
                serving = h.provisions()["serving_s"]
                new = [v for k, v in serving.items() if k not in seen]
                out += new
                print(f"  ray-autoscaler provision {i + 1}: serving after {secs(new[0] if new else None)} s", flush=True)
                if i == trials - 1:  # the next provision needs the node gone; after the last, the cluster goes
                    break
                c.wait_until(lambda: not [n for n in ray.nodes() if n["Alive"] and n["Labels"].get("fabric.io/pool-tier") == "cloud"],
                             "the idle node given back", timeout_s=180)
        finally:
            fabric.down()


def _where() -> str:
    return ray.get_runtime_context().get_node_id()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3, help="failovers per kind (medians over them; default 3)")
    ap.add_argument("--providers", default="local,ray-autoscaler", help="providers to time provision-to-serving for")
    ap.add_argument("--autoscaler-trials", type=int, default=2, help="provisions through ray-autoscaler (default 2)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the fabric and nodes")
    ap.add_argument("--budget", type=float, default=900.0,
                    help="seconds the whole run may take (default 900); what does not fit is reported unmeasured")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args(argv)
    if args.trials < 1:
        ap.error("--trials must be at least 1")
    if args.budget <= 0:
        ap.error("--budget must be positive")
    deadline = time.monotonic() + args.budget
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    unknown = [p for p in providers if p not in ("local", "ray-autoscaler")]
    if unknown:
        ap.error(f"--providers: unknown {unknown}; known: local, ray-autoscaler")

    trials: dict[str, list[dict[str, Any]]] = {"spare": [], "busy": [], "provisioned": []}
    unmeasured: list[str] = []
    trials_end = deadline - (AUTOSCALER_SHARE_S if "ray-autoscaler" in providers else 0.0)
    b = Bench(args.timeout)
    try:
        b.add_fixed()
        b.lf.wait_registered()
        for i in range(args.trials):
            for kind, run in (("spare", spare_trial), ("busy", busy_trial), ("provisioned", provisioned_trial)):
                if trials_end - time.monotonic() < PHASE_FLOOR_S:
                    unmeasured.append(f"{kind} failover: trial {i + 1} of {args.trials} not run (budget spent)")
                    continue
                while not b.fixed_alive():
                    b.add_fixed()
                b.lf.wait_registered()
                t = run(b)
                trials[kind].append(t)
                print(f"trial {i + 1} {kind}: answered again after {secs(t['recovery_s'])} s on {t['landed_on']} "
                      f"({t['landed_pool_tier']}); Ray saw the node dead after {secs(t['death_detection_s'])} s", flush=True)
        local_serving = list(b.h.provisions()["serving_s"].values())
    finally:
        b.lf.close()
    serving = {"local": median(local_serving)} if "local" in providers else {}
    if "ray-autoscaler" in providers:
        serving["ray-autoscaler"] = median(autoscaler_serving(max(1, args.autoscaler_trials), deadline, unmeasured))

    result: dict[str, Any] = {
        "spare_failover_s": median([t["recovery_s"] for t in trials["spare"]]),
        "provisioned_failover_s": median([t["recovery_s"] for t in trials["provisioned"]]),
        "busy_node_failover_s": median([t["recovery_s"] for t in trials["busy"]]),
        "death_detection_s": median([t["death_detection_s"] for k in trials for t in trials[k]]),
        "provision_to_serving_s": serving, "trials": args.trials, "budget_s": args.budget, "unmeasured": unmeasured,
    }
    margin = None if result["spare_failover_s"] is None or result["death_detection_s"] is None else \
        result["spare_failover_s"] - result["death_detection_s"]
    result["spare_margin_s"] = margin
    print()
    print(f"job failover (median of {args.trials}): onto a hot spare {secs(result['spare_failover_s'])} s, "
          f"onto an ordinary busy node {secs(result['busy_node_failover_s'])} s, "
          f"onto a freshly provisioned node {secs(result['provisioned_failover_s'])} s")
    print(f"Ray's death detection {secs(result['death_detection_s'])} s; spare failover beyond it {secs(margin)} s "
          f"(goal <= 1 s: {'met' if margin is not None and margin <= 1.0 else 'NOT met'})")
    if result["busy_node_failover_s"] and result["spare_failover_s"]:
        print(f"spare / busy node: {result['spare_failover_s'] / result['busy_node_failover_s']:.2f}; "
              f"provisioned / spare: {result['provisioned_failover_s'] / result['spare_failover_s']:.2f}")
    for p, v in serving.items():
        print(f"provision to serving ({p}): {secs(v)} s")
    for what in unmeasured:
        print(f"not measured within the {args.budget:g} s budget: {what}")
    if args.json:
        result["per_trial"] = {k: [{key: t[key] for key in ("recovery_s", "death_detection_s", "landed_pool_tier")} for t in v]
                               for k, v in trials.items()}
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

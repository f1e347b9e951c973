"""``SpareReconcilerActor``: one per pool with a hot-spare entry.

Every ``interval_s`` (and at once when the live list changes) it reads the scheduler's fleet,
asks the pure ``reconcile`` (``fabric.core.spares``) what the pool's spares need, and carries the
decisions out through the scheduler, which owns the providers and the fleet view:

- ``Provision`` -> ``scheduler.provision_node(..., spare=True)`` (the node joins labelled
  ``fabric.io/spare=true`` with its pool tier and instance id); the state learns
  ``provision_started``, then ``provision_done`` when a node with that instance id shows up, or
  ``provision_failed`` (a backoff of the entry's ``provision_backoff_s`` follows; no phantom node).
- ``Abandon`` / ``Reap`` -> ``scheduler.terminate_instance`` (only nodes a provider of this fabric made).
- ``Tag`` -> ``scheduler.set_spare_tags`` (the fabric's own view: Ray labels cannot change).
- ``Prefetch`` -> the node's ``ProbeActor.prefetch`` (its artifact cache), then an
  ``images_prefetched`` event with the per-artifact results.
- ``Underflow`` -> a ``spare_underflow`` event.

The live entry comes from the registry (``HOT_SPARES_KEY``, written by ``h.update_hot_spares``),
else the settings' ``hot_spares``. A restart re-runs ``__init__``; provisions in flight are not
forgotten: each provision is asked for with its id, and the scheduler keeps it in the job store
(``spare_provision`` rows, ``fabric.core.spares.rows``) until its node registers or is terminated.
Before its first round a reconciler takes its pool's kept provisions back (``_adopt_kept``): each
counts as pending, times out from when it was really asked for and is matched by instance id when
its node joins, so a restart provisions nothing twice. One whose provider had not answered yet is
followed each round until it answers (or its row goes: it failed, or its node registered).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ray

from fabric.core.names import HEAD_RESOURCE, HOT_SPARES_KEY, NAMESPACE, REGISTRY, SCHEDULER, probe_actor_name
from fabric.core.settings import FabricSettings, HotSpareSettings
from fabric.core.spares import (
    Abandon, Prefetch, Provision, ProvisionPhase, Reap, SpareState, Tag, Underflow, reconcile, survey,
)
from fabric.core.spares.entries import parse_hot_spares
from fabric.core.spares.rows import KeptSpareProvision, in_flight_of, spare_provision_from_row

INTERVAL_S = 1.0
"""How often a reconciler looks (cheap: one read of the scheduler's fleet)."""


def live_entries(settings: FabricSettings, stored: Any) -> tuple[HotSpareSettings, ...]:
    """The live hot-spare list: what the registry holds (``update_hot_spares``), else the settings'."""
    if stored is None:
        return settings.hot_spares
    try:
        return parse_hot_spares(stored, settings)
    except Exception:
        return settings.hot_spares


class SpareReconciler:
    """The reconciler's logic (the actor below is it on Ray); ``clock``: monotonic seconds."""

    def __init__(self, pool: str, settings: dict | None = None, interval_s: float | None = None, *, run_loop: bool = True) -> None:
        self.pool = pool
        self.settings = FabricSettings.load(settings or {})
        self.interval_s = interval_s if interval_s is not None else min(INTERVAL_S, self.settings.health.monitor_interval_s)
        self.state = SpareState(pool, id_prefix=f"spare-{pool}-{int(time.time() * 1000) % 10**9}")
        self.spec: HotSpareSettings | None = next((e for e in self.settings.hot_spares if e.pool == pool), None)
        self.instances: dict[str, tuple[str, str]] = {}
        """Instance id -> (provision id, provider), for provisions the provider started and whose node has not shown up."""
        self.errors: list[str] = []
        self.rounds = 0
        self.adopted: bool = False
        """Whether the kept provisions of the pool were read back (before the first round decides anything)."""
        self._unanswered: set[str] = set()
        """Adopted provisions whose provider had not answered yet: followed each round."""
        self._wake = asyncio.Event()
        self._busy: set[str] = set()
        self._task = asyncio.get_event_loop().create_task(self._run()) if run_loop else None

    # -- the loop -------------------------------------------------------------------------------------
    async def _run(self) -> None:
        await self._load_entry()
        while True:
            try:
                await self.reconcile_once()
            except Exception as exc:  # the scheduler restarting: the next round tries again
                self._error(f"round failed: {type(exc).__name__}: {exc}")
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def _load_entry(self) -> None:
        try:
            registry = ray.get_actor(REGISTRY, namespace=NAMESPACE)
            stored = await registry.get_state.remote(HOT_SPARES_KEY)
        except Exception:
            return
        self.spec = next((e for e in live_entries(self.settings, stored) if e.pool == self.pool), None)

    def _scheduler(self) -> Any:
        return ray.get_actor(SCHEDULER, namespace=NAMESPACE)

    async def reconcile_once(self) -> list[Any]:
        sched = self._scheduler()
        if not self.adopted:
            await self._adopt_kept(sched)
        elif self._unanswered:
            await self._follow_kept(sched)
        records = await sched.nodes.remote()
        now = time.monotonic()
        by_instance = {r.instance_id: r.node_id for r in records if r.instance_id}
        for iid, (pid, _) in list(self.instances.items()):
            if iid in by_instance:
                self.state.provision_done(pid, by_instance[iid])
                del self.instances[iid]
        decisions = reconcile(self.pool, self.spec, records, self.settings, self.state, now, self._templates())
        by_id = {r.node_id: r for r in records}
        for d in decisions:
            if isinstance(d, Provision):
                self._spawn(self._provision(sched, d), d.provision_id)
            elif isinstance(d, (Abandon, Reap)):
                self._spawn(self._remove(sched, d, by_id), getattr(d, "node_id", None) or d.provision_id)
            elif isinstance(d, Tag):
                await sched.set_spare_tags.remote(d.node_id, d.spare, list(d.reserved_for), d.exclusive, d.reason)
            elif isinstance(d, Prefetch):
                self._spawn(self._prefetch(sched, d), f"prefetch:{d.node_id}")
            elif isinstance(d, Underflow):
                await sched.record_event.remote("spare_underflow", {"pool": d.pool, "current": d.current, "target": d.target})
        self.rounds += 1
        return decisions

    # -- provisions kept by the scheduler (a restart) ------------------------------------------------
    async def _kept(self, sched: Any) -> dict[str, KeptSpareProvision]:
        """The pool's spare provisions the scheduler keeps, by id (an unreadable row is reported and skipped)."""
        view = await sched.provisions.remote()
        out: dict[str, KeptSpareProvision] = {}
        for row in view.get("spare_provisions", ()):
            try:
                k = spare_provision_from_row(row)
            except Exception as exc:
                self._error(f"a kept spare provision cannot be read: {type(exc).__name__}: {exc}")
                continue
            if k.pool == self.pool:
                out[k.provision_id] = k
        return out

    async def _adopt_kept(self, sched: Any) -> int:
        """Take back the pool's provisions in flight a reconciler before this one asked for (counted
        pending, timed out from their own ask, matched by instance id); how many."""
        kept = await self._kept(sched)
        offset = time.time() - time.monotonic()
        taken = []
        for k in kept.values():
            if not self.state.adopt(in_flight_of(k, offset)):
                continue
            taken.append(k.provision_id)
            if k.instance_id is not None:
                self.instances[k.instance_id] = (k.provision_id, k.provider)
            else:
                self._unanswered.add(k.provision_id)
        self.adopted = True
        if taken:
            await sched.record_event.remote("spare_provisions_adopted", {
                "pool": self.pool, "provision_ids": sorted(taken), "unanswered": sorted(self._unanswered)})
        return len(taken)

    async def _follow_kept(self, sched: Any) -> None:
        """Adopted provisions whose provider had not answered: one that answered is started (or, if it
        was abandoned meanwhile, its node given back); one whose row went (it failed, or its node
        registered and counts as a spare by its label) ends without a backoff."""
        kept = await self._kept(sched)
        now = time.monotonic()
        for pid in sorted(self._unanswered):
            k = kept.get(pid)
            if k is not None and k.instance_id is None:
                continue
            self._unanswered.discard(pid)
            if k is None or k.instance_id is None:
                self.state.abandon(pid, now, None)
            elif self.state.provision_started(pid, now):
                self.instances[k.instance_id] = (pid, k.provider)
            elif self.state.finished.get(pid) is ProvisionPhase.ABANDONED:
                await sched.terminate_instance.remote(k.provider, k.instance_id, "spare abandoned")

    def _templates(self) -> dict[str, tuple[str, ...]]:
        templates = getattr(self.settings, "templates", None) or {}
        return {name: tuple(t.artifacts) for name, t in templates.items()}

    # -- carrying out -----------------------------------------------------------------------------------
    def _spawn(self, coro: Any, key: str) -> None:
        if key in self._busy:
            coro.close()
            return
        self._busy.add(key)
        task = asyncio.get_event_loop().create_task(coro)
        task.add_done_callback(lambda _t: (self._busy.discard(key), self._wake.set()))

    async def _provision(self, sched: Any, d: Provision) -> None:
        pt = next((t for p in self.settings.pools if p.name == d.pool for t in p.tiers if t.name == d.pool_tier), None)
        provider = pt.provider if pt is not None else "local"
        backoff = self.spec.provision_backoff_s if self.spec is not None else 60.0
        try:
            node = await sched.provision_node.remote(provider, d.shape.model_dump(mode="json"), d.pool, d.pool_tier,
                                                     True, d.provision_id)
        except Exception as exc:
            cause = getattr(exc, "cause", None) or exc  # the provider's own error, not Ray's wrapper
            self.state.provision_failed(d.provision_id, time.monotonic(), backoff)
            self._error(f"provision {d.provision_id} failed: {type(cause).__name__}: {cause}")
            await sched.record_event.remote("spare_provision_failed", {
                "pool": d.pool, "pool_tier": d.pool_tier, "shape": d.shape.name, "provision_id": d.provision_id,
                "error": f"{type(cause).__name__}: {cause}"[:800], "reason": getattr(cause, "reason", None),
                "backoff_s": backoff})
            return
        if self.state.provision_started(d.provision_id, time.monotonic()):
            self.instances[node["instance_id"]] = (d.provision_id, provider)
        else:  # abandoned while it started: give it back
            await sched.terminate_instance.remote(provider, node["instance_id"], "abandoned")

    async def _remove(self, sched: Any, d: Any, by_id: dict[str, Any]) -> None:
        if isinstance(d, Reap):
            rec = by_id.get(d.node_id)
            if rec is None or not rec.instance_id or not rec.provider:
                return
            await sched.terminate_instance.remote(rec.provider, rec.instance_id, f"spare {d.reason}", d.node_id)
            await sched.record_event.remote("spare_reaped", {"pool": self.pool, "node_id": d.node_id, "reason": d.reason})
            return
        iid = next((i for i, (p, _) in self.instances.items() if p == d.provision_id), None)
        if iid is not None:
            _, provider = self.instances.pop(iid)
            await sched.terminate_instance.remote(provider, iid, f"spare {d.reason}")

    async def _prefetch(self, sched: Any, d: Prefetch) -> None:
        try:
            probe = ray.get_actor(probe_actor_name(d.node_id), namespace=NAMESPACE)
            results = await probe.prefetch.remote(list(d.artifacts))
        except Exception as exc:
            results = [{"uri": a, "ok": False, "error": f"{type(exc).__name__}: {exc}"} for a in d.artifacts]
        await sched.record_event.remote("images_prefetched", {"pool": self.pool, "node_id": d.node_id, "results": results})

    # -- the operator -----------------------------------------------------------------------------------
    async def set_entry(self, entry: dict | None) -> None:
        """The live list changed: converge on the new entry at once (None: the entry was removed)."""
        self.spec = HotSpareSettings.model_validate(entry) if entry is not None else None
        self._wake.set()

    async def status(self) -> dict:
        sched = self._scheduler()
        records = await sched.nodes.remote()
        s = survey(self.pool, self.spec, records, self.settings, self.state, time.monotonic())
        return {"pool": self.pool, "target": s.target, "live": list(s.live), "consumed": list(s.consumed),
                "pending": list(s.pending), "reaping": list(s.reaping), "warm_for": list(s.warm_for),
                "reserved_for": list(s.reserved_for), "exclusive": s.exclusive,
                "backing_off": self.state.backing_off(time.monotonic()), "rounds": self.rounds, "errors": self.errors[-5:]}

    def ping(self) -> str:
        return "ok"

    def _error(self, text: str) -> None:
        print(f"[fabric.spares.{self.pool}] {text}")
        self.errors.append(text)
        del self.errors[:-50]


@ray.remote(num_cpus=0, resources={HEAD_RESOURCE: 0.001}, max_restarts=-1, max_task_retries=-1)
class SpareReconcilerActor(SpareReconciler):
    """``SpareReconciler`` as the detached, named actor ``fabric.spares.<pool>``."""


__all__ = ["SpareReconciler", "SpareReconcilerActor", "live_entries", "INTERVAL_S"]

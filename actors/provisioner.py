"""The scheduler's hands on providers: ``Provisioner`` carries out ``ProvisionNode`` and
``TerminateNode`` and serves the spare reconcilers' provisions.

It lives inside the scheduler actor, so every node the fabric provisions is a child of one
process (the ``local`` provider's ``ray start`` sessions) or one demand model (the
``ray-autoscaler`` provider's ``request_resources``). Provider calls block (a ``ray start`` takes
seconds), so they run in a small thread pool; the answer goes back to the core as a stimulus
(``ProvisionStarted`` / ``ProvisionFailed``) on the scheduler's event loop.

Providers are built on first use from the settings' pool tiers (``providers_for``), joining this
cluster's GCS address. The ``local`` provider writes its children's logs and pid files beside the
fabric's store (``<store folder>/providers/local``). Every instance a provider answers is a row of
the job store (``kind = "instance"``: the ``ProvisionedNode`` as JSON), removed once terminated. A
restarted scheduler reads them back (``attach``): each instance still running is adopted by its
provider again (listed, scaled down, terminated by ``fabric down`` as if started here), one that
ended is forgotten, and what a provision in flight had started but not yet answered (a ``ray
start`` pid file nobody adopted) is killed. A ``command`` provider's ``list`` script is the truth:
a remembered instance it no longer lists is forgotten, and one it lists that nobody remembered is
adopted (and kept as a row) or terminated, by its pool tier's ``command.unknown_instances``. None
is leaked, none terminated twice.

Provisions in flight are kept beside them (``fabric.core.scheduling.provision_rows``,
``fabric.core.spares.rows``). The task core's (its ``ProvisionBook``) are written by ``persist``,
which the scheduler calls after every stimulus, as ``provision`` and ``provision_hold`` rows; the
instance a provision's answer brought is written in the same transaction as the provision's row
that names it, so no restart falls between the two. A spare reconciler's (asked with a
``provision_id``) are ``spare_provision`` rows from the ask until the node registers or is
terminated; asking again for the same id answers the node already started. ``attach`` gives each
back whose instance its provider took back (the core's through ``ProvisionsAdopted``, the
reconcilers' through ``view``) and drops, with a ``provision_dropped`` / ``spare_provision_dropped``
note, one that was never answered (what it started is swept) or whose instance is gone.

What the provisioner needs of the scheduler it serves is the ``ProvisionerHost`` port below, so this
module imports nothing of ``actors.scheduler`` (the scheduler builds a ``Provisioner``; the
provisioner only answers it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from fabric.core.errors import FabricError
from fabric.core.provision_phase import ProvisionPhase
from fabric.core.scheduling import (
    ProvisionFailed, ProvisionNode, ProvisionsAdopted, ProvisionStarted, Stimulus, TerminateNode,
)
from fabric.core.scheduling.provision_rows import (
    HOLD_KIND, PROVISION_KIND, book_changes, hold_from_row, provision_from_row,
)
from fabric.core.scheduling.provisions import ProvisionBook
from fabric.core.settings import FabricSettings, NodeShape
from fabric.core.spares.rows import (
    SPARE_PROVISION_KIND, KeptSpareProvision, spare_provision_from_row, spare_provision_row,
)
from fabric.providers.base import ProvisionedNode

StateRow = tuple[str, str, bytes | None]
"""``(kind, key, record)`` of the job store's ``state`` table (a None record deletes the row)."""

PROVIDER_THREADS = 4
"""Provider calls in flight at once (each ``ray start`` is a few seconds of mostly waiting)."""


class EventLog(Protocol):
    """Where the provisioner's notes go beside the fabric's other events (``actors.jobs.JobRunner``)."""

    def emit(self, kind: str, data: dict) -> None: ...


class ProvisionerHost(Protocol):
    """The port the provisioner is handed: what it reads of the scheduler it lives in
    (``actors.scheduler.Scheduler`` is one; unit tests pass a small fake)."""

    @property
    def settings(self) -> FabricSettings:
        """The fabric's settings: the pool tiers the providers are built from, the store's folder."""
        ...

    @property
    def jobs(self) -> EventLog | None:
        """The event log the notes are emitted to; None while the scheduler drives no jobs."""
        ...

    @property
    def feed(self) -> object:
        """The fleet feed; one with an ``adapter`` (the Ray seam) finds the health actor."""
        ...

    def handle_stimulus(self, stimulus: Stimulus) -> object:
        """Hand the core a stimulus (``ProvisionStarted`` / ``ProvisionFailed`` / ``ProvisionsAdopted``)
        and carry out its answer; the host then calls ``Provisioner.persist`` with the core's book."""
        ...


def _dumps(row: Mapping[str, Any]) -> bytes:
    return json.dumps(row, sort_keys=True).encode()


def providers_dir(settings: Any, gcs_address: str) -> Path:
    """``<store folder>/providers``: where providers keep what outlives a call (logs, pid files)."""
    from fabric.store.paths import store_paths

    return store_paths(settings, gcs_address).folder / "providers"


class Provisioner:
    """Provider calls for one scheduler. ``providers``: ready-made providers by name (tests);
    default: built from the settings on first use."""

    def __init__(self, host: ProvisionerHost, providers: Mapping[str, Any] | None = None) -> None:
        self.host = host
        self._providers: dict[str, Any] | None = dict(providers) if providers is not None else None
        self._pool = concurrent.futures.ThreadPoolExecutor(PROVIDER_THREADS, thread_name_prefix="fabric-provider")
        self.log: list[dict] = []
        """What was provisioned and terminated, newest last (bounded): ``fabric status`` shows it."""
        self.started_at: dict[str, float] = {}
        """Instance id -> when its provision was asked for (monotonic): provision-to-serving times."""
        self.serving_s: dict[str, float] = {}
        """Instance id -> seconds from the provision to the node registering."""
        self._joined_early: dict[str, float] = {}
        self._store: Any = None
        """The job store the instance rows go to (``attach``); None: nothing is kept (unit tests)."""
        self._outbox: list[StateRow] = []
        """Rows to write with the next ``persist`` (an answered provision's instance), or not written yet."""
        self.spare_provisions: dict[str, KeptSpareProvision] = {}
        """Provision id -> a spare reconciler's provision kept in the store (asked, or answered and not registered)."""
        self._asking: dict[str, asyncio.Event] = {}
        """Spare provision ids whose provider call runs now (a second ask waits for it)."""

    # -- the store ---------------------------------------------------------------------------------
    def attach(self, store: Any) -> int:
        """Keep instance rows in ``store`` from now on, and adopt the instances rows kept by a
        scheduler before this one: each its provider takes back if it still runs (the rest are
        forgotten), then the local provider kills what nobody adopted. The provisions in flight
        kept there are given back next (``_adopt_provisions``). How many instances were adopted."""
        self._store = store
        rows = store.state("instance")
        held: set[tuple[str, str]] = set()
        gone: list[StateRow] = []
        # a command pool tier's list script is asked even with no rows: what it reports is the truth
        asks = any(pt.provider == "command" for pool in self.host.settings.pools for pt in pool.tiers)
        providers = self.providers() if rows or asks else {}
        for key, blob in rows:
            try:
                node = ProvisionedNode.from_row(json.loads(blob))
            except Exception as exc:
                print(f"[fabric.provisioner] instance {key!r} could not be read back: {type(exc).__name__}: {exc}")
                continue
            adopt = getattr(providers.get(node.provider), "adopt", None)
            if adopt is not None and adopt(node):
                held.add((node.provider, node.instance_id))
                self._note("instance_adopted", provider=node.provider, instance_id=node.instance_id, pool=node.pool,
                           pool_tier=node.pool_tier, shape=node.shape.name)
            else:
                gone.append(("instance", key, None))
                self._note("instance_forgotten", provider=node.provider, instance_id=node.instance_id,
                           reason="it no longer runs" if adopt is not None else "its provider cannot adopt it")
        for p in providers.values():
            sweep = getattr(p, "sweep_unknown", None)
            if sweep is not None:
                killed = sweep()
                if killed:
                    self._note("instances_swept", provider=p.name, count=killed,
                               reason="started by a provision a restart interrupted; nobody adopted them")
            for kind, data, node in getattr(p, "reconcile_unknown", lambda: [])():  # what only the provider knows of
                self._note(kind, **data)
                if node is not None:
                    held.add((node.provider, node.instance_id))
                    gone.append(self._instance_row(node))  # kept, beside the rows of the instances gone
        if gone:
            store.write(state=gone)
        self._adopt_provisions(store, held)
        return len(held)

    def _adopt_provisions(self, store: Any, held: set[tuple[str, str]]) -> None:
        """The provisions in flight a scheduler before this one kept: the task core's handed back to
        the core (``ProvisionsAdopted``) with the pool tiers it held, the spare reconcilers' kept here
        for them to read; each whose instance is not among ``held`` dropped (its row deleted, a note)."""
        wall = time.time()
        dropped: list[StateRow] = []
        kept = []
        for key, blob in store.state(PROVISION_KIND):
            try:
                p = provision_from_row(json.loads(blob), 0.0)  # times stay wall-clock: the core moves them
            except Exception as exc:
                self._note("provision_dropped", provision_id=key,
                           reason=f"its row cannot be read: {type(exc).__name__}: {exc}")
                dropped.append((PROVISION_KIND, key, None))
                continue
            why = self._unusable(p.provider, p.instance_id, held)
            if why:
                dropped.append((PROVISION_KIND, key, None))
                self._note("provision_dropped", provision_id=p.provision_id, provider=p.provider, pool=p.pool,
                           pool_tier=p.pool_tier, instance_id=p.instance_id, reason=why)
            else:
                kept.append(p)
                self._note("provision_adopted", provision_id=p.provision_id, provider=p.provider, pool=p.pool,
                           pool_tier=p.pool_tier, instance_id=p.instance_id, timeout_in_s=round(p.deadline - wall, 3))
        holds = []
        for key, blob in store.state(HOLD_KIND):
            try:
                holds.append(hold_from_row(json.loads(blob), 0.0))
            except Exception as exc:
                print(f"[fabric.provisioner] hold {key!r} could not be read back: {type(exc).__name__}: {exc}")
                dropped.append((HOLD_KIND, key, None))
        for key, blob in store.state(SPARE_PROVISION_KIND):
            try:
                k = spare_provision_from_row(json.loads(blob))
            except Exception as exc:
                self._note("spare_provision_dropped", provision_id=key,
                           reason=f"its row cannot be read: {type(exc).__name__}: {exc}")
                dropped.append((SPARE_PROVISION_KIND, key, None))
                continue
            why = self._unusable(k.provider, k.instance_id, held)
            if why:
                dropped.append((SPARE_PROVISION_KIND, key, None))
                self._note("spare_provision_dropped", provision_id=k.provision_id, provider=k.provider, pool=k.pool,
                           pool_tier=k.pool_tier, instance_id=k.instance_id, reason=why)
            else:
                self.spare_provisions[k.provision_id] = k
        if dropped:
            store.write(state=dropped)
        if kept or holds:
            self.host.handle_stimulus(ProvisionsAdopted(tuple(kept), tuple(holds), wall))

    @staticmethod
    def _unusable(provider: str, instance_id: str | None, held: set[tuple[str, str]]) -> str:
        """Why a kept provision cannot be taken back ("" when it can)."""
        if instance_id is None:
            return "its provider had not answered when the scheduler stopped (what it started is swept)"
        if (provider, instance_id) not in held:
            return "its instance no longer runs (or its provider could not take it back)"
        return ""

    def persist(self, book: ProvisionBook, clock: Callable[[], float]) -> None:
        """Write what changed in the task core's ``book`` since the last call (``clock``: the core's)
        as ``state`` rows, with the rows waiting in the outbox, in one transaction. The host calls it
        after every stimulus; a write that fails is tried again with the next."""
        changes = book_changes(book, time.time() - clock()) if book.changed else []
        if not changes and not self._outbox:
            return
        if self._store is None:
            self._outbox.clear()
            return
        rows = self._outbox + [(kind, key, None if row is None else _dumps(row)) for kind, key, row in changes]
        self._outbox = []
        self._write(rows)

    def _write(self, rows: list[StateRow]) -> None:
        """One transaction of ``state`` rows; what fails waits in the outbox for the next write."""
        if self._store is None or not rows:
            return
        try:
            self._store.write(state=rows)
        except Exception as exc:  # kept for the next write: the newest row of each key, no more
            self._outbox = list({(kind, key): (kind, key, rec) for kind, key, rec in rows + self._outbox}.values())
            print(f"[fabric.provisioner] provision rows not written yet: {type(exc).__name__}: {exc}")

    @staticmethod
    def _instance_row(node: Any) -> StateRow:
        return ("instance", f"{node.provider}/{node.instance_id}", _dumps(node.as_row()))

    def _keep(self, node: Any) -> None:
        if self._store is not None:
            self._store.write(state=[self._instance_row(node)])

    def _forget(self, provider: str, instance_id: str) -> None:
        """The instance's row goes, and a spare provision's row that named it."""
        rows: list[StateRow] = [("instance", f"{provider}/{instance_id}", None)]
        rows += self._spares_of(instance_id, ProvisionPhase.ABANDONED, provider)
        self._write(rows)

    def _spares_of(self, instance_id: str, ended: ProvisionPhase, provider: str | None = None) -> list[StateRow]:
        """End the spare provisions answered with ``instance_id`` in phase ``ended`` (its node registered,
        or was terminated): the deletions of their rows."""
        ids = [pid for pid, k in self.spare_provisions.items()
               if k.instance_id == instance_id and (provider is None or k.provider == provider)]
        return [row for pid in ids if (row := self._end_spare(pid, ended)) is not None]

    def _end_spare(self, provision_id: str, ended: ProvisionPhase) -> StateRow | None:
        """End a kept spare provision in phase ``ended`` (through the provision lifecycle: a forbidden
        move raises ``TransitionError`` naming it) and forget it: its row's deletion (None: not kept)."""
        kept = self.spare_provisions.get(provision_id)
        if kept is None:
            return None
        kept.moved(ended)
        del self.spare_provisions[provision_id]
        return (SPARE_PROVISION_KIND, provision_id, None)

    # -- providers ---------------------------------------------------------------------------------
    def providers(self) -> dict[str, Any]:
        if self._providers is None:
            from fabric.providers import providers_for
            from fabric.rayio.adapter import RayAdapter

            address = RayAdapter().gcs_address()
            folder = providers_dir(self.host.settings, address)
            self._providers = providers_for(self.host.settings, address=address, log_dir=folder / "local")
        return self._providers

    def provider(self, name: str) -> Any:
        providers = self.providers()
        if name not in providers:
            raise FabricError(f"no provider {name!r} in this fabric's settings (has: {', '.join(sorted(providers)) or 'none'})",
                              reason="unknown_provider", provider=name)
        return providers[name]

    # -- instructions ------------------------------------------------------------------------------
    def carry_out(self, ins: Any) -> None:
        if isinstance(ins, ProvisionNode):
            asyncio.get_event_loop().create_task(self._provision(ins))
        elif isinstance(ins, TerminateNode):
            asyncio.get_event_loop().create_task(self._terminate(ins.provider, ins.instance_id, ins.reason, ins.node_id))

    async def _provision(self, ins: ProvisionNode) -> None:
        t0 = time.monotonic()
        self._note("provision_requested", provision_id=ins.provision_id, provider=ins.provider, pool=ins.pool,
                   pool_tier=ins.pool_tier, shape=ins.shape.name, reason=ins.reason)
        try:
            node = await self._start(ins.provider, ins.shape, ins.pool, ins.pool_tier, spare=False)
        except Exception as exc:
            self._note("provision_failed", provision_id=ins.provision_id, provider=ins.provider, pool=ins.pool,
                       pool_tier=ins.pool_tier, shape=ins.shape.name, error=f"{type(exc).__name__}: {exc}")
            self.host.handle_stimulus(ProvisionFailed(ins.provision_id, str(exc)))
            return
        self.started_at[node.instance_id] = t0
        if self._store is not None:  # written with the provision's row that names it (the host's persist)
            self._outbox.append(self._instance_row(node))
        self.host.handle_stimulus(ProvisionStarted(ins.provision_id, node.instance_id, ins.provider))
        rows, self._outbox = self._outbox, []
        self._write(rows)  # nothing left when the host persisted; else the instance is not left unwritten

    async def provision(self, provider: str, shape: NodeShape, pool: str, pool_tier: str, *, spare: bool,
                        tags: Mapping[str, str] | None = None, provision_id: str | None = None) -> Any:
        """Have ``provider`` start a node (in a thread); its ``ProvisionedNode``. With ``provision_id``
        (a spare reconciler's), the provision is kept as a ``spare_provision`` row from the ask until
        its node registers or is terminated, and a second ask of that id answers the same node (one
        still being started is waited for; a failed one is asked again)."""
        if provision_id is None:
            node = await self._start(provider, shape, pool, pool_tier, spare=spare, tags=tags)
            self._keep(node)
            return node
        while provision_id in self._asking:
            await self._asking[provision_id].wait()
        kept = self.spare_provisions.get(provision_id)
        if kept is not None and kept.instance_id is not None:
            node = next((n for n in self.provider(kept.provider).list() if n.instance_id == kept.instance_id), None)
            if node is not None:
                self._note("spare_provision_answered_again", provision_id=provision_id, provider=kept.provider,
                           instance_id=kept.instance_id, reason="asked again for a provision already started")
                return node
        kept = KeptSpareProvision(pool, provision_id, provider, pool_tier, shape, time.time())
        self.spare_provisions[provision_id] = kept
        self._asking[provision_id] = done = asyncio.Event()
        self._write([(SPARE_PROVISION_KIND, provision_id, _dumps(spare_provision_row(kept)))])
        try:
            node = await self._start(provider, shape, pool, pool_tier, spare=spare, tags=tags)
        except BaseException:
            self._end_spare(provision_id, ProvisionPhase.FAILED)
            self._write([(SPARE_PROVISION_KIND, provision_id, None)])
            raise
        finally:
            del self._asking[provision_id]
            done.set()
        if node.instance_id in self.serving_s:  # its node registered before the provider answered: nothing to keep
            self._end_spare(provision_id, ProvisionPhase.REGISTERED)
            self._write([self._instance_row(node), (SPARE_PROVISION_KIND, provision_id, None)])
            return node
        kept = self.spare_provisions[provision_id] = kept.answered(node.instance_id, time.time())
        self._write([self._instance_row(node), (SPARE_PROVISION_KIND, provision_id, _dumps(spare_provision_row(kept)))])
        return node

    async def _start(self, provider: str, shape: NodeShape, pool: str, pool_tier: str, *, spare: bool,
                     tags: Mapping[str, str] | None = None) -> Any:
        """The provider's call itself (in a thread) and its note; the caller keeps the instance's row."""
        p = self.provider(provider)
        loop = asyncio.get_event_loop()
        t0 = time.monotonic()
        node = await loop.run_in_executor(
            self._pool, lambda: p.provision(shape, pool=pool, pool_tier=pool_tier, spare=spare, tags=dict(tags or {})))
        self.started_at.setdefault(node.instance_id, t0)
        joined = self._joined_early.pop(node.instance_id, None)
        if joined is not None:  # it registered before ray start reported it up
            self.serving_s[node.instance_id] = round(max(0.0, joined - self.started_at[node.instance_id]), 3)
        self._note("node_provisioned", provider=provider, pool=pool, pool_tier=pool_tier, shape=shape.name,
                   instance_id=node.instance_id, spare=spare, start_s=round(time.monotonic() - t0, 3))
        return node

    async def _terminate(self, provider: str, instance_id: str, reason: str, node_id: str | None = None) -> None:
        try:
            await self.terminate(provider, instance_id, reason, node_id)
        except Exception as exc:
            self._note("terminate_failed", provider=provider, instance_id=instance_id, error=f"{type(exc).__name__}: {exc}")

    async def terminate(self, provider: str, instance_id: str, reason: str = "", node_id: str | None = None) -> None:
        """Have ``provider`` give the node back. A ``ray-autoscaler`` node (``node_id``) also loses the
        fabric's probe actor: Ray's autoscaler gives back only a node without running actors."""
        p = self.provider(provider)
        self._note("node_terminated", provider=provider, instance_id=instance_id, reason=reason)
        await asyncio.get_event_loop().run_in_executor(self._pool, p.terminate, instance_id)
        self._forget(provider, instance_id)
        if provider == "ray-autoscaler" and node_id:
            from fabric.core.names import HEALTH

            health = self.host.feed.adapter.get_actor(HEALTH) if hasattr(self.host.feed, "adapter") else None
            if health is not None:
                await health.release_node.remote(node_id)

    def registered(self, instance_id: str | None) -> None:
        """A provisioned node registered: how long it took from the provision; a spare provision it
        fulfils is no longer kept (the node is in the fleet, labelled a spare)."""
        if instance_id and self.spare_provisions:
            self._write(self._spares_of(instance_id, ProvisionPhase.REGISTERED))
        if not instance_id or instance_id in self.serving_s:
            return
        if instance_id in self.started_at:
            self.serving_s[instance_id] = round(time.monotonic() - self.started_at[instance_id], 3)
        else:
            self._joined_early[instance_id] = time.monotonic()

    def claim(self, node_id: str, labels: Mapping[str, str]) -> str | None:
        """The instance a registering node of a provider that cannot label it with our instance id
        (``ray-autoscaler``) fulfils: the provider binds it and answers the id (None: not one of its own)."""
        p = (self._providers or {}).get("ray-autoscaler")
        claim = getattr(p, "claim", None)
        if claim is None:
            return None
        try:
            return claim(node_id, labels)
        except Exception:
            return None

    def sync_demand(self, busy: list[Mapping[str, str]] | Callable[[], list[Mapping[str, str]]]) -> None:
        """Rewrite the ``ray-autoscaler`` request (each tick): its held instances plus the busy nodes
        it does not hold (their labels; or a callable that lists them, called only when needed).
        Nothing to do while that provider was never used."""
        p = (self._providers or {}).get("ray-autoscaler")
        sync = getattr(p, "sync", None)
        if sync is None:
            return
        try:
            sync(busy() if callable(busy) else busy)
        except Exception as exc:  # the GCS briefly away: the next tick writes it again
            self._note("demand_write_failed", provider="ray-autoscaler", error=f"{type(exc).__name__}: {exc}")

    def knows(self, provider: str | None, instance_id: str) -> bool:
        """Whether ``provider`` (already built) made ``instance_id`` and holds it still."""
        p = (self._providers or {}).get(provider or "")
        return p is not None and any(n.instance_id == instance_id for n in p.list())

    def view(self) -> dict[str, Any]:
        """What ``Scheduler.provisions`` adds to the core's view: the nodes providers made, their
        provision-to-serving times, the last notes, and the spare provisions kept (rows, for a
        restarted reconciler to take back)."""
        return {"instances": self.instances(), "serving_s": dict(self.serving_s), "log": list(self.log[-50:]),
                "spare_provisions": [spare_provision_row(k) for k in self.spare_provisions.values()]}

    def instances(self) -> list[dict]:
        out = []
        for name, p in (self._providers or {}).items():
            for n in p.list():
                out.append({"provider": name, "instance_id": n.instance_id, "pool": n.pool, "pool_tier": n.pool_tier,
                            "shape": n.shape.name, "spare": n.spare, "serving_s": self.serving_s.get(n.instance_id)})
        return out

    def close(self) -> int:
        """Terminate every node the providers made (``fabric.down``); how many there were."""
        n = 0
        for name, p in (self._providers or {}).items():
            nodes = p.list()
            n += len(nodes)
            close = getattr(p, "close", None)
            if close is not None:
                close()
                left = {n.instance_id for n in p.list()}  # one its provider could not give back keeps its row
                for node in nodes:
                    if node.instance_id not in left:
                        self._forget(name, node.instance_id)
        return n

    def _note(self, kind: str, **data: Any) -> None:
        self.log.append({"kind": kind, "at": time.time(), **data})
        del self.log[:-200]
        jobs = self.host.jobs
        if jobs is not None:
            jobs.emit(kind, data)


__all__ = ["EventLog", "Provisioner", "ProvisionerHost", "providers_dir", "PROVIDER_THREADS"]

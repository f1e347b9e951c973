"""How an ``@adaptive.remote`` call is carried out on Ray.

1. Ask the scheduler for a node (one actor round trip). It reserves a slot there.
2. Submit the task *to that node* ourselves, asking Ray for one ``fabric.slots`` so that Ray
   itself refuses to oversubscribe the node. The ObjectRef we return is that task's: the
   result flows node → caller through the object store, never through the scheduler.
3. When the task ends (in the worker), its reservation is released back to the scheduler.

Node loss: the task is pinned *softly* (``NodeAffinitySchedulingStrategy(soft=True)``) and carries
a label selector for every tier at or above its floor. While the chosen node lives, Ray keeps the
task there (a busy node makes it wait, not spill). If the node dies, Ray's own retry (up to
``max_retries``) places it again on a node inside the floor — never below it, never lost silently.
A hard pin would instead fail with ``TaskUnschedulableError`` (measured on Ray 2.60).

No capacity: with ``on_no_capacity="raise"`` the call raises ``CapacityError`` at once; with
``"queue"`` the call goes to the dispatcher actor, which waits in the scheduler's deferred queue
(priority, then FIFO, retried on every capacity event) and runs the task when a node frees up; its
``ray.get`` raises ``CapacityError`` after the queue timeout. Only deferred calls take this path.
"""

from __future__ import annotations

import collections
import hashlib
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable


import ray
from ray import cloudpickle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fabric.core import names
from fabric.core.errors import CapacityError, FabricError, SchedulerUnavailableError
from fabric.core.scheduling import LeaseGrant, NodeAssignment
from fabric.core.tiers import TIERS_BEST_FIRST
from fabric.rayio.tasks import base_options, counted_remote_for, launch, task_options, tier_selector

if TYPE_CHECKING:  # pragma: no cover
    from fabric.runtime.client import AdaptiveFunction
    from fabric.core.placement import Requirement


# -- in the caller ------------------------------------------------------------------------------------
ANSWER_TIMEOUT_S = 10.0
"""How long a caller waits for the scheduler's answer (a lease, a placement) before
``SchedulerUnavailableError``. It answers in milliseconds; a restart takes a second or two."""


class _Connection:
    """This process's handles on the fabric's actors (looked up once, brought up if missing)."""

    def __init__(self) -> None:
        self.scheduler = None
        self.dispatcher = None
        self.session: object = None
        self.lock = threading.Lock()
        self.leases: dict[tuple, _Lease] = {}
        self.client_id = uuid.uuid4().hex[:12]
        self.queue_timeout_s = 300.0
        self.answer_timeout_s = ANSWER_TIMEOUT_S

    def ensure(self):
        # Handles belong to one connection: after ray.shutdown() and a new ray.init() (a new
        # cluster, say) they must be looked up again.
        session = _session()
        if self.scheduler is not None and self.session == session:
            return self
        with self.lock:
            if self.scheduler is None or self.session != _session():
                self.scheduler = None
                if not ray.is_initialized():
                    ray.init()
                self.session = _session()
                try:
                    sched = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
                    disp = ray.get_actor(names.DISPATCHER, namespace=names.NAMESPACE)
                except ValueError:
                    from fabric.runtime.control import up

                    up()  # "`.remote()` brings the fabric up with defaults if it is not up"
                    sched = ray.get_actor(names.SCHEDULER, namespace=names.NAMESPACE)
                    disp = ray.get_actor(names.DISPATCHER, namespace=names.NAMESPACE)
                self.dispatcher = disp
                self.leases = {}
                try:
                    self.queue_timeout_s = float(ray.get(sched.queue_timeout_s.remote(), timeout=self.answer_timeout_s))
                except ray.exceptions.GetTimeoutError:
                    raise SchedulerUnavailableError(
                        f"the fabric's scheduler did not answer within {self.answer_timeout_s:g} s "
                        "(is the scheduler actor alive? see `fabric status`)", waited_s=self.answer_timeout_s,
                        what="connect") from None
                self.scheduler = sched
        return self

    def reset(self) -> None:
        with self.lock:
            self.scheduler = None
            self.dispatcher = None
            self.leases = {}


def _session() -> object:
    """Identifies this process's current Ray connection (None when not connected)."""
    worker = ray._private.worker.global_worker
    return getattr(worker, "core_worker", None) if ray.is_initialized() else None


_conn = _Connection()


def reset_connection() -> None:
    """Forget cached actor handles (``fabric.down`` and tests call this)."""
    _conn.reset()


class _Lease:
    """This process's lease for one requirement class (see ``fabric.core.scheduling.LeaseGrant``).

    Calls go to the leased nodes in the engine's order while a node has room for one more of this
    client's calls in flight; a finished call frees its room through a completion callback on its
    ObjectRef (no polling, no round trip). Past the slots, calls go to the spill selector with a
    soft affinity to the grant's ``spill_via`` node that spills when it is busy (see
    ``SchedulerCore.spill_target``): Ray queues them in this process, its lease requests wait in
    that node's raylet, and each call runs on whichever node inside the floor frees a slot first;
    while spilled calls still queue, new ones queue behind them (see ``spill_queue_empty``).

    Renewed every health tick, so a cordoned, drained or lost node stops receiving new calls within
    one tick: the next grant is asked for at ``RENEW_AT`` of the tick, without waiting, and taken
    into use when it arrives; a call waits for it only when the tick has run out first. A grant is
    used for at most one tick from the moment it was asked for."""

    __slots__ = ("lease_id", "grant", "expires", "renew_at", "renewal", "renewal_seq", "arrived_seq", "order", "capacity", "fallback",
                 "running", "finished", "in_flight", "bound", "spill", "lock", "peak", "spilled", "last_spill", "spill_seq",
                 "last_spill_at", "done_seq", "armed_seq", "next_spill_check", "last_call_at")

    SPILL_CHECK_S = 0.01
    """How often, at most, a call looks whether this lease's spilled calls have all been taken."""
    RENEW_AT = 0.75
    """When, as a share of the tick, the next grant is asked for."""
    IDLE_AFTER = 0.25
    """A lease with nothing in flight and no call for this share of the tick is idle: the next
    request this client makes to the scheduler gives it back (see ``idle``)."""

    def __init__(self, lease_id: str) -> None:
        self.lease_id = lease_id
        self.grant: LeaseGrant | None = None
        self.expires = 0.0
        self.renew_at = 0.0
        self.renewal = None
        """The ObjectRef of the next grant while it is on its way; it has arrived when
        ``arrived_seq`` (set by its completion callback) has caught up with ``renewal_seq``."""
        self.renewal_seq = 0
        self.arrived_seq = 0
        self.order: list[str] = []
        self.capacity: dict[str, int] = {}
        self.fallback: dict[str, bool] = {}
        """Per leased node: whether its slots sit below ``min_tier`` (a call there is a fallback)."""
        self.running: dict[str, int] = {}
        """This client's calls in flight per leased node (kept across renewals)."""
        self.bound: dict[str, Any] = {}
        self.spill = None
        self.lock = threading.Lock()
        self.finished: collections.deque = collections.deque()
        """Nodes whose calls finished, appended by completion callbacks on Ray's own threads (a
        deque append never blocks; taking ``lock`` there could deadlock against a submit)."""
        self.in_flight: dict[int, Any] = {}
        """The ObjectRefs of calls on leased slots, each dropped by its completion callback (so no
        result is kept alive): what ``idle`` looks at when a callback is still on its way."""
        self.last_call_at = 0.0
        self.peak = 0
        """Most of this client's calls in flight on leased slots at once since the last renewal."""
        self.spilled = 0
        """Calls sent to the spill selector since the last renewal."""
        self.last_spill = None
        """The newest spilled call's ObjectRef, let go of once a call sees it has finished."""
        self.spill_seq = 0
        """Spilled calls so far; ``done_seq``: the number of the newest one known to have finished
        (set by a completion callback); ``armed_seq``: the one that callback waits on."""
        self.done_seq = 0
        self.armed_seq = 0
        self.last_spill_at = 0.0
        self.next_spill_check = 0.0

    def want(self) -> int:
        """Slots to ask for at renewal: what this client used at its peak, more when it had to
        spill, and no more than that: a lease must not hoard the fleet's free slots for a tick."""
        return max(1, min(64, self.peak + self.spilled))

    def _collect(self) -> None:
        pop = self.finished.popleft
        while self.finished:
            node = pop()
            self.running[node] = self.running.get(node, 1) - 1

    def holding(self) -> dict[str, int]:
        self._collect()
        return {n: k for n, k in self.running.items() if k > 0}

    def free_node(self) -> str | None:
        self._collect()
        for node in self.order:
            if self.running.get(node, 0) < self.capacity[node]:
                return node
        return None

    def spill_queue_empty(self, now: float) -> bool:
        """No spilled call of this client waits in Ray's queue any more (its newest one finished).

        Spilled calls hold the floor set's slots, leased ones included, and the scheduler does
        not see them; while they queue, a call sent to a leased node would only wait behind them
        in a scheduling class of its own (and make Ray hand worker leases back and forth), so new
        calls queue behind them instead, in order. During a burst nothing blocks: a completion
        callback waits on the newest spilled call, moved to a newer one every ``SPILL_CHECK_S`` at
        most. Once no call has spilled for ``SPILL_CHECK_S`` (the burst is over), the newest is
        looked at directly, so the first call after a burst goes to the best leased node."""
        if self.done_seq < self.spill_seq:
            if now < self.next_spill_check:
                return False
            self.next_spill_check = now + self.SPILL_CHECK_S
            seq, ref = self.spill_seq, self.last_spill
            if self.armed_seq != seq:
                self.armed_seq = seq
                ref._on_completed(lambda _result, seq=seq: self._spill_done(seq))
            if self.done_seq < seq and now - self.last_spill_at >= self.SPILL_CHECK_S and _all_finished([ref]):
                self._spill_done(seq)
            if self.done_seq < seq:
                return False
        self.last_spill = None  # known to have finished: its result is not kept alive by us
        return True

    def _spill_done(self, seq: int) -> None:  # on Ray's thread: no lock (see ``finished``)
        if seq > self.done_seq:
            self.done_seq = seq

    def spilled_call(self, ref, now: float) -> None:
        self.spilled += 1
        self.spill_seq += 1
        self.last_spill = ref
        self.last_spill_at = now

    def route(self, now: float, may_spill: bool) -> str | None:
        """Where the next call goes: a leased node with room (its id), ``SPILL`` (Ray's queue for
        the floor set), or None (no room and no spilling: the per-call path)."""
        spill = may_spill and self.spill is not None
        if not spill or self.spill_queue_empty(now):
            node = self.free_node()
            if node is not None:
                return node
        return SPILL if spill else None

    def started(self, node: str, ref) -> None:
        k = self.running.get(node, 0) + 1
        self.running[node] = k
        if k > self.peak:
            self.peak = k
        key = id(ref)
        self.in_flight[key] = ref
        ref._on_completed(lambda _result, node=node, key=key, done=self.finished.append, drop=self.in_flight.pop:
                          (done(node), drop(key, None)))

    def idle(self, now: float) -> bool:
        """Nothing of this client's runs or queues under the lease and no call came for
        ``IDLE_AFTER`` of the tick: its slots only keep other classes off the best nodes. A
        completion callback may lag behind the task by a few milliseconds, so calls still counted
        in flight are looked at directly. A renewal on its way does not count: the scheduler takes
        this client's requests in order, so giving the lease back drops that grant too."""
        if self.grant is None:
            return False
        if now - self.last_call_at < self.IDLE_AFTER * self.grant.ttl_s:
            return False
        refs = list(self.in_flight.values())
        if self.done_seq < self.spill_seq and self.last_spill is not None:
            refs.append(self.last_spill)
        return not refs or _all_finished(refs)

    def forget(self) -> None:
        """Let go of the grant (given back to the scheduler): the next call asks for a new one.
        Callbacks still on their way land in the old bookkeeping, which is dropped."""
        self.grant = self.renewal = None
        self.expires = self.renew_at = 0.0
        self.order, self.capacity, self.running, self.fallback = [], {}, {}, {}
        self.finished, self.in_flight = collections.deque(), {}
        self.spill = self.last_spill = None
        self.done_seq = self.armed_seq = self.spill_seq
        self.peak = self.spilled = 0

    def ask_renewal(self, scheduler, req: "Requirement", now: float, release: list[str]) -> None:
        """Ask for the next grant (no waiting), giving back this client's idle leases (``release``)."""
        seq = self.renewal_seq = self.renewal_seq + 1
        self.renewal = scheduler.lease.remote(self.lease_id, req, self.holding(), self.want(), release)
        self.renew_at = now  # asked at: the grant will be used for one tick from here
        self.renewal._on_completed(lambda _result, seq=seq: setattr(self, "arrived_seq", seq))

    def renewal_arrived(self) -> bool:
        return self.renewal is not None and self.arrived_seq == self.renewal_seq

    def take_renewal(self, counted_rf, req: "Requirement", max_retries: int, name: str, timeout_s: float) -> None:
        """Take the grant asked for into use, waiting for it if it has not arrived, at most
        ``timeout_s``: past that ``SchedulerUnavailableError`` (a hung scheduler must not hang
        every caller's ``.remote()``); the request stays asked, so the next call may still take it."""
        try:
            grant = ray.get(self.renewal, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise SchedulerUnavailableError(
                f"{name}: the fabric's scheduler did not answer a lease request within {timeout_s:g} s; "
                "the call was not submitted (is the scheduler actor alive? see `fabric status`)",
                waited_s=timeout_s, what="lease") from None
        self.renewal = None
        self.install(grant, counted_rf, req, max_retries, name, self.renew_at)

    def install(self, grant: LeaseGrant, counted_rf, req: "Requirement", max_retries: int, name: str,
                asked_at: float) -> None:
        self.grant = grant
        self.expires = asked_at + grant.ttl_s
        self.renew_at = asked_at + grant.ttl_s * self.RENEW_AT
        self.order = [s.node_id for s in grant.slots if s.capacity > 0]
        self.capacity = {s.node_id: s.capacity for s in grant.slots}
        self.fallback = {s.node_id: s.fallback_levels > 0 for s in grant.slots}
        gpus = {s.node_id: s.ray_gpus for s in grant.slots}
        floor_sel = tier_selector(req)
        self.bound = {n: self.bound.get(n) or counted_rf.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=True),
                                                                  label_selector=floor_sel,
                                                                  **base_options(req, max_retries, name, gpus[n]))
                      for n in self.order}
        self.spill = None
        if grant.spill:
            via = {} if grant.spill_via is None else {"scheduling_strategy": NodeAffinitySchedulingStrategy(
                grant.spill_via, soft=True, _spill_on_unavailable=True)}
            self.spill = counted_rf.options(label_selector=grant.spill, **via, **base_options(req, max_retries, name))
        self.peak = 0
        self.spilled = 0


SPILL = "spill"
"""``_Lease.route``'s answer for "Ray's queue for the floor set" (node ids are hex, never this)."""


def _all_finished(refs: list) -> bool:
    """Whether every task of ``refs`` has finished (no waiting, nothing fetched)."""
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
    return len(ready) == len(refs)


def _release_idle(conn: "_Connection", now: float, keep: "_Lease | None" = None) -> list[str]:
    """Forget this client's idle leases (``keep`` aside) and say which, for the scheduler to take
    their slots back: a class that stopped calling must not hold the best nodes against the next
    class for the rest of its tick. A lease busy on another thread is left for next time."""
    released = []
    for lease in list(conn.leases.values()):
        if lease is keep or lease.grant is None or not lease.lock.acquire(blocking=False):
            continue
        try:
            if lease.idle(now):
                lease.forget()
                released.append(lease.lease_id)
        finally:
            lease.lock.release()
    return released


def _lease_for(conn: "_Connection", af: "AdaptiveFunction", req: "Requirement", now: float) -> _Lease:
    key = (req.class_key, af.dispatch.max_retries, af.task_name)
    lease = conn.leases.get(key)
    if lease is None:
        lease = conn.leases.setdefault(key, _Lease(f"{conn.client_id}:{len(conn.leases)}"))
    if now >= lease.renew_at:
        with lease.lock:
            if lease.renewal is not None and lease.grant is not None and now >= lease.renew_at + lease.grant.ttl_s:
                lease.renewal = None  # asked a tick ago or more and never taken (no call since): too old to use
            if lease.renewal is None and now >= lease.renew_at:
                lease.ask_renewal(conn.scheduler, req, now, _release_idle(conn, now, keep=lease))
            if lease.renewal is not None and (lease.renewal_arrived() or now >= lease.expires):
                lease.take_renewal(counted_remote_for(af.function, af._remote_cache, req.min_tier.rank, af.task_name),
                                   req, af.dispatch.max_retries, af.task_name, conn.answer_timeout_s)
    return lease


def submit(af: "AdaptiveFunction", args: tuple, kwargs: dict):
    """Carry out one ``.remote()`` call of an adaptive function (see the module docstring)."""
    conn = _conn.ensure()
    req = af.requirement
    opts = af.dispatch
    if opts.priority == 0:
        now = time.monotonic()
        try:
            lease = _lease_for(conn, af, req, now)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, FabricError):
                raise exc.cause from None
            raise
        with lease.lock:
            lease.last_call_at = now
            where = lease.route(now, opts.on_no_capacity == "queue")
            if where == SPILL:
                timeout = opts.queue_timeout_s if opts.queue_timeout_s is not None else conn.queue_timeout_s
                ref = lease.spill.remote((time.time() + timeout, None), *args, **kwargs)
                lease.spilled_call(ref, now)
                return ref
            if where is not None:
                ref = lease.bound[where].remote((None, lease.fallback[where]), *args, **kwargs)
                lease.started(where, ref)
                return ref
    return _submit_placed(conn, af, req, opts, args, kwargs)


def _submit_placed(conn, af: "AdaptiveFunction", req: "Requirement", opts, args: tuple, kwargs: dict):
    """The per-call path: the scheduler reserves a slot (or queues the call in the dispatcher)."""
    try:
        assignment: NodeAssignment = ray.get(conn.scheduler.place_task.remote(req, _release_idle(conn, time.monotonic())),
                                             timeout=conn.answer_timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise SchedulerUnavailableError(
            f"{af.task_name}: the fabric's scheduler did not answer a placement within {conn.answer_timeout_s:g} s; "
            "the call was not submitted (is the scheduler actor alive? see `fabric status`)",
            waited_s=conn.answer_timeout_s, what="place") from None
    except ray.exceptions.RayTaskError as exc:  # the actor raised: hand back our own error, clean
        if isinstance(exc.cause, FabricError):
            raise exc.cause from None
        raise
    if assignment.status == "assigned":
        return launch(af.function, af._remote_cache, assignment, req, args, kwargs, opts.max_retries, af.task_name)
    if opts.on_no_capacity == "raise":
        raise CapacityError(
            f"{af.task_name}: no node at or above {req.floor} has capacity now ({assignment.reason})",
            requirement=repr(req), reason=assignment.reason or "no capacity",
        )
    blob = af._remote_cache.get("blob")
    if blob is None:
        blob = af._remote_cache["blob"] = cloudpickle.dumps(af.function)
        af._remote_cache["digest"] = hashlib.sha1(blob).hexdigest()
    return conn.dispatcher.run.options(name=f"{af.task_name} (queued)").remote(
        uuid.uuid4().hex, af._remote_cache["digest"], blob, req, args, kwargs,
        opts.priority, opts.queue_timeout_s, opts.max_retries, af.task_name,
    )

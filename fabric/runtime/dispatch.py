"""How an ``@adaptive.remote`` call is carried out on Ray.

1. Ask the scheduler for a node (one actor round trip). It reserves a slot there.
2. Submit the task *to that node* ourselves, asking Ray for one ``fabric.slots`` so that Ray
   itself refuses to oversubscribe the node. The ObjectRef we return is that task's: the
   result flows node → caller through the object store, never through the scheduler.
3. When the task ends (in the worker), its reservation is released back to the scheduler.

Most calls skip step 1: a client holds a lease per requirement class (``fabric.runtime.leases``),
renewed every health tick, and places calls on its slots itself, or spills them to Ray's queue for
the floor set when they are full. A call on a leased slot is counted here, where it is sent
(``fabric.runtime.counts``); a spilled one by the worker that runs it.

Node loss: the task is pinned *softly* (``NodeAffinitySchedulingStrategy(soft=True)``) and carries
a label selector for every tier at or above its floor. While the chosen node lives, Ray keeps the
task there (a busy node makes it wait, not spill). If the node dies, Ray's own retry (up to
``max_retries``) places it again on a node inside the floor — never below it, never lost silently.
A hard pin would instead fail with ``TaskUnschedulableError`` (measured on Ray 2.60).

No capacity: with ``on_no_capacity="raise"`` the call raises ``CapacityError`` at once; with
``"queue"`` the call goes to the dispatcher actor, which waits in the scheduler's deferred queue
(priority, then FIFO, retried on every capacity event) and runs the task when a node frees up; its
``ray.get`` raises ``CapacityError`` after the queue timeout. Only deferred calls take this path.

Every Ray call here goes through the session's driver seam (``fabric.rayio.driver``) or a
``CallPlan`` (``fabric.rayio.tasks``), whose options are built once per function, class and node.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

from fabric.core.errors import CapacityError, SchedulerUnavailableError
from fabric.core.scheduling import NodeAssignment
from fabric.rayio.driver import AnswerTimeout
from fabric.rayio.tasks import CallPlan, FunctionRemotes
from fabric.runtime.leases import SPILL, LeaseState
from fabric.runtime.lifecycle import connected

if TYPE_CHECKING:  # pragma: no cover
    from fabric.core.placement import Requirement
    from fabric.runtime.options import DispatchOptions
    from fabric.runtime.session import Session


class Lease:
    """A lease in use: its decisions (``state``), the lock its callers take, and what its calls are
    submitted with under the grant in use (from its ``CallPlan``: per leased node, and the spill)."""

    __slots__ = ("state", "lock", "plan", "bound", "spill")

    def __init__(self, lease_id: str, plan: CallPlan, watch: Any) -> None:
        self.state = LeaseState(lease_id, watch)
        self.lock = threading.Lock()
        self.plan = plan
        self.bound: dict[str, Any] = {}
        self.spill: Any = None

    def take(self, grant: Any) -> None:
        """Take the renewal's answer into use, with the options its nodes need."""
        st = self.state
        st.took(grant)
        self.bind()

    def bind(self) -> None:
        """Look up (built once each by the plan) the options of the grant's nodes and spill."""
        st, plan = self.state, self.plan
        self.bound = {n: plan.leased(n, st.gpus[n]) for n in st.order}
        self.spill = plan.spilled(st.spill, st.spill_via) if st.spill is not None else None


def plan_for(s: "Session", fn: Callable, req: "Requirement", max_retries: int, name: str) -> tuple[tuple, CallPlan]:
    """The key and ``CallPlan`` of calls of ``fn`` under ``req`` (made the first time)."""
    key = (fn, req.class_id, max_retries, name)
    plan = s.plans.get(key)
    if plan is None:
        remotes = s.remotes.get(fn)
        if remotes is None:
            remotes = s.remotes[fn] = FunctionRemotes(fn)
        plan = s.plans[key] = CallPlan(remotes, req, max_retries, name)
    return key, plan


def release_idle(s: "Session", now: float, keep: Lease | None = None) -> list[str]:
    """Forget this client's idle leases (``keep`` aside) and say which, for the scheduler to take
    their slots back: a class that stopped calling must not hold the best nodes against the next
    class for the rest of its tick. A lease busy on another thread is left for next time."""
    released = []
    for lease in list(s.leases.values()):
        st = lease.state
        if lease is keep or st.grant is None or not lease.lock.acquire(blocking=False):
            continue
        try:
            if st.idle(now):
                st.forget()
                released.append(st.lease_id)
        finally:
            lease.lock.release()
    return released


def ask_renewal(s: "Session", lease: Lease, req: "Requirement", now: float, release: list[str]) -> None:
    """Ask for the lease's next grant (no waiting), giving back this client's idle leases (``release``)."""
    st = lease.state
    st.asked(s.scheduler.lease.remote(st.lease_id, req, st.holding(), st.want(), release), now)


def take_renewal(s: "Session", lease: Lease, name: str) -> None:
    """Take the grant asked for into use, waiting for it if it has not arrived, at most the
    session's ``call_wait_s()`` (short while the scheduler is silent): past that
    ``SchedulerUnavailableError`` (a hung scheduler must not hang every caller's ``.remote()``);
    the request stays asked, so the next call may still take it."""
    try:
        grant = s.call_answer(lease.state.renewal)
    except AnswerTimeout as exc:
        raise unavailable_error(s, name, "a lease request", exc, "lease") from None
    lease.take(grant)


def unavailable_error(s: "Session", name: str, asked: str, exc: AnswerTimeout, what: str) -> SchedulerUnavailableError:
    """The error of a call whose wait for the scheduler's answer to ``asked`` ran out (``exc``)."""
    waited = exc.waited_s if exc.waited_s is not None else s.answer_timeout_s
    silent = s.silence()
    since = f" (silent for {silent:.0f} s)" if silent is not None and silent >= 1 else ""
    return SchedulerUnavailableError(
        f"{name}: the fabric's scheduler did not answer {asked} within {waited:g} s{since}; the call was not "
        "submitted (is the scheduler actor alive? see `fabric status`)", waited_s=waited, what=what)


def lease_for(s: "Session", key: tuple, plan: CallPlan, now: float) -> Lease:
    """The lease of ``key`` (made the first time), renewed as its state decides."""
    lease = s.leases.get(key)
    if lease is None:
        with s.lock:
            lease = s.leases.get(key)
            if lease is None:
                lease = s.leases[key] = Lease(f"{s.client_id}:{len(s.leases)}", plan, s.driver)
    st = lease.state
    if now >= st.renew_at:
        with lease.lock:
            if st.wants_renewal(now):
                ask_renewal(s, lease, plan.req, now, release_idle(s, now, keep=lease))
            if st.must_take(now):
                take_renewal(s, lease, plan.name)
    return lease


def submit(fn: Callable, req: "Requirement", opts: "DispatchOptions", name: str, args: tuple, kwargs: dict,
           s: "Session | None" = None) -> Any:
    """Carry out one ``.remote()`` call of ``fn`` (see the module docstring); returns its ObjectRef."""
    if s is None:
        s = connected()
    key, plan = plan_for(s, fn, req, opts.max_retries, name)
    if opts.priority == 0:
        now = time.monotonic()
        lease = lease_for(s, key, plan, now)
        st = lease.state
        with lease.lock:
            st.last_call_at = now
            where = st.route(now, opts.on_no_capacity == "queue")
            if where is SPILL:
                timeout = opts.queue_timeout_s if opts.queue_timeout_s is not None else s.queue_timeout_s
                ref = lease.spill.remote(time.time() + timeout, *args, **kwargs)
                st.spilled_call(_first(ref), now)
                s.spilled_call()
                return ref
            if where is not None:
                ref = lease.bound[where].remote(*args, **kwargs)
                st.started(where, _first(ref))
                s.calls.count(st.fallback[where], now)
                return ref
    return submit_placed(s, plan, opts, args, kwargs)


def _first(ref: Any) -> Any:
    """The ObjectRef that stands for a call: with ``num_returns`` N > 1 Ray gives a list of N refs,
    all ready when the task ends, so the first one says when it ended."""
    return ref[0] if isinstance(ref, list) else ref


def submit_placed(s: "Session", plan: CallPlan, opts: "DispatchOptions", args: tuple, kwargs: dict) -> Any:
    """The per-call path: the scheduler reserves a slot (or queues the call in the dispatcher),
    waited for at most the session's ``call_wait_s()``, as a lease renewal is."""
    req, name = plan.req, plan.name
    try:
        assignment: NodeAssignment = s.call_api().place_task(req, release_idle(s, time.monotonic()))
    except AnswerTimeout as exc:
        raise unavailable_error(s, name, "a placement", exc, "place") from None
    if assignment.status == "assigned":
        return plan.placed(assignment.node_id, assignment.ray_gpus).remote(assignment.allocation_id, *args, **kwargs)
    if opts.on_no_capacity == "raise":
        raise CapacityError(
            f"{name}: no node at or above {req.floor} has capacity now ({assignment.reason})",
            requirement=repr(req), reason=assignment.reason or "no capacity",
        )
    return plan.queue(s.dispatcher, uuid.uuid4().hex, args, kwargs, opts.priority, opts.queue_timeout_s)

"""No job is lost or run twice, whatever happens and in whatever order: a hypothesis state machine
over the scheduler's job runner (``actors.jobs.JobRunner`` with its sagas and drains, inside a real
``Scheduler`` over a real ``JobStore``), with fakes for the fleet feed, the instance launcher (Ray's
named, detached actors) and Ray's drain call.

Its rules are the stimuli the runner meets: a submit, a stop, an instance dying, a node lost or
joining, a drain, an uncordon, a reclaim notice, an eviction, a migration of each strategy and its
abort, the instances answering the fabric's hooks (or failing them), launches landing, time
passing, and a restart: the scheduler SIGKILLed and built again over the same store and the same
live instances. After every step the books are consistent, each job has at most one instance
running (two only while an ``overlap`` or ``handover`` saga of it is in flight), nothing runs that
no job or saga owns, no job waits for good on an instance that is gone, no slot is held for nobody,
and a restart keeps every job (a stopped one stays stopped). The ``test_a_...`` functions below
replay, step by step, what the machine found.

Each scheduler life has its own event loop and its own allocation ids: a SIGKILLed process runs
none of its tasks or callbacks again (one loop shared by both lives would let the dead scheduler's
watches, sagas and ``_soon`` callbacks keep acting on the shared store), and the process Ray starts
in its place counts its engine's allocations from 1 again. Calls the runner makes off the loop
(``run_in_executor``: a launch, Ray's drain) are held until ``progress`` lands them, so a launch
may land after a stop, a death, a restart, or never.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import io
import itertools
import os
import shutil
import tempfile
import traceback
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from actors.fleet_feed import FleetChange
from actors.jobs import JobRunner
from actors.scheduler import Scheduler
from fabric.core.errors import MigrationError, TransitionError
from fabric.core.jobs import JobSpec, JobState
from fabric.core.jobs.drains import INTERRUPTION_KINDS
from fabric.core.jobs.migration import MigrationStrategy
from fabric.core.placement import Requirement
from fabric.core.placement import decision as placement_decision
from fabric.core.placement import walk as placement_walk
from fabric.rayio.metrics import RecordingMetrics
from fabric.store.jobs import JobStore
from test_scheduler_actor import FakeFeed, joined
from test_scheduling import Clock

EXAMPLES = int(os.environ.get("FABRIC_FUZZ_EXAMPLES", "200"))
STEPS = 40
MAX_JOBS = 3
"""Jobs not ended at once."""
MAX_SUBMITS = 8
MAX_NODES = 3
"""Nodes in the fleet (two more may join while drains keep all but one cordoned)."""
SLOTS = 3
"""Per node: room for a migration's target beside the jobs."""
SETTINGS = {"scaling": {"enabled": False}}  # the scaler would raise slot caps: not what this machine is about
REQ = Requirement(min_tier="cpu_ffmpeg", num_cpus=0.5)
TWO_AT_ONCE = (MigrationStrategy.OVERLAP, MigrationStrategy.HANDOVER)
THENS = (None, "restart", "stop", "notice", "source node lost", "target node lost", "source dies", "target dies")
"""What meets a saga left in a phase (``JobsMachine._migrate``)."""
MOVES = st.tuples(st.sampled_from(list(MigrationStrategy)), st.integers(0, 5), st.sampled_from(THENS))
"""A migration's strategy, the rounds it goes well, and what meets it then (``JobsMachine._migrate``)."""


from jobs_machine_fakes import ANSWERED_HOOKS, Actor, Died, FakeRay, HeldExecutor, HookFailed, Hooked, Launcher, Method, RayFeed, stimulus  # noqa: F401 - the fakes the machine runs over


# -- the machine --------------------------------------------------------------------------------------
class JobsMachine(RuleBasedStateMachine):
    """One fabric: a fleet of 2-3 nodes, a store in a temporary folder, the actors that outlive the
    scheduler, and the scheduler's current life (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        shm = Path("/dev/shm")  # a store in memory where there is one: SQLite closes a file slowly on a disk
        self.dir = Path(tempfile.mkdtemp(prefix="fabric-jobs-sm-", dir=shm if shm.is_dir() else None))
        self.clock = Clock()
        self.launcher = Launcher()
        self.ray = FakeRay()
        self.nodes = ["n1", "n2"]
        """The fleet now (a node that comes back comes with a new id, as a Ray node does)."""
        self.next_node = 3
        self.submitted: list[str] = []
        self.problems: list[str] = []
        """What the product raised in its own tasks and callbacks, or printed as failed."""
        self.tasks: list[asyncio.Task] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.store: JobStore | None = None
        # instance keys and migration ids are random in the product and order some of its loops (sagas
        # read back by id): a failing run must replay, so they are counted here, and put back at teardown
        self._uuid4 = uuid.uuid4
        counter = itertools.count(1)
        uuid.uuid4 = lambda: uuid.UUID(int=(next(counter) * 0x9E3779B1 % 2**32) << 96)
        self._alloc_ids = {(mod, name): getattr(mod, name) for mod, name in _alloc_id_names()}
        try:
            self._boot(early=False)
        except BaseException:  # hypothesis tears down only a machine it has: put the ids back now
            self.teardown()
            raise

    def teardown(self) -> None:
        for (mod, name), ids in self._alloc_ids.items():
            setattr(mod, name, ids)
        uuid.uuid4 = self._uuid4
        self._abandon()
        asyncio.set_event_loop(None)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- one scheduler life -------------------------------------------------------------------------------
    def _boot(self, early: bool) -> None:
        """A scheduler process: a new loop, a ``Scheduler`` whose runner reads the store back. Not
        ``early``: its first tick runs now (sync, then ``resume``); ``early``: stimuli that need no
        fleet may arrive before it (the actor's first poll is in flight)."""
        # a new process: the engine's allocation ids start again at 1 (module state), as they do
        # in a scheduler that comes back; an id the store kept from the old process may name a new slot
        ids = itertools.count(1)
        for mod, name in _alloc_id_names():
            setattr(mod, name, ids)
        loop = asyncio.new_event_loop()
        self.executor = HeldExecutor()
        loop.set_default_executor(self.executor)
        loop.set_exception_handler(self._loop_error)
        loop.set_task_factory(self._track)
        asyncio.set_event_loop(loop)
        self.loop = self.launcher.loop = loop
        for inst in self.launcher.started:
            inst.forget_calls_of_dead_loops(loop)
        self.store = JobStore(self.dir / "jobs.db")
        store, clock, launcher = self.store, self.clock, self.launcher
        feed = RayFeed(self.ray, [joined(n, "cpu_ffmpeg", SLOTS) for n in self.nodes])

        async def build() -> Scheduler:
            return Scheduler(SETTINGS, feed=feed, metrics=RecordingMetrics(), clock=clock, run_loop=False,
                             jobs=lambda s: JobRunner(s, store, launcher, clock=clock))

        self.sched = self._run(build())
        self.runner = self.sched.jobs
        self.synced = False
        if not early:
            self._first_tick()

    def _first_tick(self) -> None:
        self._run(self.sched._step())
        self.synced = True

    def _abandon(self) -> None:
        """SIGKILL: the loop never runs again, the store's connection goes."""
        if self.loop is None:
            return
        self.loop.set_exception_handler(lambda loop, context: None)  # its tasks die pending: that is the point
        self.loop.close()
        self.tasks = []
        if self.store is not None:
            self.store.close()
        self.loop = self.store = None

    def _track(self, loop: asyncio.AbstractEventLoop, coro: Any, context: Any = None) -> asyncio.Task:
        task = asyncio.Task(coro, loop=loop, context=context)
        self.tasks.append(task)
        return task

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        exc = context.get("exception")
        where = "".join(traceback.format_exception(exc)) if exc is not None else ""
        self.problems.append(f"loop error: {context.get('message')} {where}")

    def _current(self) -> asyncio.AbstractEventLoop:
        assert self.loop is not None, "no scheduler is running"
        return self.loop

    def _run(self, coro: Any) -> Any:
        task = self._current().create_task(coro)
        self.tasks.remove(task)  # the machine's own call: what it raises, the rule sees
        return self._current().run_until_complete(task)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A synchronous actor method, run on the actor's loop (as Ray runs it)."""

        async def within() -> Any:
            return fn(*args)

        return self._run(within())

    def _settle(self) -> None:
        """Run the loop until nothing is ready (no timer of the runner's fires in a unit test's time);
        then any task that ended with an error is a problem."""

        async def quiesce() -> None:
            for _ in range(500):
                await asyncio.sleep(0)
                if not getattr(self._current(), "_ready", None):  # only this task was runnable
                    return

        self._run(quiesce())
        left = []
        for t in self.tasks:
            if not t.done():
                left.append(t)
            elif not t.cancelled() and t.exception() is not None:
                self.problems.append(f"task {t.get_coro()!r} raised: "
                                     + "".join(traceback.format_exception(t.exception())))
        self.tasks = left

    def _pick(self, items: list, pick: int) -> Any:
        return items[pick % len(items)]

    def _abortable(self) -> list[str]:
        """The sagas in flight before their point of no return (an abort after it is refused: a
        refusal a rule seldom needs, and aborts that come too often keep sagas from going deep)."""
        return sorted(mid for mid, m in self.runner.moves.book.active.items() if not m.past_point_of_no_return)

    def _schedulable(self) -> list[str]:
        fleet = self.sched.core.fleet
        return [n for n in self.nodes if fleet.get(n) is not None and not fleet.get(n).cordoned]

    def _busiest(self) -> list[str]:
        """The fleet's nodes, those with the most jobs bound first (a pick of 0 is a node with work)."""
        load = collections.Counter(rec.binding.node_id for rec in self.runner.book.jobs.values() if rec.binding)
        return sorted(self.nodes, key=lambda n: (-load[n], n))

    def _jobs(self, which: Callable[[Any], bool]) -> list[str]:
        return [j for j in self.submitted if which(self.runner.book.jobs[j])]

    def _alive_jobs(self) -> int:
        return sum(1 for rec in self.runner.book.jobs.values() if not rec.terminal)

    def _waiting(self) -> list[tuple[Actor, str]]:
        return [(inst, hook) for inst in self.launcher.started if not inst.dead for hook in ANSWERED_HOOKS
                if inst.methods[hook].waiting(self._current())]

    # -- rules: requests ------------------------------------------------------------------------------------
    @initialize(n=st.integers(1, MAX_JOBS), policy=st.sampled_from(["avoid_spare", "avoid_spare", "drop"]),
                up=st.sampled_from([True, True, True, False]), move=st.one_of(st.none(), MOVES))
    @stimulus
    def running(self, n: int, policy: str, up: bool, move: tuple | None = None) -> None:
        """Every run starts with jobs (running ones when ``up``), and half of those with one of them
        migrating (``move``: as the ``migrate`` rule's arguments): most rules need one."""
        for _ in range(n):
            self._submit(JobSpec("enc", REQ, on_runtime_failure=policy))
        if up:
            self._settle()
            self._go_well(2)
            if move is not None:
                self._settle()
                self._migrate(0, *move)

    @precondition(lambda self: self.synced and len(self.submitted) < MAX_SUBMITS and self._alive_jobs() < MAX_JOBS)
    @rule(policy=st.sampled_from(["avoid_spare", "avoid_spare", "drop"]), ceiling=st.sampled_from([None, None, 1]),
          essential=st.booleans())
    @stimulus
    def submit(self, policy: str, ceiling: int | None, essential: bool) -> None:
        self._submit(JobSpec("enc", REQ, on_runtime_failure=policy, max_restarts_per_hour=ceiling, essential=essential))

    def _submit(self, spec: JobSpec) -> None:
        job_id = f"job-{len(self.submitted) + 1}"
        assert self._call(self.runner.submit, spec, b"cls", b"args", job_id) == job_id
        self.submitted.append(job_id)

    @precondition(lambda self: self._alive_jobs() > 1)
    @rule(pick=st.integers(0, 7))
    @stimulus
    def stop(self, pick: int) -> None:
        """A stop (never of the last job standing: a run with no job left tests nothing more)."""
        self._call(self.runner.stop, self._pick(self._jobs(lambda rec: not rec.terminal), pick))

    @precondition(lambda self: self._jobs(lambda rec: rec.state == JobState.RUNNING))
    @rule(pick=st.integers(0, 7), move=MOVES)
    @stimulus
    def migrate(self, pick: int, move: tuple) -> None:
        self._migrate(pick, *move)

    def _migrate(self, pick: int, strategy: MigrationStrategy, walk: int, then: str | None) -> None:
        """A migration of a running job; then ``walk`` rounds of everything going well, so that the
        next stimulus meets the saga in any of its phases; ``then`` that stimulus is one a rule drawn
        at random seldom lands on a saga in flight: a restart, a stop of the job, a reclaim notice
        due now on its source's node, the loss of its source's or its target's node, or of the
        instance itself."""
        running = self._jobs(lambda rec: rec.state == JobState.RUNNING)
        if not running:
            return
        job_id = self._pick(running, pick)
        try:
            self._call(self.runner.moves.migrate, job_id, strategy.value)
        except MigrationError:  # no target (no room, or none but its own node): refused, as documented
            return
        self._settle()
        self._go_well(walk)
        m = self.runner.moves.book.for_job(job_id)
        if then == "restart":
            self._restart(landed=False, early=False)
        elif then == "stop":
            self._call(self.runner.stop, job_id)
        elif then == "notice" and m is not None and m.source_node in self.nodes:
            self._run(self.runner.drains.interrupt(m.source_node, "spot-interruption", self.clock() + 1))
        elif then is not None and then.endswith("node lost") and m is not None:
            node = m.source_node if then.startswith("source") else m.target_node
            if node in self.nodes:
                self._lose(node)
        elif then is not None and then.endswith("dies") and m is not None:
            inst = self.launcher.find(job_id, m.source_key if then.startswith("source") else m.target_key or "")
            if inst is not None:
                self.launcher.crash(inst, "it crashed")

    @precondition(lambda self: self._abortable())
    @rule(pick=st.integers(0, 7))
    @stimulus
    def abort(self, pick: int) -> None:
        mid = self._pick(self._abortable(), pick)
        try:
            self._call(self.runner.moves.abort, mid)
        except MigrationError:  # past its point of no return: it fails forward
            pass

    @precondition(lambda self: self.synced and self.nodes)
    @rule(pick=st.integers(0, 7), act=st.sampled_from(["drain", "notice", "uncordon", "evict"]),
          strategy=st.sampled_from([None, *(s.value for s in MigrationStrategy)]), force=st.booleans(),
          timeout=st.sampled_from([None, 0.0, 5.0, 60.0]), kind=st.sampled_from(INTERRUPTION_KINDS),
          ray_accepts=st.booleans())
    @stimulus
    def operator(self, pick: int, act: str, strategy: str | None, force: bool, timeout: float | None, kind: str,
                 ray_accepts: bool) -> None:
        """A drain of a node (``timeout``, ``force``, ``strategy``), a provider's reclaim notice
        (``kind``, its deadline ``timeout`` from now), an uncordon that withdraws them, or an eviction.
        Ray answers the drain's ask at its end with ``ray_accepts``."""
        node = self._pick(self._busiest(), pick)
        self.ray.accepts = ray_accepts
        if act == "drain":
            self._run(self.runner.drains.drain(node, timeout, force, strategy))
        elif act == "notice":
            self._run(self.runner.drains.interrupt(node, kind, None if timeout is None else self.clock() + timeout + 1))
        elif act == "evict":
            self._call(self.runner.drains.evict, node)
        else:
            try:
                self._run(self.sched.uncordon(node))
            except TransitionError:  # Ray drained it: there is no undrain
                pass

    # -- rules: the world -------------------------------------------------------------------------------------
    @precondition(lambda self: self.launcher.live)
    @rule(pick=st.integers(0, 15))
    @stimulus
    def instance_dies(self, pick: int) -> None:
        self.launcher.crash(self._pick(list(self.launcher.live.values()), pick), "it crashed")

    @precondition(lambda self: self.synced and self.nodes)
    @rule(pick=st.integers(0, 7), change=st.sampled_from(["lost", "lost after its actors", "joined"]))
    @stimulus
    def fleet(self, pick: int, change: str) -> None:
        """A node is lost (its actors' deaths reach the watches after the feed reports it, or before),
        or a new one joins (a fleet of at most 3, 5 while drains keep all but one cordoned)."""
        if change == "joined":
            if len(self.nodes) < MAX_NODES or (len(self.nodes) < MAX_NODES + 2 and len(self._schedulable()) < 2):
                self._join()
        else:
            self._lose(self._pick(self._busiest(), pick), deaths_first=change != "lost")

    def _lose(self, node: str, deaths_first: bool = False) -> None:
        self.nodes.remove(node)
        if deaths_first:  # its actors' deaths reach the watches before the feed reports the node
            self.launcher.node_down(node)
            self._settle()
        self.sched.feed.batches.append([FleetChange("lost", node)])
        self._run(self.sched._sync())
        self.launcher.node_down(node)

    def _join(self) -> None:
        node = f"n{self.next_node}"
        self.next_node += 1
        self.nodes.append(node)
        self.sched.feed.batches.append([joined(node, "cpu_ffmpeg", SLOTS)])
        self._run(self.sched._sync())

    @precondition(lambda self: self._waiting())
    @rule(pick=st.integers(0, 63), ok=st.sampled_from([True, True, True, False]))
    @stimulus
    def answer_one(self, pick: int, ok: bool) -> None:
        inst, hook = self._pick(self._waiting(), pick)
        inst.answer(hook, _answer(inst, hook, ok), self._current())

    @precondition(lambda self: self.executor.held or self._waiting())
    @rule(rounds=st.integers(1, 6), land=st.booleans(), answer=st.sampled_from([True, True, False]))
    @stimulus
    def progress(self, rounds: int, land: bool, answer: bool) -> None:
        """What is in flight goes well for a few rounds: the launches held land (``land``), every hook
        waited on answers (``answer``; neither: launches land and nothing answers yet)."""
        self._go_well(rounds, land=land or not answer, answer=answer)

    def _go_well(self, rounds: int, land: bool = True, answer: bool = True) -> None:
        for _ in range(rounds):
            if land:
                self.executor.land()
            if answer:
                for inst, hook in self._waiting():
                    inst.answer(hook, _answer(inst, hook, True), self._current())
            self._settle()

    @rule(dt=st.sampled_from([0.0, 1.5, 6.0, 31.0, 125.0, 400.0, 3700.0]))
    @stimulus
    def tick(self, dt: float) -> None:
        self.clock.t += dt
        if self.synced:
            for node in sorted(self.ray.drained & set(self.nodes)):  # Ray drained it: its raylet is gone
                self._lose(node)
            while len(self.nodes) < 2:  # capacity is replaced (a provider, an operator)
                self._join()
        self._first_tick()

    @precondition(lambda self: self.submitted)
    @rule(landed=st.booleans(), early=st.booleans())
    @stimulus
    def restart(self, landed: bool, early: bool) -> None:
        """SIGKILL and a new scheduler over the same store and the same live instances. ``landed``:
        the launches the old one had handed to Ray reached the GCS (their handles reach nobody)."""
        self._restart(landed, early)

    def _restart(self, landed: bool, early: bool) -> None:
        before = {j: r.state for j, r in self.runner.book.jobs.items()}
        for m in self.runner.moves.book.active.values():  # --hypothesis-show-statistics: how deep restarts go
            if currently_in_test_context():
                event(f"restart: a saga {'past' if m.past_point_of_no_return else 'before'} its point of no return")
        if landed:
            self.executor.land()
        self._abandon()
        self._boot(early)
        after = {j: r.state for j, r in self.runner.book.jobs.items()}
        assert sorted(after) == sorted(before), f"a restart changed the jobs: {sorted(before)} -> {sorted(after)}"
        for job_id, state in before.items():
            terminal = state in (JobState.STOPPED, JobState.DROPPED, JobState.FAILED)
            assert not terminal or after[job_id] == state, (
                f"{job_id} was {state} before the restart, {after[job_id]} after")

    # -- invariants -------------------------------------------------------------------------------------
    @invariant()
    def nothing_failed_inside(self) -> None:
        assert not self.problems, "\n".join(self.problems)

    @invariant()
    def books_are_consistent(self) -> None:
        r = self.runner
        assert sorted(r.book.jobs) == sorted(self.submitted), "a job was lost or invented"
        assert all(isinstance(rec.state, JobState) for rec in r.book.jobs.values())
        assert r.book.validate_state() == []
        assert r.moves.book.validate_state() == []
        assert r.drains.drains.problems() == []
        self.sched.core.validate_state()

    @invariant()
    def never_two_instances(self) -> None:
        """At most one instance runs the user's code per job; two only while an ``overlap`` or
        ``handover`` saga of it is in flight. Before a restart's resume, a launch the dead scheduler
        had handed to Ray may have landed: only the instances the store owns count until the sweep."""
        live = [i for i in self.launcher.live.values() if i.running_user_code]
        if not self.runner.resumed:
            live = [i for i in live if self._owner(i.job_id, i.key)]
        for job_id, n in collections.Counter(i.job_id for i in live).items():
            m = self.runner.moves.book.for_job(job_id)
            most = 2 if m is not None and m.strategy in TWO_AT_ONCE else 1
            assert n <= most, (f"{job_id} runs {n} instances ({self._where(job_id)}), "
                               f"saga: {m.strategy.value + ' ' + m.phase.value if m else 'none'}")

    @invariant()
    def nothing_stray(self) -> None:
        """Every live instance is its job's bound one or its saga's target (once resumed)."""
        if not self.runner.resumed:  # a restart's strays are swept by its resume
            return
        for (job_id, key), inst in self.launcher.live.items():
            assert self._owner(job_id, key), (
                f"{job_id}'s instance {key} on {inst.node_id} runs for nobody ({self._where(job_id)})")

    @invariant()
    def no_job_forgotten(self) -> None:
        """Once resumed, a running or stopping job's instance lives (its end was seen, or the job
        would be running, or stopping, for good on nothing), and a starting one's lives or is being
        launched."""
        if not self.runner.resumed:
            return
        launching = self.executor.launches()
        for job_id, rec in self.runner.book.jobs.items():
            if rec.state not in (JobState.RUNNING, JobState.STARTING, JobState.STOPPING):
                continue
            assert rec.binding is not None
            key = (job_id, rec.binding.instance_key)
            assert key in self.launcher.live or (rec.state == JobState.STARTING and key in launching), (
                f"{job_id} is {rec.state.value} on an instance that is gone ({self._where(job_id)})")

    @invariant()
    def no_slot_leaked(self) -> None:
        """Once resumed, the core's reservations are the jobs' bindings and the sagas' targets: none
        held for nobody, none a binding names that the core has let go."""
        if not self.runner.resumed:
            return
        owned = {rec.binding.allocation_id for rec in self.runner.book.jobs.values() if rec.binding is not None}
        owned |= {m.target_allocation for m in self.runner.moves.book.active.values()}
        owned.discard(None)
        held = set(self.sched.core.ledger)
        assert held <= owned, f"slots held for nobody: {sorted(held - owned)}"
        fleet, ledger = self.sched.core.fleet, self.sched.core.ledger
        for rec in self.runner.book.jobs.values():
            b = rec.binding
            if b is None or b.allocation_id is None or fleet.get(b.node_id) is None:
                continue  # a slot on a node the fleet lost went with the node
            a = ledger.get(b.allocation_id)
            assert a is not None and a.node_id == b.node_id, (
                f"{rec.job_id} is bound to slot {b.allocation_id} on {b.node_id}, which the core holds "
                f"{'for nobody' if a is None else 'on ' + a.node_id}")
        named = [rec.binding.allocation_id for rec in self.runner.book.jobs.values()
                 if rec.binding is not None and rec.binding.allocation_id is not None]
        named += [m.target_allocation for m in self.runner.moves.book.active.values()
                  if m.target_allocation is not None]
        assert len(named) == len(set(named)), f"one slot named twice: {sorted(named)}"

    def _owner(self, job_id: str, key: str) -> str | None:
        """Who owns an instance: its job (bound to it), its job's saga in flight (its target), or nobody."""
        rec = self.runner.book.jobs.get(job_id)
        if rec is not None and rec.binding is not None and rec.binding.instance_key == key:
            return "job"
        m = self.runner.moves.book.for_job(job_id)
        return "saga" if m is not None and m.target_key == key else None

    def _where(self, job_id: str) -> str:
        rec = self.runner.book.jobs.get(job_id)
        live = [k for (j, k) in self.launcher.live if j == job_id]
        return f"state {rec.state.value if rec else None}, bound {rec.binding if rec else None}, live {live}"


def _alloc_id_names() -> list[tuple[Any, str]]:
    """Where the engine's allocation id counter is named (its module, and the one that imported it)."""
    return [(mod, name) for mod in (placement_decision, placement_walk) for name in ("ALLOC_IDS", "_ALLOC_IDS")
            if hasattr(mod, name)]


def _answer(inst: Actor, hook: str, ok: bool) -> Any:
    """What a hook answers: ``ok``, or its failure (a constructor's error is an answer, not a raise)."""
    if hook in ("__fabric_started__", "__fabric_begin__"):
        return None if ok else ("init_failed", "RuntimeError: the constructor failed")
    if ok:
        return {"__fabric_ready__": {"payload": inst.key}, "__fabric_cut__": 42}.get(hook)
    return HookFailed(f"{hook} raised")


JobsMachine.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_jobs_state_machine = JobsMachine.TestCase

"""The jobs core, driven through ``JobsCore.handle`` only, with ``validate_state()`` after every step.

A small pure executor answers the core's instructions the way ``actors.jobs`` does: placements and
reservations at once, everything that runs on Ray (starts, stops, saga hooks, Ray's drain) later,
when a rule lands it. A restart rebuilds the core from its persisted rows (the store's JSON) and
hands it the instances alive by name. The hypothesis machine checks that no job is lost or runs
twice, whatever the order.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fabric.core.errors import FabricError
from fabric.core.jobs import JobSpec, JobState
from fabric.core.jobs.book import JobEvent, PlaceJob, ReleaseSlot, StartInstance, StopInstance
from fabric.core.jobs.core import JobsCore
from fabric.core.jobs.drains import AskRayToDrain
from fabric.core.jobs.migration import (
    AskReady, BeginTarget, CreateTarget, Cut, PlaceTarget, Resume, StopSource, StopTarget,
)
from fabric.core.jobs.state import (
    Cordon, DropPayload, KillInstance, PlaceSoon, Reply, ReserveSlot, SagaEnded, StorePayload, WatchInstance, WatchTarget,
)
from fabric.core.jobs import stimuli as js
from fabric.core.placement import NodeRecord, Requirement
from fabric.core.settings import FabricSettings
from test_scheduling import rec
from fabric.store.job_rows import (
    decode_drain, decode_job, decode_migration, decode_notice, encode_drain, encode_job, encode_migration, encode_notice,
)

NODES = ("n1", "n2", "n3")
SPEC = JobSpec("worker", Requirement(), on_runtime_failure="avoid_spare", max_restarts_per_hour=1000)


class World:
    def __init__(self) -> None:
        self.nodes = {n: rec(n, "cpu_ffmpeg") for n in NODES}

    def record(self, node_id: str) -> NodeRecord | None:
        return self.nodes.get(node_id)

    def handed_off(self, node_id: str) -> bool:
        return True

    def better_node(self, requirement: Any, ctx: Any) -> None:
        return None

    def can_hand_over(self, job_id: str) -> bool:
        return True


class Fleet:
    """The pure executor (see the module docstring)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.ids = itertools.count(1)
        self.world = World()
        self.core = self._core()
        self.core.handle(js.Restarted(frozenset(), frozenset()))
        self.live: dict[tuple[str, str], str] = {}
        """(job id, instance key) -> node, of every instance running."""
        self.pending: deque[Any] = deque()
        """Answers of work that runs on Ray, landed by ``land``."""
        self.replies: list[Reply] = []
        self.events: list[JobEvent] = []
        self.disrupted: dict[str, int] = {}
        """Per job: instances lost without a saga's or a stop's say (died, node lost, killed at a timeout)."""

    def _core(self) -> JobsCore:
        return JobsCore(FabricSettings(), self.world, lambda: self.now, lambda: f"t{next(self.ids)}")

    def _node(self, exclude: str | None = None, pin: str | None = None) -> str | None:
        if pin is not None:
            return pin if pin in self.world.nodes else None
        free = [n for n in self.world.nodes if n != exclude and n not in self.core.drains]
        return free[0] if free else None

    def handle(self, s: Any) -> Any:
        out = self.core.handle(s)
        self.core.validate_state()
        self.run(out)
        sid = s.stimulus_id
        mine = [r for r in self.replies if r.stimulus_id == sid]
        return mine[0].value if mine else None

    def run(self, out: list[Any]) -> None:
        queue = deque(out)
        while queue:
            ins = queue.popleft()
            assert getattr(ins, "stimulus_id", ""), f"{type(ins).__name__} carries no stimulus id"
            more = self._one(ins)
            if more:
                queue.extend(more)
                self.core.validate_state()

    def _one(self, ins: Any) -> list[Any]:
        h = self.core.handle
        if isinstance(ins, Reply):
            self.replies.append(ins)
        elif isinstance(ins, JobEvent):
            self.events.append(ins)
        elif isinstance(ins, PlaceJob):
            node = self._node()
            if node is None:
                return h(js.JobUnplaced(ins.job_id, "no capacity"))
            return h(js.JobPlaced(ins.job_id, node, next(self.ids), f"primary@{next(self.ids)}"))
        elif isinstance(ins, StartInstance):
            self.live[(ins.job_id, ins.binding.instance_key)] = ins.binding.node_id
            self.pending.append(js.InstanceStarted(ins.job_id, ins.binding.instance_key))
        elif isinstance(ins, StopInstance):
            if self.live.pop((ins.job_id, ins.binding.instance_key), None) is not None:
                self.pending.append(js.InstanceEnded(ins.job_id, ins.binding.instance_key, "stopped"))
            else:
                return h(js.InstanceEnded(ins.job_id, ins.binding.instance_key, "stopped"))
        elif isinstance(ins, KillInstance):
            if self.live.pop((ins.job_id, ins.instance_key), None) is not None:
                self.disrupt(ins.job_id)
                self.pending.append(js.InstanceEnded(ins.job_id, ins.instance_key, "killed"))
        elif isinstance(ins, ReserveSlot):
            return h(js.SlotReserved(ins.job_id, next(self.ids), ins.migration_id))
        elif isinstance(ins, PlaceTarget):
            m = self.core.migrations.get(ins.migration_id)
            node = self._node(exclude=ins.source_node, pin=ins.target_node)
            if node is None or m is None:
                return h(js.SagaStepAnswered(ins.migration_id, "unplaced", "no target"))
            return h(js.SagaStepAnswered(ins.migration_id, "placed", node_id=node, allocation_id=next(self.ids),
                                         instance_key=f"primary@{next(self.ids)}"))
        elif isinstance(ins, CreateTarget):
            self.live[(ins.job_id, ins.instance_key)] = ins.node_id
            self.pending.append(js.SagaStepAnswered(ins.migration_id, "prepared"))
        elif isinstance(ins, (AskReady, Cut, Resume, BeginTarget)):
            answer = {AskReady: "ready", Cut: "cut", Resume: "resumed", BeginTarget: "began"}[type(ins)]
            self.pending.append(js.SagaStepAnswered(ins.migration_id, answer))  # type: ignore[arg-type]
        elif isinstance(ins, StopSource):  # its watch sees it end too, in whichever order
            if self.live.pop((ins.job_id, ins.instance_key), None) is not None:
                self.pending.append(js.InstanceEnded(ins.job_id, ins.instance_key, "stopped"))
            self.pending.append(js.SagaStepAnswered(ins.migration_id, "source_stopped"))
        elif isinstance(ins, StopTarget):
            if ins.instance_key is not None:
                self.live.pop((ins.job_id, ins.instance_key), None)
        elif isinstance(ins, AskRayToDrain):
            self.pending.append(js.RayDrainAnswered(ins.node_id, True, "accepted", ins.reason))
        elif isinstance(ins, (WatchInstance, WatchTarget)):
            if (ins.job_id, ins.instance_key) not in self.live:
                return h(js.InstanceEnded(ins.job_id, ins.instance_key, "gone"))
        elif not isinstance(ins, (ReleaseSlot, Cordon, PlaceSoon, SagaEnded, StorePayload, DropPayload)):
            raise AssertionError(f"unknown instruction {ins!r}")
        return []

    def land(self, pick: int) -> None:
        if not self.pending:
            return
        self.pending.rotate(-(pick % len(self.pending)))
        s = self.pending.popleft()
        if isinstance(s, js.InstanceEnded) or (isinstance(s, js.InstanceStarted) and (s.job_id, s.instance_key) in self.live):
            self.handle(s)
        elif isinstance(s, (js.SagaStepAnswered, js.RayDrainAnswered)):
            self.handle(s)

    def disrupt(self, job_id: str) -> None:
        self.disrupted[job_id] = self.disrupted.get(job_id, 0) + 1

    def die(self, job_id: str, key: str) -> None:
        """An instance dies: a saga's target is watched by its saga, everything else by the job's watch."""
        if self.live.pop((job_id, key), None) is None:
            return
        self.disrupt(job_id)
        m = self.core.migrations.for_job(job_id)
        if m is not None and m.target_key == key:
            self.handle(js.SagaStepAnswered(m.migration_id, "target_failed", "died"))
        else:
            self.handle(js.InstanceEnded(job_id, key, "died"))

    def restart(self, head_nodes: frozenset[str] = frozenset()) -> None:
        """Rebuild the core from its rows (as the store keeps them) and resume it; what was in flight
        on the old process's event loop is lost with it. ``head_nodes``: Ray's head nodes then."""
        old = self.core
        rows = {j.job_id: encode_job(j) for j in old.book.jobs.values()}
        sagas = [encode_migration(m) for m in list(old.migrations.finished) + list(old.migrations.active.values())]
        drains = [encode_drain(d) for d in old.drains.every()]
        notices = {n: encode_notice(x) for n, x in old.notices.items()}
        self.core = new = self._core()
        for blob in rows.values():
            new.book.adopt(decode_job(blob))
        for blob in sagas:
            new.migrations.adopt(decode_migration(blob))
        for blob in drains:
            new.drains.adopt(decode_drain(blob))
        for node, blob in notices.items():
            latest = next((d for d in reversed(new.drains.every()) if d.node_id == node), None)
            notice = decode_notice(blob, latest)
            if notice is not None:
                new.notices[node], _ = notice, new.preempting.add(node)
        self.pending.clear()
        alive = frozenset(self.live)
        self.handle(js.Restarted(alive, alive, head_nodes))
        assert set(new.book.jobs) == set(old.book.jobs)


def _running(f: Fleet) -> list[str]:
    return sorted(r.job_id for r in f.core.book.jobs.values() if r.state == JobState.RUNNING)


def _settle(f: Fleet) -> None:
    for _ in range(200):
        if not f.pending:
            return
        f.land(0)


def test_a_job_is_placed_started_and_stopped_through_handle_only():
    f = Fleet()
    job = f.handle(js.JobSubmitted("job-1", SPEC))
    assert job == "job-1"
    f.handle(js.PlacementsDue())
    _settle(f)
    assert _running(f) == ["job-1"] and len(f.live) == 1
    assert f.handle(js.StopRequested("job-1")) == "stopping"
    _settle(f)
    assert f.core.book.job("job-1").state == JobState.STOPPED and f.live == {}
    kinds = [k for k, _, _ in f.core.log]
    assert kinds[:2] == ["restarted", "jobsubmitted"] and len(f.core.log) <= f.core.log.maxlen


def test_every_strategy_moves_a_job_once_and_a_restart_past_the_point_of_no_return_finishes_it():
    for strategy in ("stop_then_start", "overlap", "handover"):
        f = Fleet()
        f.handle(js.JobSubmitted("job-1", SPEC))
        f.handle(js.PlacementsDue())
        _settle(f)
        mid = f.handle(js.MigrateRequested("job-1", strategy))
        for _ in range(3):
            f.land(0)
        f.restart()
        _settle(f)
        f.handle(js.JobsTick())
        _settle(f)
        rec = f.core.book.job("job-1")
        assert rec.state == JobState.RUNNING, (strategy, rec.state, f.core.migrations.get(mid).phase)
        assert list(f.live) == [("job-1", rec.binding.instance_key)], strategy


def test_a_drain_moves_both_jobs_and_asks_ray_once_the_node_is_empty():
    f = Fleet()
    for j in ("a", "b"):
        f.handle(js.JobSubmitted(j, SPEC))
    f.handle(js.PlacementsDue())
    _settle(f)
    assert {n for n in f.live.values()} == {"n1"}
    state = f.handle(js.DrainJobsRequested("n1", timeout_s=60, strategy="stop_then_start"))
    assert state.node_id == "n1"
    for _ in range(10):
        _settle(f)
        f.handle(js.JobsTick())
    assert set(f.live.values()) == {"n2"} and f.core.drains.status("n1").phase.value == "done"


def test_a_job_dying_under_a_reclaim_notice_is_not_counted_and_the_notice_survives_a_restart():
    f = Fleet()
    f.handle(js.JobSubmitted("a", SPEC))
    f.handle(js.PlacementsDue())
    _settle(f)
    f.handle(js.DrainJobsRequested("n1", interruption="spot-interruption", deadline=f.now + 600))
    f.restart()
    assert "n1" in f.core.preempting and "n1" in f.core.notices
    key = next(k for (j, k) in f.live if j == "a")
    f.die("a", key)
    rec = f.core.book.job("a")
    assert rec.restarts and not rec.restarts[-1].counted


def test_a_job_that_died_with_the_head_is_recovered_and_not_counted_and_one_elsewhere_is():
    for heads, counted in ((frozenset({"n1"}), False), (frozenset({"n2"}), True)):
        f = Fleet()
        f.handle(js.JobSubmitted("a", SPEC))
        f.handle(js.PlacementsDue())
        _settle(f)
        key = next(k for (j, k) in f.live if j == "a")
        assert f.live[("a", key)] == "n1"
        f.live.pop(("a", key))  # gone while the scheduler was away (the head went down with it, or not)
        f.restart(head_nodes=heads)
        rec = f.core.book.job("a")
        assert rec.state == JobState.RECOVERING and [r.counted for r in rec.restarts] == [counted]
        assert ("head node" in rec.reason) is not counted


def test_a_job_on_a_node_the_fleet_lost_but_that_still_runs_it_is_killed_before_it_runs_elsewhere():
    """The fleet loses a node by its missed heartbeats while Ray still runs it (a stalled host): the
    job recovers elsewhere, and its instance there is killed first, so that it never runs twice."""
    f = Fleet()
    f.handle(js.JobSubmitted("a", SPEC))
    f.handle(js.PlacementsDue())
    _settle(f)
    old = next(k for (j, k) in f.live if j == "a")
    assert f.live[("a", old)] == "n1"
    del f.world.nodes["n1"]
    f.handle(js.JobsNodeLost("n1"))  # its instance is still in f.live: nothing killed it
    assert ("a", old) not in f.live
    f.handle(js.PlacementsDue())
    _settle(f)
    rec = f.core.book.job("a")
    assert rec.state == JobState.RUNNING and list(f.live) == [("a", rec.binding.instance_key)]
    assert rec.binding.instance_key != old and rec.restarts


class JobsCoreMachine(RuleBasedStateMachine):
    """Random stimuli through ``handle`` (see the module docstring): no job lost, none twice."""

    @initialize()
    def boot(self) -> None:
        self.f = Fleet()
        self.submitted: set[str] = set()

    def _jobs(self) -> list[str]:
        return sorted(self.f.core.book.jobs)

    def _request(self, s: Any) -> None:
        try:
            self.f.handle(s)
        except FabricError:  # refused with nothing changed
            self.f.core.validate_state()

    @rule()
    def submit(self) -> None:
        job_id = f"job-{len(self.submitted)}"
        self.submitted.add(job_id)
        self.f.handle(js.JobSubmitted(job_id, SPEC))
        self.f.handle(js.PlacementsDue())

    @precondition(lambda self: self.f.core.book.jobs)
    @rule(pick=st.integers(0, 50))
    def stop(self, pick: int) -> None:
        self._request(js.StopRequested(self._jobs()[pick % len(self._jobs())]))

    @precondition(lambda self: self.f.live)
    @rule(pick=st.integers(0, 50))
    def instance_dies(self, pick: int) -> None:
        job_id, key = sorted(self.f.live)[pick % len(self.f.live)]
        self.f.die(job_id, key)

    @rule(node=st.sampled_from(NODES))
    def node_lost_and_back(self, node: str) -> None:
        for (job_id, key), where in list(self.f.live.items()):
            if where == node:
                del self.f.live[(job_id, key)]
                self.f.disrupt(job_id)
        self.f.handle(js.JobsNodeLost(node))
        self.f.handle(js.CapacityJoined())

    @rule(node=st.sampled_from(NODES), strategy=st.sampled_from(["stop_then_start", "overlap", "handover"]),
          force=st.booleans())
    def drain(self, node: str, strategy: str, force: bool) -> None:
        self._request(js.DrainJobsRequested(node, timeout_s=5.0, force=force, strategy=strategy))

    @rule(node=st.sampled_from(NODES))
    def notice(self, node: str) -> None:
        self._request(js.DrainJobsRequested(node, interruption="spot-interruption", deadline=self.f.now + 30))

    @rule(node=st.sampled_from(NODES))
    def withdraw(self, node: str) -> None:
        self._request(js.WithdrawRequested(node))

    @precondition(lambda self: self.f.core.book.jobs)
    @rule(pick=st.integers(0, 50), strategy=st.sampled_from(["stop_then_start", "overlap", "handover"]))
    def migrate(self, pick: int, strategy: str) -> None:
        self._request(js.MigrateRequested(self._jobs()[pick % len(self._jobs())], strategy))

    @precondition(lambda self: self.f.core.migrations.active)
    @rule(pick=st.integers(0, 50))
    def abort(self, pick: int) -> None:
        mids = sorted(self.f.core.migrations.active)
        self._request(js.AbortRequested(mids[pick % len(mids)], "by the machine"))

    @precondition(lambda self: self.f.pending)
    @rule(pick=st.integers(0, 50), n=st.integers(1, 4))
    def land(self, pick: int, n: int) -> None:
        for _ in range(n):
            self.f.land(pick)

    @rule(dt=st.sampled_from([0.5, 3.0, 30.0]))
    def tick(self, dt: float) -> None:
        self.f.now += dt
        self.f.handle(js.JobsTick())

    @rule()
    def restart(self) -> None:
        self.f.restart()

    @invariant()
    def never_lost_never_twice(self) -> None:
        if not hasattr(self, "f"):
            return
        core = self.f.core
        core.validate_state()
        assert set(core.book.jobs) == self.submitted  # nothing lost
        per_job: dict[str, int] = {}
        for job_id, key in self.f.live:
            rec = core.book.jobs[job_id]
            m = core.migrations.for_job(job_id)
            owned = (rec.binding is not None and rec.binding.instance_key == key) or (
                m is not None and key in (m.source_key, m.target_key))
            assert owned, f"instance {key} of {job_id} runs for nobody ({rec.state.value})"
            per_job[job_id] = per_job.get(job_id, 0) + 1
        for job_id, n in per_job.items():
            limit = 2 if core.migrations.for_job(job_id) is not None else 1
            assert n <= limit, f"job {job_id} runs {n} instances"
        for rec in core.book.jobs.values():  # a move on purpose is never a restart
            recoveries = [why for _, state, why in rec.history if state == "recovering"
                          and not why.startswith("migration lost")]
            assert len(recoveries) <= self.f.disrupted.get(rec.job_id, 0), (rec.job_id, recoveries)


JobsCoreMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None,
                                             suppress_health_check=[HealthCheck.too_slow])
test_jobs_core_machine = JobsCoreMachine.TestCase

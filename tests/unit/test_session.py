"""The driver's session (``fabric.runtime.session``) and the values ``submit`` takes, over a fake
driver seam: one session per Ray session, its handles found once, its leases and Ray options
built once per function, class and node, and each function's calls running that function."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fabric import SchedulerUnavailableError, adaptive
from fabric.core.names import DISPATCHER, HEALTH, REGISTRY, SCHEDULER, probe_actor_name
from fabric.core.scheduling import LeaseGrant, LeaseSlot, NodeAssignment
from fabric.rayio.driver import AnswerTimeout
from fabric.runtime import control, dispatch, session

ROOT = Path(__file__).resolve().parents[2]
A, B = "aa" * 28, "bb" * 28
SELECTOR = {"fabric.io/tier": "in(gpu_cuda,gpu_vaapi,gpu_apu,cpu_ffmpeg)"}


class Ref:
    def __init__(self, value=None, done=True) -> None:
        self.value, self.done, self.callbacks = value, done, []

    def _on_completed(self, callback) -> None:
        self.callbacks.append(callback)
        if self.done:
            callback(self.value)


class Method:
    def __init__(self, answer) -> None:
        self.answer, self.calls = answer, []

    def remote(self, *args):
        self.calls.append(args)
        return Ref(self.answer(*args) if callable(self.answer) else self.answer)


class FakeScheduler:
    def __init__(self, grant: LeaseGrant | None = None, answers: bool = True) -> None:
        self.answers = answers
        """False: every wait for an answer runs out (``FakeDriver.answer``), as during a head outage."""
        self.queue_timeout_s = Method(120.0)
        self.lease = Method(lambda lease_id, *rest: grant or LeaseGrant(lease_id, (LeaseSlot(A, 1),), SELECTOR, 1.0,
                                                                                            spill_via=B))
        self.place_task = Method(NodeAssignment("assigned", node_id=A, allocation_id=7))
        self.pid = Method(4242)


class FakeDriver:
    """The driver seam over a pretend Ray session with the fabric's actors up."""

    def __init__(self, scheduler: FakeScheduler | None = None) -> None:
        self.key = object()
        self.actors = {SCHEDULER: scheduler or FakeScheduler(), DISPATCHER: object(), HEALTH: object(),
                       REGISTRY: object(), probe_actor_name(A): object()}
        self.killed: list[str] = []
        self.waits: list[float] = []
        """Every ``answer``'s wait, in order."""

    def session_key(self):
        return self.key

    def init(self) -> None:
        pass

    def is_initialized(self) -> bool:
        return True

    def get_actor(self, name):
        return self.actors.get(name)

    def named_actors(self):
        return list(self.actors)

    def kill(self, handle) -> None:
        name = next(n for n, h in self.actors.items() if h is handle)
        self.killed.append(name)
        del self.actors[name]

    def answer(self, ref, timeout_s):
        self.waits.append(timeout_s)
        if not self.actors[SCHEDULER].answers:
            raise AnswerTimeout(timeout_s)
        return ref.value

    def when_done(self, ref, callback) -> None:
        ref._on_completed(callback)

    def all_finished(self, refs) -> bool:
        return all(r.done for r in refs)


class Bound:
    """A Ray remote function with options: records what it was built with and what it ran."""

    def __init__(self, fn, kind: str, options: dict | None = None) -> None:
        self.fn, self.kind, self.options_given, self.ran = fn, kind, options, []

    def options(self, **options):
        return Bound(self.fn, self.kind, options)

    def remote(self, *args, **kwargs):
        self.ran.append(args)
        ref = Ref(done=False)
        ref.ran = (self.fn, self.kind, args)
        return ref


class FakeRemotes:
    """``FunctionRemotes`` for one function, counting the option sets built."""

    built: list[tuple] = []

    def __init__(self, fn) -> None:
        self.fn = fn

    def _bound(self, kind: str):
        owner = self

        class Counting(Bound):
            def options(self, **options):
                owner.built.append((owner.fn, kind, options.get("scheduling_strategy")))
                return Bound(self.fn, kind, options)

        return Counting(self.fn, kind)

    def leased(self):
        return self._bound("leased")

    def spilled(self, min_rank, name):
        return self._bound("spilled")

    def placed(self):
        return self._bound("placed")


@pytest.fixture
def fake():
    driver = FakeDriver()
    s = session.session(driver)
    FakeRemotes.built = []
    yield driver, s
    session.end()


def connected(driver, s):
    s.connect()
    return s


def call(s, af, *args):
    s.remotes.setdefault(af.function, FakeRemotes(af.function))
    return dispatch.submit(af.function, af.requirement, af.dispatch, af.task_name, args, {}, s)


def test_a_session_finds_the_actors_once_and_asks_the_queue_timeout(fake):
    driver, s = fake
    assert not s.connected
    s.connect()
    assert s.connected and s.scheduler is driver.actors[SCHEDULER] and s.dispatcher is driver.actors[DISPATCHER]
    assert s.queue_timeout_s == 120.0 and len(driver.actors[SCHEDULER].queue_timeout_s.calls) == 1
    s.connect()
    assert len(driver.actors[SCHEDULER].queue_timeout_s.calls) == 1  # connected: nothing asked again


def test_a_scheduler_that_does_not_answer_when_connecting_is_a_typed_error(fake):
    driver, s = fake
    driver.actors[SCHEDULER].answers = False
    with pytest.raises(SchedulerUnavailableError) as exc:
        s.connect()
    assert exc.value.what == "connect" and s.scheduler is None


def test_a_new_ray_session_gets_a_fresh_session_with_nothing_of_the_old_one(fake):
    driver, s = fake
    connected(driver, s)
    call(s, adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")(lambda x: x), 1)
    assert s.leases and s.plans
    driver.key = object()  # ray.shutdown() and a new ray.init()
    assert not s.connected
    fresh = session.session(driver)
    assert fresh is not s and not fresh.leases and not fresh.plans and fresh.scheduler is None
    assert session.session(driver) is fresh  # the same Ray session: the same session


def test_ray_options_are_built_once_per_function_class_and_node(fake):
    driver, s = fake
    connected(driver, s)
    af = adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")(lambda x: x)
    refs = [call(s, af, i) for i in range(50)]
    kinds = [r.ran[1] for r in refs]
    assert kinds[0] == "leased" and set(kinds[1:]) == {"spilled"}  # one slot on A, then Ray's queue
    assert [r.ran[2] for r in refs[:2]] == [(0,), (refs[1].ran[2][0], 1)]  # a spilled call's one own argument: its deadline
    assert isinstance(refs[1].ran[2][0], float)
    assert len(FakeRemotes.built) == 2  # A's options and the spill's, for fifty calls
    assert len(driver.actors[SCHEDULER].pid.calls) == 1  # the spill witness: asked at the first spilled call only
    strategies = {b[1]: b[2] for b in FakeRemotes.built}
    assert (strategies["leased"].node_id, strategies["leased"].soft) == (A, True)
    assert (strategies["spilled"].node_id, strategies["spilled"]._spill_on_unavailable) == (B, True)
    lease = next(iter(s.leases.values()))
    lease.take(LeaseGrant(lease.state.lease_id, (LeaseSlot(A, 1),), dict(SELECTOR), 1.0, spill_via=B))  # next tick's grant
    assert len(FakeRemotes.built) == 2  # the same nodes and spill: nothing built again
    lease.take(LeaseGrant(lease.state.lease_id, (LeaseSlot(A, 1), LeaseSlot(B, 1, fallback_levels=1)), dict(SELECTOR), 1.0,
                          spill_via=B))
    assert len(FakeRemotes.built) == 3 and FakeRemotes.built[-1][1] == "leased"  # a new node: its options, once


def test_two_functions_of_one_name_and_class_each_run_their_own_code(fake):
    # The lease key was (class, retries, name): two lambdas of one class shared a lease, and the
    # second one's calls were submitted with the first one's Ray function.
    driver, s = fake
    connected(driver, s)
    first = adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")(lambda x: ("first", x))
    second = adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")(lambda x: ("second", x))
    assert first.task_name == second.task_name and first.requirement == second.requirement
    for i in range(3):
        assert call(s, first, i).ran[0] is first.function
        assert call(s, second, i).ran[0] is second.function


def renewal_due(s) -> None:
    """The session's one lease is past its tick: its next call asks for a grant and waits for it."""
    next(iter(s.leases.values())).state.renew_at = 0.0


def test_a_silent_scheduler_is_waited_on_briefly_until_it_answers_again(fake):
    """During a head outage every call waited the whole 10 s before it was refused, one after
    another. Once a wait has run out, a lease renewal waits ``SILENT_WAIT_S``; the first answer
    restores the full wait."""
    driver, s = fake
    now = [100.0]
    s.clock = lambda: now[0]
    connected(driver, s)
    af = adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")(lambda x: x)
    call(s, af, 1)  # the lease's first grant
    assert driver.waits == [10.0, 10.0] and s.silence() is None and s.call_wait_s() == 10.0
    driver.actors[SCHEDULER].answers = False  # the head went down
    renewal_due(s)
    with pytest.raises(SchedulerUnavailableError) as first:
        call(s, af, 2)
    assert (first.value.what, first.value.waited_s) == ("lease", 10.0) and "within 10 s;" in str(first.value)
    assert driver.waits[-1] == 10.0 and s.silent_since == 100.0 and s.silence() == 0.0
    assert s.call_wait_s() == session.SILENT_WAIT_S == 2.0
    now[0] += 5.0
    with pytest.raises(SchedulerUnavailableError) as second:
        call(s, af, 3)  # the renewal asked is still asked: waited for again, briefly
    assert (second.value.what, second.value.waited_s) == ("lease", 2.0)
    assert "within 2 s (silent for 5 s)" in str(second.value)
    assert driver.waits[2:] == [10.0, 2.0] and s.silent_since == 100.0  # still silent since the first wait
    driver.actors[SCHEDULER].answers = True  # the head is back
    call(s, af, 4)
    assert driver.waits[-1] == 2.0 and s.silent_since is None and s.call_wait_s() == 10.0
    renewal_due(s)
    call(s, af, 5)
    assert driver.waits[4:] == [2.0, 10.0]


def test_a_placement_waits_briefly_too_and_reads_keep_the_full_wait(fake):
    """The per-call path (a call with a priority) goes to the scheduler on every call, so it is the
    one that paid 10 s per call during an outage. Reads (``api()``) still wait the whole time."""
    driver, s = fake
    connected(driver, s)
    af = adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg", priority=1)(lambda x: x)
    assert call(s, af, 1).ran[1:] == ("placed", (7, 1))
    driver.actors[SCHEDULER].answers = False
    for expected in (10.0, 2.0, 2.0):
        with pytest.raises(SchedulerUnavailableError) as exc:
            call(s, af, 2)
        assert (exc.value.what, exc.value.waited_s) == ("place", expected)
        assert f"within {expected:g} s" in str(exc.value)
    with pytest.raises(AnswerTimeout) as read:
        s.api().queue_timeout_s()
    assert read.value.waited_s == 10.0 and s.silence() is not None
    driver.actors[SCHEDULER].answers = True
    assert call(s, af, 3).ran[1] == "placed" and s.silence() is None
    call(s, af, 4)
    assert driver.waits == [10.0, 10.0, 10.0, 2.0, 2.0, 10.0, 2.0, 10.0]
    assert len(driver.actors[SCHEDULER].place_task.calls) == 6


def test_down_stops_the_actors_in_order_and_the_session_forgets_them(fake):
    driver, s = fake
    connected(driver, s)
    call(s, adaptive.remote(min_tier="gpu_apu", floor="cpu_ffmpeg")(lambda x: x), 1)
    stopped = control.down(timeout_s=1.0)
    assert stopped == driver.killed == [HEALTH, SCHEDULER, DISPATCHER, probe_actor_name(A), REGISTRY]
    assert s.scheduler is None and not s.leases  # the next call finds the fabric anew


def test_importing_the_driver_side_and_decorating_import_no_ray():
    code = ("import sys, fabric.runtime.client, fabric.runtime.session, fabric.runtime.leases\n"
            "from fabric import adaptive\n"
            "adaptive.remote(min_tier='gpu_apu')(lambda x: x)\n"
            "assert 'ray' not in sys.modules, 'ray imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)

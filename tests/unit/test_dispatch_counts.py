"""What a call carries and how it is counted (issue 11): every call under a lease counts once, as a
fallback when it ran below its ``min_tier`` (a call on a leased slot by its driver, when sent; a
spilled call by its worker, where it ran); GPU work asks Ray for its GPUs."""

import time

import pytest

from fabric import CapacityError, Requirement
from fabric.rayio import tasks, worker_calls
from fabric.core.scheduling import LeaseGrant, LeaseSlot
from fabric.core.tiers import ComputeTier


@pytest.fixture
def counts(monkeypatch):
    fresh = worker_calls.SpillCounts()
    monkeypatch.setattr(worker_calls, "_spill_counts", fresh)
    monkeypatch.setattr(worker_calls, "_spill_flusher", object())  # no reporting thread in a unit test
    monkeypatch.setattr(worker_calls, "_spill_refused", 0)
    monkeypatch.setattr(worker_calls, "_node_rank", ComputeTier.CPU_FFMPEG.rank)  # this worker's node label
    return fresh


class Ref:
    def _on_completed(self, callback) -> None:
        pass


class Recorder:
    """A remote function, a scheduler and a driver seam at once: records what the session sends."""

    def __init__(self, grant: LeaseGrant) -> None:
        self.grant = grant
        self.reports: list[tuple[int, int]] = []
        self.submitted = 0
        self.lease = self.report_calls = self

    # the remote functions a plan binds, and the scheduler's actor methods, all end in .remote()
    def leased(self):
        return self

    def spilled(self, min_rank, name):
        return self

    def options(self, **kwargs):
        return self

    def remote(self, *args, **kwargs):
        if len(args) == 2 and all(isinstance(a, int) for a in args) and not kwargs:  # report_calls(placed, fallbacks)
            self.reports.append(args)
        elif len(args) == 5:  # lease(lease_id, req, holding, want, release)
            pass
        else:
            self.submitted += 1
        return Ref()

    # the driver seam
    def session_key(self):
        return None

    def answer(self, ref, timeout_s):
        return self.grant

    def when_done(self, ref, callback) -> None:
        pass

    def all_finished(self, refs) -> bool:
        return False


def test_calls_on_leased_slots_are_counted_by_their_driver_with_their_slots_fallback():
    """Counted when sent, in the driver (whose process outlives the call): a slot at ``min_tier``
    counts a placement, a slot below it (say, on a node the engine demoted) a fallback too."""
    from fabric.runtime import dispatch
    from fabric.runtime.client import DispatchOptions
    from fabric.runtime.session import Session

    a, b = "aa" * 28, "bb" * 28
    grant = LeaseGrant("c:0", (LeaseSlot(a, 1), LeaseSlot(b, 2, fallback_levels=1)), {}, 60.0)
    rec = Recorder(grant)
    s = Session(rec, None)
    s.scheduler = rec
    s.remotes[double] = rec
    s.calls.close()  # no reporting thread: this test looks at what is sent, and when
    req = Requirement(min_tier="gpu_apu", floor="cpu_ffmpeg")
    try:
        for x in range(3):  # one on a, two on b
            dispatch.submit(double, req, DispatchOptions(on_no_capacity="raise"), "double", (x,), {}, s)
        assert rec.submitted == 3 and rec.reports == []  # nothing sent per call: reported in batches
        s.calls.flush()
        assert rec.reports == [(3, 2)]
        s.calls.flush()
        assert rec.reports == [(3, 2)]  # reported once
    finally:
        s.calls.close()


def double(x):
    return x * 2


def test_counts_that_could_not_be_sent_are_kept_for_the_next_report():
    from fabric.runtime.counts import CallReporter

    sent, fail = [], [True]

    def send(placed, fallbacks):
        if fail[0]:
            raise RuntimeError("the scheduler is restarting")
        sent.append((placed, fallbacks))
        return "ref"

    r = CallReporter(send)
    r.close()  # no reporting thread: this test sends by hand
    r.count(True, 0.0)
    assert r.flush() is None and sent == []
    fail[0] = False
    r.count(False, 0.1)
    assert r.flush() == "ref" and sent == [(2, 1)]


def test_spilled_calls_count_by_their_nodes_label_and_refuse_to_start_late(counts):
    run = worker_calls.wrap_spilled(lambda: "ran", ComputeTier.GPU_APU.rank, "f")
    assert run(float("inf")) == "ran"  # on a cpu_ffmpeg node: below gpu_apu
    low = worker_calls.wrap_spilled(lambda: "ran", ComputeTier.CPU_FFMPEG.rank, "g")
    assert low(float("inf")) == "ran"  # at its min_tier
    with pytest.raises(CapacityError):
        run(0.0)  # its queue deadline passed before a node took it
    assert (counts.placed, counts.fallbacks) == (2, 1)  # the refused call did not run, so it does not count


def test_gpu_work_asks_ray_for_the_gpus_the_scheduler_says():
    req = Requirement(min_tier="gpu_cuda", fallback=False, num_gpus=0.5)
    assert "num_gpus" not in tasks.base_options(req, 3, "t")
    assert tasks.base_options(req, 3, "t", 0.5)["num_gpus"] == 0.5
    opts = tasks.base_options(Requirement(min_tier="relay", memory_mib=64), 3, "t")
    assert opts["resources"] == {"fabric.slots": 1} and opts["memory"] == 64 * 1024 * 1024


def test_counts_are_never_sent_once_the_ray_session_is_gone():
    """After ``ray.shutdown()`` an actor call would connect Ray again (from the reporting thread,
    in the middle of a cluster's shutdown): the session sends nothing then and keeps the counts."""
    from fabric.runtime.session import Session

    rec = Recorder(LeaseGrant("c:0", (), {}, 60.0))
    key = object()
    rec.session_key = lambda: key  # connected to this Ray session
    s = Session(rec, key)
    s.scheduler = rec
    s.calls.close()
    s.calls.count(False, 0.0)
    rec.session_key = lambda: None  # ray.shutdown()
    assert s.calls.flush() is None and rec.reports == []
    rec.session_key = lambda: key
    s.calls.flush()
    assert rec.reports == [(1, 0)]


def test_a_workers_report_carries_its_refused_calls_beside_the_ones_that_ran(counts):
    """Refused calls are not placements, but the driver waits for them too (``spilled_seen``)."""
    run = worker_calls.wrap_spilled(lambda: "ran", ComputeTier.GPU_APU.rank, "f")
    assert worker_calls._take_spill_report(0.0) is None
    run(float("inf"))
    with pytest.raises(CapacityError):
        run(0.0)
    assert worker_calls._take_spill_report(time.time()) is None  # the burst is not over yet
    assert worker_calls._take_spill_report(time.time() + 1) == (1, 1, 1)
    assert worker_calls._take_spill_report(time.time() + 2) is None  # reported once
    with pytest.raises(CapacityError):
        run(0.0)
    assert worker_calls._take_spill_report(time.time()) == (0, 0, 1)  # nothing ran: nothing to wait for


class PidRef:
    def __init__(self, pid: int) -> None:
        self.pid = pid


class Pid:
    """The scheduler's ``pid()``: ``now`` is the process it runs in now (another one after a restart)."""

    def __init__(self, now: int) -> None:
        self.now, self.asked = now, 0

    def remote(self):
        self.asked += 1
        return PidRef(self.now)


class Tally(Recorder):
    """A scheduler that has seen ``seen[0]`` of this job's spilled calls (``spilled_seen``)."""

    def __init__(self) -> None:
        super().__init__(LeaseGrant("c:0", (), {}, 60.0))
        self.seen = [0]
        self.asked: list[str] = []
        self.spilled_seen = self
        self.pid = Pid(1000)
        self.pid_waits: list[float] = []
        self.pid_error: Exception | None = None

    def remote(self, *args, **kwargs):
        if len(args) == 1 and isinstance(args[0], str):
            self.asked.append(args[0])
            self.seen[0] += 1  # one more worker report in between
            return Ref()
        return super().remote(*args, **kwargs)

    def job_id(self):
        return "02000000"

    def answer(self, ref, timeout_s):
        if isinstance(ref, PidRef):
            self.pid_waits.append(timeout_s)
            if self.pid_error is not None:
                raise self.pid_error
            return ref.pid
        return self.seen[0]


def test_an_exiting_driver_waits_until_the_scheduler_saw_every_call_it_spilled_and_no_longer_than_its_deadline():
    from fabric.runtime.session import Session, wait_spill_reports

    tally = Tally()
    s = Session(tally, None)
    s.scheduler = tally
    s.calls.close()
    for _ in range(3):
        s.spilled_call()
    assert s.calls.spilled == 3 and tally.pid.asked == 1  # the witness: asked at the first spilled call only
    assert wait_spill_reports(s, time.monotonic() + 30) and tally.asked == ["02000000"] * 3
    tally.seen = [-10**6]  # a count that never comes, from the same scheduler (its pid): waited for until the deadline
    start = time.monotonic()
    assert not wait_spill_reports(s, start + 0.3)
    assert len(tally.asked) > 3


def test_a_scheduler_that_restarted_since_the_calls_spilled_is_not_waited_for_at_exit():
    """The scheduler keeps its count of spilled calls in memory only: after a restart (a head's, or
    its actor's own) the reports that came before it are gone, the count is never reached, and the
    wait used to sit out its whole stall (5 s per driver exit). It now returns at once."""
    from fabric.runtime.session import WITNESS_WAIT_S, Session, restarted_since_spilling, wait_spill_reports

    tally = Tally()
    s = Session(tally, None)
    s.scheduler = tally
    s.calls.close()
    s.spilled_call()
    s.spilled_call()
    assert not restarted_since_spilling(s)  # the same process as at the first spilled call
    tally.pid.now = 2000  # the head restarted: the scheduler runs in another process
    assert restarted_since_spilling(s)
    start = time.monotonic()
    assert not wait_spill_reports(s, start + 30)  # not all seen: they are lost
    assert tally.asked == [] and time.monotonic() - start < 1  # never polled
    assert tally.pid_waits and all(w <= WITNESS_WAIT_S for w in tally.pid_waits)  # short looks


def test_a_scheduler_pid_that_cannot_be_read_keeps_the_wait():
    """Unknown is not a restart: a pid look that fails leaves the exit wait as it was."""
    from fabric.rayio.driver import AnswerTimeout
    from fabric.runtime.session import Session, restarted_since_spilling, wait_spill_reports

    tally = Tally()
    s = Session(tally, None)
    assert not restarted_since_spilling(s)  # nothing spilled: no witness
    s.scheduler = tally
    s.calls.close()
    s.spilled_call()
    tally.pid.now = 2000
    tally.pid_error = AnswerTimeout(1.0)
    assert not restarted_since_spilling(s)
    assert wait_spill_reports(s, time.monotonic() + 30) and tally.asked == ["02000000"]


def test_the_exit_wait_ends_once_the_count_stops_growing():
    """A report lost with its worker (its node died mid-call) never comes: no growth for
    ``stall_s`` ends the wait long before the deadline."""
    from fabric.runtime.session import Session, wait_spill_reports

    tally = Tally()
    tally.remote = lambda *a, **k: Ref()  # the count stays where it is
    tally.seen = [1]
    s = Session(tally, None)
    s.scheduler = tally
    s.calls.close()
    for _ in range(3):
        s.spilled_call()
    start = time.monotonic()
    assert not wait_spill_reports(s, start + 30, stall_s=0.2)  # the same scheduler: its count is waited for
    assert 0.2 <= time.monotonic() - start < 5


def test_a_driver_can_wait_for_its_spilled_calls_reports_before_it_reads_its_fallbacks(monkeypatch):
    from fabric.runtime import session

    assert session.spill_reports_in(0.1)  # nothing connected: nothing to wait for
    tally = Tally()
    s = session.Session(tally, None)
    s.scheduler = tally
    s.calls.close()
    s.calls.spilled_call()
    monkeypatch.setattr(session, "_current", s)
    assert session.spill_reports_in(5) and tally.asked == ["02000000"]


def test_the_spill_tally_keeps_the_jobs_reported_most_recently():
    from fabric.core.scheduling.reports import SpillTally

    tally = SpillTally()
    tally.MAX_JOBS = 2
    tally.add("a", 2)
    tally.add("b", 1)
    tally.add("a", 1)  # a reported again: b is now the oldest
    tally.add("c", 4)
    assert (tally.of("a"), tally.of("b"), tally.of("c")) == (3, 0, 4)

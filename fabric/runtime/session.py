"""The driver's session with the fabric: one object for everything a process holds while it is
connected to one Ray session.

``Session`` holds the settings in force (``fabric.up`` hands them over, and decorators check
their arguments against them), the scheduler's and dispatcher's handles, the leases, and the Ray
options of every function called (``fabric.rayio.tasks.CallPlan``, built once each). It is keyed
to the Ray session: after ``ray.shutdown()`` and a new ``ray.init()`` (another cluster, say) the
next call finds a fresh session, and nothing of the old one's handles or leases is used again.

Every Ray call a session makes goes through its driver seam (``fabric.rayio.driver.RayDriver``;
a fake in unit tests). Importing this module imports no Ray: the seam is imported the first time
a session needs one.
"""

from __future__ import annotations

import atexit
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

from fabric.core.errors import FabricError, SchedulerUnavailableError
from fabric.core.names import DISPATCHER, SCHEDULER
from fabric.rayio.scheduler_client import SchedulerClient
from fabric.runtime.counts import EXIT_POLL_S, EXIT_STALL_S, EXIT_WAIT_S, CallReporter

if TYPE_CHECKING:  # pragma: no cover
    from fabric.core.settings import FabricSettings
    from fabric.rayio.tasks import CallPlan, FunctionRemotes

ANSWER_TIMEOUT_S = 10.0
"""How long a caller waits for the scheduler's answer (a lease, a placement) before
``SchedulerUnavailableError``. It answers in milliseconds; a restart takes a second or two."""
SILENT_WAIT_S = 2.0
"""How long a lease renewal or a placement waits instead, once a wait for the scheduler ran out
with no answer and none came since (``Session.silent_since``): during a head outage every call
would otherwise pay the whole ``ANSWER_TIMEOUT_S`` again, one after another. Such a call is refused,
not lost, and its caller sends it again; the first answer restores the full wait."""
WITNESS_WAIT_S = 1.0
"""How long each of the two looks at the scheduler's pid waits at exit (``restarted_since_spilling``)."""
EXIT_FLUSH_S = 2.0
"""How long an exiting process waits for the scheduler to take its last call counts."""


class Session:
    """This process's connection to the fabric on one Ray session (see the module docstring)."""

    def __init__(self, driver: Any, key: object | None, settings: "FabricSettings | None" = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.driver = driver
        """The Ray seam (``RayDriver``, or a fake)."""
        self.key = key
        """The Ray session this one belongs to (``driver.session_key()`` when it was made)."""
        self.settings = settings
        """The fabric's settings in force, once ``fabric.up`` handed them over (None: the defaults)."""
        self.scheduler: Any = None
        self.dispatcher: Any = None
        self.leases: dict[tuple, Any] = {}
        """Per function, requirement class, retries and name: its lease (``fabric.runtime.dispatch.Lease``)."""
        self.plans: dict[tuple, "CallPlan"] = {}
        """The same keys: how those calls go to Ray, options built once each."""
        self.remotes: dict[Callable, "FunctionRemotes"] = {}
        """Per function: its Ray remote functions, shared by every class it is called with. Like
        Ray's own function table, the session keeps every function it ran."""
        self.client_id = uuid.uuid4().hex[:12]
        self.queue_timeout_s = 300.0
        """The scheduler's default queue timeout (asked when connecting)."""
        self.answer_timeout_s = ANSWER_TIMEOUT_S
        self.clock = clock
        """Monotonic seconds, for ``silent_since``."""
        self.silent_since: float | None = None
        """When (``clock``) the first wait for the scheduler ran out with no answer since its last
        answer; None while it answers. Lease renewals and placements then wait ``SILENT_WAIT_S``."""
        self.spill_witness: Any = None
        """The scheduler's pid as it was at this session's first spilled call (an ``ObjectRef`` of
        ``pid()``, looked at only at exit): a scheduler with another pid has lost their count."""
        self.lock = threading.Lock()
        self.calls = CallReporter(self._report_calls)
        """This session's calls on leased slots, counted when sent (``fabric.runtime.counts``)."""

    def _report_calls(self, placed: int, fallbacks: int) -> Any:
        # Only on this session's own Ray connection: after ``ray.shutdown()`` an actor call would
        # connect Ray again (Ray initializes itself on a ``.remote()``), from the reporting thread.
        sched = self.scheduler
        if sched is None or not self.connected:
            raise SchedulerUnavailableError("not connected to the fabric's scheduler", what="report")
        return sched.report_calls.remote(placed, fallbacks)

    @property
    def connected(self) -> bool:
        """Whether the fabric's actors have been looked up (and the Ray session is this one's)."""
        return self.scheduler is not None and self.key is self.driver.session_key()

    def api(self) -> SchedulerClient:
        """The scheduler's methods (``SchedulerApi``) over this session's handle, each answer waited
        for at most ``answer_timeout_s`` (``AnswerTimeout`` past it; the scheduler's own error raised)."""
        return SchedulerClient(self.scheduler, self._answer)

    def call_api(self) -> SchedulerClient:
        """``api()`` for the calls a ``.remote()`` makes (a placement): each answer waited for at most
        ``call_wait_s()``. A refusal there costs the caller a retry, not a job."""
        return SchedulerClient(self.scheduler, self._call_answer)

    def call_wait_s(self) -> float:
        """How long a lease renewal or a placement waits for the scheduler now: ``answer_timeout_s``,
        or ``SILENT_WAIT_S`` (no longer than that) while the scheduler is silent."""
        if self.silent_since is None:
            return self.answer_timeout_s
        return min(SILENT_WAIT_S, self.answer_timeout_s)

    def call_answer(self, ref: Any) -> Any:
        """An answer of the scheduler for a ``.remote()`` (a lease renewal), waited for at most
        ``call_wait_s()``; ``AnswerTimeout`` past it, its ``waited_s`` the wait."""
        return self._waited(ref, self.call_wait_s())

    def silence(self) -> float | None:
        """How long (seconds) the scheduler has been silent, or None while it answers."""
        since = self.silent_since
        return None if since is None else max(0.0, self.clock() - since)

    def _call_answer(self, ref: Any, least_wait_s: float | None) -> Any:
        return self.call_answer(ref)

    def _answer(self, ref: Any, least_wait_s: float | None) -> Any:
        return self._waited(ref, self.answer_timeout_s)

    def _waited(self, ref: Any, wait_s: float) -> Any:
        """``ref``'s answer, waited for at most ``wait_s``. Every wait tells whether the scheduler is
        silent: one that ran out starts the silence (``AnswerTimeout`` raised, its ``waited_s`` set),
        an answer ends it. An error the scheduler raised is an answer too."""
        from fabric.rayio.driver import AnswerTimeout

        try:
            answer = self.driver.answer(ref, wait_s)
        except AnswerTimeout as exc:
            if self.silent_since is None:
                self.silent_since = self.clock()
            exc.waited_s = wait_s
            raise
        except FabricError:
            self.silent_since = None
            raise
        self.silent_since = None
        return answer

    def spilled_call(self) -> None:
        """One call sent to the spill selector: counted (its worker reports it), and at the first,
        the scheduler's pid asked for (``spill_witness``)."""
        if self.spill_witness is None and self.scheduler is not None:
            try:
                self.spill_witness = self.scheduler.pid.remote()
            except Exception:  # the call is sent already; an exit without the witness only waits longer
                pass
        self.calls.spilled_call()

    def connect(self, bring_up: Callable[[], object] | None = None) -> "Session":
        """Look up the scheduler and dispatcher and ask the scheduler's queue timeout:
        ``SchedulerUnavailableError`` when it does not answer. When the fabric is not up,
        ``bring_up()`` brings it up with defaults (``fabric.runtime.lifecycle.connected`` passes one:
        a ``.remote()`` brings the fabric up with defaults if it is not up); without one, or
        when the actors did not come up, ``SchedulerUnavailableError``."""
        from fabric.rayio.driver import AnswerTimeout

        with self.lock:
            if self.scheduler is not None:
                return self
            d = self.driver
            sched, disp = d.get_actor(SCHEDULER), d.get_actor(DISPATCHER)
            if (sched is None or disp is None) and bring_up is not None:
                bring_up()
                sched, disp = d.get_actor(SCHEDULER), d.get_actor(DISPATCHER)
            if sched is None or disp is None:
                raise SchedulerUnavailableError("the fabric's scheduler and dispatcher did not come up" if bring_up
                                                else "the fabric's scheduler and dispatcher are not up: call fabric.up()",
                                                what="connect")
            try:
                self.queue_timeout_s = float(SchedulerClient(sched, self._answer).queue_timeout_s())
            except AnswerTimeout:
                raise SchedulerUnavailableError(
                    f"the fabric's scheduler did not answer within {self.answer_timeout_s:g} s "
                    "(is the scheduler actor alive? see `fabric status`)", waited_s=self.answer_timeout_s,
                    what="connect") from None
            self.dispatcher = disp
            self.leases = {}
            self.scheduler = sched
        # Ray shuts down at exit through its own atexit hook, registered by ``ray.init``; ours is
        # (re-)registered after it, so it runs first, while the scheduler can still be reached.
        atexit.unregister(_at_exit)
        atexit.register(_at_exit)
        return self

    def disconnect(self) -> None:
        """Forget the actors' handles and the leases (``fabric.down`` stopped the actors): the next
        call looks the actors up again, or brings the fabric up anew."""
        with self.lock:
            self.scheduler = self.dispatcher = None
            self.leases = {}
            self.silent_since = None  # the next scheduler is another one; spill_witness stays: its pid differs
            self.calls.take_all()  # the scheduler they were for is gone, and its counters with it


_current: Session | None = None
_lock = threading.RLock()  # re-entered: connecting may bring the fabric up, which hands over its settings


def _new_driver() -> Any:
    from fabric.rayio.driver import RayDriver

    return RayDriver()


def session(driver: Any = None) -> Session:
    """This process's session for its Ray connection as it is now (a fresh one when the Ray
    session changed, or none was made yet); it may not be connected to the fabric's actors."""
    global _current
    with _lock:
        s = _current
        d = driver if driver is not None else (s.driver if s is not None else _new_driver())
        key = d.session_key()
        if s is None or s.driver is not d or s.key is not key:
            if s is not None:
                s.calls.close()  # its Ray session is gone: so is the scheduler its counts were for
            s = _current = Session(d, key)
        return s


def current(bring_up: Callable[[], object] | None = None) -> Session:
    """The connected session (connecting to Ray the way ``ray.init()`` does, and to the fabric's
    actors, when needed; ``bring_up`` as ``Session.connect`` takes it). Every ``.remote()`` call
    starts here (through ``fabric.runtime.lifecycle.connected``), so the connected case is quick."""
    s = _current
    if s is not None and s.scheduler is not None and s.key is s.driver.session_key():
        return s
    with _lock:
        d = _current.driver if _current is not None else _new_driver()
        d.init()
        return session(d).connect(bring_up)


def use_settings(settings: "FabricSettings | None", driver: Any = None) -> Session:
    """Make ``settings`` the ones in force for this Ray session (``fabric.up`` calls this, so
    operations defined there are known to decorators in the same process)."""
    with _lock:
        s = session(driver)
        s.settings = settings
        return s


def settings_in_force() -> "FabricSettings | None":
    """The settings ``fabric.up`` handed to this Ray session's session, if any (None: the
    defaults). Imports nothing: with no session there are none."""
    s = _current
    if s is None or s.settings is None or s.key is not s.driver.session_key():
        return None
    return s.settings


def driver() -> Any:
    """The Ray seam the current session uses (a new ``RayDriver`` when there is no session)."""
    s = _current
    return s.driver if s is not None else _new_driver()


def flush_calls(timeout_s: float = ANSWER_TIMEOUT_S) -> None:
    """Send the connected session's counted calls to the scheduler and wait until it took them:
    a metrics read in this process then counts every call this process sent (see
    ``fabric.runtime.counts``). Best effort: a scheduler that does not answer is not waited for."""
    s = _current
    if s is None or not s.connected:
        return
    ref = s.calls.flush()
    if ref is not None:
        try:
            s.driver.answer(ref, timeout_s)
        except Exception:  # counts are best effort; the read that follows reports what it can
            pass


def spill_reports_in(timeout_s: float = EXIT_WAIT_S) -> bool:
    """Wait until the scheduler has seen the workers' reports of every call this process spilled
    (at most ``timeout_s``): its fallback counts are then complete. Whether they are."""
    s = _current
    if s is None or not s.connected or not s.calls.spilled:
        return True
    try:
        return wait_spill_reports(s, time.monotonic() + timeout_s)
    except Exception:  # the scheduler is away: the counts are what they are
        return False


def _at_exit() -> None:
    """At exit, before Ray's shutdown: the last counts go out, and a session that spilled calls
    waits until their workers' reports are in (at most ``EXIT_WAIT_S``)."""
    s = _current
    try:
        if s is None or not s.connected:
            return
        flush_calls(EXIT_FLUSH_S)
        spill_reports_in(EXIT_WAIT_S)
    except Exception:  # never stand in the way of an exit
        pass


def restarted_since_spilling(s: Session, wait_s: float = WITNESS_WAIT_S) -> bool:
    """Whether the scheduler now runs in another process than at ``s``'s first spilled call (its pid
    differs from ``spill_witness``): a restart, a head's or the actor's own. Each look waits at most
    ``wait_s``; a look that fails or is not answered leaves it unknown, and unknown is False."""
    witness, sched = s.spill_witness, s.scheduler
    if witness is None or sched is None:
        return False
    try:
        then = s.driver.answer(witness, wait_s)
        now = s.driver.answer(sched.pid.remote(), wait_s)
    except Exception:
        return False
    return bool(then != now)


def wait_spill_reports(s: Session, deadline: float, stall_s: float = EXIT_STALL_S) -> bool:
    """Wait until the scheduler has seen the reports of every call ``s`` spilled (its workers count
    them: ``fabric.runtime.counts``), or ``deadline`` (``time.monotonic``) passes, or the count has
    not grown for ``stall_s`` (a report lost with its worker, on a node that died, never comes);
    whether it saw all. A scheduler that restarted since the first of those calls
    (``restarted_since_spilling``) is not waited for at all: its count is kept in memory only, so
    the reports that came before the restart are gone with the old scheduler and the count could
    never be reached (False)."""
    if restarted_since_spilling(s, max(0.1, min(WITNESS_WAIT_S, deadline - time.monotonic()))):
        return False
    job = s.driver.job_id()
    last, grew = -1, time.monotonic()
    while True:
        seen = s.driver.answer(s.scheduler.spilled_seen.remote(job), max(0.1, deadline - time.monotonic()))
        if seen >= s.calls.spilled:
            return True
        now = time.monotonic()
        if seen != last:
            last, grew = seen, now
        if now + EXIT_POLL_S > deadline or now - grew >= stall_s:
            return False
        time.sleep(EXIT_POLL_S)


def end() -> None:
    """Forget the current session (tests that made one with a fake driver call this)."""
    global _current
    with _lock:
        if _current is not None:
            _current.calls.close()
        _current = None

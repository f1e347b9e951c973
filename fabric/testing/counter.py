"""``CounterJob``: a job that counts its own output, so a migration's gap and duplicates are
measured by the job itself (issue 16's strategy tests and ``scripts/bench_migration.py``).

Every instance emits *ticks* on one wall-clock schedule: tick ``n`` is due at
``epoch + n * period``. A background thread writes every tick it has passed, one line each,
flushed per line, to ``<out_dir>/<writer>.ticks`` (``writer``: the instance's Ray actor name,
or a uuid outside an actor). A late wake-up writes the ticks it skipped too, so one writer never
leaves a hole: a hole in the union of the files is time when no instance was emitting, a tick in
two files is output two instances produced. ``fabric.testing.counter_report.analyze`` reads
the folder back.

Used as ``adaptive.remote(...)(CounterJob)`` (the fabric package is importable on every node, so
the class is pickled by reference). ``epoch=None`` is the Unix epoch: every instance of the job
(source and target of a migration are built from the same arguments) agrees on the schedule.

- A plain instance starts emitting at once: from the first tick due after it started (never a
  tick whose time came before it existed, so an instance that starts after another stopped can
  only leave a hole, never a duplicate; the measure's resolution is one period).
- A handover target (``fabric.instance_info().handover_target``) emits nothing until
  ``__fabric_resume__(position)``, then emits from ``position + 1`` (waiting for that tick's
  time, or catching up when it is already past).
- ``__fabric_ready__()`` (after ``ready_delay_s``) returns a payload; ``__fabric_cut__(payload)``
  (after ``cut_delay_s``) picks ``stop_at = tick now + lead_ticks``, keeps emitting through it and
  stops there, and returns it; ``__fabric_stop__()`` waits (at most 2 s) until a cut's ``stop_at``
  was written, then stops the thread once it wrote every tick due until the stop (a thread the
  machine starved for a moment catches up first, so a hole is never the writer's own lag). The
  delays let tests overrun a phase's deadline.
- ``hold_stop``: a file path; ``__fabric_stop__`` first waits (emitting on, at most
  ``HOLD_MAX_S``) while that file exists, so a test can hold a migration in ``stopping_source``.

``Emitter`` is the schedule without threads or Ray (the clock is an argument), tested in
milliseconds.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
import uuid
from typing import Any, Callable

STOP_WAIT_S = 2.0
"""How long ``__fabric_stop__`` waits for a cut's last tick to be written."""

HOLD_MAX_S = 120.0
"""The longest ``hold_stop`` holds a stop."""

IDLE_WAIT_S = 0.05
"""The thread's longest sleep while it has nothing due (a stop or a resume is seen within it)."""


class Emitter:
    """The tick schedule of one writer: which ticks are due at a time, and where it stops.

    ``pump(now)`` returns the ticks to write now (every tick from the next one through the one due
    at ``now``, capped at ``stop_at``) and advances past them; ``armed`` is False until
    ``start(tick)`` says where to begin (a handover target waits for its resume)."""

    def __init__(self, period_s: float, epoch: float = 0.0) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s!r}")
        self.period_s = float(period_s)
        self.epoch = float(epoch)
        self.next_tick: int | None = None
        self.stop_at: int | None = None
        self.last_written: int | None = None

    def tick_at(self, now: float) -> int:
        """The tick due at ``now`` (the last one whose time has come; a float's rounding below a
        tick's exact time still counts as that tick)."""
        return math.floor((now - self.epoch) / self.period_s + 1e-9)

    def due_at(self, tick: int) -> float:
        return self.epoch + tick * self.period_s

    @property
    def armed(self) -> bool:
        return self.next_tick is not None

    @property
    def done(self) -> bool:
        """A cut's last tick was written (nothing more will be)."""
        return self.stop_at is not None and self.last_written is not None and self.last_written >= self.stop_at

    def start(self, tick: int) -> None:
        """Emit from ``tick`` on."""
        self.next_tick = int(tick)

    def start_now(self, now: float) -> None:
        """Emit from the first tick due after ``now``."""
        self.start(self.tick_at(now) + 1)

    def cut(self, now: float, lead_ticks: int) -> int:
        """Stop after ``tick now + lead_ticks``; returns that tick. A second cut keeps the first's."""
        if self.stop_at is None:
            self.stop_at = self.tick_at(now) + max(0, int(lead_ticks))
        return self.stop_at

    def pump(self, now: float) -> list[int]:
        """The ticks to write at ``now``, in order; the emitter advances past them."""
        if self.next_tick is None:
            return []
        last = self.tick_at(now)
        if self.stop_at is not None:
            last = min(last, self.stop_at)
        if last < self.next_tick:
            return []
        out = list(range(self.next_tick, last + 1))
        self.next_tick = last + 1
        self.last_written = last
        return out

    def wait_s(self, now: float) -> float:
        """Seconds until the next tick is due (capped at ``IDLE_WAIT_S``; 0 when one is due now)."""
        if self.next_tick is None or self.done:
            return IDLE_WAIT_S
        return min(IDLE_WAIT_S, max(0.0, self.due_at(self.next_tick) - now))


def _writer_name() -> str:
    try:
        import ray

        name = ray.get_runtime_context().get_actor_name()
    except Exception:  # not inside a Ray actor
        name = None
    return name or f"writer-{uuid.uuid4().hex[:12]}"


def _handover_target() -> bool:
    """Whether this instance is a handover's target (it waits for ``__fabric_resume__``)."""
    try:
        import fabric

        info_fn = getattr(fabric, "instance_info", None)
        info = info_fn() if info_fn is not None else None
    except Exception:  # outside a job instance, or the fabric has no instance_info yet
        return False
    return bool(getattr(info, "handover_target", False))


def safe_file_name(writer: str) -> str:
    """``writer`` as a file name (anything but letters, digits, ``.-_@`` becomes ``_``)."""
    return re.sub(r"[^A-Za-z0-9._@-]", "_", writer) or "writer"


class CounterJob:
    """A job that writes one tick line per ``period_ms`` to ``<out_dir>/<writer>.ticks``
    (see the module docstring)."""

    def __init__(self, out_dir: str, period_ms: float = 10.0, epoch: float | None = None, lead_ticks: int = 20,
                 ready_delay_s: float = 0.0, cut_delay_s: float = 0.0, resume_delay_s: float = 0.0,
                 hold_stop: str | None = None) -> None:
        self._hold_stop = hold_stop
        self._clock: Callable[[], float] = time.time
        self._delays = {"ready": float(ready_delay_s), "cut": float(cut_delay_s), "resume": float(resume_delay_s)}
        self._lead_ticks = int(lead_ticks)
        self._emitter = Emitter(float(period_ms) / 1000.0, 0.0 if epoch is None else float(epoch))
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop_time: float | None = None
        self._written = threading.Condition(self._lock)
        self._writer = _writer_name()
        os.makedirs(out_dir, exist_ok=True)
        self._path = os.path.join(out_dir, safe_file_name(self._writer) + ".ticks")
        self._file = open(self._path, "a", encoding="utf-8")
        if not _handover_target():
            self._emitter.start_now(self._clock())
        self._thread = threading.Thread(target=self._run, name=f"counter-{self._writer}", daemon=True)
        self._thread.start()

    # -- the emitting thread --------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.clear()
            with self._lock:
                stop_time = self._stop_time
                stopping = stop_time is not None
                # a stop asked at T: every tick due up to T was this instance's output (a thread
                # the machine starved writes them now), none after it
                now = self._clock() if stop_time is None else min(self._clock(), stop_time)
                for tick in self._emitter.pump(now):
                    self._file.write(f"{tick}\n")
                    self._file.flush()
                if self._emitter.done:
                    self._written.notify_all()
                if stopping:
                    self._file.close()
                    self._written.notify_all()
                    return
                wait = self._emitter.wait_s(now)
            if wait > 0:
                self._wake.wait(wait)

    def _close(self) -> None:
        """Stop emitting as of now (the ticks due until now are written first)."""
        with self._lock:
            if self._stop_time is None:
                self._stop_time = self._clock()
        self._wake.set()
        self._thread.join(timeout=STOP_WAIT_S)

    # -- the fabric's hooks ---------------------------------------------------------------------
    def __fabric_ready__(self) -> dict[str, Any]:
        time.sleep(self._delays["ready"])
        with self._lock:
            return {"writer": self._writer, "armed": self._emitter.armed}

    def __fabric_cut__(self, payload: Any = None) -> int:
        time.sleep(self._delays["cut"])
        with self._lock:
            stop_at = self._emitter.cut(self._clock(), self._lead_ticks)
        self._wake.set()
        return stop_at

    def __fabric_resume__(self, position: int) -> None:
        time.sleep(self._delays["resume"])
        with self._lock:
            self._emitter.start(int(position) + 1)
        self._wake.set()

    def __fabric_stop__(self) -> None:
        held = time.monotonic() + HOLD_MAX_S
        while self._hold_stop is not None and os.path.exists(self._hold_stop) and time.monotonic() < held:
            time.sleep(0.05)
        deadline = time.monotonic() + STOP_WAIT_S
        with self._lock:
            while self._emitter.stop_at is not None and not self._emitter.done and self._stop_time is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._written.wait(left)
        self._close()

    # -- plain methods --------------------------------------------------------------------------
    def where(self) -> str:
        """The Ray node id this instance runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def writer(self) -> str:
        """This instance's writer name (its ticks file is ``<out_dir>/<safe_file_name(writer)>.ticks``)."""
        return self._writer

    def last_tick(self) -> int | None:
        """The last tick this instance wrote (None before its first)."""
        with self._lock:
            return self._emitter.last_written

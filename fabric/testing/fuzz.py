"""Fuzzing the fabric's boundaries: every place outside input enters, fed as an adversary would.

A *surface* is one such boundary (settings YAML, ``Requirement(**kw)``, a probe parser, a
recording folder, a registry call): a hypothesis strategy that draws one input, a ``call`` that
feeds it in, and the error types that count as a clean refusal there. ``run_surface`` draws
``examples`` inputs and sorts each outcome into ok, a typed refusal, or a crash (any other
exception, or an example that ran past its time guard); where a surface keeps state, its
``stored`` check says whether a refused input changed it anyway (a refusal must store nothing).

The surfaces themselves live with the tests (``tests/fuzz/surfaces_*.py``) and register here;
``tests/fuzz/test_fuzz.py`` runs them with a small profile and ``scripts/fuzz.py`` with a large
one. hypothesis is a test dependency, so it is imported inside the functions that need it:
importing ``fabric.testing`` stays light.
"""

from __future__ import annotations

import math
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Surface", "SURFACES", "register", "run_surface", "ExampleTimeout", "EXAMPLE_TIMEOUT_S", "paths", "with_value"]

#: An example that takes longer than this is a crash (a read that blocks forever, a runaway loop).
EXAMPLE_TIMEOUT_S = 10.0
#: How many crashing examples a report keeps, and how much of each input and error it shows.
_KEEP_CRASHES = 3
_SHOW_CHARS = 300


class ExampleTimeout(BaseException):
    """One example ran past its time guard. A ``BaseException`` so that a surface's own
    ``except Exception`` (the probe's per-section guard) cannot swallow it."""


@dataclass
class Surface:
    """One boundary to fuzz."""

    name: str
    """Unique name (the key in ``SURFACES``, the row in the report)."""
    strategy: Any
    """A hypothesis strategy producing one input for ``call``."""
    call: Callable[[Any], Any]
    """Feeds one input to the boundary; returning is ok, raising one of ``typed`` a clean refusal."""
    typed: tuple[type[BaseException], ...] = ()
    """Errors that count as a clean refusal (``(SettingsError,)``); any other exception is a crash."""
    stored: Callable[[Any], bool] | None = None
    """After a refusal: True when the refused input changed stored state anyway (None: never)."""
    setup: Callable[[], Any] | None = None
    """Run once before the examples (make a temporary folder, open a store)."""
    teardown: Callable[[], Any] | None = None
    """Run once after the examples, even when the run failed."""
    timeout_s: float = EXAMPLE_TIMEOUT_S
    """Per-example time guard (enforced with a signal timer when run on the main thread)."""
    description: str = ""
    """One line for people reading the report."""


SURFACES: dict[str, Surface] = {}
"""Every registered surface by name, in registration order."""


def register(surface: Surface) -> Surface:
    """Add ``surface`` to ``SURFACES`` and return it. A surface registered again under the same
    name replaces the earlier one (a module imported twice registers its surfaces twice)."""
    if not isinstance(surface, Surface):
        raise TypeError(f"register() takes a Surface, got {type(surface).__name__}")
    SURFACES[surface.name] = surface
    return surface


@dataclass
class _Tally:
    tried: int = 0
    ok: int = 0
    typed: int = 0
    crashes: int = 0
    stored_on_refusal: int = 0
    slowest_s: float = 0.0
    examples_of_crashes: list[dict[str, str]] = field(default_factory=list)
    examples_of_stored: list[dict[str, str]] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        return {
            "tried": self.tried, "ok": self.ok, "typed": self.typed, "crashes": self.crashes,
            "stored_on_refusal": self.stored_on_refusal, "slowest_ms": round(self.slowest_s * 1000, 1),
            "examples_of_crashes": list(self.examples_of_crashes),
            "examples_of_stored": list(self.examples_of_stored),
        }


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except BaseException as exc:  # noqa: BLE001 - a hostile input may not even repr (deep nesting)
        text = f"<unrepresentable {type(value).__name__}: {type(exc).__name__}>"
    return text if len(text) <= _SHOW_CHARS else text[:_SHOW_CHARS] + f"... ({len(text)} chars)"


def _where(exc: BaseException) -> str:
    """``file:line in function`` of the three innermost frames outside this module, innermost
    first (for a timeout: the code the guard interrupted), so a crash report points at the code
    even when the innermost frame is a hostile input's own method."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
    return " <- ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in reversed(frames[-3:]))


class _TimeGuard:
    """Raise ``ExampleTimeout`` in the code it guards after ``seconds`` (main thread, POSIX only;
    elsewhere it only measures). Interrupts blocking system calls too (a FIFO's ``open``)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = (
            seconds > 0 and math.isfinite(seconds) and hasattr(signal, "setitimer")
            and threading.current_thread() is threading.main_thread()
        )
        self._old: Any = None

    def _fire(self, signum: int, frame: Any) -> None:
        raise ExampleTimeout(f"example ran past {self.seconds:g} s")

    def __enter__(self) -> "_TimeGuard":
        if self.armed:
            self._old = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)


def _one_example(surface: Surface, value: Any, tally: _Tally) -> None:
    """Feed one input and file its outcome; never raises (hypothesis must not see a failure,
    or it would stop and shrink instead of counting)."""
    tally.tried += 1
    start = time.perf_counter()
    outcome: BaseException | None = None
    try:
        with _TimeGuard(surface.timeout_s):
            surface.call(value)
    except ExampleTimeout as exc:
        outcome = exc
    except Exception as exc:  # noqa: BLE001 - sorting every exception is the point
        outcome = exc
    tally.slowest_s = max(tally.slowest_s, time.perf_counter() - start)
    if outcome is None:
        tally.ok += 1
        return
    if isinstance(outcome, surface.typed) and not isinstance(outcome, ExampleTimeout):
        tally.typed += 1
        if surface.stored is None:
            return
        try:
            changed = bool(surface.stored(value))
        except Exception as exc:  # noqa: BLE001 - a broken stored check is the harness's crash
            _crash(tally, value, exc, note="the stored() check itself raised")
            return
        if changed:
            tally.stored_on_refusal += 1
            if len(tally.examples_of_stored) < _KEEP_CRASHES:
                tally.examples_of_stored.append({"input": _show(value), "error": _show(outcome)[:_SHOW_CHARS]})
        return
    _crash(tally, value, outcome)


def _crash(tally: _Tally, value: Any, exc: BaseException, note: str = "") -> None:
    tally.crashes += 1
    if len(tally.examples_of_crashes) < _KEEP_CRASHES:
        error = f"{type(exc).__name__}: {exc}"
        tally.examples_of_crashes.append({
            "input": _show(value),
            "error": error if len(error) <= _SHOW_CHARS else error[:_SHOW_CHARS] + "...",
            "where": _where(exc) + (f" ({note})" if note else ""),
        })


def run_surface(surface: Surface, examples: int, seed: int | None = None) -> dict[str, Any]:
    """Draw up to ``examples`` inputs from ``surface.strategy`` and feed each to ``surface.call``.

    Returns ``{"tried", "ok", "typed", "crashes", "stored_on_refusal", "slowest_ms",
    "examples_of_crashes", "examples_of_stored"}``; the example lists keep the first three, each
    ``{"input", "error", "where"}`` with input and error cut to 300 characters. ``tried`` can be
    below ``examples`` when the strategy has fewer distinct inputs. ``seed`` makes the run
    repeatable (the same seed draws the same inputs); None draws fresh ones.
    """
    from hypothesis import HealthCheck, Phase, given
    from hypothesis import seed as hypothesis_seed
    from hypothesis import settings as hypothesis_settings

    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise ValueError(f"examples must be a positive integer, got {examples!r}")
    tally = _Tally()

    @hypothesis_settings(
        max_examples=examples, database=None, deadline=None, derandomize=False,
        suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate],
        report_multiple_bugs=False, print_blob=False,
    )
    @given(surface.strategy)
    def drive(value: Any) -> None:
        _one_example(surface, value, tally)

    if seed is not None:
        drive = hypothesis_seed(seed)(drive)
    if surface.setup is not None:
        surface.setup()
    try:
        drive()
    finally:
        if surface.teardown is not None:
            surface.teardown()
    return tally.report()


# -- one field at a time ---------------------------------------------------------------------------------
def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into ``doc`` (dict keys and list indexes), parents before children."""
    out: list[tuple] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in items:
        out.append(prefix + (key,))
        out.extend(paths(value, prefix + (key,)))
    return out


def with_value(doc: Any, path: tuple, value: Any) -> Any:
    """A deep copy of ``doc`` whose field at ``path`` (from ``paths``) holds a copy of ``value``."""
    import copy

    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = copy.deepcopy(value)
    return out

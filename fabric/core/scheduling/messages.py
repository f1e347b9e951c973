"""What the scheduler accepts, checked on arrival (issue 12: validate at every boundary).

The ``SchedulerActor`` is called by every client, by workers reporting their calls, and by
operators. Each method's arguments are read here first: types, ranges and sizes, so that a bad
message gets ``MessageError`` naming the field (a requirement itself is checked by
``Requirement``, a pool by ``SchedulerCore.check_requirement``) and nothing in the scheduler
changes. Plain checks, not pydantic: a lease request arrives every health tick per class.

Each rule is written once, here (and, for what needs the jobs core's names, in
``fabric.core.scheduler_args``): the actor's endpoints call these readers, and so does an edge
that reads an argument before sending it (a ``FabricHandle`` method, the gRPC servicer, the CLI,
a task's decorator options), so every path a bad argument takes ends in the same ``MessageError``.
``tests/unit/test_scheduler_args.py`` holds the edges to that.
"""

from __future__ import annotations

import math
from typing import Any

from fabric.core.errors import MessageError
from fabric.core.placement import PlacementContext, Requirement

MAX_ID_CHARS = 128
"""Lease ids and node names/ids: a Ray node id is 56 hex characters."""
MAX_NODES = 4096
"""Entries in a lease's ``holding`` (nodes with calls in flight)."""
MAX_WANT = 1024
"""Slots one lease request may ask for."""
MAX_RELEASE = 1024
"""Idle leases, or allocations, given back in one message."""
MAX_COUNT = 10**9
"""Calls counted in one report."""
MAX_SEQ = 2**63 - 1
"""An event's number in the log, an allocation id: 64 bits."""
MAX_TEXT = 1000
"""Characters of free text an operator sends (a migration's abort reason)."""
MAX_KINDS = 256
"""Event kinds one read of the log may name."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_id(field: str, value: Any) -> str:
    """A non-empty id or name of at most ``MAX_ID_CHARS`` characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise MessageError(field, f"must be a non-empty string of at most {MAX_ID_CHARS} characters", value)
    return value


def read_count(field: str, value: Any, limit: int = MAX_COUNT) -> int:
    """An integer in ``[0, limit]``."""
    if not _is_int(value) or not 0 <= value <= limit:
        raise MessageError(field, f"must be an integer from 0 to {limit}", value)
    return value


def read_optional_id(field: str, value: Any) -> str | None:
    """None, or an id (``read_id``)."""
    return None if value is None else read_id(field, value)


def read_flag(field: str, value: Any) -> bool:
    """True or False (not 1, not "yes")."""
    if not isinstance(value, bool):
        raise MessageError(field, "must be true or false", value)
    return value


def read_text(field: str, value: Any, limit: int = MAX_TEXT) -> str:
    """Free text (possibly empty) of at most ``limit`` characters."""
    if not isinstance(value, str) or len(value) > limit:
        raise MessageError(field, f"must be text, at most {limit} characters", value)
    return value


def read_requirement(value: Any) -> Requirement:
    if not isinstance(value, Requirement):
        raise MessageError("requirement", "must be a fabric.Requirement", type(value).__name__)
    return value


def read_ids(field: str, value: Any, limit: int = MAX_RELEASE) -> tuple[str, ...]:
    """A list or tuple of at most ``limit`` ids."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or len(value) > limit:
        raise MessageError(field, f"must be a list of at most {limit} ids", value)
    return tuple(read_id(f"{field}[{i}]", v) for i, v in enumerate(value))


def read_lease_request(lease_id: Any, req: Any, holding: Any, want: Any, release: Any
                       ) -> tuple[str, Requirement, dict[str, int], int, tuple[str, ...]]:
    """``SchedulerActor.lease``'s arguments, checked."""
    lease_id = read_id("lease_id", lease_id)
    req = read_requirement(req)
    if holding is None:
        holding = {}
    if not isinstance(holding, dict) or len(holding) > MAX_NODES:
        raise MessageError("holding", f"must be a mapping of at most {MAX_NODES} node ids to call counts", holding)
    checked = {read_id("holding", k): read_count(f"holding[{k}]", v, MAX_WANT * 64) for k, v in holding.items()}
    return lease_id, req, checked, read_count("want", want, MAX_WANT), read_ids("release", release)


def read_call_report(placed: Any, fallbacks: Any) -> tuple[int, int]:
    """A worker's report: calls that ran, and how many of them below their ``min_tier``."""
    placed, fallbacks = read_count("placed", placed), read_count("fallbacks", fallbacks)
    if fallbacks > placed:
        raise MessageError("fallbacks", "cannot exceed placed", fallbacks)
    return placed, fallbacks


def read_allocations(value: Any) -> tuple[int, ...]:
    """Allocation ids a worker gives back."""
    if not isinstance(value, (list, tuple)) or len(value) > MAX_RELEASE:
        raise MessageError("allocation_ids", f"must be a list of at most {MAX_RELEASE} allocation ids", value)
    return tuple(read_count(f"allocation_ids[{i}]", v, MAX_SEQ) for i, v in enumerate(value))


MAX_SECONDS = 10.0**9
"""No wait or grace is longer than this (about 31 years)."""


def read_seconds(field: str, value: Any, *, allow_zero: bool = False) -> float | None:
    """None, or a number of seconds: > 0 (``>= 0`` with ``allow_zero``), at most ``MAX_SECONDS``.
    Ints are range-checked before any float conversion (``10**400`` does not fit a float)."""
    if value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if ok and isinstance(value, float):
        ok = math.isfinite(value)
    if not ok or not (0 <= value <= MAX_SECONDS) or (value == 0 and not allow_zero):
        raise MessageError(field, f"must be a number of seconds {'>=' if allow_zero else '>'} 0 and at most {MAX_SECONDS:g}", value)
    return float(value)


def read_timeout(field: str, value: Any) -> float | None:
    """None, or a positive number of seconds."""
    return read_seconds(field, value)


def read_priority(field: str, value: Any) -> int:
    """A queued call's priority: an integer of at most ``MAX_COUNT`` either way (higher goes first)."""
    if not (_is_int(value) and abs(value) <= MAX_COUNT):
        raise MessageError(field, f"must be an integer from {-MAX_COUNT} to {MAX_COUNT}", value)
    return value


def read_context(value: Any) -> PlacementContext | None:
    """``explain``'s placement context: None or a ``PlacementContext``."""
    if value is not None and not isinstance(value, PlacementContext):
        raise MessageError("ctx", "must be a fabric.core.placement.PlacementContext or None", type(value).__name__)
    return value


# -- the event log (``events``, ``job_events``) ------------------------------------------------------------
def read_since(value: Any) -> int:
    """The number of the last event already read: events after it are asked for."""
    return read_count("since", value, MAX_SEQ)


def read_kinds(value: Any) -> list[str] | None:
    """None (every kind), or a list of at most ``MAX_KINDS`` event kinds, each a non-empty id; an
    empty list is None. One kind given as a bare string is the caller's to wrap (an edge may)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) > MAX_KINDS:
        raise MessageError("kinds", f"expected a list of at most {MAX_KINDS} event kinds", value)
    if not all(isinstance(k, str) and 0 < len(k) <= MAX_ID_CHARS for k in value):
        raise MessageError("kinds", "expected a list of event kinds (non-empty strings)", value)
    return list(value) or None


def read_event_limit(value: Any) -> int:
    """How many events: the first ``limit`` after ``since``, or (negative) the newest ``-limit``."""
    if not _is_int(value) or value == 0:
        raise MessageError("limit", "expected a non-zero whole number", value)
    return value

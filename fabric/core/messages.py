"""What the registry accepts, checked on arrival: registrations, heartbeats, reports, fleet events.

Every message a probe or the health monitor sends the registry crosses a trust boundary (issue 12:
fuzzed, the registry let dicts through as node ids, stored 37 MB reports, and kept a flap hold
forged for a node nobody knew). Each message is a pydantic model here, read in two steps:

1. ``scan``: one bounded, iterative walk over the raw input *before* pydantic sees it, so a huge,
   deeply nested or cyclic input costs at most its size limit in work. It refuses a message past
   its serialized-size limit, a string or collection past its bound, an integer outside 64 bits,
   a float that is not finite, and anything that is not plain data (a generator, a socket).
2. The model's own validation (types, Ray node id shape, name length, how many GPUs or reasons).

Either step refuses with a ``RegistrationError`` that names the field (``capabilities.gpus``,
``events[3].until``). What needs Ray or the store (is the node alive, did it join with that
tier, does the store hold it) is the registry's to check; the pure part of the tier rule is
``check_joined_tiers``. No Ray, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from fabric.core.capabilities import NodeCapabilities
from fabric.core.errors import RegistrationError
from fabric.core.events import EVENT_TYPES, FleetEvent, NodeCollected, NodeCordoned, NodeDrainRequested, NodeFlapHeld, NodeUncordoned
from fabric.core.records import Utilization

NODE_ID_PATTERN = r"^[0-9a-f]{56}$"
"""A Ray node id: 28 bytes, lowercase hex (``ray.NodeID.hex()``)."""
MAX_NAME_CHARS = 253
"""A node name, an id of a stimulus: the length of a DNS name."""
MAX_TEXT_CHARS = 1024
"""Any other string in a message (a limitation note, a degradation reason, a driver version)."""
MAX_ITEMS = 1024
"""Any list or mapping in a message (``ffmpeg -encoders`` lists ~140-300 video encoders)."""
MAX_DEPTH = 16
"""Nesting of lists and mappings in a message (capabilities nest 4 deep): deeper input is refused
before pydantic walks it recursively."""
MAX_DEGRADED = 64
"""Degradation reasons in one report."""
MAX_GPUS = 64
"""GPUs in one node's capabilities or utilisation."""
MAX_REPORT_BYTES = 256 * 1024
"""A registration or report, serialized (the bundled profiles are 1-6 KiB)."""
MAX_HEARTBEAT_BYTES = 64 * 1024
"""A heartbeat, serialized."""
MAX_EVENT_BYTES = 16 * 1024
"""One fleet event, serialized."""
MAX_EVENTS = 10_000
"""Fleet events in one ``apply`` batch (the monitor sends longer queues in chunks of this)."""
MAX_HOLD_S = 24 * 3600.0
"""How far ahead of the registry's clock a flap hold (or any event time) may reach."""

_INT64 = 2**63

NodeId = Annotated[str, StringConstraints(pattern=NODE_ID_PATTERN)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)]


@dataclass(frozen=True)
class Problem:
    """One reason a raw input is refused before validation: where, and what is wrong."""

    field: str
    message: str


def scan(value: Any, *, limit_bytes: int, root: str = "") -> Problem | None:
    """The first problem in ``value`` (None: none): larger than ``limit_bytes`` as JSON (estimated:
    string lengths, 8 bytes a number, 1 a separator), a string over ``MAX_TEXT_CHARS``, a list or
    mapping over ``MAX_ITEMS`` or nested deeper than ``MAX_DEPTH``, an integer outside 64 bits, a float that is not finite, or an
    object that is not plain data (str, bytes, numbers, None, lists, tuples, sets, mappings,
    enums, pydantic models). Iterative; every item it looks at counts toward the limit, so the
    work is bounded by ``limit_bytes`` whatever the input (cycles included)."""
    total = 0
    stack: list[tuple[str, Any, int]] = [(root, value, 0)]
    while stack:
        path, v, depth = stack.pop()
        children: Iterable[tuple[str, Any]] = ()
        if depth > MAX_DEPTH:
            return Problem(path, f"nested deeper than {MAX_DEPTH}")
        if isinstance(v, (str, bytes, bytearray)):
            if len(v) > MAX_TEXT_CHARS:
                return Problem(path, f"{len(v)} characters, more than {MAX_TEXT_CHARS}")
            total += len(v) + 2
        elif v is None or isinstance(v, bool):
            total += 4
        elif isinstance(v, int):
            if not -_INT64 <= v < _INT64:
                return Problem(path, "integer outside 64 bits")
            total += 8
        elif isinstance(v, float):
            if not math.isfinite(v):
                return Problem(path, f"{v} is not a finite number")
            total += 8
        elif isinstance(v, Enum):
            total += 8
        elif isinstance(v, (BaseModel, Mapping)):
            if isinstance(v, BaseModel):
                pairs = list(v)
            elif len(v) <= MAX_ITEMS:
                pairs = list(v.items())
            else:
                return Problem(path, f"{len(v)} entries, more than {MAX_ITEMS}")
            total += 2
            for key, _ in pairs:
                if isinstance(key, str) and len(key) > MAX_NAME_CHARS:
                    return Problem(path, f"a key of {len(key)} characters, more than {MAX_NAME_CHARS}")
                total += (len(key) if isinstance(key, str) else 8) + 1
            children = ((_join(path, key), child) for key, child in pairs)
        elif isinstance(v, (list, tuple, set, frozenset)):
            if len(v) > MAX_ITEMS:
                return Problem(path, f"{len(v)} items, more than {MAX_ITEMS}")
            total += 2 + len(v)
            children = ((_join(path, i), child) for i, child in enumerate(v))
        else:
            return Problem(path, f"a {type(v).__name__} is not plain data")
        if total > limit_bytes:  # name the top-level field that took it past the limit
            top = path[len(root):].lstrip(".").split(".")[0]
            return Problem(_join(root, top) if top else root, f"the message is larger than {limit_bytes // 1024} KiB serialized")
        stack.extend((p, c, depth + 1) for p, c in children)
    return None


def _join(path: str, key: Any) -> str:
    key = str(key) if isinstance(key, (str, int, Enum)) else type(key).__name__
    key = key if len(key) <= 64 else key[:64] + "..."
    return f"{path}.{key}" if path else key


def _shown(value: Any) -> str:
    """``value`` for an error message, never long (the refused input may be megabytes)."""
    if isinstance(value, str) and len(value) <= 80:
        return repr(value)
    return f"a {type(value).__name__}" + (f" of {len(value)} characters" if isinstance(value, str) else "")


def _node_id_of(value: Any) -> str | None:
    """The node id to put on an error: the value when it is a plausible string, else None."""
    return value if isinstance(value, str) and len(value) <= MAX_NAME_CHARS else None


def _refuse(what: str, node_id: Any, field: str, message: str) -> RegistrationError:
    who = f" from node {node_id}" if _node_id_of(node_id) else ""
    return RegistrationError(f"malformed {what}{who}: {field or '<message>'}: {message}", node_id=_node_id_of(node_id), field=field)


_EVENT_KINDS = frozenset(cls.model_fields["kind"].default for cls in EVENT_TYPES)


def _from_validation(exc: ValidationError, what: str, node_id: Any, prefix: str = "") -> RegistrationError:
    err = exc.errors(include_url=False)[0]
    loc = tuple(err.get("loc", ()))
    if loc and loc[0] in _EVENT_KINDS:  # a discriminated union puts the event's kind first
        loc = loc[1:]
    field = ".".join(str(p) for p in (prefix, *loc) if p != "")
    return _refuse(what, node_id, field, str(err.get("msg", "invalid")))


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _beyond_bounds(msg: BaseModel) -> Problem | None:
    """What the fabric's models allow but a message may not carry: a node name longer than a DNS
    name, more than ``MAX_GPUS`` GPUs."""
    caps: NodeCapabilities | None = getattr(msg, "capabilities", None)
    util: Utilization | None = getattr(msg, "utilization", None)
    if caps is not None and len(caps.name) > MAX_NAME_CHARS:
        return Problem("capabilities.name", f"{len(caps.name)} characters, more than {MAX_NAME_CHARS}")
    if caps is not None and len(caps.gpus) > MAX_GPUS:
        return Problem("capabilities.gpus", f"{len(caps.gpus)} GPUs, more than {MAX_GPUS}")
    if util is not None and len(util.gpus) > MAX_GPUS:
        return Problem("utilization.gpus", f"{len(util.gpus)} GPUs, more than {MAX_GPUS}")
    return None


class Registration(_Message):
    """A probe registers (or re-registers, after it restarted) its node."""

    node_id: NodeId
    """Ray's id of the node the probe runs on."""
    capabilities: NodeCapabilities
    """What the probe found (at most ``MAX_GPUS`` GPUs, a name of at most ``MAX_NAME_CHARS``)."""
    utilization: Utilization | None = None
    """The node's load now, when the probe read it."""


class Heartbeat(_Message):
    """A probe says its node is alive, with its load."""

    node_id: NodeId
    """Ray's id of the node."""
    utilization: Utilization | None = None
    """The node's load now."""


class Report(_Message):
    """A re-probe: the node's capabilities now and what it lost since it joined."""

    node_id: NodeId
    """Ray's id of the node."""
    capabilities: NodeCapabilities
    """What the probe found now (a degraded node reports less than it joined with)."""
    degraded: tuple[Text, ...] = Field(default=(), max_length=MAX_DEGRADED)
    """What the node lost (``gpu vanished: ...``): at most ``MAX_DEGRADED`` reasons."""
    utilization: Utilization | None = None
    """The node's load now."""


def _read(model: type[_Message], what: str, limit_bytes: int, fields: dict[str, Any]) -> Any:
    node_id = fields.get("node_id")
    if not isinstance(node_id, str):  # the cheap check first: a dict as a node id never reaches SQLite
        raise _refuse(what, None, "node_id", f"must be a Ray node id (56 hex characters), got {_shown(node_id)}")
    problem = scan(fields, limit_bytes=limit_bytes)
    if problem is not None:
        raise _refuse(what, node_id, problem.field, problem.message)
    try:
        msg = model.model_validate(fields)
    except ValidationError as exc:
        raise _from_validation(exc, what, node_id) from None
    problem = _beyond_bounds(msg)
    if problem is not None:
        raise _refuse(what, node_id, problem.field, problem.message)
    return msg


def read_registration(node_id: Any, capabilities: Any, utilization: Any = None) -> Registration:
    """The registration these arguments make; ``RegistrationError`` naming the field otherwise."""
    return _read(Registration, "registration", MAX_REPORT_BYTES,
                 {"node_id": node_id, "capabilities": capabilities, "utilization": utilization})


def read_heartbeat(node_id: Any, utilization: Any = None) -> Heartbeat:
    """The heartbeat these arguments make; ``RegistrationError`` naming the field otherwise."""
    return _read(Heartbeat, "heartbeat", MAX_HEARTBEAT_BYTES, {"node_id": node_id, "utilization": utilization})


def read_report(node_id: Any, capabilities: Any, degraded: Any = (), utilization: Any = None) -> Report:
    """The report these arguments make; ``RegistrationError`` naming the field otherwise."""
    return _read(Report, "report", MAX_REPORT_BYTES,
                 {"node_id": node_id, "capabilities": capabilities, "degraded": degraded, "utilization": utilization})


def check_joined_tiers(caps: NodeCapabilities, joined: Iterable[str], node_id: str, what: str = "report") -> None:
    """Refuse capabilities that serve a tier the node did not join Ray with (``joined``: the tier
    names of its ``fabric.tier.*`` resources). Ray cannot change a live node's resources, so to
    gain a tier a node rejoins; serving fewer (a demotion) is fine."""
    have = set(joined)
    extra = [t.value for t in caps.tiers if t.value not in have]
    if extra:
        raise RegistrationError(
            f"{what} from node {node_id} claims tier(s) {', '.join(extra)} that the node did not join Ray with "
            f"(it joined serving {', '.join(sorted(have)) or 'no tier'}): to gain a tier a node rejoins",
            node_id=node_id, field="capabilities.tiers")


# -- fleet events -----------------------------------------------------------------------------
_EVENT: TypeAdapter = TypeAdapter(FleetEvent)


class _EventBounds(BaseModel):
    """The bounds every inbound event meets beyond its own model (which the policy also uses with
    short test ids, so its fields stay unconstrained)."""

    model_config = ConfigDict(extra="ignore")

    node_id: NodeId
    name: Name
    stimulus_id: Annotated[str, StringConstraints(max_length=MAX_NAME_CHARS)]
    at: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    reason: Text = ""
    reasons: tuple[Text, ...] = Field(default=(), max_length=MAX_DEGRADED)
    until: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    toggles: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    lost_for_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0


def read_events(events: Any, now: float) -> list[Any]:
    """Every event of the batch ``events`` (a list of event models or their dict forms), validated; or a
    ``RegistrationError`` naming the first bad one (``events[3].until``) and nothing else: a batch
    is read whole before any of it is applied. ``now`` bounds the times an event may carry (at
    most ``MAX_HOLD_S`` ahead)."""
    if not isinstance(events, (list, tuple)):  # not any iterable: a generator could be endless
        raise _refuse("fleet events", None, "events", f"must be a list of events, got {_shown(events)}")
    batch = list(events)
    if len(batch) > MAX_EVENTS:
        raise _refuse("fleet events", None, "events", f"more than {MAX_EVENTS} events in one batch")
    horizon = now + MAX_HOLD_S
    out = []
    for i, raw in enumerate(batch):
        where = f"events[{i}]"
        if not isinstance(raw, (Mapping, *EVENT_TYPES)):
            raise _refuse("fleet event", None, where, f"must be a fleet event, got {_shown(raw)}")
        node_id = raw.get("node_id") if isinstance(raw, Mapping) else raw.node_id
        problem = scan(raw, limit_bytes=MAX_EVENT_BYTES)
        if problem is not None:
            raise _refuse("fleet event", node_id, _join(where, problem.field) if problem.field else where, problem.message)
        try:
            # A model instance is validated again from its dict form: one built with
            # ``model_construct`` (or unpickled from anywhere) has not been checked.
            event = _EVENT.validate_python(dict(raw))  # a model iterates as (field, value): not serialized unchecked
            _EventBounds.model_validate(event.model_dump())
        except ValidationError as exc:
            raise _from_validation(exc, "fleet event", node_id, where) from None
        if event.at > horizon:
            raise _refuse("fleet event", event.node_id, f"{where}.at", f"{event.at} is more than {MAX_HOLD_S:.0f} s ahead")
        if isinstance(event, NodeFlapHeld) and event.until > horizon:
            raise _refuse("fleet event", event.node_id, f"{where}.until",
                          f"a hold until {event.until} ends more than {MAX_HOLD_S:.0f} s from now")
        if isinstance(event, NodeCollected) and event.status is not None and event.status.value != "dead":
            raise _refuse("fleet event", event.node_id, f"{where}.status", "a collected node is dead")
        if isinstance(event, (NodeCordoned, NodeUncordoned)) and event.status is not None:
            raise _refuse("fleet event", event.node_id, f"{where}.status", "a cordon or an uncordon sets no status (an uncordon ends a drain)")
        if isinstance(event, NodeDrainRequested) and event.status is not None and event.status.value != "draining":
            raise _refuse("fleet event", event.node_id, f"{where}.status", "a drained node is draining")
        out.append(event)
    return out


__all__ = [
    "Heartbeat", "MAX_DEGRADED", "MAX_DEPTH", "MAX_EVENT_BYTES", "MAX_EVENTS", "MAX_GPUS", "MAX_HEARTBEAT_BYTES", "MAX_HOLD_S",
    "MAX_ITEMS", "MAX_NAME_CHARS", "MAX_REPORT_BYTES", "MAX_TEXT_CHARS", "NODE_ID_PATTERN", "Problem", "Registration",
    "Report", "check_joined_tiers", "read_events", "read_heartbeat", "read_registration", "read_report", "scan",
]

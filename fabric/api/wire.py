"""Between the operator API's messages and the fabric's objects (issue 17).

``jsonable`` turns what the scheduler answers (pydantic models, dataclasses, enums, frozensets) into
JSON text; ``build_bundle`` makes a ``fabric.core.jobs.bundles.Bundle`` from a ``BundleSpec`` (each job's
class named by import path, ``module:Class``); ``requirement_from_json`` a ``Requirement`` from a JSON
object of its keyword arguments; ``node_message`` / ``bundle_status_message`` / ``event_message`` the
replies. Bad input raises the fabric's typed errors naming the field (the servicer maps them to
INVALID_ARGUMENT)."""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import json
import math
import re
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from fabric.api import operator_pb2 as pb
from fabric.core.errors import InvalidSpecError, RequirementError

MAX_JSON_CHARS = 1024 * 1024
"""The longest ``*_json`` field a request may carry."""
CLASS_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


# -- out: the fabric's objects as JSON ----------------------------------------------------------------------
def plain(value: Any, _depth: int = 0) -> Any:
    """``value`` as JSON-ready data (dicts, lists, str, numbers, bools, None); anything else by ``str``."""
    if _depth > 64:
        return str(value)
    d = _depth + 1
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, enum.Enum):
        return plain(value.value, d)
    if isinstance(value, BaseModel):
        return plain(value.model_dump(mode="python"), d)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), d) for f in dataclasses.fields(value) if not f.name.startswith("_")}
    if isinstance(value, dict):
        return {str(plain(k, d)): plain(v, d) for k, v in value.items()}
    if isinstance(value, (frozenset, set)):
        return sorted((plain(v, d) for v in value), key=str)
    if isinstance(value, (list, tuple)):
        return [plain(v, d) for v in value]
    if isinstance(value, type):
        return f"{value.__module__}:{value.__qualname__}"
    return str(value)


def jsonable(value: Any) -> str:
    return json.dumps(plain(value), sort_keys=True)


_PLAIN = (str, int, float, bool, type(None))


# -- in: JSON fields --------------------------------------------------------------------------------------
def read_json(field: str, text: str, kind: type, default: Any) -> Any:
    """The JSON ``text`` of ``field`` (empty: ``default``), which must be a ``kind`` (dict or list)."""
    if not text:
        return default
    if len(text) > MAX_JSON_CHARS:
        raise InvalidSpecError(f"{field}: at most {MAX_JSON_CHARS} characters of JSON", field=field)
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidSpecError(f"{field}: not JSON ({exc})", field=field) from None
    except RecursionError:
        raise InvalidSpecError(f"{field}: JSON nested too deep", field=field) from None
    if not isinstance(value, kind):
        raise InvalidSpecError(f"{field}: must be a JSON {'object' if kind is dict else 'list'}", field=field)
    return value


def requirement_from_json(text: str, field: str = "requirement") -> Any:
    """A ``Requirement`` from a JSON object of its keyword arguments (``{"min_tier": "edge", "num_cpus": 1}``)."""
    from fabric.core.placement import Requirement

    try:
        kwargs = read_json(field, text, dict, {})
    except InvalidSpecError as exc:
        raise RequirementError(field, exc.message.split(": ", 1)[-1], text[:80]) from None
    known = set(inspect.signature(Requirement).parameters)
    for key in kwargs:
        if key not in known:
            raise RequirementError(f"{field}.{key}", "is not a Requirement field", kwargs[key])
    try:
        return Requirement(**kwargs)
    except RequirementError as exc:
        raise RequirementError(f"{field}.{exc.field}", exc.reason, exc.value) from None
    except TypeError as exc:
        raise RequirementError(field, str(exc), None) from None


def import_class(path: str, field: str) -> Any:
    """The class ``module:Class`` names (imported here); ``InvalidSpecError`` naming ``field`` otherwise."""
    if not isinstance(path, str) or len(path) > 300 or not CLASS_PATH.match(path):
        raise InvalidSpecError(f"{field}: must name a class by import path, 'module:Class'", field=field)
    module_name, _, qual = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise InvalidSpecError(f"{field}: cannot import {path!r}: {type(exc).__name__}: {exc}", field=field) from None
    if not isinstance(getattr(obj, "cls", obj), type):
        raise InvalidSpecError(f"{field}: {path!r} is not a class", field=field)
    return obj


def build_bundle(spec: pb.BundleSpec, importer: Callable[[str, str], Any] = import_class) -> Any:
    """The ``Bundle`` a ``BundleSpec`` describes (validated by the model: ``InvalidSpecError`` naming the field)."""
    from fabric.core.jobs.bundles import Bundle

    doc = dict(read_json("bundle.options_json", spec.options_json, dict, {}))
    doc["bundle_id"] = spec.bundle_id
    if spec.pool:
        doc["pool"] = spec.pool
    jobs = []
    for i, j in enumerate(spec.jobs):
        at = f"bundle.jobs.{i}"
        job = dict(read_json(f"{at}.options_json", j.options_json, dict, {}))
        job["name"] = j.name
        job["cls"] = importer(j.cls, f"{at}.cls") if j.cls else None
        job["args"] = tuple(read_json(f"{at}.args_json", j.args_json, list, []))
        job["kwargs"] = read_json(f"{at}.kwargs_json", j.kwargs_json, dict, {})
        if j.requirement_json:
            try:
                job["requirement"] = requirement_from_json(j.requirement_json, f"{at}.requirement")
            except RequirementError as exc:
                raise InvalidSpecError(str(exc), field=exc.field) from None
        jobs.append(job)
    doc["jobs"] = jobs
    try:
        return Bundle.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in ("bundle", *first.get("loc", ())))
        raise InvalidSpecError(f"{path}: {first.get('msg', 'invalid')}", field=path) from None
    except (InvalidSpecError, RequirementError):
        raise
    except (TypeError, ValueError) as exc:
        raise InvalidSpecError(f"bundle: {exc}", field="bundle") from None


# -- replies ------------------------------------------------------------------------------------------------
def _text(value: Any) -> str:
    value = getattr(value, "value", value)
    return "" if value is None else str(value)


def node_message(record: Any) -> pb.Node:
    """One ``NodeRecord`` (or a record-like object) as a ``Node``."""
    caps = getattr(record, "capabilities", None)
    tier = getattr(record, "tier", None)
    if tier is None:
        tier = getattr(caps, "tier", None)
    last_seen = getattr(record, "last_seen", None)
    return pb.Node(
        node_id=_text(getattr(record, "node_id", "")), name=_text(getattr(record, "name", "")),
        status=_text(getattr(record, "status", "")), tier=_text(tier), pool=_text(getattr(record, "pool", "")),
        cordoned=bool(getattr(record, "cordoned", False)), unhealthy=bool(getattr(record, "unhealthy", False)),
        running=max(0, int(getattr(record, "running", 0) or 0)),
        utilization=float(getattr(record, "utilization", 0.0) or 0.0),
        last_seen=float(last_seen or 0.0), jobs=sorted(str(j) for j in (getattr(record, "jobs", ()) or ())),
        hardware_json=jsonable(caps), limitations_json=jsonable(getattr(caps, "limitations", None)),
        record_json=jsonable(record),
    )


def bundle_status_message(status: Any) -> pb.BundleStatus:
    return pb.BundleStatus(
        bundle_id=_text(getattr(status, "bundle_id", "")), state=_text(getattr(status, "state", "")),
        replicas=max(0, int(getattr(status, "replicas", 0) or 0)),
        jobs={str(k): str(v) for k, v in (getattr(status, "jobs", {}) or {}).items()},
        reasons=[str(r) for r in (getattr(status, "reasons", ()) or ())],
    )


def event_json(data: object) -> str:
    """An event's data as JSON text, the same text as ``jsonable`` (keys sorted): a
    flat dict of text keys and plain values (the usual event) is dumped directly, anything else
    goes through ``jsonable``."""
    if type(data) is dict and all(type(k) is str for k in data) and all(
            type(v) in _PLAIN and (type(v) is not float or math.isfinite(v)) for v in data.values()):
        return json.dumps(data, sort_keys=True)
    return jsonable(data)


def event_message(event: Any) -> pb.Event:
    """One event of the log (a dict ``{seq, kind, at, data, stimulus_id}`` or an object with those)."""
    get = event.get if isinstance(event, dict) else (lambda k, d=None: getattr(event, k, d))
    data = get("data", {}) or {}
    sid = get("stimulus_id", None) or (data.get("stimulus_id") if isinstance(data, dict) else None) or ""
    return pb.Event(seq=int(get("seq", 0) or 0), kind=str(get("kind", "")), at=float(get("at", 0.0) or 0.0),
                    data_json=event_json(data), stimulus_id=str(sid))


__all__ = ["build_bundle", "bundle_status_message", "event_json", "event_message", "import_class", "jsonable", "node_message",
           "plain", "read_json", "requirement_from_json"]

"""The wire forms of a decision's inputs: requirement, context, node records, settings (JSON values),
and the compression every kept blob goes through (zlib over compact JSON)."""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import fields
from typing import Any

from fabric.core.capabilities import NodeCapabilities
from fabric.core.placement import NodeRecord, Peer, PlacementContext, Requirement
from fabric.core.settings import FabricSettings

NODE_SKIPPED = frozenset({"last_seen", "load", "unconsumed_spare", "slots"})
"""``NodeRecord.to_dict`` keys no filter or key component reads (the last two are derived again)."""


def pack(value: Any) -> bytes:
    return zlib.compress(json.dumps(value, separators=(",", ":"), sort_keys=True).encode(), 1)


def unpack(blob: bytes) -> Any:
    return json.loads(zlib.decompress(blob))


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def requirement_row(req: Requirement) -> dict[str, Any]:
    """The requirement's arguments as JSON values; how Ray is told to run the call (``ray``) is left
    out: no filter reads it."""
    kw = req.as_kwargs()
    kw.pop("ray", None)
    kw["capabilities"] = list(kw["capabilities"])
    kw["ports"] = list(kw["ports"])
    return kw


def requirement_from_row(row: dict[str, Any]) -> Requirement:
    return Requirement(**row)


_CTX_SETS = ("co_locate_with", "separate_from", "group_separate_from", "template_images")


def context_row(ctx: PlacementContext) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in PlacementContext.__dataclass_fields__:
        v = getattr(ctx, name)
        if name == "peers":
            v = [[p.job, p.node_id, p.zone, p.rule_less] for p in v]
        elif name == "exclude_nodes":
            v = sorted(v)
        elif isinstance(v, tuple):
            v = list(v)
        out[name] = v
    return out


def context_from_row(row: dict[str, Any]) -> PlacementContext:
    kw = dict(row)
    kw["peers"] = tuple(Peer(*p) for p in kw.get("peers", ()))
    kw["exclude_nodes"] = frozenset(kw.get("exclude_nodes", ()))
    for name in _CTX_SETS:
        if name in kw:
            kw[name] = tuple(kw[name])
    return PlacementContext(**kw)


_NODE_FIELDS = tuple(f.name for f in fields(NodeRecord) if f.init and f.name not in NODE_SKIPPED and f.name != "capabilities")


_AS_LIST = frozenset({"ports", "jobs", "spare_reserved_for", "warm"})
_AS_VALUE = frozenset({"status", "tier", "label_tier"})
_AS_DICT = frozenset({"ray_labels", "ray_resources"})


def node_row(rec: NodeRecord) -> dict[str, Any]:
    """The record's fields the engine reads, as JSON values, without its capabilities (kept apart,
    once per content: most nodes share their hardware's)."""
    d = rec.__dict__
    out: dict[str, Any] = {}
    for name in _NODE_FIELDS:
        v = d[name]
        if name in _AS_LIST:
            v = sorted(v)
        elif name in _AS_VALUE:
            v = v.value if v is not None else None
        elif name in _AS_DICT:
            v = dict(v)
        elif name == "gpu_reserved":
            v = list(v)
        out[name] = v
    return out


def capabilities_row(caps: NodeCapabilities) -> dict[str, Any]:
    return caps.model_dump(mode="json")


def node_from_row(row: dict[str, Any], capabilities: NodeCapabilities) -> NodeRecord:
    kw = dict(row)
    for name in _AS_LIST:
        kw[name] = frozenset(kw.get(name, ()))
    kw["gpu_reserved"] = tuple(kw.get("gpu_reserved", ()))
    return NodeRecord(capabilities=capabilities, **kw)


def capabilities_from_row(row: dict[str, Any]) -> NodeCapabilities:
    return NodeCapabilities.model_validate(row)


def settings_row(settings: FabricSettings) -> dict[str, Any]:
    return settings.model_dump(mode="json")


def settings_from_row(row: dict[str, Any]) -> FabricSettings:
    return FabricSettings.load(row)

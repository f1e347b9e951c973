"""The operator API's replies back into the fabric's own objects, for a client (``fabric.api.client``).

The servicers send what the scheduler answers as messages and JSON (``fabric.api.wire``); these
readers make the same types again, so a command renders an answer that came over gRPC with the
code that renders one that came through Ray: ``NodeRecord`` (``Node.record_json``), ``JobStatus``
(``Job``), ``DrainState``, ``NodeInterruptionState`` and ``MigrationState`` (their ``state_json``), ``FabricEvent`` (``Event``),
``FabricSettings`` (``SettingsReply``). A reply that does not read as its type raises
``ValueError`` naming what.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from fabric.api import inspect_pb2 as pb  # the Inspect messages and, imported publicly, the Operator ones
from fabric.core.capabilities import NodeCapabilities
from fabric.core.jobs.book import Binding, JobStatus
from fabric.core.jobs.drains import DrainJob, DrainState, JobDrainStatus, NodeDrainPhase, NodeInterruptionState
from fabric.core.jobs.migration import MigrationPhase, MigrationState, MigrationStrategy
from fabric.core.jobs.states import JobState
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import NodeRecord
from fabric.core.scheduler_api import FabricEvent
from fabric.core.settings import FabricSettings
from fabric.core.tiers import ComputeTier

__all__ = ["drain_state", "event", "interruption_state", "job_status", "json_object", "migration_state", "node_record", "settings"]

_SETS = ("ports", "jobs", "spare_reserved_for", "warm")
"""``NodeRecord`` fields that are frozensets (JSON lists on the wire)."""
_READ_HERE = ("node_id", "name", "capabilities", "status", "tier", "label_tier", "gpu_reserved", *_SETS)


def json_object(text: str, what: str) -> dict[str, Any]:
    """The JSON object ``text`` (``ValueError`` naming ``what`` when it is not one)."""
    try:
        value = json.loads(text or "{}")
    except ValueError as exc:
        raise ValueError(f"{what}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what}: not a JSON object")
    return value


def _tier(value: Any) -> ComputeTier | None:
    return None if value in (None, "") else ComputeTier(value)


def node_record(message: pb.Node) -> NodeRecord:
    """The ``NodeRecord`` a ``Node`` carries whole in ``record_json``: the fields with a type of their
    own read as that type, every other field (numbers, text, flags, mappings) as it came."""
    d = json_object(message.record_json, "Node.record_json")
    names = {f.name for f in dataclasses.fields(NodeRecord) if f.init and not f.name.startswith("_")}
    kwargs: dict[str, Any] = {k: v for k, v in d.items() if k in names and k not in _READ_HERE}
    kwargs.update({k: frozenset(d[k]) for k in _SETS if d.get(k) is not None})
    if d.get("gpu_reserved") is not None:
        kwargs["gpu_reserved"] = tuple(float(x) for x in d["gpu_reserved"])
    return NodeRecord(node_id=str(d.get("node_id") or message.node_id), name=str(d.get("name") or message.name),
                      capabilities=NodeCapabilities.model_validate(d["capabilities"]),
                      status=NodeStatus(d.get("status") or message.status or "active"), tier=_tier(d.get("tier")),
                      label_tier=_tier(d.get("label_tier")), **kwargs)


def job_status(message: pb.Job) -> JobStatus:
    """The ``JobStatus`` a ``Job`` stands for."""
    binding = None
    if message.node_id:
        allocation = message.allocation_id if message.HasField("allocation_id") else None
        binding = Binding(message.node_id, message.instance_key, allocation)
    return JobStatus(job_id=message.job_id, name=message.name, state=JobState(message.state),
                     bundle_id=message.bundle_id or None, replica=int(message.replica), binding=binding,
                     restarts_last_hour=int(message.restarts_last_hour), reason=message.reason,
                     history=tuple((h.at, h.state, h.reason) for h in message.history),
                     **{name: getattr(message, name) for name in ("started_at", "first_started_at", "start_at")
                        if message.HasField(name)})


def drain_state(text: str) -> DrainState:
    """The ``DrainState`` in ``state_json`` (its fields, or its ``as_dict()``)."""
    d = json_object(text, "state_json")
    jobs = {str(k): DrainJob(job_id=str(j.get("job_id") or k), status=JobDrainStatus(j["status"]),
                             migration_id=j.get("migration_id"), reason=str(j.get("reason") or ""))
            for k, j in (d.get("jobs") or {}).items()}
    return DrainState(node_id=str(d["node_id"]), phase=NodeDrainPhase(d["phase"]), started=float(d["started"]),
                      timeout_s=float(d["timeout_s"]), force=bool(d.get("force")), strategy=d.get("strategy"), jobs=jobs,
                      reason=str(d.get("reason") or ""), ray_drain=d.get("ray_drain"), interruption=d.get("interruption"),
                      tasks_finishing=bool(d.get("tasks_finishing")))


def interruption_state(text: str) -> NodeInterruptionState:
    """The ``NodeInterruptionState`` in ``state_json`` (its drain as ``drain_state`` reads it)."""
    d = json_object(text, "state_json")
    return NodeInterruptionState(node_id=str(d["node_id"]), kind=str(d["kind"]), deadline=d.get("deadline"),
                                 noticed_at=float(d["noticed_at"]), drain=drain_state(json.dumps(d["drain"])))


def migration_state(text: str) -> MigrationState:
    """The ``MigrationState`` in ``state_json`` (its fields, or its ``as_dict()``)."""
    d = json_object(text, "state_json")
    return MigrationState(
        migration_id=str(d["migration_id"]), job_id=str(d["job_id"]), strategy=MigrationStrategy(d["strategy"]),
        phase=MigrationPhase(d["phase"]), source_node=str(d["source_node"]), source_key=str(d.get("source_key") or ""),
        target_node=d.get("target_node"), target_key=d.get("target_key"), reason=str(d.get("reason") or ""),
        started_at=float(d["started_at"]), phase_deadline=d.get("phase_deadline"),
        past_point_of_no_return=bool(d.get("past_point_of_no_return")),
        history=tuple((str(h[0]), float(h[1]), str(h[2])) for h in d.get("history") or ()),
    )


def event(message: pb.Event) -> FabricEvent:
    """One ``Event`` as the log's ``FabricEvent`` (seq, kind, at, stimulus_id, data)."""
    out: FabricEvent = {"seq": int(message.seq), "kind": message.kind, "at": float(message.at),
                        "data": json_object(message.data_json, "Event.data_json")}
    if message.stimulus_id:
        out["stimulus_id"] = message.stimulus_id
    return out


def settings(message: pb.SettingsReply) -> FabricSettings:
    """The ``FabricSettings`` a ``SettingsReply`` carries."""
    return FabricSettings.load(json_object(message.settings_json, "SettingsReply.settings_json"))

"""A cloud's own reclaim notices, read from its instance metadata: what to ask, and what the answers mean.

A spot (preemptible) machine learns that it is about to be taken back from its cloud's metadata
service, on the machine itself. This module is the pure half of reading it: the documented
requests per cloud (``MetadataRequest``), and one reader per document that turns an answer (HTTP
status, body) into ``SpotNotice``s: a kind the scheduler takes (``spot-interruption``,
``rebalance``) and a deadline in epoch seconds. ``probes.spot`` sends the requests; the probe
actor hands each new notice to the scheduler once (``actors.spot_watch``).

- **AWS** (IMDSv2): a session token first (``PUT /latest/api/token``), then
  ``/latest/meta-data/spot/instance-action`` (404: no notice; ``{"action", "time"}``: a spot
  interruption at ``time``) and ``/latest/meta-data/events/recommendations/rebalance``
  (``{"noticeTime"}``: a rebalance recommendation, no deadline).
- **GCP**: ``/computeMetadata/v1/instance/preempted`` answers ``TRUE`` or ``FALSE``; the machine
  goes about 30 s after it turns ``TRUE`` (``GCP_NOTICE_S``).
- **Azure**: ``/metadata/scheduledevents`` lists scheduled events; a ``Preempt`` event is a spot
  interruption at its ``NotBefore`` (RFC 1123).

A document that is not what the cloud documents raises ``ProbeError`` (``source`` names the cloud
and path): the caller notes it and reads again next time, it never acts on a guess. Time is
passed in (``now``), never read here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from fabric.core.errors import ProbeError

SPOT_INTERRUPTION = "spot-interruption"
REBALANCE = "rebalance"

STANDARD_BASE_URLS = {"aws": "http://169.254.169.254", "azure": "http://169.254.169.254",
                      "gcp": "http://metadata.google.internal"}
"""Each cloud's metadata service, where the settings name no ``spot_notices.metadata_url``."""
SPOT_CLOUDS = tuple(STANDARD_BASE_URLS)
"""The clouds whose notices are read (the values of the ``fabric.io/cloud`` label that start a poller)."""
GCP_NOTICE_S = 30.0
"""GCP stops a preempted machine about 30 s after ``preempted`` turns ``TRUE``."""
AWS_TOKEN_TTL_S = 300
"""The lifetime asked for an IMDSv2 session token; the poller takes a new one well before it ends."""
AWS_ACTIONS = ("terminate", "stop", "hibernate")


@dataclass(frozen=True)
class MetadataRequest:
    """One documented request to a metadata service: method, path (with its query) and headers."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()


AWS_TOKEN = MetadataRequest("PUT", "/latest/api/token", (("X-aws-ec2-metadata-token-ttl-seconds", str(AWS_TOKEN_TTL_S)),))
AWS_TOKEN_HEADER = "X-aws-ec2-metadata-token"
"""The header every IMDSv2 read carries the session token in."""
AWS_INSTANCE_ACTION = MetadataRequest("GET", "/latest/meta-data/spot/instance-action")
AWS_REBALANCE = MetadataRequest("GET", "/latest/meta-data/events/recommendations/rebalance")
GCP_PREEMPTED = MetadataRequest("GET", "/computeMetadata/v1/instance/preempted", (("Metadata-Flavor", "Google"),))
AZURE_SCHEDULED_EVENTS = MetadataRequest("GET", "/metadata/scheduledevents?api-version=2020-07-01", (("Metadata", "true"),))


@dataclass(frozen=True)
class SpotNotice:
    """A reclaim notice read from the cloud: ``kind`` (``spot-interruption`` or ``rebalance``),
    ``deadline`` (epoch seconds the machine goes at; None: the cloud named none), ``key`` (the same
    notice read again has the same key: it is delivered once) and ``detail`` (the document's words)."""

    cloud: str
    kind: str
    deadline: float | None
    key: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "kind": self.kind, "deadline": self.deadline, "key": self.key, "detail": self.detail}


def base_url(cloud: str, metadata_url: str | None = None) -> str:
    """Where ``cloud``'s metadata service answers: ``metadata_url`` when given (a test's fake), else
    the cloud's standard address. ``KeyError`` for a cloud whose notices are not read."""
    standard = STANDARD_BASE_URLS[cloud]
    return (metadata_url or standard).rstrip("/")


def _malformed(cloud: str, request: MetadataRequest, reason: str) -> ProbeError:
    return ProbeError(f"{cloud} metadata {request.path}: {reason}", source=f"{cloud}:{request.path}")


def _json_object(cloud: str, request: MetadataRequest, body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _malformed(cloud, request, f"not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise _malformed(cloud, request, f"expected a JSON object, got {type(doc).__name__}")
    return doc


def read_iso_time(text: Any) -> float:
    """Epoch seconds of an ISO 8601 time (``2026-12-07T12:00:00Z``; no zone: UTC). ``ValueError`` otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"a time must be a string, got {type(text).__name__}")
    when = datetime.fromisoformat(text.strip())
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def read_rfc1123_time(text: Any) -> float:
    """Epoch seconds of an RFC 1123 time (``Mon, 19 Sep 2016 18:29:47 GMT``). ``ValueError`` otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"a time must be a string, got {type(text).__name__}")
    try:
        when = parsedate_to_datetime(text.strip())
    except (TypeError, IndexError) as exc:  # older email.utils raise these for garbage
        raise ValueError(f"not an RFC 1123 time: {text!r}") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def _unanswered(cloud: str, request: MetadataRequest, status: int) -> ProbeError:
    return _malformed(cloud, request, f"answered HTTP {status}")


def read_aws_instance_action(status: int, body: bytes) -> SpotNotice | None:
    """``spot/instance-action``: 404 is no notice; 200 ``{"action": "terminate"|"stop"|"hibernate",
    "time": ISO 8601}`` is a spot interruption at ``time``."""
    request = AWS_INSTANCE_ACTION
    if status == 404:
        return None
    if status != 200:
        raise _unanswered("aws", request, status)
    doc = _json_object("aws", request, body)
    action, when = doc.get("action"), doc.get("time")
    if action not in AWS_ACTIONS:
        raise _malformed("aws", request, f"action must be one of {', '.join(AWS_ACTIONS)}, got {action!r}")
    try:
        deadline = read_iso_time(when)
    except ValueError as exc:
        raise _malformed("aws", request, f"time: {exc}") from exc
    return SpotNotice("aws", SPOT_INTERRUPTION, deadline, f"aws:instance-action:{action}:{when}", f"instance-action {action} at {when}")


def read_aws_rebalance(status: int, body: bytes) -> SpotNotice | None:
    """``events/recommendations/rebalance``: 404 is none; 200 ``{"noticeTime": ISO 8601}`` is a
    rebalance recommendation (no deadline: the machine is at elevated risk, not yet going)."""
    request = AWS_REBALANCE
    if status == 404:
        return None
    if status != 200:
        raise _unanswered("aws", request, status)
    doc = _json_object("aws", request, body)
    when = doc.get("noticeTime")
    try:
        read_iso_time(when)
    except ValueError as exc:
        raise _malformed("aws", request, f"noticeTime: {exc}") from exc
    return SpotNotice("aws", REBALANCE, None, f"aws:rebalance:{when}", f"rebalance recommendation at {when}")


def read_gcp_preempted(status: int, body: bytes, now: float) -> SpotNotice | None:
    """``instance/preempted``: ``FALSE`` is none; ``TRUE`` a spot interruption ``GCP_NOTICE_S``
    after ``now`` (read first; the same notice read again keeps its key, so its first deadline)."""
    request = GCP_PREEMPTED
    if status != 200:
        raise _unanswered("gcp", request, status)
    word = body.decode("utf-8", errors="replace").strip().upper()
    if word == "FALSE":
        return None
    if word != "TRUE":
        raise _malformed("gcp", request, f"expected TRUE or FALSE, got {body[:40]!r}")
    return SpotNotice("gcp", SPOT_INTERRUPTION, now + GCP_NOTICE_S, "gcp:preempted", "preempted")


def read_azure_scheduled_events(status: int, body: bytes, now: float) -> list[SpotNotice]:
    """``scheduledevents``: each ``Preempt`` event is a spot interruption at its ``NotBefore``
    (RFC 1123; empty once the event has started: ``now``). Other event types are not reclaims."""
    request = AZURE_SCHEDULED_EVENTS
    if status != 200:
        raise _unanswered("azure", request, status)
    doc = _json_object("azure", request, body)
    events = doc.get("Events")
    if not isinstance(events, list):
        raise _malformed("azure", request, f"Events must be a list, got {type(events).__name__}")
    notices = []
    for i, event in enumerate(events):
        if not isinstance(event, dict):
            raise _malformed("azure", request, f"Events[{i}] must be an object, got {type(event).__name__}")
        if event.get("EventType") != "Preempt":
            continue
        event_id, not_before = event.get("EventId"), event.get("NotBefore", "")
        if not isinstance(event_id, str) or not event_id:
            raise _malformed("azure", request, f"Events[{i}].EventId must be a non-empty string, got {event_id!r}")
        try:
            deadline = now if not_before == "" else read_rfc1123_time(not_before)
        except ValueError as exc:
            raise _malformed("azure", request, f"Events[{i}].NotBefore: {exc}") from exc
        notices.append(SpotNotice("azure", SPOT_INTERRUPTION, deadline, f"azure:{event_id}",
                                  f"Preempt {event_id} not before {not_before or 'now (started)'}"))
    return notices


__all__ = ["AWS_ACTIONS", "AWS_INSTANCE_ACTION", "AWS_REBALANCE", "AWS_TOKEN", "AWS_TOKEN_HEADER", "AWS_TOKEN_TTL_S",
           "AZURE_SCHEDULED_EVENTS", "GCP_NOTICE_S", "GCP_PREEMPTED", "MetadataRequest", "REBALANCE", "SPOT_CLOUDS",
           "SPOT_INTERRUPTION", "STANDARD_BASE_URLS", "SpotNotice", "base_url", "read_aws_instance_action",
           "read_aws_rebalance", "read_azure_scheduled_events", "read_gcp_preempted", "read_iso_time", "read_rfc1123_time"]

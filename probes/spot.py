"""Reading a cloud's reclaim notices from its instance metadata service, over HTTP.

``MetadataHttp`` is the one seam to the outside: it sends a ``fabric.core.spot.MetadataRequest``
to a base URL and answers (status, body), with a short timeout and never through a proxy (the
metadata service is link-local: a proxy from the environment would ask the wrong machine).
``SpotPoller`` reads one cloud's documents once per ``poll()``, the AWS IMDSv2 session token
included, and hands each answer to the pure readers of ``fabric.core.spot``. What a poll found is a
``SpotReading``: the notices, and notes on what could not be read (a document not as documented,
a service that did not answer). A poll never raises for what the service answered.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Protocol

from fabric.core.errors import ProbeError
from fabric.core.spot import (AWS_INSTANCE_ACTION, AWS_REBALANCE, AWS_TOKEN, AWS_TOKEN_HEADER, AWS_TOKEN_TTL_S,
                              AZURE_SCHEDULED_EVENTS, GCP_PREEMPTED, SPOT_CLOUDS, MetadataRequest, SpotNotice, base_url,
                              read_aws_instance_action, read_aws_rebalance, read_azure_scheduled_events, read_gcp_preempted)

MAX_BODY_BYTES = 64 * 1024
"""The most of a metadata answer read: the documents are a few hundred bytes."""


class Http(Protocol):
    """What a poller sends its requests through (``MetadataHttp``; a fake in tests)."""

    def send(self, request: MetadataRequest, headers: tuple[tuple[str, str], ...] = ()) -> tuple[int, bytes]: ...


class MetadataHttp:
    """Requests to one metadata service at ``base`` (``http://169.254.169.254``), each within
    ``timeout_s``. ``send`` answers (status, body) for any HTTP answer, 404 and 500 included, and
    raises ``OSError`` when nothing answered (refused, timed out)."""

    def __init__(self, base: str, timeout_s: float) -> None:
        self.base = base.rstrip("/")
        self.timeout_s = timeout_s
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def send(self, request: MetadataRequest, headers: tuple[tuple[str, str], ...] = ()) -> tuple[int, bytes]:
        req = urllib.request.Request(self.base + request.path, method=request.method,
                                     headers=dict(request.headers + headers),
                                     data=b"" if request.method == "PUT" else None)
        try:
            with self._opener.open(req, timeout=self.timeout_s) as answer:
                return answer.status, answer.read(MAX_BODY_BYTES)
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read(MAX_BODY_BYTES)


@dataclass
class SpotReading:
    """What one poll found: the notices in force now, and a note per document it could not read."""

    notices: list[SpotNotice] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class SpotPoller:
    """One cloud's notice documents, read once per ``poll()`` through ``http``. ``clock``: epoch
    seconds (GCP's deadline is counted from when ``TRUE`` is read); ``monotonic``: when the AWS
    session token was taken (a new one well before its ``AWS_TOKEN_TTL_S`` ends, or at once when
    the service refuses it)."""

    def __init__(self, cloud: str, http: Http, *, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if cloud not in SPOT_CLOUDS:
            raise ValueError(f"no reclaim notices are read for cloud {cloud!r} (only {', '.join(SPOT_CLOUDS)})")
        self.cloud = cloud
        self.http = http
        self.clock = clock
        self.monotonic = monotonic
        self._token: tuple[str, float] | None = None
        """The IMDSv2 session token and when it was taken (monotonic)."""

    def poll(self) -> SpotReading:
        """Read every document of the cloud once."""
        reading = SpotReading()
        if self.cloud == "aws":
            # The rebalance first: when both are up, the spot notice then tightens the drain it started.
            self._read(reading, AWS_REBALANCE, lambda s, b: _listed(read_aws_rebalance(s, b)))
            self._read(reading, AWS_INSTANCE_ACTION, lambda s, b: _listed(read_aws_instance_action(s, b)))
        elif self.cloud == "gcp":
            self._read(reading, GCP_PREEMPTED, lambda s, b: _listed(read_gcp_preempted(s, b, self.clock())))
        else:
            self._read(reading, AZURE_SCHEDULED_EVENTS, lambda s, b: read_azure_scheduled_events(s, b, self.clock()))
        return reading

    def _read(self, reading: SpotReading, request: MetadataRequest,
              read: Callable[[int, bytes], list[SpotNotice]]) -> None:
        try:
            status, body = self._send(request)
            reading.notices += read(status, body)
        except ProbeError as exc:
            reading.notes.append(str(exc))
        except OSError as exc:  # refused, timed out, no route: nothing answered this time
            reading.notes.append(f"{self.cloud} metadata {request.path}: no answer ({type(exc).__name__}: {exc})")

    def _send(self, request: MetadataRequest) -> tuple[int, bytes]:
        if self.cloud != "aws":
            return self.http.send(request)
        status, body = self.http.send(request, ((AWS_TOKEN_HEADER, self._session_token()),))
        if status == 401:  # the token ended early (the service restarted): take a new one, ask once more
            self._token = None
            status, body = self.http.send(request, ((AWS_TOKEN_HEADER, self._session_token()),))
        return status, body

    def _session_token(self) -> str:
        """The IMDSv2 session token: the one held while it has half its life left, else a new one."""
        now = self.monotonic()
        if self._token is not None and now - self._token[1] < AWS_TOKEN_TTL_S / 2:
            return self._token[0]
        status, body = self.http.send(AWS_TOKEN)
        token = body.decode("utf-8", errors="replace").strip()
        if status != 200 or not token:
            raise ProbeError(f"aws metadata {AWS_TOKEN.path}: no session token (HTTP {status})", source=f"aws:{AWS_TOKEN.path}")
        self._token = (token, now)
        return token


def _listed(notice: SpotNotice | None) -> list[SpotNotice]:
    return [] if notice is None else [notice]


def poller_for(cloud: str, *, metadata_url: str | None, timeout_s: float) -> SpotPoller:
    """A poller of ``cloud``'s notices over HTTP to ``metadata_url`` (None: the cloud's own service)."""
    return SpotPoller(cloud, MetadataHttp(base_url(cloud, metadata_url), timeout_s))


__all__ = ["Http", "MAX_BODY_BYTES", "MetadataHttp", "SpotPoller", "SpotReading", "poller_for"]

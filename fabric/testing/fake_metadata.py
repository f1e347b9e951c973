"""A cloud instance metadata service on loopback, for tests: AWS IMDSv2, GCP and Azure notice documents.

``FakeMetadata`` is a real HTTP server (``http.server`` in a thread, on ``127.0.0.1`` and a port the
OS picks) that answers the requests ``probes.spot`` sends the way each cloud documents them, and
records every request (method, path with its query, headers), so a test can check what was sent:

- AWS: ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds`` gives a session
  token; every ``GET /latest/...`` without that token in ``X-aws-ec2-metadata-token`` is refused
  401, as IMDSv2 refuses it (``expire_token`` makes the service forget the token it gave).
- GCP: ``/computeMetadata/...`` without ``Metadata-Flavor: Google`` is refused 403.
- Azure: ``/metadata/...`` without ``Metadata: true`` is refused 400.

A document is set by its path (``serve(path, status, body)``); unset AWS documents answer 404, GCP's
``preempted`` ``FALSE`` and Azure's scheduled events an empty list, as on a machine under no notice.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from fabric.core.spot import AWS_INSTANCE_ACTION, AWS_REBALANCE, AWS_TOKEN_HEADER, AZURE_SCHEDULED_EVENTS, GCP_PREEMPTED


@dataclass(frozen=True)
class Recorded:
    """One request the fake service received: ``headers`` by their lower-cased names (HTTP's are not case-sensitive)."""

    method: str
    path: str
    headers: dict[str, str]

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def iso_time(epoch: float) -> str:
    """``epoch`` as AWS writes times: ``2026-12-07T12:00:00Z``."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc1123_time(epoch: float) -> str:
    """``epoch`` as Azure writes ``NotBefore``: ``Mon, 19 Sep 2016 18:29:47 GMT``."""
    return format_datetime(datetime.fromtimestamp(int(epoch), timezone.utc), usegmt=True)


class FakeMetadata:
    """The fake service; a context manager (``with FakeMetadata() as md: md.url``)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.requests: list[Recorded] = []
        self._documents: dict[str, tuple[int, bytes]] = {}
        self._tokens: set[str] = set()
        self._issued = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- the documents ----------------------------------------------------------------------------
    def serve(self, path: str, status: int, body: bytes | str | dict[str, Any] | list[Any]) -> None:
        """Answer GETs of ``path`` (no query) with ``status`` and ``body`` (a dict or list: as JSON)."""
        raw = json.dumps(body).encode() if isinstance(body, (dict, list)) else body.encode() if isinstance(body, str) else body
        with self._lock:
            self._documents[urlsplit(path).path] = (status, raw)

    def aws_instance_action(self, action: str, epoch: float) -> None:
        self.serve(AWS_INSTANCE_ACTION.path, 200, {"action": action, "time": iso_time(epoch)})

    def aws_rebalance(self, epoch: float) -> None:
        self.serve(AWS_REBALANCE.path, 200, {"noticeTime": iso_time(epoch)})

    def gcp_preempted(self, preempted: bool = True) -> None:
        self.serve(GCP_PREEMPTED.path, 200, "TRUE" if preempted else "FALSE")

    def azure_events(self, *events: dict[str, Any], incarnation: int = 1) -> None:
        self.serve(AZURE_SCHEDULED_EVENTS.path, 200, {"DocumentIncarnation": incarnation, "Events": list(events)})

    def expire_token(self) -> None:
        """Forget every AWS session token given (what a restarted IMDS does)."""
        with self._lock:
            self._tokens.clear()

    def sent(self, method: str | None = None, path: str | None = None) -> list[Recorded]:
        """The requests received, oldest first, of ``method`` and to ``path`` (no query) when named."""
        with self._lock:
            return [r for r in self.requests if (method is None or r.method == method)
                    and (path is None or urlsplit(r.path).path == path)]

    # -- answering ----------------------------------------------------------------------------------
    def answer(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        """What the service answers a request (also recorded)."""
        low = {k.lower(): v for k, v in headers.items()}
        plain = urlsplit(path).path
        with self._lock:
            self.requests.append(Recorded(method, path, low))
            if plain.startswith("/latest/"):
                return self._aws(method, plain, low)
            if method != "GET":
                return 405, b""
            if plain.startswith("/computeMetadata/"):
                if low.get("metadata-flavor") != "Google":
                    return 403, b"Missing Metadata-Flavor:Google header"
                return self._documents.get(plain, (200, b"FALSE") if plain == GCP_PREEMPTED.path else (404, b""))
            if plain.startswith("/metadata/"):
                if low.get("metadata") != "true":
                    return 400, b'{"error": "Bad request. Required metadata header not specified"}'
                empty = (200, json.dumps({"DocumentIncarnation": 0, "Events": []}).encode())
                return self._documents.get(plain, empty if plain == urlsplit(AZURE_SCHEDULED_EVENTS.path).path else (404, b""))
            return 404, b""

    def _aws(self, method: str, path: str, low: dict[str, str]) -> tuple[int, bytes]:
        if path == "/latest/api/token":
            if method != "PUT":
                return 405, b""
            if not low.get("x-aws-ec2-metadata-token-ttl-seconds", "").isdigit():
                return 400, b""
            self._issued += 1
            token = f"token-{self._issued}"
            self._tokens.add(token)
            return 200, token.encode()
        if method != "GET":
            return 405, b""
        if low.get(AWS_TOKEN_HEADER.lower()) not in self._tokens:
            return 401, b""
        return self._documents.get(path, (404, b""))

    # -- the server -----------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake metadata service is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeMetadata":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, body = fake.answer(self.command, self.path, dict(self.headers.items()))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_POST = _any

            def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read ``requests``
                pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        # A short poll: ``close`` waits for the loop to see the shutdown (0.5 s by default, per test).
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-metadata", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeMetadata":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["FakeMetadata", "Recorded", "iso_time", "rfc1123_time"]

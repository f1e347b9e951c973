"""A node's artifact cache: the files its templates need, fetched by URI, and which it holds.

Issue 15's warmth: a template lists artifacts (``templates: {encoder: {artifacts: [...]}}``); a
node is warm for it when its cache holds them. The probe reports ``ArtifactCache.held()`` to the
registry with its heartbeats (``NodeRecord.warm``), and a spare's ``ProbeActor.prefetch`` fills
the cache through ``ArtifactCache.fetch``.

Layout under the cache root: one file per artifact, named from the sha256 of its URI and the
URI's basename (``3f9c1e2a4b5d6e7f-encoder.bin``), and ``index.json`` (uri -> file, size, sha256,
fetched_at). A URI is *held* when its file is there with the size and sha256 the index recorded
(a file is hashed again only when its size, mtime or inode moved, so ``held`` is a few ``stat``s
per beat). A fetch writes a temporary file in the root and renames it into place once whole: a
failed fetch (a 404, a missing file, a timeout, too large) leaves no partial file, and the
artifact stays cold.

The root (``cache_root``): ``$FABRIC_ARTIFACT_CACHE`` when set, else
``$XDG_CACHE_HOME/adaptive-fabric/artifacts/<node name>`` (``~/.cache`` without it): several
local nodes share one machine, so each node name gets its own folder (a node the local provider
started is named by its instance id).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from fabric.core.names import ARTIFACT_CACHE_ENV

__all__ = ["ArtifactCache", "FetchResult", "cache_root", "DEFAULT_TIMEOUT_S", "MAX_URIS"]

INDEX = "index.json"
DEFAULT_TIMEOUT_S = 300.0
"""How long one artifact's fetch may take, whole (connect, read, copy)."""
MAX_URIS = 1000
"""Most URIs one ``fetch`` takes."""
_CHUNK = 1 << 20
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe(part: str, limit: int = 80) -> str:
    out = _SAFE.sub("-", part).strip(".-")[:limit]
    return out or "artifact"


def cache_root(node_name: str, environ: Mapping[str, str] | None = None) -> Path:
    """The artifact cache folder of the node ``node_name`` (see the module docstring)."""
    env = os.environ if environ is None else environ
    explicit = env.get(ARTIFACT_CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME") or Path.home()) / ".cache")
    return base / "adaptive-fabric" / "artifacts" / _safe(node_name, 120)


@dataclass(frozen=True)
class FetchResult:
    """What one artifact's fetch came to: ``ok`` (held now), else ``error`` says why it stays cold."""

    uri: str
    ok: bool
    error: str | None = None
    bytes: int = 0
    """Size of the artifact (what was copied, or what the cache already held)."""
    seconds: float = 0.0
    """How long the fetch took (0 when the cache held it already)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ArtifactCache:
    """One node's artifact cache under ``root`` (created on the first fetch). Thread-safe; two
    processes on one root serialise their index updates with a lock file."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()
        self._verified: dict[str, tuple[str, tuple[int, int, int]]] = {}  # file -> (sha256, stat signature)

    # -- names and the index ----------------------------------------------------------------------
    @staticmethod
    def file_name(uri: str) -> str:
        """The cache file of ``uri``: its sha256 (16 hex digits) and its basename."""
        path = urllib.parse.urlsplit(uri).path if "://" in uri else uri
        base = urllib.parse.unquote(path.rstrip("/").rsplit("/", 1)[-1])
        return f"{hashlib.sha256(uri.encode()).hexdigest()[:16]}-{_safe(base)}"

    def index(self) -> dict[str, dict[str, Any]]:
        """The index as stored (uri -> file, size, sha256, fetched_at); ``{}`` when missing or unreadable."""
        try:
            data = json.loads((self.root / INDEX).read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {u: e for u, e in data.items() if isinstance(u, str) and isinstance(e, dict)
                and isinstance(e.get("file"), str) and isinstance(e.get("size"), int) and isinstance(e.get("sha256"), str)}

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(self.root / ".lock", "a") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)

    def _write_index(self, index: dict[str, dict[str, Any]]) -> None:
        tmp = self.root / f".{INDEX}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
        os.replace(tmp, self.root / INDEX)

    # -- what the node holds ------------------------------------------------------------------------
    def intact(self, entry: Mapping[str, Any]) -> bool:
        """Whether the file of index ``entry`` is there with its recorded size and sha256."""
        name = entry.get("file")
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            return False
        path = self.root / name
        try:
            st = path.stat()
        except OSError:
            return False
        if st.st_size != entry.get("size"):
            return False
        sig = (st.st_size, st.st_mtime_ns, st.st_ino)
        seen = self._verified.get(name)
        if seen is not None and seen[1] == sig:
            return seen[0] == entry.get("sha256")
        try:
            digest = _sha256_of(path)
        except OSError:
            return False
        self._verified[name] = (digest, sig)
        return digest == entry.get("sha256")

    def held(self) -> frozenset[str]:
        """The URIs whose file is present and intact (a missing or corrupted file is not held)."""
        return frozenset(uri for uri, entry in self.index().items() if self.intact(entry))

    # -- fetching -----------------------------------------------------------------------------------
    def fetch(self, uris: Iterable[str], timeout_s: float = DEFAULT_TIMEOUT_S, max_bytes: int | None = None) -> list[FetchResult]:
        """Fetch each URI into the cache (``file://`` copied, ``http(s)://`` downloaded), one
        ``FetchResult`` per URI in order; one the cache holds already is not fetched again. Never
        raises for a URI: a failure is its result's ``error`` (and no partial file is left)."""
        uris = list(uris)
        if len(uris) > MAX_URIS:
            raise ValueError(f"at most {MAX_URIS} URIs per fetch, got {len(uris)}")
        out: list[FetchResult] = []
        for uri in uris:
            if not isinstance(uri, str) or not uri:
                out.append(FetchResult(str(uri), False, "an artifact URI is a non-empty string"))
                continue
            out.append(self._fetch_one(uri, timeout_s, max_bytes))
        return out

    def _fetch_one(self, uri: str, timeout_s: float, max_bytes: int | None) -> FetchResult:
        entry = self.index().get(uri)
        if entry is not None and self.intact(entry):
            return FetchResult(uri, True, None, int(entry["size"]), 0.0)
        t0 = time.monotonic()
        name = self.file_name(uri)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return FetchResult(uri, False, f"cannot create the cache folder {self.root}: {exc.strerror or exc}")
        tmp = self.root / f".{name}.{os.getpid()}.{threading.get_ident()}.part"
        try:
            size, digest = self._download(uri, tmp, t0 + timeout_s, timeout_s, max_bytes)
            with self._locked():
                os.replace(tmp, self.root / name)
                index = self.index()
                index[uri] = {"file": name, "size": size, "sha256": digest, "fetched_at": time.time()}
                self._write_index(index)
        except _FetchError as exc:
            return FetchResult(uri, False, str(exc), 0, time.monotonic() - t0)
        except OSError as exc:
            return FetchResult(uri, False, f"{type(exc).__name__}: {exc}", 0, time.monotonic() - t0)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        return FetchResult(uri, True, None, size, time.monotonic() - t0)

    def _download(self, uri: str, tmp: Path, deadline: float, timeout_s: float, max_bytes: int | None) -> tuple[int, str]:
        """Copy ``uri`` into ``tmp``: its size and sha256. ``_FetchError`` says what went wrong."""
        parts = urllib.parse.urlsplit(uri)
        scheme = parts.scheme.lower()
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise _FetchError(f"a file:// artifact is on this node (file:///path), not on {parts.netloc!r}")
            path = urllib.parse.unquote(parts.path)
            try:  # non-blocking open, then a regular file only: a FIFO or a device is never waited on
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except FileNotFoundError:
                raise _FetchError(f"no such file: {path}") from None
            except OSError as exc:
                raise _FetchError(f"cannot read {path}: {exc.strerror or exc}") from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise _FetchError(f"not a regular file: {path}")
            os.set_blocking(fd, True)
            src: Any = os.fdopen(fd, "rb")
        elif scheme in ("http", "https"):
            try:
                src = urllib.request.urlopen(urllib.request.Request(uri, headers={"User-Agent": "adaptive-fabric"}),
                                             timeout=max(0.1, timeout_s))
            except urllib.error.HTTPError as exc:
                exc.close()
                raise _FetchError(f"HTTP {exc.code} {exc.reason}") from None
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                raise _FetchError(f"cannot reach {parts.netloc}: {reason}") from None
        else:
            raise _FetchError(f"unsupported artifact scheme {parts.scheme!r} (file, http, https)")
        h = hashlib.sha256()
        size = 0
        try:
            with src, open(tmp, "wb") as dst:
                while True:
                    if time.monotonic() > deadline:
                        raise _FetchError(f"timed out after {timeout_s:g} s")
                    try:
                        chunk = src.read(_CHUNK)
                    except Exception as exc:  # a reset connection, a read timeout, a short body (IncompleteRead)
                        raise _FetchError(f"read failed after {size} bytes: {type(exc).__name__}: {exc}") from None
                    if not chunk:
                        break
                    size += len(chunk)
                    if max_bytes is not None and size > max_bytes:
                        raise _FetchError(f"larger than {max_bytes} bytes")
                    h.update(chunk)
                    dst.write(chunk)
                expected = src.headers.get("Content-Length") if hasattr(src, "headers") else None
                if expected is not None and expected.isdigit() and int(expected) != size:
                    raise _FetchError(f"read failed: the body ended after {size} of {expected} bytes")
                dst.flush()
                os.fsync(dst.fileno())
        except OSError as exc:
            raise _FetchError(f"cannot write the cache: {exc.strerror or exc}") from None
        return size, h.hexdigest()

    def evict(self, uri: str) -> bool:
        """Drop ``uri`` from the cache (file and index entry); whether it was there."""
        with self._locked():
            index = self.index()
            entry = index.pop(uri, None)
            if entry is None:
                return False
            with contextlib.suppress(OSError):
                (self.root / entry["file"]).unlink()
            self._write_index(index)
            return True


class _FetchError(Exception):
    """Why one artifact could not be fetched (becomes its ``FetchResult.error``)."""


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()

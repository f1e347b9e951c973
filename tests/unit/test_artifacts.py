"""The node's artifact cache (``probes.artifacts``): file:// copied, http:// downloaded from a
loopback ``http.server`` started here; a failed fetch (a 404, a missing file, a short body, too
large) leaves no partial file and the artifact cold; ``held`` ignores a missing or corrupted file."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest

from fabric.core.names import ARTIFACT_CACHE_ENV
from probes.artifacts import INDEX, ArtifactCache, FetchResult, cache_root

PAYLOAD = b"weights " * 1000


class _Handler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/short.bin":  # promises more than it sends, then hangs up
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"only a little")
            self.wfile.flush()
            self.close_connection = True
            return
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    _Handler.files = {"/models/encoder.bin": PAYLOAD, "/models/big.bin": b"x" * 5000}
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def source(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    f = d / "decoder model.bin"
    f.write_bytes(b"decoder" * 300)
    return f


def files_in(root: Path) -> set[str]:
    return {p.name for p in root.iterdir()} if root.exists() else set()


def test_a_file_uri_is_copied_indexed_and_held(tmp_path, source):
    cache = ArtifactCache(tmp_path / "cache")
    uri = source.as_uri()
    [r] = cache.fetch([uri])
    assert r.ok and r.error is None and r.bytes == source.stat().st_size and r.seconds >= 0
    name = ArtifactCache.file_name(uri)
    assert name == f"{hashlib.sha256(uri.encode()).hexdigest()[:16]}-decoder-model.bin"
    assert (cache.root / name).read_bytes() == source.read_bytes()
    entry = json.loads((cache.root / INDEX).read_text())[uri]
    assert entry["file"] == name and entry["size"] == r.bytes
    assert entry["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest() and entry["fetched_at"] > 0
    assert cache.held() == {uri}
    assert ArtifactCache(cache.root).held() == {uri}  # another process reading the same folder


def test_an_http_uri_is_downloaded(tmp_path, server):
    cache = ArtifactCache(tmp_path / "cache")
    uri = f"{server}/models/encoder.bin"
    [r] = cache.fetch([uri], timeout_s=10)
    assert r == FetchResult(uri, True, None, len(PAYLOAD), r.seconds)
    assert (cache.root / ArtifactCache.file_name(uri)).read_bytes() == PAYLOAD and cache.held() == {uri}


def test_failed_fetches_leave_no_partial_file_and_stay_cold(tmp_path, server, source):
    cache = ArtifactCache(tmp_path / "cache")
    good = source.as_uri()
    bad = [f"{server}/models/missing.bin", (source.parent / "absent.bin").as_uri(), f"{server}/short.bin",
           "s3://bucket/key.bin", f"{server}/models/big.bin"]
    results = cache.fetch([bad[0], good, *bad[1:]], timeout_s=10, max_bytes=4096)
    by_uri = {r.uri: r for r in results}
    assert [r.uri for r in results] == [bad[0], good, *bad[1:]]
    assert by_uri[good].ok
    assert not by_uri[bad[0]].ok and "404" in by_uri[bad[0]].error
    assert not by_uri[bad[1]].ok and "no such file" in by_uri[bad[1]].error
    assert not by_uri[bad[2]].ok and "read failed" in by_uri[bad[2]].error
    assert not by_uri[bad[3]].ok and "unsupported" in by_uri[bad[3]].error
    assert not by_uri[bad[4]].ok and "larger than 4096" in by_uri[bad[4]].error
    assert cache.held() == {good}
    assert files_in(cache.root) == {INDEX, ".lock", ArtifactCache.file_name(good)}  # no .part, no half file
    assert set(json.loads((cache.root / INDEX).read_text())) == {good}


def test_held_ignores_a_missing_or_corrupted_file(tmp_path, source, server):
    cache = ArtifactCache(tmp_path / "cache")
    a, b = source.as_uri(), f"{server}/models/encoder.bin"
    assert all(r.ok for r in cache.fetch([a, b], timeout_s=10))
    assert cache.held() == {a, b}
    fa = cache.root / ArtifactCache.file_name(a)
    data = bytearray(fa.read_bytes())
    data[0] ^= 0xFF  # same size, other bytes
    fa.write_bytes(bytes(data))
    assert cache.held() == {b}
    (cache.root / ArtifactCache.file_name(b)).unlink()
    assert cache.held() == frozenset()
    [again] = cache.fetch([a])  # a corrupted artifact is fetched afresh
    assert again.ok and again.seconds > 0 and cache.held() == {a}


def test_a_held_artifact_is_not_fetched_again(tmp_path, source):
    cache = ArtifactCache(tmp_path / "cache")
    uri = source.as_uri()
    cache.fetch([uri])
    original = source.read_bytes()
    source.write_bytes(b"changed at the source")
    [r] = cache.fetch([uri])
    assert r.ok and r.seconds == 0.0 and r.bytes == len(original)
    assert (cache.root / ArtifactCache.file_name(uri)).read_bytes() == original


def test_an_unreadable_index_holds_nothing_and_the_next_fetch_rewrites_it(tmp_path, source):
    root = tmp_path / "cache"
    root.mkdir()
    (root / INDEX).write_text("{not json")
    cache = ArtifactCache(root)
    assert cache.held() == frozenset() and cache.index() == {}
    [r] = cache.fetch([source.as_uri()])
    assert r.ok and cache.held() == {source.as_uri()}
    (root / INDEX).write_text(json.dumps({source.as_uri(): {"file": "../../etc/passwd", "size": 1, "sha256": "x"}}))
    assert cache.held() == frozenset()  # an index entry never points outside the folder


def test_a_missing_cache_folder_holds_nothing_and_evict_drops_one(tmp_path, source):
    cache = ArtifactCache(tmp_path / "never-made")
    assert cache.held() == frozenset() and not cache.root.exists()
    cache.fetch([source.as_uri()])
    assert cache.evict(source.as_uri()) and cache.held() == frozenset() and not cache.evict(source.as_uri())
    assert files_in(cache.root) == {INDEX, ".lock"}


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    import os

    fifo = tmp_path / "pipe.bin"
    os.mkfifo(fifo)
    [r] = ArtifactCache(tmp_path / "cache").fetch([fifo.as_uri()])
    assert not r.ok and "not a regular file" in r.error


def test_the_cache_root(tmp_path):
    assert cache_root("node-1", {ARTIFACT_CACHE_ENV: str(tmp_path / "c")}) == tmp_path / "c"
    assert cache_root("node-1", {"XDG_CACHE_HOME": "/x"}) == Path("/x/adaptive-fabric/artifacts/node-1")
    assert cache_root("i-3f9c", {"HOME": "/home/u"}) == Path("/home/u/.cache/adaptive-fabric/artifacts/i-3f9c")
    assert cache_root("../../evil name", {"HOME": "/h"}).parent == Path("/h/.cache/adaptive-fabric/artifacts")
    assert cache_root("a", {"HOME": "/h"}) != cache_root("b", {"HOME": "/h"})  # each node its own folder

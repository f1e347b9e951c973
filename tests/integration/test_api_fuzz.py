"""A fuzzed request stream against the live operator API (issue 17, Security): well over 1,000
malformed messages to the ``fabric.operator`` actor's gRPC server and its JSON view, and the actor
is the same process, still answering, afterwards.

The gRPC half speaks through a raw channel (``unary_unary`` / ``unary_stream`` with identity
serializers, so a body is whatever bytes the test chooses) to every method path of
``fabric.operator.v1.Operator``:

- random bytes (empty, short, long, one over 64 KiB) to every method, with the right token;
- well-formed messages carrying bad field values: huge strings, NUL and control characters, lone
  surrogates' bytes (invalid UTF-8 in a string field), NaN / infinite / negative numbers, JSON
  fields that are not JSON, the wrong JSON type, JSON nested 500 deep;
- wrong types: one method's message sent to another, and a field sent with the wrong wire type;
- auth: no token, a wrong one, a malformed header, a token in the wrong key: always UNAUTHENTICATED,
  and a cordon refused that way does not cordon;
- a body over gRPC's receive limit.

Every answer must come within its deadline (no hang) and be OK or a *typed* status code; UNKNOWN
(an exception the servicer did not map), INTERNAL and DEADLINE_EXCEEDED fail the test. The HTTP
half sends bad paths, methods, tokens and bodies to the JSON view: never a 5xx, 401 before
anything else without the token, and a good GET still answers afterwards.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import random
import socket
import struct
import threading
import time

import pytest

ray = pytest.importorskip("ray")
grpc = pytest.importorskip("grpc")

from fabric.api import operator_pb2 as pb  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration

SERVICE = "/fabric.operator.v1.Operator/"
UNARY = {
    "Status": pb.StatusRequest, "ListNodes": pb.ListNodesRequest, "Cordon": pb.NodeRequest, "Uncordon": pb.NodeRequest,
    "Drain": pb.DrainRequest, "Evict": pb.NodeRequest, "NotifyInterruption": pb.NotifyInterruptionRequest,
    "CreateBundle": pb.BundleWriteRequest, "UpdateBundle": pb.BundleWriteRequest, "DeleteBundle": pb.BundleIdRequest,
    "GetBundle": pb.BundleIdRequest, "ListBundles": pb.ListBundlesRequest, "Explain": pb.ExplainRequest,
    "Migrate": pb.MigrateRequest, "AbortMigration": pb.AbortMigrationRequest,
}
STREAM = {"WatchEvents": pb.WatchEventsRequest}
METHODS = {**UNARY, **STREAM}
TYPED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
         grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.ALREADY_EXISTS,
         grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.PERMISSION_DENIED}
"""What an answer may be. Not UNKNOWN (an unmapped exception), INTERNAL, DEADLINE_EXCEEDED (a hang)
nor UNAVAILABLE (the server went away)."""
DEADLINE_S = 20.0
STREAM_WAIT_S = 1.0
MIN_MESSAGES = 1000
SENDERS = 8
"""Fuzzed calls in flight at once (the server runs its calls on a thread pool)."""

IP = "127.0.0.2"
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "drain_grace_s": 30.0,
                       "monitor_interval_s": 0.25, "join_timeout_s": 60.0}}


def identity(b: bytes) -> bytes:
    return b


# -- the bodies ---------------------------------------------------------------------------------------------
def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field written by hand (so a string field can carry invalid UTF-8)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def random_bodies(rng: random.Random, n: int) -> list[bytes]:
    sizes = [0, 1, 2, 3, 5, 8, 16, 64, 200, 1024, 4096]
    out = [bytes(rng.getrandbits(8) for _ in range(rng.choice(sizes))) for _ in range(n - 1)]
    out.append(rng.randbytes(70_000))
    return out


HUGE = "x" * (1 << 20)
BAD_STRINGS = ["", " ", "\x00", "\x00node", "a\nb", "../../etc/passwd", "%s%n%x", "\u202e\u0000", "名前" * 100,
               HUGE, "n" * 70_000, "'; DROP TABLE jobs; --", "${jndi:ldap://x}", "\ud7ff\ue000", "{}", "null"]
BAD_JSON = ["{", "}", "[", "not json", "null", "1", "\"str\"", "[1, 2]", "{\"a\": NaN}", "{\"a\": Infinity}",
            "[" * 500 + "]" * 500, "\x00", HUGE,
            json.dumps({"min_tier": 5}), json.dumps({"min_tier": "no_such_tier"}), json.dumps({"floor": []}),
            json.dumps({"num_cpus": -1}), json.dumps({"num_cpus": "lots"}), json.dumps({"memory_mib": 1e308}),
            json.dumps({"unknown_field": 1}), json.dumps({"min_tier": {"nested": [1, {"x": None}]}})]
BAD_FLOATS = [math.nan, math.inf, -math.inf, -1.0, 0.0, 1e308, -1e308, 5e-324]
INVALID_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"ok\x80", b"\xe2\x82"]


def bad_value_messages() -> list[tuple[str, bytes]]:
    """Well-formed messages with bad values: (method, serialized body)."""
    out: list[tuple[str, bytes]] = []
    for s in BAD_STRINGS:
        for m in ("Cordon", "Uncordon", "Evict"):
            out.append((m, pb.NodeRequest(node=s).SerializeToString()))
        out.append(("Drain", pb.DrainRequest(node=s, strategy=s).SerializeToString()))
        out.append(("NotifyInterruption", pb.NotifyInterruptionRequest(node=s, kind=s).SerializeToString()))
        out.append(("DeleteBundle", pb.BundleIdRequest(bundle_id=s).SerializeToString()))
        out.append(("GetBundle", pb.BundleIdRequest(bundle_id=s).SerializeToString()))
        out.append(("Migrate", pb.MigrateRequest(job_id=s, strategy=s, target_node=s).SerializeToString()))
        out.append(("AbortMigration", pb.AbortMigrationRequest(migration_id=s, reason=s).SerializeToString()))
        out.append(("WatchEvents", pb.WatchEventsRequest(kinds=[s, s]).SerializeToString()))
        job = pb.BundleJobSpec(name=s, cls=s)
        for m in ("CreateBundle", "UpdateBundle"):
            out.append((m, pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id=s, pool=s, jobs=[job]),
                                                 validate_only=m == "CreateBundle").SerializeToString()))
    for j in BAD_JSON:
        out.append(("Explain", pb.ExplainRequest(requirement_json=j, verbose=True).SerializeToString()))
        out.append(("Explain", pb.ExplainRequest(requirement_json=j).SerializeToString()))
        job = pb.BundleJobSpec(name="j", cls="fabric.testing.counter:CounterJob", args_json=j, kwargs_json=j,
                               requirement_json=j, options_json=j)
        out.append(("CreateBundle", pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id="fz", jobs=[job], options_json=j),
                                                          validate_only=True).SerializeToString()))
        job = pb.BundleJobSpec(name="j", cls="no.such.module:X", args_json=j, requirement_json=j)
        out.append(("CreateBundle", pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id="fz", jobs=[job])).SerializeToString()))
        out.append(("UpdateBundle", pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id="fz", options_json=j)).SerializeToString()))
    for cls in ("no.such.module:X", "fabric:", ":", "a:b:c", "fabric.testing.counter:NoSuchClass", "json:loads",
                "builtins:int", "fabric.core.errors:FabricError", "x" * 400, "fabric.testing.counter:CounterJob.x"):
        job = pb.BundleJobSpec(name="j", cls=cls, args_json="[1]")
        out.append(("CreateBundle", pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id="fz-cls", jobs=[job]),
                                                          validate_only=True).SerializeToString()))
    for x in BAD_FLOATS:
        out.append(("Drain", pb.DrainRequest(node="fz-none", timeout_s=x).SerializeToString()))
        out.append(("NotifyInterruption", pb.NotifyInterruptionRequest(node="fz-none", deadline_epoch=x).SerializeToString()))
    for since in (0, 1, 2**63 - 1, 2**63, 2**64 - 1):
        out.append(("WatchEvents", pb.WatchEventsRequest(since=since, kinds=["no_such_kind"]).SerializeToString()))
    for raw in INVALID_UTF8:  # string fields carrying bytes that are not UTF-8
        out.append(("Cordon", field_bytes(1, raw)))
        out.append(("Explain", field_bytes(1, raw)))
        out.append(("DeleteBundle", field_bytes(1, raw)))
        out.append(("WatchEvents", field_bytes(2, raw)))
        out.append(("CreateBundle", field_bytes(1, field_bytes(1, raw))))
    return out


def wrong_type_messages(rng: random.Random) -> list[tuple[str, bytes]]:
    """One method's message to another; known fields with the wrong wire type; truncated messages."""
    samples = [pb.NodeRequest(node="fz-none"), pb.DrainRequest(node="fz-none", timeout_s=1.0, force=True),
               pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id="fz", jobs=[pb.BundleJobSpec(name="j")])),
               pb.ExplainRequest(requirement_json="{}"), pb.WatchEventsRequest(since=5, kinds=["x"]),
               pb.MigrateRequest(job_id="fz", target_node="fz"), pb.Event(seq=1, kind="k", data_json="{}")]
    out: list[tuple[str, bytes]] = []
    for m in METHODS:
        for s in samples:
            body = s.SerializeToString()
            out.append((m, body))
            if len(body) > 1:
                out.append((m, body[: rng.randrange(1, len(body))]))  # truncated
        for number in range(1, 6):
            out.append((m, varint(number << 3 | 0) + varint(2**64 - 1)))  # a varint where a string is
            out.append((m, varint(number << 3 | 1) + struct.pack("<d", math.nan)))  # fixed64
            out.append((m, varint(number << 3 | 5) + b"\x00\x00\x80\x7f"))  # fixed32
            out.append((m, varint(number << 3 | 2) + varint(2**31)))  # length past the end
            out.append((m, varint(number << 3 | 3)))  # a group start, never ended
        out.append((m, varint(2**29 - 1 << 3 | 2) + b"\x00"))  # the largest field number
        out.append((m, b"\x80" * 11))  # a varint too long
    return out


# -- the live API --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def api():
    """A one-node fabric with the operator actor ``fabric.up`` started: its handle, addresses, token."""
    from fabric.core.names import NAMESPACE

    with LocalFabric(["cpu-only-box"], settings=SETTINGS, max_slots=2, timeout_s=120, node_ip_address=IP) as lf:
        actor = lf.wait_until(lambda: _operator(NAMESPACE), "the operator actor", timeout_s=60)
        address = ray.get(actor.address.remote(), timeout=60)
        token = ray.get(actor.token.remote(), timeout=60)
        yield {"lf": lf, "actor": actor, "grpc": address["grpc"], "http": address["http"], "token": token}


def _operator(namespace: str):
    from fabric.core import names

    try:
        return ray.get_actor(getattr(names, "OPERATOR", "fabric.operator"), namespace=namespace)
    except ValueError:
        return None


class Caller:
    def __init__(self, address: str, token: str) -> None:
        self.channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 8 << 20)])
        self.token = token
        self.unary = {m: self.channel.unary_unary(SERVICE + m, request_serializer=identity, response_deserializer=identity)
                      for m in UNARY}
        self.stream = {m: self.channel.unary_stream(SERVICE + m, request_serializer=identity, response_deserializer=identity)
                       for m in STREAM}
        self.codes: dict[str, int] = {}
        self.details = ""
        self.lock = threading.Lock()

    def meta(self, token: str | None = "", key: str = "authorization") -> list[tuple[str, str]]:
        token = self.token if token == "" else token
        return [] if token is None else [(key, token if token.startswith(("Bearer", "bearer", "Basic")) or not token else f"Bearer {token}")]

    def send(self, method: str, body: bytes, metadata=None) -> grpc.StatusCode:
        """One call; its status code (a stream that opened and waits counts as OK)."""
        code, self.details = self.call(method, body, metadata)
        return code

    def call(self, method: str, body: bytes, metadata=None) -> tuple[grpc.StatusCode, str]:
        """One call, safe from several threads at once: its status code and details."""
        metadata = self.meta() if metadata is None else metadata
        details = ""
        if method in STREAM:
            call = self.stream[method](body, metadata=metadata, timeout=DEADLINE_S)
            box: list = []
            t = concurrent.futures.ThreadPoolExecutor(1)
            fut = t.submit(lambda: box.append(next(call, None)))
            try:
                fut.result(STREAM_WAIT_S)
            except concurrent.futures.TimeoutError:
                pass  # open and waiting for new events: the right answer to a valid request
            except grpc.RpcError:
                pass
            call.cancel()
            t.shutdown(wait=True)
            code = call.code()
            code = grpc.StatusCode.OK if code is grpc.StatusCode.CANCELLED else code
        else:
            try:
                self.unary[method](body, metadata=metadata, timeout=DEADLINE_S)
                code = grpc.StatusCode.OK
            except grpc.RpcError as exc:
                code = exc.code()
                details = (exc.details() or "")[:160]
        with self.lock:
            self.codes[code.name] = self.codes.get(code.name, 0) + 1
        return code, details

    def close(self) -> None:
        self.channel.close()


def status_ok(address: str, token: str) -> "pb.StatusReply":
    from fabric.api import operator_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address) as ch:
        return pb_grpc.OperatorStub(ch).Status(pb.StatusRequest(), metadata=[("authorization", f"Bearer {token}")],
                                               timeout=DEADLINE_S)


def node_cordoned(api, name: str) -> bool:
    return next(n for n in api["lf"].handle.nodes() if n.name == name).cordoned


def test_fuzzed_grpc_stream_gets_typed_answers_and_the_actor_stays_up(api):
    rng = random.Random(17)
    pid = ray.get(api["actor"].pid.remote(), timeout=30)
    before = status_ok(api["grpc"], api["token"])
    messages = [(m, b) for m in METHODS for b in random_bodies(rng, 30)] + bad_value_messages() + wrong_type_messages(rng)
    rng.shuffle(messages)
    assert len(messages) >= MIN_MESSAGES
    c = Caller(api["grpc"], api["token"])
    untyped: list[tuple] = []
    try:
        # SENDERS at a time (a valid WatchEvents waits STREAM_WAIT_S for its first event: one by
        # one, those waits were most of this test's time); every answer is still checked
        with concurrent.futures.ThreadPoolExecutor(SENDERS) as pool:
            answers = list(pool.map(lambda mb: c.call(*mb), messages))
        for (method, body), (code, details) in zip(messages, answers):
            if code not in TYPED:
                untyped.append((method, code.name, details, body[:40]))
        # the same at once: 200 random bodies in flight together
        futures = [(m, c.unary[m].future(b, metadata=c.meta(), timeout=DEADLINE_S))
                   for m, b in ((rng.choice(list(UNARY)), rng.randbytes(rng.randrange(0, 300))) for _ in range(200))]
        for m, f in futures:
            code = f.code()
            c.codes[code.name] = c.codes.get(code.name, 0) + 1
            if code not in TYPED:
                untyped.append((m, code.name, f.details(), b"<concurrent>"))
    finally:
        c.close()
    assert not untyped, f"{len(untyped)} untyped answers (of {sum(c.codes.values())}; {c.codes}), first: {untyped[:10]}; not UNKNOWN: {[u for u in untyped if u[1] != 'UNKNOWN'][:10]}"
    assert sum(c.codes.values()) >= MIN_MESSAGES + 200
    assert c.codes.get("INVALID_ARGUMENT", 0) > 300 and c.codes.get("NOT_FOUND", 0) > 0  # it did refuse, by type
    after = status_ok(api["grpc"], api["token"])
    assert after.node_count == before.node_count == 1 and after.api == before.api
    assert ray.get(api["actor"].pid.remote(), timeout=30) == pid
    assert not node_cordoned(api, "cpu-only-box")  # nothing random acted on the real node


@pytest.mark.parametrize("method", sorted(METHODS))
def test_no_token_wrong_token_malformed_header_are_unauthenticated(api, method):
    c = Caller(api["grpc"], api["token"])
    body = pb.NodeRequest(node="cpu-only-box").SerializeToString() if METHODS[method] is pb.NodeRequest else b""
    bad = [None, "wrong", api["token"][:-1], api["token"] + "x", "Basic " + api["token"], "bearer", "Bearer  ",
           "x" * 4000, "Bearer " + api["token"].upper() if api["token"] != api["token"].upper() else "Bearer nope"]
    try:
        codes = [c.send(method, body, metadata=c.meta(t)) for t in bad]
        codes.append(c.send(method, body, metadata=[("x-authorization", f"Bearer {api['token']}")]))
        codes.append(c.send(method, body, metadata=[("authorization-token", api["token"])]))
    finally:
        c.close()
    assert set(codes) == {grpc.StatusCode.UNAUTHENTICATED}, codes
    c2 = Caller(api["grpc"], api["token"])  # past gRPC's metadata limit: refused by the transport or the token check
    try:
        huge = c2.send(method, body, metadata=c2.meta("x" * 20_000))
    finally:
        c2.close()
    assert huge in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert not node_cordoned(api, "cpu-only-box")


def test_oversized_message_is_resource_exhausted(api):
    c = Caller(api["grpc"], api["token"])
    try:
        code = c.send("Cordon", pb.NodeRequest(node="n" * (17 << 20)).SerializeToString())
    finally:
        c.close()
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert status_ok(api["grpc"], api["token"]).node_count == 1


# -- the JSON view ----------------------------------------------------------------------------------------------
def http_raw(address: str, request: bytes, timeout_s: float = DEADLINE_S) -> int | None:
    """Send ``request`` as is; the status code of the answer (None: the server closed without one)."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as s:
        s.sendall(request)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    if not data.startswith(b"HTTP/1."):
        return None
    return int(data.split(b" ", 2)[1])


def http_requests(rng: random.Random, token: str) -> list[tuple[bytes, set]]:
    """(request bytes, the statuses it may get). A request without the right token: 401, whatever else
    is wrong with it (a request that does not parse as HTTP: 400 or no answer)."""
    good = f"Authorization: Bearer {token}\r\n"
    out: list[tuple[bytes, set]] = []

    def req(method: str, path: str, headers: str = "", body: bytes = b"") -> bytes:
        length = f"Content-Length: {len(body)}\r\n" if body else ""
        return f"{method} {path} HTTP/1.1\r\nHost: x\r\n{headers}{length}Connection: close\r\n\r\n".encode("latin-1") + body

    paths = ["/", "/api", "/api/capabilities", "/api/capabilities/nodes/", "/api/capabilities/nodes/x", "/API/CAPABILITIES/NODES",
             "/api/capabilities/nodes%2f", "/%2e%2e/%2e%2e/etc/passwd", "/api/capabilities/nodes/../../../", "/" + "a" * 6000,
             "/api/capabilities/nodes;x", "/metrics", "/api/../api/capabilities/nodes/x", "/\x7f", "/%00", "/%ff%fe"]
    for p in paths:
        out.append((req("GET", p, good), {404, 400}))
        out.append((req("GET", p), {401, 400}))
    for m in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "CONNECT", "PROPFIND", "FOO", "get"):
        body = rng.randbytes(rng.randrange(0, 2000))
        out.append((req(m, "/api/capabilities/nodes", good, body), {405, 400, 404}))
        out.append((req(m, "/api/capabilities/nodes", "", body), {401, 400}))
    for _ in range(60):
        tok = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789-_.~+/=") for _ in range(rng.randrange(0, 80)))
        scheme = rng.choice(["Bearer ", "bearer ", "Basic ", "", "Token ", "Bearer  "])
        out.append((req("GET", "/api/capabilities/nodes", f"Authorization: {scheme}{tok}\r\n"), {401}))
    out.append((req("GET", "/api/capabilities/nodes", f"Authorization: Bearer {'x' * 7000}\r\n"), {401, 400, 431}))
    out.append((req("GET", "/api/capabilities/nodes", f"Authorization: Bearer {token}\r\nAuthorization: Bearer x\r\n"), {200, 401, 400}))
    for _ in range(140):  # bytes that are not HTTP at all, or HTTP cut short
        raw = rng.randbytes(rng.randrange(1, 600))
        out.append((raw + b"\r\n\r\n", {400, 401, 404, 405, 408, 413, 414, 431, None}))
    for cut in (5, 14, 30, 60):
        out.append((req("GET", "/api/capabilities/nodes", good)[:cut], {400, None}))
    out.append((req("GET", "/api/capabilities/nodes", good, b"x" * 3_000_000), {200, 400, 413}))
    return out


def test_fuzzed_http_view_never_5xx_and_still_serves(api):
    rng = random.Random(1717)
    requests = http_requests(rng, api["token"])

    def one(raw: bytes, allowed: set) -> tuple | None:
        """The request's unexpected answer (None: an allowed one)."""
        try:
            status = http_raw(api["http"], raw, timeout_s=5.0 if len(raw) < 200 or not raw.startswith(b"GET") else DEADLINE_S)
        except socket.timeout:
            status = "timeout"  # a cut-short request waits for the rest: aiohttp's own keep-alive timeout ends it
            if None in allowed:
                return None
        except (ConnectionResetError, BrokenPipeError):
            status = None
        return None if status in allowed else (raw[:80], status, sorted(map(str, allowed)))

    with concurrent.futures.ThreadPoolExecutor(SENDERS) as pool:  # cut-short ones wait out their timeout side by side
        bad = [b for b in pool.map(lambda r: one(*r), requests) if b is not None]
    assert not bad, f"{len(bad)} of {len(requests)} unexpected answers, first: {bad[:8]}"
    host_status = http_raw(api["http"], f"GET /api/capabilities/nodes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {api['token']}"
                           "\r\nConnection: close\r\n\r\n".encode())
    assert host_status == 200
    assert len(requests) >= 250


def test_json_view_lists_the_live_node_in_seed_002_shape(api):
    import http.client

    host, _, port = api["http"].rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE_S)
    try:
        conn.request("GET", "/api/capabilities/nodes", headers={"Authorization": f"Bearer {api['token']}"})
        r = conn.getresponse()
        body = json.loads(r.read())
    finally:
        conn.close()
    assert r.status == 200 and body["count"] == len(body["nodes"]) == 1
    (node,) = body["nodes"]
    assert {"node_id", "hardware", "tier", "limitations", "last_seen", "status"} <= set(node)
    live = api["lf"].node("cpu-only-box")
    assert node["node_id"] == live.node_id and node["name"] == "cpu-only-box" and node["status"] == "active"
    assert node["tier"] == "cpu_ffmpeg" and node["limitations"]["max_concurrent_tasks"] == 2
    assert node["last_seen"].endswith("Z")



DEEP_JSON = ["[" * 100_000 + "]" * 100_000, "{\"a\":" * 50_000 + "1" + "}" * 50_000]


def test_json_nested_past_the_recursion_limit_is_invalid_argument(api):
    c = Caller(api["grpc"], api["token"])
    try:
        codes = []
        for j in DEEP_JSON:
            job = pb.BundleJobSpec(name="j", cls="fabric.testing.counter:CounterJob", args_json=j)
            for method, body in (("Explain", pb.ExplainRequest(requirement_json=j)),
                                 ("CreateBundle", pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id="fz", jobs=[job]),
                                                                        validate_only=True)),
                                 ("UpdateBundle", pb.BundleWriteRequest(bundle=pb.BundleSpec(bundle_id="fz", options_json=j)))):
                codes.append((method, c.send(method, body.SerializeToString()), c.details))
    finally:
        c.close()
    assert {code for _, code, _ in codes} == {grpc.StatusCode.INVALID_ARGUMENT}, codes

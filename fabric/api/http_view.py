"""The read-only JSON view beside the operator API: ``GET /api/capabilities/nodes`` (issue 17).

A capability registry is checked with ``curl -s http://HOST/api/capabilities/nodes | jq
'.nodes | length'``; this is that URL, served from the fabric's own records. The body is one
object ``{"nodes": [...], "count": N}``; each entry has the registry shape::

    {"node_id": ..., "name": ..., "tailscale_ip": ..., "k3s_hostname": ...,
     "hardware": {"arch", "cpu_cores", "cpu_logical", "cpu_usable", "memory_mib",
                  "gpus": [{"model", "vendor", "vram_mib", "discrete", "cuda", "tier",
                            "encoders", "decoders"}],
                  "storage": [{"mount", "type", "size_gib"}], "ffmpeg": [working encoders],
                  "encoders": [every hardware and ffmpeg encoder], "framebuffer": {...} | null},
     "tier": "gpu_cuda", "tiers": [...], "limitations": {"max_concurrent_tasks", "notes"},
     "last_seen": "2026-06-01T04:00:00Z" | null, "status": "active|draining|offline|dead",
     "cordoned": false, "pool": ..., "pool_tier": ..., "jobs": [...], "spare": false}

Security: every request needs ``Authorization: Bearer <token>`` (the operator API's token); a
missing or wrong one is answered 401 (before routing: an unauthenticated caller learns nothing,
not even which paths exist). Only that one path is served, only with ``GET``: any other method
on it is 405, any other path 404. Nothing here changes anything. It lists every node the
registry holds, whatever its status; ``?status=offline,dead`` (or the parameter repeated) lists
only those (an unknown status is answered 400, naming ``status``).

``make_app(nodes, token)`` builds the ``aiohttp`` application; ``nodes`` is an async callable
returning the records (``NodeRecord``, its ``to_dict()`` form, or anything with ``to_dict``): the
operator actor passes its ``AsyncSchedulerApi``'s ``nodes`` and mounts the view beside its gRPC server.
``node_entry`` / ``nodes_document`` are the pure mapping (tested without a server).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Iterable

from aiohttp import web

from fabric.core.errors import MessageError
from fabric.core.node_view import read_statuses

NODES_PATH = "/api/capabilities/nodes"
"""The one path served (the capability registry's URL)."""

NODES_TIMEOUT_S = 10.0
"""How long a request waits for the records before answering 504."""

NodesSource = Callable[[], Awaitable[Iterable[Any]]]

# -- the pure mapping --------------------------------------------------------------------------------------
def _as_dict(rec: Any) -> dict[str, Any]:
    if isinstance(rec, dict):
        return rec
    to_dict = getattr(rec, "to_dict", None)
    if callable(to_dict):
        out = to_dict()
        if isinstance(out, dict):
            return out
    raise MessageError("nodes", "each record must be a NodeRecord or its to_dict() form", rec)


def iso_utc(epoch: Any) -> str | None:
    """Epoch seconds as ``2026-06-01T04:00:00Z`` (None, NaN, or not a number: None)."""
    if isinstance(epoch, bool) or not isinstance(epoch, (int, float)) or not math.isfinite(epoch):
        return None
    try:
        return datetime.fromtimestamp(float(epoch), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return None


def _gpu_tier(g: dict[str, Any]) -> str | None:
    """The tier one GPU gives (the registry lists a tier per GPU): CUDA for an NVML-enumerated NVIDIA
    GPU, VA-API (discrete) or APU (integrated) for an AMD/Intel GPU with a proven encode
    entrypoint; None for a GPU that gives no GPU tier."""
    vendor = str(g.get("vendor") or "").lower()
    if vendor == "nvidia":
        return "gpu_cuda" if g.get("cuda") else None
    profiles = g.get("vaapi_profiles") or {}
    encodes = any(str(ep).startswith("VAEntrypointEncSlice") or ep == "VAEntrypointEncPicture"
                  for eps in profiles.values() for ep in (eps or ()))
    if not encodes:
        return None
    return "gpu_vaapi" if g.get("discrete") else "gpu_apu"


def node_entry(rec: Any) -> dict[str, Any]:
    """One record in the registry shape (see the module doc)."""
    d = _as_dict(rec)
    caps = d.get("capabilities") or {}
    gpus = []
    encoders: list[str] = []
    for g in caps.get("gpus") or ():
        gpus.append({"model": g.get("model"), "vendor": g.get("vendor"), "vram_mib": g.get("vram_mib", 0),
                     "discrete": g.get("discrete"), "cuda": bool(g.get("cuda")), "tier": _gpu_tier(g),
                     "encoders": list(g.get("encoders") or ()), "decoders": list(g.get("decoders") or ())})
        encoders.extend(g.get("encoders") or ())
    ffmpeg = list((caps.get("ffmpeg") or {}).get("working") or ())
    encoders.extend(ffmpeg)
    storage = [{"mount": s.get("mount"), "type": s.get("kind"), "size_gib": s.get("size_gib")} for s in caps.get("storage") or ()]
    tailnet = caps.get("tailnet") or {}
    ips = list(tailnet.get("ips") or ())
    lim = caps.get("limitations") or {}
    slots = d.get("slots") if d.get("slots") is not None else lim.get("max_concurrent_tasks")
    name = d.get("name") or caps.get("name")
    return {
        "node_id": d.get("node_id"),
        "name": name,
        "tailscale_ip": ips[0] if ips else None,
        "k3s_hostname": str(name).split(".")[0] if name else None,
        "hardware": {
            "arch": caps.get("arch"),
            "cpu_cores": caps.get("cpu_physical"),
            "cpu_logical": caps.get("cpu_logical"),
            "cpu_usable": caps.get("cpu_usable"),
            "memory_mib": caps.get("memory_mib"),
            "gpus": gpus,
            "storage": storage,
            "ffmpeg": ffmpeg,
            "encoders": sorted(set(encoders)),
            "framebuffer": caps.get("framebuffer"),
        },
        "tier": d.get("tier") or caps.get("tier"),
        "tiers": list(caps.get("tiers") or ()),
        "limitations": {"max_concurrent_tasks": slots, "notes": list(lim.get("notes") or ())},
        "last_seen": iso_utc(d.get("last_seen")),
        "status": d.get("status"),
        "cordoned": bool(d.get("cordoned")),
        "pool": d.get("pool"),
        "pool_tier": d.get("pool_tier"),
        "jobs": sorted(d.get("jobs") or ()),
        "spare": bool(d.get("spare")),
    }


def nodes_document(records: Iterable[Any], statuses: frozenset[str] | None = None) -> dict[str, Any]:
    """The response body: ``{"nodes": [entry, ...], "count": N}``, in node id order; only the
    entries whose ``status`` is in ``statuses`` when given."""
    entries = sorted((e for e in map(node_entry, records) if statuses is None or str(e.get("status")) in statuses),
                     key=lambda e: str(e["node_id"]))
    return {"nodes": entries, "count": len(entries)}


# -- the server --------------------------------------------------------------------------------------------
def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers or None)


def bearer_ok(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (constant-time comparison)."""
    if not header:
        return False
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), token.encode("utf-8"))


def make_app(nodes: NodesSource, token: str, *, timeout_s: float = NODES_TIMEOUT_S) -> web.Application:
    """The read-only JSON view: ``GET /api/capabilities/nodes`` behind ``token``. ``nodes`` is an
    async callable returning the records; a record source that fails answers 503, one that takes
    longer than ``timeout_s`` answers 504 (the view itself stays up)."""
    if not isinstance(token, str) or not token.strip():
        raise MessageError("token", "the JSON view needs a non-empty bearer token", token)
    if not callable(nodes):
        raise MessageError("nodes", "must be an async callable returning node records", nodes)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (0 < timeout_s < math.inf):
        raise MessageError("timeout_s", "must be a positive number of seconds", timeout_s)

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if not bearer_ok(request.headers.get("Authorization"), token):
            return _error(401, "unauthenticated: a bearer token is required", **{"WWW-Authenticate": 'Bearer realm="fabric"'})
        try:
            return await handler(request)
        except web.HTTPException as exc:  # 404 / 405 from the router, as JSON
            headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
            return _error(exc.status, exc.reason.lower(), **headers)

    async def list_nodes(request: web.Request) -> web.Response:
        try:
            wanted = read_statuses(request.query.getall("status", []))
        except MessageError as exc:
            return _error(400, str(exc))
        try:
            records = await asyncio.wait_for(nodes(), timeout_s)
            body = nodes_document(records, wanted)
        except asyncio.TimeoutError:
            return _error(504, "the fabric did not answer in time")
        except Exception as exc:  # the scheduler is gone or answered nonsense: say so, stay up
            return _error(503, f"the fabric's node records are unavailable: {type(exc).__name__}")
        return web.json_response(body, dumps=lambda o: json.dumps(o, default=str))

    app = web.Application(middlewares=[auth])
    app.router.add_get(NODES_PATH, list_nodes, allow_head=False)
    return app


async def serve_view(nodes: NodesSource, token: str, host: str = "127.0.0.1", port: int = 0,
                     *, timeout_s: float = NODES_TIMEOUT_S) -> tuple[web.AppRunner, int]:
    """Start the view on ``host:port`` (0: any free port) in the running event loop; returns the
    runner (``await runner.cleanup()`` stops it) and the bound port."""
    runner = web.AppRunner(make_app(nodes, token, timeout_s=timeout_s), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = next((a[1] for a in runner.addresses if isinstance(a, tuple)), port)
    return runner, int(bound)

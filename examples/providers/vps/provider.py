#!/usr/bin/env python3
"""A skeleton ``provider: command`` script for a VPS host with an HTTP API (one script for all
three calls: it reads ``action`` from the JSON on stdin). Adapt the three ``*_server`` functions to
your host's API; the contract around them (docs/providers.md) stays as it is.

- provision: creates a server whose first boot (cloud-init user data) installs the fabric and runs
  the ``fabric join`` line it was handed, with ``--block`` under systemd; prints
  ``{"instance_id": ..., "name": ...}``.
- terminate: deletes the server tagged with the instance id (none: already gone, still success).
- list: prints every server tagged ``fabric`` as ``{"instances": [...]}``, with the pool, pool tier
  and shape it was made for (so a restarted fabric may adopt it).

Settings (the command block's ``env``): VPS_API (the API's base URL), VPS_REGION. The token:
$VPS_TOKEN, filled by the command block's ``secret_files`` (sent only as an HTTP header). The
cluster token the machine joins with: $FABRIC_CLUSTER_TOKEN (also a secret file); it reaches the
machine inside its user data, which your host should keep private. Standard library only.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import urllib.error
import urllib.request


def fail(message: str) -> None:
    print(f"provider.py: {message}", file=sys.stderr)
    sys.exit(1)


def api(method: str, path: str, body: dict | None = None) -> object:
    token = os.environ.get("VPS_TOKEN", "").strip()
    base = os.environ.get("VPS_API", "").rstrip("/")
    if not token or not base:
        fail("VPS_API and VPS_TOKEN must be set (VPS_TOKEN by the command block's secret_files)")
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{base}{path}", data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            raw = resp.read()
            return json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        if method == "DELETE" and exc.code == 404:
            return None
        fail(f"{method} {path}: HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}")
    except urllib.error.URLError as exc:
        fail(f"{method} {path}: {exc.reason}")
    return None


# -- adapt these three to your host's API ---------------------------------------------------------------------
def create_server(name: str, size: str, user_data: str, tags: dict[str, str]) -> dict:
    return api("POST", "/servers", {"name": name, "size": size, "region": os.environ.get("VPS_REGION", ""),
                                    "user_data": user_data, "tags": tags})  # type: ignore[return-value]


def delete_server(server_id: str) -> None:
    api("DELETE", f"/servers/{server_id}")


def list_servers() -> list[dict]:
    answer = api("GET", "/servers?tag=fabric")
    return list((answer or {}).get("servers", []))  # type: ignore[union-attr]


# -- the contract ---------------------------------------------------------------------------------------------
def user_data(req: dict) -> str:
    join = shlex.join([*req["join"]["argv"], "--token-file", "/etc/fabric/cluster-token", "--block"])
    token = os.environ.get("FABRIC_CLUSTER_TOKEN", "")
    return "\n".join([
        "#!/bin/sh", "set -e",
        "umask 077 && install -d /etc/fabric",
        "cat > /etc/fabric/cluster-token <<'FABRIC_TOKEN'", token, "FABRIC_TOKEN",
        "python3 -m pip install adaptive-fabric",
        f"systemd-run --unit fabric-node --property=Restart=no {join}", ""])


def main() -> None:
    req = json.load(sys.stdin)
    action = req.get("action") or os.environ.get("FABRIC_ACTION")
    if action == "provision":
        tags = {"fabric": "1", "fabric-instance": req["instance_id"], "fabric-pool": req["pool"],
                "fabric-pool-tier": req["pool_tier"], "fabric-shape": req["shape"]["name"]}
        server = create_server(f"fabric-{req['instance_id']}", req["shape"]["name"], user_data(req), tags)
        print(json.dumps({"instance_id": req["instance_id"], "name": str(server.get("name") or server.get("id"))}))
    elif action == "terminate":
        for server in list_servers():
            if server.get("tags", {}).get("fabric-instance") == req["instance_id"]:
                delete_server(str(server["id"]))
        print("{}")
    elif action == "list":
        out = []
        for server in list_servers():
            tags = server.get("tags", {})
            if tags.get("fabric-instance"):
                out.append({"instance_id": tags["fabric-instance"], "name": server.get("name"), "pool": tags.get("fabric-pool"),
                            "pool_tier": tags.get("fabric-pool-tier"), "shape": tags.get("fabric-shape")})
        print(json.dumps({"instances": out}))
    else:
        fail(f"unknown action {action!r}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A ``provider: command`` script that makes CI runner jobs fabric nodes (one script for all three
calls: it reads ``action`` from the JSON on stdin, as the fabric also says in $FABRIC_ACTION).

- provision: dispatches the workflow ``runner.yml`` (POST .../actions/workflows/WORKFLOW/dispatches)
  with the instance id, the head's address, the pool, pool tier and labels as inputs; prints
  ``{"instance_id": ..., "name": ...}``.
- terminate: cancels the workflow's queued or running run whose title names the instance (its
  run-name is ``fabric runner ID POOL/TIER``); an instance with no such run is already gone.
- list: prints ``{"instances": [...]}``, one per queued or running run of the workflow.

Settings (environment, the command block's ``env``): FABRIC_CI_REPO (owner/name, required),
FABRIC_CI_WORKFLOW (default runner.yml), FABRIC_CI_REF (default main), FABRIC_CI_API (default
https://api.github.com). The token: $GITHUB_TOKEN, which the command block's ``secret_files``
fills from a file (``secret_files: {GITHUB_TOKEN: /etc/fabric/ci-token}``); it is sent only as an
HTTP header, never printed. Python 3.8+, standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

TITLE = "fabric runner "


def fail(message: str) -> None:
    print(f"dispatch.py: {message}", file=sys.stderr)
    sys.exit(1)


def api(method: str, path: str, body: dict | None = None) -> tuple[int, object]:
    """One call of the CI's HTTP API: (status, the JSON it answered or None)."""
    token = os.environ.get("GITHUB_TOKEN", "").strip()
    if not token:
        fail("GITHUB_TOKEN is not set (give it by the command block's secret_files)")
    base = os.environ.get("FABRIC_CI_API", "https://api.github.com").rstrip("/")
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{base}{path}", data=data, method=method, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28", **({"Content-Type": "application/json"} if data else {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as exc:
        fail(f"{method} {path}: HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}")
    except urllib.error.URLError as exc:
        fail(f"{method} {path}: {exc.reason}")
    raise AssertionError("unreachable")


def repo_path() -> str:
    repo = os.environ.get("FABRIC_CI_REPO", "")
    if repo.count("/") != 1:
        fail(f"FABRIC_CI_REPO must be owner/name, got {repo!r}")
    workflow = urllib.parse.quote(os.environ.get("FABRIC_CI_WORKFLOW", "runner.yml"), safe="")
    return f"/repos/{repo}/actions/workflows/{workflow}"


def runs() -> list[dict]:
    """The workflow's queued and running runs that are fabric runners."""
    out = []
    for status in ("queued", "in_progress"):
        _, answer = api("GET", f"{repo_path()}/runs?status={status}&per_page=100")
        for run in (answer or {}).get("workflow_runs", []):
            title = run.get("display_title") or run.get("name") or ""
            if title.startswith(TITLE):
                out.append(run)
    return out


def instance_of(run: dict) -> dict:
    parts = (run.get("display_title") or run.get("name") or "")[len(TITLE):].split()
    entry = {"instance_id": parts[0], "name": f"run-{run.get('id')}"}
    if len(parts) > 1 and "/" in parts[1]:
        entry["pool"], entry["pool_tier"] = parts[1].split("/", 1)
    return entry


def provision(req: dict) -> dict:
    labels = " ".join(f"{k}={v}" for k, v in sorted(req["labels"].items()) if k.startswith("fabric.io/")
                      and k.split("/", 1)[1] not in ("instance", "provider", "pool", "pool-tier"))
    inputs = {"instance_id": req["instance_id"], "address": req["join"]["address"], "pool": req["pool"],
              "pool_tier": req["pool_tier"], "labels": labels}
    status, _ = api("POST", f"{repo_path()}/dispatches", {"ref": os.environ.get("FABRIC_CI_REF", "main"), "inputs": inputs})
    if status not in (200, 201, 204):
        fail(f"the dispatch answered HTTP {status}")
    return {"instance_id": req["instance_id"], "name": f"ci-{req['instance_id']}"}


def terminate(req: dict) -> dict:
    repo = os.environ["FABRIC_CI_REPO"]
    for run in runs():
        if instance_of(run)["instance_id"] == req["instance_id"]:
            api("POST", f"/repos/{repo}/actions/runs/{run['id']}/cancel")
    return {}


def main() -> None:
    req = json.load(sys.stdin)
    action = req.get("action") or os.environ.get("FABRIC_ACTION")
    if action == "provision":
        answer = provision(req)
    elif action == "terminate":
        answer = terminate(req)
    elif action == "list":
        answer = {"instances": [instance_of(run) for run in runs()]}
    else:
        fail(f"unknown action {action!r}")
    print(json.dumps(answer))


if __name__ == "__main__":
    main()

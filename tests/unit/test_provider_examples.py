"""The shipped ``command`` provider examples keep the contract: the CI runner's workflow parses and
its job runs ``fabric join`` with the instance id for the job's lifetime; its dispatch script and
the VPS skeleton, run as the command provider runs them, call a local HTTP stand-in of their API
(127.0.0.1) with the token from their environment, and print what the contract asks for."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from fabric.core.settings import FabricSettings
from fabric.providers.command import CommandProvider, command_tiers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "providers"
TOKEN = "ghp-example-token"


class StandIn:
    """An HTTP API on 127.0.0.1 answering from ``routes`` ("METHOD path" -> (status, JSON)); it keeps
    every request (method, path, headers, JSON body)."""

    def __init__(self, routes: dict[str, tuple[int, object]]) -> None:
        self.routes = routes
        self.seen: list[tuple[str, str, dict, object]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                outer.seen.append((self.command, self.path, dict(self.headers), body))
                status, answer = outer.routes.get(f"{self.command} {self.path}", (404, {"message": "Not Found"}))
                raw = b"" if answer is None else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in():
    made: list[StandIn] = []

    def make(routes):
        made.append(StandIn(routes))
        return made[-1]

    yield make
    for s in made:
        s.close()


def provider(tmp_path: Path, script: Path, env: dict[str, str], secret: str) -> CommandProvider:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    settings = FabricSettings.load({"pools": [{"name": "ci", "tiers": [{
        "name": "runners", "scale_out": "elastic", "provider": "command",
        "candidate_shapes": [{"name": "ubuntu-latest", "num_cpus": 4}],
        "command": {"provision": str(script), "terminate": str(script), "list": str(script), "timeout_s": 30, "env": env,
                    "secret_files": {secret: str(token)}}}]}]})
    return CommandProvider(command_tiers(settings), address="100.64.0.1:6379", new_id=lambda: "cmd-0a1b",
                           env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})


def test_the_ci_workflow_parses_and_its_job_runs_fabric_join_with_the_instance_id_for_its_lifetime():
    wf = yaml.safe_load((EXAMPLES / "ci-runner" / "runner.yml").read_text())
    trigger = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` as true
    inputs = trigger["workflow_dispatch"]["inputs"]
    assert {"instance_id", "address", "pool", "pool_tier", "labels"} <= set(inputs) and inputs["instance_id"]["required"]
    assert "${{ inputs.instance_id }}" in wf["run-name"]
    (job,) = wf["jobs"].values()
    step = next(s for s in job["steps"] if "fabric join" in s.get("run", ""))
    run = " ".join(step["run"].replace("\\\n", " ").split())
    assert step["env"]["FABRIC_INSTANCE_ID"] == "${{ inputs.instance_id }}"
    for flag in ('--role batch', '--instance "$FABRIC_INSTANCE_ID"', "--provider command", '--address "$FABRIC_ADDRESS"', "--block"):
        assert flag in run, flag
    assert "secrets." not in run  # secrets by environment only


def test_the_ci_dispatch_script_dispatches_lists_and_cancels_through_the_ci_api(tmp_path, stand_in):
    wf = "/repos/acme/fleet/actions/workflows/runner.yml"
    run = {"id": 42, "display_title": "fabric runner cmd-0a1b ci/runners"}
    api = stand_in({f"POST {wf}/dispatches": (204, None),
                    f"GET {wf}/runs?status=queued&per_page=100": (200, {"workflow_runs": [run]}),
                    f"GET {wf}/runs?status=in_progress&per_page=100": (200, {"workflow_runs": [
                        {"id": 7, "display_title": "an unrelated run"}]}),
                    "POST /repos/acme/fleet/actions/runs/42/cancel": (202, {})})
    p = provider(tmp_path, EXAMPLES / "ci-runner" / "dispatch.py", {"FABRIC_CI_API": api.url, "FABRIC_CI_REPO": "acme/fleet"},
                 "GITHUB_TOKEN")
    shape = p.tiers[("ci", "runners")].candidate_shapes[0]
    node = p.provision(shape, pool="ci", pool_tier="runners")
    assert node.instance_id == "cmd-0a1b" and node.name == "ci-cmd-0a1b"
    method, path, headers, body = api.seen[0]
    assert (method, path) == ("POST", f"{wf}/dispatches") and headers["Authorization"] == f"Bearer {TOKEN}"
    assert body["ref"] == "main" and body["inputs"]["instance_id"] == "cmd-0a1b"
    assert body["inputs"]["address"] == "100.64.0.1:6379" and (body["inputs"]["pool"], body["inputs"]["pool_tier"]) == ("ci", "runners")
    assert "fabric.io/shape=ubuntu-latest" in body["inputs"]["labels"].split()
    assert p.listed("ci", "runners") == {"cmd-0a1b": {"instance_id": "cmd-0a1b", "name": "run-42", "pool": "ci",
                                                     "pool_tier": "runners"}}
    p.terminate("cmd-0a1b")
    assert ("POST", "/repos/acme/fleet/actions/runs/42/cancel") in [(m, pa) for m, pa, _, _ in api.seen]
    assert p.list() == []


def test_the_ci_dispatch_scripts_refusal_reaches_the_fabric_with_its_words(tmp_path, stand_in):
    wf = "/repos/acme/fleet/actions/workflows/runner.yml"
    api = stand_in({f"POST {wf}/dispatches": (422, {"message": "Workflow does not have 'workflow_dispatch' trigger"})})
    p = provider(tmp_path, EXAMPLES / "ci-runner" / "dispatch.py", {"FABRIC_CI_API": api.url, "FABRIC_CI_REPO": "acme/fleet"},
                 "GITHUB_TOKEN")
    from fabric.providers import ProviderError

    with pytest.raises(ProviderError) as err:
        p.provision(p.tiers[("ci", "runners")].candidate_shapes[0], pool="ci", pool_tier="runners")
    assert err.value.reason == "script_failed" and "HTTP 422" in err.value.log_tail and "workflow_dispatch" in str(err.value)


def test_the_vps_skeleton_creates_lists_and_deletes_through_its_api(tmp_path, stand_in):
    server = {"id": "s-9", "name": "fabric-cmd-0a1b", "tags": {"fabric": "1", "fabric-instance": "cmd-0a1b", "fabric-pool": "ci",
                                                               "fabric-pool-tier": "runners", "fabric-shape": "ubuntu-latest"}}
    api = stand_in({"POST /servers": (201, server), "GET /servers?tag=fabric": (200, {"servers": [server]}),
                    "DELETE /servers/s-9": (204, None)})
    p = provider(tmp_path, EXAMPLES / "vps" / "provider.py", {"VPS_API": api.url}, "VPS_TOKEN")
    node = p.provision(p.tiers[("ci", "runners")].candidate_shapes[0], pool="ci", pool_tier="runners")
    assert node.name == "fabric-cmd-0a1b"
    method, path, headers, body = api.seen[0]
    assert (method, path) == ("POST", "/servers") and headers["Authorization"] == f"Bearer {TOKEN}"
    assert body["tags"]["fabric-instance"] == "cmd-0a1b" and body["size"] == "ubuntu-latest"
    assert "fabric join --address 100.64.0.1:6379 --instance cmd-0a1b --provider command" in body["user_data"]
    assert body["user_data"].rstrip().endswith("--block") and TOKEN not in body["user_data"]  # the API token is not the node's
    assert p.listed("ci", "runners")["cmd-0a1b"] == {"instance_id": "cmd-0a1b", "name": "fabric-cmd-0a1b", "pool": "ci",
                                                     "pool_tier": "runners", "shape": "ubuntu-latest"}
    p.terminate("cmd-0a1b")
    assert api.seen[-1][:2] == ("DELETE", "/servers/s-9")


@pytest.mark.parametrize("script", sorted(EXAMPLES.glob("*/*.py")), ids=lambda p: p.parent.name)
def test_every_example_script_compiles_and_is_executable(script):
    compile(script.read_text(), str(script), "exec")
    assert script.stat().st_mode & 0o111 and script.read_text().startswith("#!/usr/bin/env python3\n")
    assert sys.version_info >= (3, 8)

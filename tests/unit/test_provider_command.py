"""The ``command`` provider without Ray: its scripts are tiny Python programs written to tmp_path.
A provision hands the script its request (the instance id, the ``fabric join`` line carrying it) and
keeps what it answers; a non-zero exit, bad JSON and a timeout are each a ``ProviderError`` with the
script's stderr, after which the instance is terminated; secrets reach the script by its environment,
never its arguments or its stdin, and never show in an error; after a restart ``list`` is the truth."""

from __future__ import annotations

import asyncio
import json
import pickle
import shlex
import sys
from pathlib import Path

import pytest

from actors.provisioner import Provisioner
from fabric.core.errors import SettingsError
from fabric.core.settings import FabricSettings
from fabric.providers import ProviderError, providers_for
from fabric.providers.command import CommandProvider, command_tiers
from fabric.store.jobs import JobStore

SHAPE = {"name": "ci-small", "num_cpus": 2, "zone": "eu-1"}


def script(tmp_path: Path, name: str, body: str) -> str:
    """An executable Python script in ``tmp_path``: ``req`` is the JSON it was handed; every call
    appends ``[argv, request, environment's SECRET]`` to ``calls.jsonl``."""
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport json, os, sys, time\nreq = json.load(sys.stdin)\n"
                    f"with open({str(tmp_path / 'calls.jsonl')!r}, 'a') as f:\n"
                    f"    f.write(json.dumps([sys.argv, req, os.environ.get('SECRET')]) + '\\n')\n{body}\n")
    path.chmod(0o755)
    return str(path)


def calls(tmp_path: Path) -> list:
    f = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


OK_PROVISION = "print(json.dumps({'instance_id': req['instance_id'], 'name': 'vm-' + req['instance_id']}))"
OK_TERMINATE = "print('{}')"


def settings(tmp_path: Path, provision: str = OK_PROVISION, terminate: str = OK_TERMINATE, listing: str = "print('{\"instances\": []}')",
             **block) -> FabricSettings:
    secret = tmp_path / "token"
    secret.write_text("s3cr3t-value\n")
    cmd = {"provision": script(tmp_path, "provision", provision), "terminate": script(tmp_path, "terminate", terminate),
           "list": script(tmp_path, "list", listing), "timeout_s": 5, "secret_files": {"SECRET": str(secret)}, **block}
    return FabricSettings.load({"pools": [{"name": "ci", "tiers": [
        {"name": "runners", "scale_out": "elastic", "provider": "command", "candidate_shapes": [SHAPE], "command": cmd}]}]})


def provider(tmp_path: Path, **kw) -> CommandProvider:
    s = settings(tmp_path, **kw)
    return CommandProvider(command_tiers(s), address="10.0.0.1:6379", new_id=lambda: "cmd-1")


def shape(p: CommandProvider):
    return p.tiers[("ci", "runners")].candidate_shapes[0]


def test_a_provision_hands_the_script_its_instance_id_and_join_line_and_keeps_its_answer(tmp_path):
    p = provider(tmp_path)
    node = p.provision(shape(p), pool="ci", pool_tier="runners", tags={"team": "video"})
    assert node.instance_id == "cmd-1" and node.name == "vm-cmd-1" and node.provider == "command"
    assert [n.instance_id for n in p.list()] == ["cmd-1"]
    (argv, req, secret), = calls(tmp_path)
    assert argv[1:] == [] and secret == "s3cr3t-value"  # no arguments at all; the secret by environment
    assert req["action"] == "provision" and req["instance_id"] == "cmd-1" and req["shape"]["name"] == "ci-small"
    join = req["join"]["argv"]
    assert join[:6] == ["fabric", "join", "--address", "10.0.0.1:6379", "--instance", "cmd-1"]
    assert {"--provider", "command", "--pool", "ci", "--pool-tier", "runners", "--zone", "eu-1"} <= set(join)
    assert "fabric.io/team=video" in join and "fabric.io/spare=false" in join and shlex.split(req["join"]["command"]) == join
    assert req["labels"]["fabric.io/instance"] == "cmd-1" and "s3cr3t" not in json.dumps(req)
    p.terminate("cmd-1")
    assert calls(tmp_path)[-1][1] == {"action": "terminate", "instance_id": "cmd-1", "pool": "ci", "pool_tier": "runners",
                                      "name": "vm-cmd-1"}
    assert p.list() == []
    with pytest.raises(ProviderError) as err:
        p.terminate("cmd-1")
    assert err.value.reason == "unknown_instance"


@pytest.mark.parametrize("body, reason, said", [
    ("sys.stderr.write('quota exceeded for s3cr3t-value\\n'); sys.exit(3)", "script_failed", "quota exceeded for ***"),
    ("sys.stderr.write('half-way\\n'); print('not json')", "bad_answer", "half-way"),
    ("print('[1, 2]')", "bad_answer", ""),
    ("print(json.dumps({'instance_id': 'other'}))", "bad_answer", ""),
    ("sys.stderr.write('waiting for the cloud\\n'); sys.stderr.flush(); time.sleep(30)", "script_timeout", "waiting for the cloud"),
])
def test_every_failure_of_the_provision_script_is_a_provider_error_with_its_stderr_then_a_terminate(tmp_path, body, reason, said):
    p = provider(tmp_path, provision=body, timeout_s=1 if reason == "script_timeout" else 10)
    with pytest.raises(ProviderError) as err:
        p.provision(shape(p), pool="ci", pool_tier="runners")
    e = err.value
    assert e.reason == reason and e.provider == "command" and e.instance_id == "cmd-1"
    assert said in e.log_tail and said in str(e) and "s3cr3t" not in str(e) + e.log_tail
    assert p.list() == []
    assert [c[1]["action"] for c in calls(tmp_path)] == ["provision", "terminate"]  # nothing billed left behind


def test_a_script_that_is_not_there_or_a_secret_that_cannot_be_read_is_named(tmp_path):
    p = provider(tmp_path)
    Path(p.tiers[("ci", "runners")].command.provision).unlink()
    with pytest.raises(ProviderError) as err:
        p.provision(shape(p), pool="ci", pool_tier="runners")
    assert err.value.reason == "script_missing" and err.value.field == "command.provision"
    (tmp_path / "token").unlink()
    with pytest.raises(ProviderError) as err:
        p.listed("ci", "runners")
    assert err.value.reason == "secret_unreadable" and err.value.field == "command.secret_files.SECRET"


def test_a_failed_terminate_keeps_the_instance_listed(tmp_path):
    p = provider(tmp_path, terminate="sys.stderr.write('api down\\n'); sys.exit(1)")
    p.provision(shape(p), pool="ci", pool_tier="runners")
    with pytest.raises(ProviderError) as err:
        p.terminate("cmd-1")
    assert err.value.reason == "script_failed" and "api down" in err.value.log_tail
    assert [n.instance_id for n in p.list()] == ["cmd-1"]


def test_a_command_tier_without_its_scripts_is_refused_naming_the_field():
    with pytest.raises(SettingsError) as err:
        FabricSettings.load({"pools": [{"name": "ci", "tiers": [
            {"name": "runners", "scale_out": "elastic", "provider": "command", "candidate_shapes": [SHAPE]}]}]})
    assert [(p.code, p.path) for p in err.value.problems] == [("command_without_scripts", "pools.0.tiers.0.command")]
    with pytest.raises(SettingsError) as err:
        FabricSettings.load({"pools": [{"name": "ci", "tiers": [{"name": "runners", "scale_out": "elastic", "provider": "command",
                                                                  "candidate_shapes": [SHAPE], "command": {"provision": "p"}}]}]})
    assert {p.path for p in err.value.problems} == {"pools.0.tiers.0.command.terminate", "pools.0.tiers.0.command.list"}


def test_providers_for_builds_the_command_provider(tmp_path):
    built = providers_for(settings(tmp_path), address="10.0.0.1:6379")
    assert isinstance(built["command"], CommandProvider) and built["command"].address == "10.0.0.1:6379"


LISTING = """listed = os.path.join(os.path.dirname(sys.argv[0]), 'listed.json')
print(open(listed).read() if os.path.exists(listed) else '{"instances": []}')"""
LISTED = {"instances": [{"instance_id": "cmd-kept"},
                        {"instance_id": "cmd-stray", "pool": "ci", "pool_tier": "runners", "shape": "ci-small", "name": "vm-stray"},
                        {"instance_id": "cmd-nameless"}]}


class _Host:
    jobs = None
    feed = None

    def __init__(self, settings):
        self.settings = settings

    def handle_stimulus(self, stimulus):
        return None


@pytest.mark.parametrize("unknown", ["terminate", "adopt"])
def test_after_a_restart_the_list_script_is_the_truth(tmp_path, unknown):
    s = settings(tmp_path, listing=LISTING, unknown_instances=unknown)
    store = JobStore(tmp_path / "fabric.jobs.db")
    ids = iter(["cmd-kept", "cmd-gone"])
    first = CommandProvider(command_tiers(s), address="10.0.0.1:6379", new_id=lambda: next(ids))
    pv = Provisioner(_Host(s), providers={"command": first})
    assert pv.attach(store) == 0  # the script lists nothing yet
    for _ in range(2):
        asyncio.run(pv.provision("command", first.tiers[("ci", "runners")].candidate_shapes[0], "ci", "runners", spare=False))
    (tmp_path / "listed.json").write_text(json.dumps(LISTED))
    # the scheduler dies; a new provider over the same store: the script lists cmd-kept and two it never remembered
    second = CommandProvider(command_tiers(s), address="10.0.0.1:6379")
    after = Provisioner(_Host(s), providers={"command": second})
    after.attach(store)
    held = sorted(n.instance_id for n in second.list())
    terminated = [c[1]["instance_id"] for c in calls(tmp_path) if c[1]["action"] == "terminate"]
    notes = {(e["kind"], e.get("instance_id")) for e in after.log}
    assert ("instance_forgotten", "cmd-gone") in notes and ("instance_adopted", "cmd-kept") in notes
    if unknown == "terminate":
        assert held == ["cmd-kept"] and sorted(terminated) == ["cmd-nameless", "cmd-stray"]
        assert sorted(k for k, _ in store.state("instance")) == ["command/cmd-kept"]
    else:  # adopted when its entry says where it belongs; a nameless one is still terminated
        assert held == ["cmd-kept", "cmd-stray"] and terminated == ["cmd-nameless"]
        assert sorted(k for k, _ in store.state("instance")) == ["command/cmd-kept", "command/cmd-stray"]
        assert ("instance_adopted", "cmd-stray") in notes
    assert sum(1 for c in calls(tmp_path) if c[1]["action"] == "list") == 2  # once per attach, not once per row


def test_a_list_script_that_fails_after_a_restart_keeps_what_the_store_remembers(tmp_path):
    s = settings(tmp_path, listing="sys.stderr.write('cloud api unreachable\\n'); sys.exit(1)")
    store = JobStore(tmp_path / "fabric.jobs.db")
    first = CommandProvider(command_tiers(s), address="10.0.0.1:6379", new_id=lambda: "cmd-1")
    pv = Provisioner(_Host(s), providers={"command": first})
    pv.attach(store)
    asyncio.run(pv.provision("command", first.tiers[("ci", "runners")].candidate_shapes[0], "ci", "runners", spare=False))
    second = CommandProvider(command_tiers(s), address="10.0.0.1:6379")
    after = Provisioner(_Host(s), providers={"command": second})
    assert after.attach(store) == 1 and [n.instance_id for n in second.list()] == ["cmd-1"]
    failed = [e for e in after.log if e["kind"] == "list_failed"]
    assert failed and "cloud api unreachable" in failed[0]["log_tail"]
    assert after.close() == 1 and store.state("instance") == []  # fabric down terminates it


def test_a_provider_error_keeps_the_scripts_stderr_across_pickling(tmp_path):
    p = provider(tmp_path, provision="sys.stderr.write('no capacity in eu-1\\n'); sys.exit(2)")
    with pytest.raises(ProviderError) as err:
        p.provision(shape(p), pool="ci", pool_tier="runners")
    again = pickle.loads(pickle.dumps(err.value))
    assert type(again) is ProviderError and again.reason == "script_failed" and again.log_tail == "no capacity in eu-1"
    assert again.field == "command.provision" and str(again) == str(err.value)

"""``fabric join`` / ``start-head`` / ``status`` without a cluster: the ray start line they build,
how they refuse, and the status table."""

from __future__ import annotations

import json
import socket
import time

import pytest

from fabric.cli import main
from fabric.cli.node import build_ray_start, format_status_table, parse_address, status_rows
from fabric.core.capabilities import NodeCapabilities


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_join_dry_run_prints_the_ray_start_line_with_probed_resources_and_labels(capsys):
    code, out, err = run(capsys, "join", "--address", "127.0.0.1:6379", "--profile", "gpu-cuda-workstation", "--pool", "gpu",
                         "--zone", "home", "--dry-run")
    assert code == 0, err
    line = [ln for ln in out.splitlines() if ln.startswith("would run: ")][0]
    assert " start --address=127.0.0.1:6379 " in line and "--num-cpus=12" in line
    assert '"fabric.slots":12.0' in line and '"fabric.tier.gpu_cuda":1.0' in line
    for label in ("fabric.io/tier=gpu_cuda", "fabric.io/profile=gpu-cuda-workstation", "fabric.io/name=gpu-cuda-workstation",
                  "fabric.io/pool=gpu", "fabric.io/zone=home"):
        assert label in line
    assert "probed gpu-cuda-workstation" in out


def test_start_head_dry_run_and_recording_goes_through_the_environment(capsys, tmp_path):
    from probes.profiles import profile_path

    code, out, err = run(capsys, "start-head", "--recording", str(profile_path("edge-relay")), "--port", "6380", "--dry-run", "--", "--block")
    assert code == 0, err
    line = [ln for ln in out.splitlines() if ln.startswith("would run: ")][0]
    assert line.startswith(f"would run: FABRIC_RECORDING={profile_path('edge-relay').resolve()} ")
    assert " start --head --port=6380 " in line and "fabric.io/tier=relay" in line and line.endswith("--block")
    assert "fabric.io/profile" not in line  # a folder is not a profile: the path travels in the environment


def test_role_and_slots_override(capsys):
    code, out, _ = run(capsys, "join", "--address", "h:1", "--profile", "cpu-only-box", "--role", "relay", "--max-concurrent-tasks", "1", "--dry-run")
    assert code == 0 and "fabric.io/tier=relay" in out and "--num-cpus=1" in out and "fabric.io/role=relay" in out


def test_missing_ray_is_one_clear_line_and_exit_2(capsys, tmp_path):
    code, out, err = run(capsys, "join", "--address", "127.0.0.1:6379", "--profile", "edge-relay", "--ray", str(tmp_path / "no-ray"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "the `ray` command was not found" in err


@pytest.mark.parametrize("address", ["nohost", "host:", ":6379", "host:99999", "host:port"])
def test_malformed_address_is_refused(capsys, address):
    code, _, err = run(capsys, "join", "--address", address, "--profile", "edge-relay")
    assert code == 2 and "is not HOST:PORT" in err


def test_unreachable_address_is_refused_before_ray_start(capsys):
    port = _free_port()
    code, out, err = run(capsys, "join", "--address", f"127.0.0.1:{port}", "--profile", "edge-relay")
    assert code == 1 and f"cannot reach the head at 127.0.0.1:{port}" in err  # not reachable: 1, bad input: 2
    assert "running: " in out  # it said what it would have run


def test_bad_profile_and_recording_are_refused(capsys, tmp_path):
    code, _, err = run(capsys, "join", "--address", "h:1", "--profile", "no-such-profile", "--dry-run")
    assert code == 2 and "unknown profile" in err
    code, _, err = run(capsys, "join", "--address", "h:1", "--recording", str(tmp_path / "missing"), "--dry-run")
    assert code == 2 and "not a folder" in err


def test_parse_address():
    assert parse_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert parse_address("[::1]:6379") == ("::1", 6379)


def test_build_ray_start_is_pure():
    caps = NodeCapabilities(name="n", cpu_logical=4, cpu_physical=2, cpu_usable=4, memory_mib=8192)
    argv, env = build_ray_start(caps, ray="/x/ray", address="h:1", profile="p")
    assert argv[:3] == ["/x/ray", "start", "--address=h:1"] and env == {}
    assert argv[4] == "--num-gpus=0"  # the GPUs the probe found, none here: Ray must not guess its own
    assert json.loads(argv[5].split("=", 1)[1]) == caps.to_ray_resources()


class _Rec:
    def __init__(self, name, tier_caps, **kw):
        self.node_id, self.name, self.capabilities = kw.pop("node_id", name * 8), name, tier_caps
        self.tier = None
        self.status = kw.pop("status", "active")
        self.running, self.max_concurrent_tasks, self.utilization = kw.pop("running", 0), None, kw.pop("utilization", 0.0)
        self.last_seen, self.cordoned, self.flap_held = kw.pop("last_seen", None), kw.pop("cordoned", False), kw.pop("flap_held", False)


def test_status_table_and_json_rows():
    from fabric.core.capabilities import GpuInfo, GpuVendor, Limitations

    gpu = GpuInfo(vendor=GpuVendor.NVIDIA, model="NVIDIA GeForce RTX 4070", discrete=True, cuda=True)
    cuda = NodeCapabilities(name="ws", cpu_logical=12, cpu_physical=6, cpu_usable=12, memory_mib=32000, gpus=(gpu,),
                            limitations=Limitations(max_concurrent_tasks=12))
    relay = NodeCapabilities(name="edge", roles=("relay",))
    now = time.time()
    rows = status_rows([_Rec("edge", relay, last_seen=now - 2, flap_held=True), _Rec("ws", cuda, running=3, utilization=0.25, last_seen=now - 0.5)], now)
    assert rows[1]["tier"] == "gpu_cuda" and rows[1]["gpus"] == ["NVIDIA GeForce RTX 4070"] and rows[1]["max"] == 12
    table = format_status_table(rows, now)
    lines = table.splitlines()
    assert lines[0].split() == ["NAME", "TIER", "GPUS", "STATUS", "RUNNING/MAX", "UTIL", "LAST", "SEEN", "NODE"]
    assert lines[1].startswith("ws") and "3/12" in lines[1] and "25%" in lines[1] and "0.5s ago" in lines[1]
    assert lines[2].startswith("edge") and "flap-held" in lines[2]
    json.dumps(rows)
    assert "(no nodes registered)" in format_status_table([], now)


def test_start_head_uses_the_tailnet_address_and_prints_the_join_line_and_the_dashboard(capsys):
    code, out, _ = run(capsys, "start-head", "--profile", "edge-relay", "--port", "6390", "--dry-run")
    assert code == 0 and "--node-ip-address=100.101.102.103" in out and "--dashboard-host=" not in out
    assert "the other machines join with: fabric join --address 100.101.102.103:6390" in out
    assert "dashboard: http://127.0.0.1:8265, this machine only" in out
    code, out, _ = run(capsys, "start-head", "--profile", "edge-relay", "--dashboard-host", "0.0.0.0",
                       "--node-ip-address", "198.51.100.7", "--dry-run")
    assert "--node-ip-address=198.51.100.7" in out and "--dashboard-host=0.0.0.0" in out
    assert "fabric join --address 198.51.100.7:6379" in out
    assert "ray job submit --address http://198.51.100.7:8265" in out


def test_a_node_address_given_to_ray_start_itself_is_not_given_twice(capsys):
    code, out, _ = run(capsys, "join", "--address", "h:1", "--profile", "edge-relay", "--dry-run", "--",
                       "--node-ip-address=198.51.100.9")
    assert code == 0 and out.count("--node-ip-address") == 1 and "--node-ip-address=198.51.100.9" in out
    code, out, _ = run(capsys, "join", "--address", "h:1", "--profile", "cpu-only-box", "--dry-run")
    assert "--node-ip-address" not in out  # no tailnet probed: Ray chooses


def test_status_wide_and_json_show_the_address_ray_knows_each_node_by():
    from fabric.cli.status_cmd import node_address

    relay = NodeCapabilities(name="edge", roles=("relay",))
    rec = _Rec("edge", relay, last_seen=time.time())
    rec.ray_resources = {"CPU": 1.0, "node:__internal_head__": 1.0, "node:198.51.100.2": 1.0}
    assert node_address(rec) == "198.51.100.2"
    rows = status_rows([rec], time.time())
    assert rows[0]["address"] == "198.51.100.2"
    wide = format_status_table(rows, time.time(), None, address=True).splitlines()
    assert wide[0].split()[-1] == "ADDRESS" and wide[1].split()[-1] == "198.51.100.2"
    assert "ADDRESS" not in format_status_table(rows, time.time(), None)


def _labels_of(out: str) -> dict[str, str]:
    line = [ln for ln in out.splitlines() if ln.startswith("would run: ")][0]
    labels = next(a for a in line.split() if a.startswith("--labels="))[len("--labels="):]
    return dict(kv.split("=", 1) for kv in labels.split(","))


def test_join_instance_binds_the_node_to_its_provision_from_the_flags_or_the_environment(capsys, monkeypatch):
    code, out, err = run(capsys, "join", "--address", "h:1", "--profile", "cpu-only-box", "--instance", "cmd-0a1b",
                         "--provider", "command", "--label", "fabric.io/shape=ci-small", "--label", "team=video", "--dry-run")
    assert code == 0, err
    labels = _labels_of(out)
    assert labels["fabric.io/instance"] == "cmd-0a1b" and labels["fabric.io/provider"] == "command"
    assert labels["fabric.io/shape"] == "ci-small" and labels["fabric.io/team"] == "video"
    monkeypatch.setenv("FABRIC_INSTANCE_ID", "cmd-env")
    monkeypatch.setenv("FABRIC_PROVIDER", "command")
    code, out, err = run(capsys, "join", "--address", "h:1", "--profile", "cpu-only-box", "--dry-run")
    assert code == 0, err
    assert _labels_of(out)["fabric.io/instance"] == "cmd-env" and _labels_of(out)["fabric.io/provider"] == "command"


@pytest.mark.parametrize("flags, said", [
    (["--instance", "a/b"], "--instance 'a/b' is not a valid label value"),
    (["--label", "novalue"], "--label 'novalue' is not KEY=VALUE"),
    (["--label", "fabric.io/name=x"], "fabric.io/name"),
])
def test_join_refuses_a_bad_instance_or_label_naming_the_flag(capsys, flags, said):
    code, out, err = run(capsys, "join", "--address", "h:1", "--profile", "cpu-only-box", *flags, "--dry-run")
    assert code == 2 and said in err and "would run" not in out


def test_the_command_providers_join_line_labels_the_node_as_the_provider_expects(capsys):
    """The join line a provision hands its script, run as given, labels the node with every label the
    provider recorded: the scheduler matches the two by them."""
    from fabric.core.settings import NodeShape
    from fabric.providers.command import join_argv

    labels = {"fabric.io/pool": "ci", "fabric.io/pool-tier": "runners", "fabric.io/instance": "cmd-0a1b",
              "fabric.io/provider": "command", "fabric.io/spare": "true", "fabric.io/shape": NodeShape(name="ci-small").name,
              "fabric.io/zone": "eu-1", "fabric.io/team": "video"}
    argv = join_argv("h:1", "cmd-0a1b", labels)
    code, out, err = run(capsys, *argv[1:], "--profile", "cpu-only-box", "--dry-run")
    assert code == 0, err
    assert labels.items() <= _labels_of(out).items()

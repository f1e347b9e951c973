"""A fleet of hosts in network namespaces (``fabric.testing.netns.NetnsFleet``): a head and two
nodes started with ``fabric start-head`` / ``fabric join`` inside their own namespaces, each with
its own 198.51.100.x address and token auth on; real partitions (link down, one-way drops) that
the fabric is not told about; and a teardown that leaves nothing behind, also when the body raises.

ONE fleet serves the module (the head, n1 under ``fabric join --supervise``, n2 blocking). Tests
run in file order: the reads come first, then n2 is cut and joins again by hand, then n1 loses its
outgoing packets and its supervisor brings it back once healed. Waits are bounded polls that fail
saying what they waited for; nothing asserts a duration. Needs root, ``ip`` and network namespaces:
without them the module skips (``CI=true``: fails), naming what is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fabric.testing.netns import NetnsFleet, netns_problem, one_way_problem, require
from fabric.testing.netns_net import STATE_DIR, Names, RunRecord, pid_alive, sh, state_lock

pytestmark = pytest.mark.integration

SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0, "reprobe_interval_s": 300.0}}
HEAD_PROFILE = "edge-relay"  # tier relay: work that needs cpu_ffmpeg must run on n1 or n2
NODE_PROFILE = "cpu-only-box"


def left_behind(names: Names) -> list[str]:
    """Every namespace, link, nft table and folder of run ``names`` still on this machine."""
    left = [f"netns {n}" for n in sh(["ip", "netns", "list"], check=False).stdout.split() if names.run_id in n]
    left += [f"link {line.strip()}" for line in sh(["ip", "-o", "link"], check=False).stdout.splitlines()
             if names.run_id in line]
    if sh(["which", "nft"], check=False).returncode == 0:
        left += [f"nft {line}" for line in sh(["nft", "list", "tables"], check=False).stdout.splitlines() if names.run_id in line]
    if Path(f"/tmp/afn-{names.run_id}").exists():
        left.append(f"folder /tmp/afn-{names.run_id}")
    return left


@pytest.fixture(scope="module")
def fleet():
    require(netns_problem())
    with NetnsFleet(auth=True) as f:
        f.start_head("head", profile=HEAD_PROFILE)
        f.join("n1", profile=NODE_PROFILE, supervise=True)  # fabric join --supervise: it comes back after a cut
        f.join("n2", profile=NODE_PROFILE)
        f.wait_nodes(3, timeout_s=120)
        config = f.folder / "fabric.json"
        config.write_text(json.dumps(SETTINGS))  # JSON is YAML
        up = f.run(None, ["fabric", "up", "--address", f.address, "--config", str(config), "--no-scheduler",
                          "--timeout", "120"], timeout_s=240)
        assert up.returncode == 0, f"fabric up failed: {up.stdout[-1500:]}{up.stderr[-1500:]}"
        yield f
    assert left_behind(f.names) == []


def fabric_json(f: NetnsFleet, command: str) -> list[dict]:
    proc = f.run(None, ["fabric", command, "--address", f.address, "--json"], timeout_s=120)
    assert proc.returncode == 0, f"fabric {command}: {proc.stdout[-1000:]}{proc.stderr[-1500:]}"
    return json.loads(proc.stdout)


def wait_registry(f: NetnsFleet, node_id: str, statuses: set[str], timeout_s: float = 60.0) -> dict:
    """Poll ``fabric nodes --json`` until the record of Ray node ``node_id`` has a status in ``statuses``."""
    deadline, rows = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline:
        rows = [r for r in fabric_json(f, "nodes") if r["node_id"] == node_id]
        if rows and rows[0]["status"] in statuses:
            return rows[0]
        time.sleep(1)
    raise AssertionError(f"{node_id} never {statuses} in the registry: {rows}")


def test_each_host_joined_with_its_own_address_and_the_fleet_token(fleet):
    rows = fleet.nodes()
    assert sorted(r["ip"] for r in rows if r["state"] == "ALIVE") == sorted(h.address for h in fleet.hosts.values())
    assert all(ip.startswith("198.51.100.") for ip in (h.address for h in fleet.hosts.values()))
    assert len({h.address for h in fleet.hosts.values()} | {fleet.bridge_address}) == 4
    # each node kept its Ray session under its own temp dir, not the head's or /tmp/ray
    for host in fleet.hosts.values():
        assert list(host.temp_dir.glob("session_*")), f"{host.name} has no session under {host.temp_dir}"
    # ray status from the root namespace, over the bridge, with the fleet's token: Ray 2.60 prints
    # node ids, not addresses; each is the node table's node at one host's own address
    deadline = time.monotonic() + 60
    while True:  # the autoscaler's view, which ray status prints, lags the node table by a poll or two
        status = fleet.run("", ["ray", "status", "--address", fleet.address, "-v"], timeout_s=120)
        assert status.returncode == 0, status.stderr[-1500:]
        if all(f"Node: {row['node_id']}" in status.stdout for row in rows) or time.monotonic() > deadline:
            break
        time.sleep(2)
    for row in rows:
        assert f"Node: {row['node_id']}" in status.stdout, f"{row} not in ray status:\n{status.stdout}"
    # token auth is on: a client without the token is refused by the GCS
    refused = fleet.run("", [sys.executable, "-m", "fabric.testing.netns_gcs", fleet.address, "--timeout", "3"],
                        env={"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN_PATH": ""}, timeout_s=120)
    assert "error" in refused.stdout and "198.51.100." not in refused.stdout


def test_fabric_status_lists_every_host_with_its_ray_node(fleet):
    ip_of = {r["node_id"]: r["ip"] for r in fleet.nodes() if r["state"] == "ALIVE"}
    rows = {r["name"]: r for r in fabric_json(fleet, "status") if r["status"] == "active"}
    assert set(rows) == {"head", "n1", "n2"}
    for name, row in rows.items():
        assert ip_of[row["node_id"]] == fleet.hosts[name].address
    assert rows["n1"]["tier"] == "cpu_ffmpeg" and rows["head"]["tier"] == "relay"


def test_fabric_status_shows_each_node_with_its_own_address(fleet):
    rows = {r["name"]: r for r in fabric_json(fleet, "status") if r["status"] == "active"}
    assert {name: row["address"] for name, row in rows.items()} == {n: fleet.hosts[n].address for n in ("head", "n1", "n2")}
    proc = fleet.run(None, ["fabric", "status", "--address", fleet.address, "--wide"], timeout_s=120)
    assert proc.returncode == 0, proc.stdout[-1000:] + proc.stderr[-1500:]
    lines = proc.stdout.splitlines()
    assert lines[0].split()[-1] == "ADDRESS"
    for name in ("head", "n1", "n2"):
        assert any(line.split()[0] == name and line.split()[-1] == fleet.hosts[name].address for line in lines[1:]), proc.stdout


ADAPTIVE = """
import json, ray, fabric
from fabric import adaptive

@adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg")
def where():
    return ray.util.get_node_ip_address()

ray.init(log_to_driver=False)
fabric.up()
print("RESULT " + json.dumps(sorted(set(ray.get([where.remote() for _ in range(4)], timeout=120)))))
"""


def test_an_adaptive_remote_call_runs_on_a_node_in_its_namespace(fleet):
    proc = fleet.run_python(ADAPTIVE, timeout_s=240)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    ran_at = json.loads(line.split(" ", 1)[1])
    assert ran_at and set(ran_at) <= {fleet.hosts["n1"].address, fleet.hosts["n2"].address}


def test_a_driver_in_the_root_namespace_cannot_attach_without_a_raylet_there(fleet):
    """Why drivers run inside a host: Ray 2.60 attaches a driver to a raylet with the driver's IP."""
    code = ("import ray\ntry:\n    ray.init(address=%r, _node_ip_address=%r, log_to_driver=False)\n    print('ATTACHED')\n"
            "except Exception as exc:\n    print('REFUSED', type(exc).__name__)\n") % (fleet.address, fleet.bridge_address)
    proc = fleet.run("", [sys.executable, "-c", code], env={"RAY_gcs_server_request_timeout_seconds": "5"}, timeout_s=180)
    assert "REFUSED" in proc.stdout and "ATTACHED" not in proc.stdout, proc.stdout[-800:] + proc.stderr[-1500:]


def test_a_cut_node_is_dead_in_ray_and_lost_in_the_registry_and_rejoins_after_heal(fleet):
    fleet.cut("n2")
    try:
        row = fleet.wait_state("n2", "DEAD", timeout_s=90)
        assert row["ip"] == fleet.hosts["n2"].address
        assert wait_registry(fleet, str(row["node_id"]), {"offline", "dead"})["name"] == "n2"
        assert fleet.nodes() and fleet.wait_state("n1", "ALIVE", timeout_s=10)  # the others are untouched
    finally:
        fleet.heal("n2")
    # healed: the link carries again; Ray never revives a DEAD node, so the host joins anew
    assert udp_reaches(fleet, None, "n2") and udp_reaches(fleet, "n2", None)
    fleet.stop("n2")
    fleet.join("n2", profile=NODE_PROFILE)
    again = fleet.wait_state("n2", "ALIVE", timeout_s=120)
    assert again["node_id"] != row["node_id"]
    assert wait_registry(fleet, str(again["node_id"]), {"active"}, timeout_s=120)["name"] == "n2"


UDP_LISTEN = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 0)); s.settimeout(3)
print(s.getsockname()[1], flush=True)
try:
    data, peer = s.recvfrom(100); print("GOT", data.decode(), flush=True)
except socket.timeout:
    print("NOTHING", flush=True)
"""
UDP_SEND = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(30):  # until the listener has one (the caller then ends this) or its 3 s are over
    try:
        s.sendto(b"hi", (sys.argv[1], int(sys.argv[2])))
    except OSError:  # a local drop (iptables OUTPUT) refuses the send itself
        pass
    time.sleep(0.1)
"""


def udp_reaches(f: NetnsFleet, sender: str | None, receiver: str | None) -> bool:
    """Whether a UDP datagram from ``sender`` (a host, or None: the root namespace) reaches a
    listener in ``receiver`` (a host, or None: the root namespace, on the bridge address; a port
    the OS picks, so runs side by side do not mix)."""
    listen_ns = [] if receiver is None else ["ip", "netns", "exec", f.hosts[receiver].namespace]
    target = f.bridge_address if receiver is None else f.hosts[receiver].address
    listener = subprocess.Popen([*listen_ns, sys.executable, "-c", UDP_LISTEN, target], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None
        port = listener.stdout.readline().strip()
        send_ns = [] if sender is None else ["ip", "netns", "exec", f.hosts[sender].namespace]
        # the listener ends at the first datagram (or after its 3 s): the sender is not waited for
        sending = subprocess.Popen([*send_ns, sys.executable, "-c", UDP_SEND, target, port])
        try:
            out, _ = listener.communicate(timeout=30)
        finally:
            if sending.poll() is None:
                sending.send_signal(signal.SIGKILL)
            sending.wait()
        # a sender that failed by itself sent nothing: that is no drop
        assert sending.returncode in (0, -signal.SIGKILL), f"the UDP sender failed ({sending.returncode})"
    finally:
        if listener.poll() is None:
            listener.send_signal(signal.SIGKILL)
            listener.wait()
    return "GOT" in out


def test_a_one_way_drop_cuts_what_a_node_sends_but_not_what_it_receives(fleet):
    require(one_way_problem())
    fleet.cut_one_way("n1", "out")
    try:
        assert udp_reaches(fleet, None, "n1")  # in: still arrives
        assert not udp_reaches(fleet, "n1", None)  # out: dropped towards the root namespace
        dead = fleet.wait_state("n1", "DEAD", timeout_s=90)  # the head hears nothing back from it
    finally:
        fleet.heal("n1")
    assert udp_reaches(fleet, "n1", None)
    # n1 runs under fabric join --supervise: once healed it starts a new node by itself
    back = fleet.wait_state("n1", "ALIVE", timeout_s=150)
    assert back["node_id"] != dead["node_id"]
    assert f"afnet{fleet.names.run_id}" not in sh(["nft", "list", "tables"], check=False).stdout


@pytest.mark.parametrize("tool", ["nft", "iptables"])
def test_one_way_drops_by_each_tool_between_hosts_and_with_the_root_namespace(tool):
    require(netns_problem())
    if tool == "nft":
        require(None if shutil.which("nft") else "nft is not installed (apt-get install nftables)")
    else:
        require(None if shutil.which("iptables") else "iptables is not installed (apt-get install iptables)")
    with NetnsFleet(auth=False) as f:
        f.add_host("a")
        f.add_host("b")
        f.cut_one_way("a", "out", tool=tool)
        assert not udp_reaches(f, "a", "b") and not udp_reaches(f, "a", None)  # forwarded, and to the root
        assert udp_reaches(f, None, "a")
        f.heal("a")
        f.cut_one_way("a", "in", tool=tool)
        assert not udp_reaches(f, None, "a") and udp_reaches(f, "a", None)
        f.heal("a")
        assert udp_reaches(f, None, "a")
        if tool == "iptables":
            assert sh(["iptables", "-w", "-n", "-L", f.names.nft_table(1)], check=False).returncode != 0
            f.cut_one_way("b", "in", tool=tool)  # left in force: teardown removes it
            chain = f.names.nft_table(2)
            assert sh(["iptables", "-w", "-n", "-L", chain], check=False).returncode == 0
    assert left_behind(f.names) == []
    if tool == "iptables":
        assert chain not in sh(["iptables", "-w", "-S"]).stdout


def test_a_fleet_without_auth_answers_clients_without_a_token():
    require(netns_problem())
    with NetnsFleet(auth=False) as f:
        f.start_head("solo", profile=NODE_PROFILE)
        rows = f.wait_nodes(1, timeout_s=90)
        assert [r["ip"] for r in rows] == [f.hosts["solo"].address]
        assert f.hosts["solo"].env["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN_PATH" not in f.driver_env()
        assert f.token_file is None and not list(f.folder.glob("auth_token*"))
    assert left_behind(f.names) == []


def test_teardown_removes_everything_also_when_the_body_raises():
    require(netns_problem())
    with pytest.raises(RuntimeError, match="the body failed"):
        with NetnsFleet(auth=True) as f:
            f.add_host("x")
            proc = f.spawn("x", ["sleep", "600"])
            stray = subprocess.Popen(["ip", "netns", "exec", f.hosts["x"].namespace, "sleep", "600"],
                                     start_new_session=True)  # not in a group the fleet made: found in the namespace
            f.cut_all_from("x")
            assert "state DOWN" in sh(["ip", "link", "show", f.hosts["x"].veth]).stdout
            f.heal("x")
            assert "state DOWN" not in sh(["ip", "link", "show", f.hosts["x"].veth]).stdout
            if one_way_problem() is None:
                f.cut_one_way("x", "in")
            assert left_behind(f.names)
            raise RuntimeError("the body failed")
    assert left_behind(f.names) == []
    stray.wait(timeout=10)
    assert not pid_alive(proc.pid) and not pid_alive(stray.pid)
    assert not (STATE_DIR / f"{f.record.index}.json").exists()


def test_leftovers_of_a_dead_run_are_removed_and_a_live_runs_are_not():
    require(netns_problem())
    dead_pid = _dead_pid()
    dead, live = Names("dead00"), Names("11fe00")
    with state_lock():
        taken = {int(p.stem) for p in STATE_DIR.glob("*.json")}
        free = [i for i in range(16) if i not in taken][:2]
        recs = [RunRecord(pid=dead_pid, run_id=dead.run_id, index=free[0], subnet="198.51.100.224/28", folder="",
                          namespaces=[dead.namespace("x")], links=[dead.bridge]),
                RunRecord(pid=os.getpid(), run_id=live.run_id, index=free[1], subnet="198.51.100.240/28", folder="",
                          namespaces=[live.namespace("x")])]
        for rec in recs:
            rec.save()
    try:
        sh(["ip", "netns", "add", dead.namespace("x")])
        sh(["ip", "link", "add", dead.bridge, "type", "bridge"])
        sh(["ip", "netns", "add", live.namespace("x")])
        with NetnsFleet(auth=False) as f:
            assert f.record is not None and f.record.index not in free[1:]
            namespaces = sh(["ip", "netns", "list"]).stdout
            assert dead.namespace("x") not in namespaces and live.namespace("x") in namespaces
            assert sh(["ip", "link", "show", dead.bridge], check=False).returncode != 0
            after = {r.run_id for p in STATE_DIR.glob("*.json") if (r := RunRecord.load(p)) is not None}
            assert dead.run_id not in after and live.run_id in after and f.names.run_id in after
    finally:
        sh(["ip", "netns", "delete", live.namespace("x")], check=False)
        sh(["ip", "netns", "delete", dead.namespace("x")], check=False)
        sh(["ip", "link", "delete", dead.bridge], check=False)
        for rec in recs:
            rec.path.unlink(missing_ok=True)


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


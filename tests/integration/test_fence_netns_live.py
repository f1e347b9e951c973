"""The fence across a real cut (``fabric.core.jobs.fence``): hosts in network namespaces
(``fabric.testing.netns``), a job that does not cooperate, and its node's link taken down.

The fleet: a head (tier relay: no job lands there) and two nodes joined with ``fabric join``,
token auth on, the fabric up with fast health checks and a short lease (6 s). The job is a
``PlainWriter``: a plain class whose own thread appends a line every 100 ms to a file both sides
reach, no fabric hooks. Its node's link goes down; nothing in the fabric is told.

What must hold: the instance on the cut side ends its own process when its lease runs out (its
process is gone from that namespace while the link is still down); the job serves again from the
other node, and the two instances never wrote at the same time (no line of one between the first
and the last line of the other). Waits are bounded polls; the recovery time is printed, not asserted.
"""

from __future__ import annotations

import json
import sys
import time

import pytest

from fabric.testing.netns import NetnsFleet, netns_problem, require
from fabric.testing.netns_net import sh
from fabric.testing.writer import overlaps, read_lines

pytestmark = pytest.mark.integration

LEASE = {"lease_ttl_s": 6.0, "renew_every_s": 1.5, "margin_s": 1.0}
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0, "reprobe_interval_s": 300.0, "flap_toggles": 50},
            "failure": {"min_recovery_interval_s": 0.5}, "fence": LEASE}

SUBMIT = """
import json, sys
import ray
import fabric
from fabric import adaptive
from fabric.testing.writer import PlainWriter
fabric.up()
Job = adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1, name="plain-writer",
                      call_timeout_s=60, max_restarts_per_hour=100)(PlainWriter)
h = Job.remote(sys.argv[1], 0.1).wait_running(120)
print("result: " + json.dumps({"job_id": h.job_id, "where": h.result(h.where.remote(), timeout_s=60)}))
"""

WHERE = """
import json, sys
import fabric
from fabric import JobHandle
fabric.up()
h = JobHandle(sys.argv[1], "plain-writer", call_timeout_s=60)
s = h.status()
print("result: " + json.dumps({"state": s.state.value, "node_id": s.node_id}))
"""


@pytest.fixture(scope="module")
def fleet():
    require(netns_problem())
    with NetnsFleet(auth=True) as f:
        f.start_head("head", profile="edge-relay")
        f.join("n1", profile="cpu-only-box")
        f.join("n2", profile="cpu-only-box")
        f.wait_nodes(3, timeout_s=120)
        config = f.folder / "fabric.json"
        config.write_text(json.dumps(SETTINGS))  # JSON is YAML
        up = f.run(None, ["fabric", "up", "--address", f.address, "--config", str(config), "--timeout", "120"], timeout_s=240)
        assert up.returncode == 0, f"fabric up failed: {up.stdout[-1500:]}{up.stderr[-1500:]}"
        yield f


def driver(f: NetnsFleet, code: str, *args: str) -> dict:
    proc = f.run(None, [sys.executable, "-c", code, *args], timeout_s=240)
    assert proc.returncode == 0, f"driver failed: {proc.stdout[-1500:]}{proc.stderr[-2500:]}\n{f.logs_tail()}"
    answers = [line[len("result: "):] for line in proc.stdout.splitlines() if line.startswith("result: ")]
    assert answers, f"the driver printed no result: {proc.stdout[-1500:]}"
    return json.loads(answers[-1])  # Ray may print its processes' lines to the driver too


def instance_pids(f: NetnsFleet, host: str, pid: int) -> bool:
    """Whether ``pid`` still runs inside ``host``'s namespace."""
    listed = sh(["ip", "netns", "pids", f.hosts[host].namespace], check=False).stdout.split()
    return str(pid) in listed


def test_a_cut_off_instance_ends_itself_and_its_replacement_never_writes_beside_it(fleet):
    f = fleet
    out = f.folder / "writes.log"
    out.touch()
    out.chmod(0o666)
    job = driver(f, SUBMIT, str(out))
    pid_s, address = job["where"].split()
    host = next(h.name for h in f.hosts.values() if h.address == address)
    assert host in ("n1", "n2"), job
    pid = int(pid_s)
    assert instance_pids(f, host, pid)

    cut_at = time.time()
    f.cut(host)
    try:
        deadline = time.monotonic() + 90
        while instance_pids(f, host, pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not instance_pids(f, host, pid), f"the cut-off instance (pid {pid}) still runs in {host}"
        gone_at = time.time()

        def new_writer() -> list:
            return [ln for ln in read_lines(out) if ln.writer != job["where"]]
        deadline = time.monotonic() + 120
        while not new_writer() and time.monotonic() < deadline:
            time.sleep(0.3)
        fresh = new_writer()
        assert fresh, f"the job did not serve again from another node\n{f.logs_tail()}"
        assert fresh[0].writer.split()[1] != address
        lines = read_lines(out)
        old_last = max(ln.at for ln in lines if ln.writer == job["where"])
        print(f"lease {LEASE['lease_ttl_s']:g} s: the old instance wrote last {old_last - cut_at:.1f} s after the cut, "
              f"ended by {gone_at - cut_at:.1f} s; the replacement wrote first {fresh[0].at - cut_at:.1f} s after the cut")
        assert overlaps(lines) == 0 and fresh[0].at > old_last
    finally:
        f.heal(host)
    status = driver(f, WHERE, job["job_id"])
    assert status["state"] == "running"

"""``fabric nodes|status|jobs|bundles --address`` for real (issue 17): a small LocalFabric (two
nodes, one job, one bundle) read back by the CLI in a subprocess, as a shell runs it.

Off a terminal each table fits 80 columns and its ``--json`` names the same nodes, jobs and
bundles the driver's handle does. As in test_jobs_cli.py the head listens on 127.0.0.2 and each
command connects itself with ``--address`` (its own ``ray.init``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")

from fabric import Bundle, BundleJob, ResiliencePolicy, adaptive  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

IP = "127.0.0.2"
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "monitor_interval_s": 0.25, "join_timeout_s": 60.0}}


@adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.25)
class Echo:
    def __init__(self, word: str) -> None:
        self.word = word

    def say(self) -> str:
        return self.word


@adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.1)
class Idle:
    def ping(self) -> str:
        return "pong"


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(["cpu-only-box", "cpu-only-box"], settings=SETTINGS, max_slots=2, timeout_s=120,
                     node_ip_address=IP) as fabric_:
        yield fabric_


@pytest.fixture(scope="module")
def work(lf):
    job = Echo.remote("hello")
    job.wait_running(timeout_s=120)
    lf.handle.create_bundle(Bundle(bundle_id="tables", resilience=ResiliencePolicy(same_node="forbid", same_zone="allow"),
                                   jobs=[BundleJob(name="idle", cls=Idle)]))  # with a policy: a primary and a backup

    def bundle_running():
        b = lf.handle.bundle("tables")
        return all(lf.handle.job(j).state.value == "running" for j in b.jobs.values()) and len(b.jobs) == 2

    lf.wait_until(bundle_running, "both replicas of the bundle running", timeout_s=120)
    yield job
    lf.handle.delete_bundle("tables")
    job.stop(timeout_s=60)


def fabric_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "fabric", *args], capture_output=True, text=True, timeout=timeout, env=env)


def table(lf, command: str) -> list[str]:
    out = fabric_cli(command, "--address", lf.address)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80, out.stdout
    return lines


def as_json(lf, command: str):
    out = fabric_cli(command, "--address", lf.address, "--json")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return json.loads(out.stdout)


def test_nodes_lists_each_node_with_its_pool_slots_and_last_seen(lf, work):
    rows = {r["node_id"]: r for r in as_json(lf, "nodes")}
    ours = {n.node_id: n.name for n in lf.nodes}
    assert ours.keys() <= rows.keys()
    for node_id, name in ours.items():
        row = rows[node_id]
        assert row["name"] == name and row["tier"] == "cpu_ffmpeg" and row["status"] == "active"
        assert row["max"] == 2 and row["pool"] == "default" and row["pool_tier"]  # no pool label: the default pool's fixed tier
        assert row["last_seen_ago_s"] is not None and row["last_seen_ago_s"] < 30
    assert sum(rows[n]["running"] for n in ours) >= 1  # the Echo job holds a slot

    lines = table(lf, "nodes")
    assert lines[0].split() == ["NAME", "TIER", "STATUS", "RUN/MAX", "GPUS", "POOL/TIER", "LAST", "SEEN"]
    for node_id, name in ours.items():
        line = next(ln for ln in lines[1:] if ln.split()[0] == name)
        row = rows[node_id]
        assert line.split()[1:5] == ["cpu_ffmpeg", "active", f"{row['running']}/2", "-"]
        assert f"default/{row['pool_tier']}" in line and line.endswith("ago")


def test_status_fits_80_columns_and_names_every_node(lf, work):
    lines = table(lf, "status")
    assert lines[0].startswith("NAME")
    for n in lf.nodes:
        assert any(line.split()[:1] == [n.name] for line in lines), lines


def test_jobs_lists_the_job_and_the_bundle_replicas_whole(lf, work):
    rows = {r["job_id"]: r for r in as_json(lf, "jobs")}
    st = work.status()
    row = rows[work.job_id]
    assert row["state"] == "running" and row["node_id"] == st.node_id and row["instance_key"] == st.instance_key
    replicas = sorted(r["replica"] for r in rows.values() if r["bundle_id"] == "tables")
    assert replicas == ["backup", "primary"]

    lines = table(lf, "jobs")  # the bundle's rows ("tables (primary)") make it wider than 80: the instance key is cut first
    cells = next(ln for ln in lines if ln.startswith(work.job_id)).split()
    assert cells[:4] == [work.job_id, "Echo", "running", row["node"]] and cells[5:] == ["0", "-"]
    assert cells[4] == row["instance_key"] or (cells[4].endswith("\u2026") and row["instance_key"].startswith(cells[4][:-1]))
    wide = fabric_cli("jobs", "--address", lf.address, "--wide")
    line = next(ln for ln in wide.stdout.splitlines() if ln.startswith(work.job_id))
    assert line.split() == [work.job_id, "Echo", "running", row["node"], row["instance_key"], "0", "-"]  # --wide: every cell whole


def test_bundles_lists_the_bundle_with_its_jobs(lf, work):
    rows = {r["bundle_id"]: r for r in as_json(lf, "bundles")}
    b = rows["tables"]
    assert b["state"] == "live" and b["replicas"] == 2 and sorted(j["state"] for j in b["jobs"]) == ["running", "running"]
    lines = table(lf, "bundles")
    assert lines[0].split() == ["BUNDLE", "STATE", "REPLICAS", "JOBS", "REASON"]
    assert next(ln for ln in lines if ln.startswith("tables")).split() == ["tables", "live", "2", "2", "running", "-"]
    detail = fabric_cli("bundles", "tables", "--address", lf.address)
    assert detail.returncode == 0 and "bundle    tables" in detail.stdout
    assert max(len(line) for line in detail.stdout.splitlines()) <= 80

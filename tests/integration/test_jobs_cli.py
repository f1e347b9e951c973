"""``fabric jobs`` for real: a LocalFabric with two nodes and a running job, read back by the CLI.

As in test_cli_lifecycle.py the head listens on 127.0.0.2 and the CLI runs in a subprocess with
``--address`` (its own ``ray.init``, exit codes as a shell sees them); the one-job view also runs
in-process through ``fabric.cli.main`` (this driver is connected already: the command leaves that
connection alone).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray")

from fabric import adaptive  # noqa: E402
from fabric.cli import main  # noqa: E402
from fabric.cli.jobs_cmd import find_job, format_jobs_table, job_rows  # noqa: E402
from fabric.core.jobs import JobState  # noqa: E402
from fabric.core.jobs.book import Binding, JobStatus  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration

IP = "127.0.0.2"
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "monitor_interval_s": 0.25, "join_timeout_s": 60.0}}


@adaptive.remote(min_tier="cpu_ffmpeg", floor="cpu_ffmpeg", num_cpus=0.5)
class Echo:
    def __init__(self, word: str) -> None:
        self.word = word

    def say(self) -> str:
        return self.word


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(["cpu-only-box", "cpu-only-box"], settings=SETTINGS, max_slots=2, timeout_s=120,
                     node_ip_address=IP) as fabric_:
        yield fabric_


@pytest.fixture(scope="module")
def job(lf):
    handle = Echo.remote("hello")
    handle.wait_running(timeout_s=120)
    assert handle.result(handle.say.remote(), timeout_s=60) == "hello"
    yield handle
    handle.stop(timeout_s=60)


def fabric_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabric", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))


def node_name(lf, node_id: str) -> str:
    return next(n.name for n in lf.nodes if n.node_id == node_id)


def test_jobs_lists_the_running_job_with_its_node_and_instance(lf, job):
    out = fabric_cli("jobs", "--address", lf.address, "--json")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = {r["job_id"]: r for r in json.loads(out.stdout)}
    row = rows[job.job_id]
    st = job.status()
    assert row["name"] == "Echo" and row["state"] == "running"
    assert row["node_id"] == st.node_id and row["node"] == node_name(lf, st.node_id)
    assert row["instance_key"] == st.instance_key and row["instance_key"]
    assert row["restarts_last_hour"] == 0 and row["bundle_id"] is None

    table = fabric_cli("jobs", "--address", lf.address)
    assert table.returncode == 0, table.stdout[-2000:] + table.stderr[-2000:]
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["JOB", "NAME", "STATE", "NODE", "INSTANCE", "RESTARTS/H", "BUNDLE"]
    line = next(ln for ln in lines if ln.startswith(job.job_id))
    assert line.split() == [job.job_id, "Echo", "running", row["node"], row["instance_key"], "0", "-"]


def test_jobs_job_id_shows_the_job_and_its_history(lf, job, capsys):
    assert main(["jobs", job.job_id]) == 0
    text = capsys.readouterr().out
    st = job.status()
    assert f"job       {job.job_id}" in text and "state     running" in text
    assert f"instance  {st.instance_key}" in text and node_name(lf, st.node_id) in text
    history = text.split("history:", 1)[1]
    assert "running" in history and "starting" in history
    assert ray.is_initialized()  # the in-process command left this driver's connection alone

    assert main(["jobs", job.job_id[:6], "--json"]) == 0  # a unique prefix names the job
    row = json.loads(capsys.readouterr().out)
    assert row["job_id"] == job.job_id and row["state"] == "running"
    assert [h["state"] for h in row["history"]][-1] == "running"
    assert all(isinstance(h["at"], float) for h in row["history"])


def test_an_unknown_job_id_exits_non_zero_and_says_so(lf, job):
    out = fabric_cli("jobs", "no-such-job", "--address", lf.address)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "fabric jobs: no job 'no-such-job'" in out.stderr and "`fabric jobs` lists them" in out.stderr
    assert out.stdout == ""


def test_a_stopped_job_is_listed_stopped_with_no_node(lf):
    handle = Echo.remote("bye")
    handle.wait_running(timeout_s=120)
    assert handle.stop(timeout_s=60) == JobState.STOPPED
    out = fabric_cli("jobs", "--address", lf.address, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    row = next(r for r in json.loads(out.stdout) if r["job_id"] == handle.job_id)
    assert row["state"] == "stopped" and row["node_id"] is None and row["instance_key"] is None


def test_find_job_refuses_an_ambiguous_prefix_and_an_empty_fabric_says_no_jobs():
    statuses = [JobStatus(f"ab{i}", "Echo", JobState.RUNNING, binding=Binding("n1", f"primary@{i}")) for i in range(2)]
    assert find_job(statuses, "ab1")[0] is statuses[1]
    st, why = find_job(statuses, "ab")
    assert st is None and "ambiguous" in why and "ab0" in why and "ab1" in why
    assert find_job([], "x") == (None, "no job 'x' (no jobs known)")
    assert format_jobs_table(job_rows([], {})).endswith("(no jobs)")
    row = job_rows([JobStatus("j1", "Enc", JobState.RUNNING, bundle_id="b1", replica=1, binding=Binding("n1", "backup@1"))],
                   {"n1": "box"})[0]
    assert row["node"] == "box" and row["replica"] == "backup"
    assert "b1 (backup)" in format_jobs_table([row])

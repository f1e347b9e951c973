"""A restarted scheduler knows every instance its providers started (issue 21): the provisioner
keeps each ``ProvisionedNode`` as a row of the job store, and a new provisioner over that store has
the local provider adopt each one still running (listed, terminated, closed like its own), forgets
one that ended, and kills what a provision in flight had started but nobody adopted. The "nodes"
here are stand-in processes that look like ``ray start --block`` (a script named ``ray`` leading a
session of its own): no Ray is started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from actors.provisioner import Provisioner
from fabric.core.settings import FabricSettings, NodeShape
from fabric.providers.base import ProvisionedNode
from fabric.providers.local import PID_SUFFIX, LocalProvider
from fabric.store.jobs import JobStore

SHAPE = NodeShape(name="box", profile="cpu-only-box", num_cpus=2, memory_mib=2048)


@pytest.fixture
def fake_ray(tmp_path):
    script = tmp_path / "bin" / "ray"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    script.chmod(0o755)
    procs: list[subprocess.Popen] = []

    def start() -> subprocess.Popen:
        p = subprocess.Popen([str(script), "start", "--block"], start_new_session=True)
        procs.append(p)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the interpreter runs the script (its cmdline says ray start)
            try:
                with open(f"/proc/{p.pid}/cmdline", "rb") as f:
                    if b"start" in f.read():
                        break
            except OSError:
                pass
            time.sleep(0.02)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def node(pid: int, instance_id: str = "local-abc") -> ProvisionedNode:
    return ProvisionedNode(instance_id=instance_id, provider="local", pool="default", pool_tier="burst", shape=SHAPE,
                           spare=False, started_at=1.0, name=instance_id, profile="cpu-only-box", labels={"a": "b"},
                           pid=pid)


def test_a_node_row_round_trips_as_plain_json():
    n = node(4242)
    assert ProvisionedNode.from_row(json.loads(json.dumps(n.as_row()))) == n


def test_the_local_provider_adopts_a_running_child_and_terminates_it(tmp_path, fake_ray):
    proc = fake_ray()
    p = LocalProvider("127.0.0.1:6379", log_dir=tmp_path / "logs", stop_grace_s=2.0)
    assert p.adopt(node(proc.pid)) is True
    assert [n.instance_id for n in p.list()] == ["local-abc"]
    assert (tmp_path / "logs" / f"local-abc{PID_SUFFIX}").exists()
    p.terminate("local-abc")
    assert proc.wait(timeout=10) is not None and p.list() == []
    p.terminate("local-abc")  # terminated once: a second terminate is a no-op, not a second kill
    p.close()


def test_a_node_that_ended_or_is_another_providers_is_not_adopted(tmp_path, fake_ray):
    p = LocalProvider("127.0.0.1:6379", log_dir=tmp_path / "logs")
    proc = fake_ray()
    proc.kill()
    proc.wait(timeout=10)
    assert p.adopt(node(proc.pid)) is False
    assert p.adopt(node(os.getpid())) is False  # alive, but not a ray start leading its session
    other = fake_ray()
    theirs = ProvisionedNode(**{**node(other.pid).__dict__, "provider": "ray-autoscaler"})
    assert p.adopt(theirs) is False and p.list() == []
    p.close()


def test_a_restarted_provisioner_adopts_what_its_store_keeps_and_kills_what_nobody_adopted(tmp_path, fake_ray):
    store = JobStore(tmp_path / "fabric.jobs.db")
    logs = tmp_path / "logs"
    logs.mkdir()
    kept, ended, unanswered = fake_ray(), fake_ray(), fake_ray()
    first = Provisioner(_Host(), providers={"local": LocalProvider("127.0.0.1:6379", log_dir=logs)})
    first.attach(store)
    first._keep(node(kept.pid, "local-kept"))
    first._keep(node(ended.pid, "local-ended"))
    (logs / f"local-unanswered{PID_SUFFIX}").write_text(str(unanswered.pid))  # a ray start whose provision never answered
    ended.kill()
    ended.wait(timeout=10)
    # the scheduler dies; a new one builds a new provider over the same folder and store
    provider = LocalProvider("127.0.0.1:6379", log_dir=logs, stop_grace_s=2.0)
    second = Provisioner(_Host(), providers={"local": provider})
    assert second.attach(store) == 1
    assert [n.instance_id for n in provider.list()] == ["local-kept"]
    assert unanswered.wait(timeout=10) is not None  # killed: nobody will ever scale it down
    assert [k for k, _ in store.state("instance")] == ["local/local-kept"]
    kinds = [e["kind"] for e in second.log]
    assert {"instance_adopted", "instance_forgotten", "instances_swept"} <= set(kinds)
    assert second.close() == 1  # fabric down: the adopted node goes too, and its row
    assert kept.wait(timeout=10) is not None and store.state("instance") == []


class _Host:
    settings = FabricSettings()
    jobs = None
    feed = None

    def handle_stimulus(self, stimulus):
        return None


def test_a_restarted_provisioner_adopts_the_ray_autoscaler_instances_and_their_spare_provision(tmp_path):
    """Instances of ``ray-autoscaler`` (no process of ours: a bundle in the autoscaler's request)
    are taken back too: held and demanded again, the spare provision naming one kept, and both
    given back by ``fabric down``."""
    import asyncio

    from fabric.providers.autoscaler import RayAutoscalerProvider

    settings = FabricSettings.load({"pools": [{"name": "default", "tiers": [
        {"name": "burst", "scale_out": "elastic", "provider": "ray-autoscaler",
         "candidate_shapes": [{"name": "box", "profile": "cpu-only-box", "num_cpus": 2}]}]}]})
    shape = settings.pools[0].tiers[0].candidate_shapes[0]
    written: list[list[dict]] = []

    def provider() -> RayAutoscalerProvider:
        return RayAutoscalerProvider(settings, request_resources=lambda **kw: written.append(kw["bundle_label_selectors"]))

    store = JobStore(tmp_path / "fabric.jobs.db")
    first = Provisioner(_Host(), providers={"ray-autoscaler": provider()})
    first.attach(store)
    plain = asyncio.run(first.provision("ray-autoscaler", shape, "default", "burst", spare=False))
    spare = asyncio.run(first.provision("ray-autoscaler", shape, "default", "burst", spare=True, provision_id="spare-default-1"))
    # the scheduler dies; a new one builds a new provider over the same store
    p = provider()
    second = Provisioner(_Host(), providers={"ray-autoscaler": p})
    assert second.attach(store) == 2
    assert sorted(n.instance_id for n in p.list()) == sorted([plain.instance_id, spare.instance_id])
    assert p.sync().bundles == ({"CPU": 2},) * 2  # both demanded again: the autoscaler keeps (or launches) their nodes
    assert second.spare_provisions["spare-default-1"].instance_id == spare.instance_id
    kinds = [e["kind"] for e in second.log]
    assert kinds.count("instance_adopted") == 2 and "spare_provision_dropped" not in kinds
    assert second.close() == 2 and p.list() == [] and store.state("instance") == []
    assert written[-1] == []  # the request is empty: every node is given back once idle

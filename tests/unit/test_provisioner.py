"""The scheduler's hands on providers (issue 15), without Ray: ``Provisioner`` carries out
``ProvisionNode`` with a provider in a thread and answers the core (``ProvisionStarted`` /
``ProvisionFailed``), terminates what it is told, times provision-to-serving; the live hot-spare
list is validated whole, profiles included (``checked_entries``, ``profile_problems``)."""

import asyncio
import time

import pytest

from actors.provisioner import Provisioner
from fabric.core.errors import SettingsError
from fabric.core.scheduling import ProvisionFailed, ProvisionNode, ProvisionStarted, TerminateNode
from fabric.core.settings import FabricSettings, NodeShape
from fabric.providers import ProviderError, ProvisionedNode
from fabric.providers.local import profile_problems
from fabric.runtime.spares import checked_entries

SHAPE = NodeShape(name="cpu-box", profile="cpu-only-box")


class FakeProvider:
    name = "local"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.made: dict[str, ProvisionedNode] = {}
        self.terminated: list[str] = []

    def provision(self, shape, *, pool, pool_tier, spare=False, tags=None):
        time.sleep(0.01)
        if self.fail:
            raise ProviderError("ray start exited with status 1", reason="start_failed", provider=self.name)
        iid = f"local-{len(self.made)}"
        node = ProvisionedNode(iid, self.name, pool, pool_tier, shape, spare, time.time(), iid)
        self.made[iid] = node
        return node

    def terminate(self, instance_id):
        self.terminated.append(instance_id)
        self.made.pop(instance_id, None)

    def list(self):
        return list(self.made.values())


class FakeScheduler:
    def __init__(self) -> None:
        self.handled: list = []
        self.events: list = []
        self.settings = FabricSettings()
        self.jobs = self

    def handle_stimulus(self, stimulus):
        self.handled.append(stimulus)

    def emit(self, kind, data):
        self.events.append((kind, data))


def run(coro_factory):
    async def main():
        await coro_factory()
        for _ in range(200):
            await asyncio.sleep(0.01)
            if not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                return
    asyncio.run(main())


def test_a_provision_is_carried_out_and_answered_with_its_instance_id():
    sched, provider = FakeScheduler(), FakeProvider()
    p = Provisioner(sched, {"local": provider})

    async def go():
        p.carry_out(ProvisionNode("p1", "local", "default", "burst", SHAPE, reason="burst"))

    run(go)
    (started,) = sched.handled
    assert isinstance(started, ProvisionStarted) and started.provision_id == "p1" and started.instance_id == "local-0"
    assert [k for k, _ in sched.events] == ["provision_requested", "node_provisioned"]
    p.registered("local-0")
    assert p.serving_s["local-0"] >= 0 and p.knows("local", "local-0") and not p.knows("local", "local-9")
    assert p.instances()[0]["pool_tier"] == "burst"


def test_a_failed_provision_is_answered_as_a_failure_with_the_providers_words():
    sched = FakeScheduler()
    p = Provisioner(sched, {"local": FakeProvider(fail=True)})

    async def go():
        p.carry_out(ProvisionNode("p1", "local", "default", "burst", SHAPE))

    run(go)
    (failed,) = sched.handled
    assert isinstance(failed, ProvisionFailed) and "status 1" in failed.error
    kind, data = sched.events[-1]
    assert kind == "provision_failed" and "status 1" in data["error"] and data["provision_id"] == "p1"


def test_terminate_and_close_reach_the_provider():
    sched, provider = FakeScheduler(), FakeProvider()
    p = Provisioner(sched, {"local": provider})

    async def go():
        await p.provision("local", SHAPE, "default", "burst", spare=True)
        await p.provision("local", SHAPE, "default", "burst", spare=False)
        p.carry_out(TerminateNode("local", "local-0", reason="provision_timeout"))

    run(go)
    assert provider.terminated == ["local-0"] and ("node_terminated", {"provider": "local", "instance_id": "local-0",
                                                                          "reason": "provision_timeout"}) in sched.events
    assert p.close() == 1


def test_a_node_that_registers_before_ray_start_returns_still_gets_its_serving_time():
    sched, provider = FakeScheduler(), FakeProvider()
    p = Provisioner(sched, {"local": provider})
    p.registered("local-0")  # seen before the provider answered

    async def go():
        await p.provision("local", SHAPE, "default", "burst", spare=False)

    run(go)
    assert "local-0" in p.serving_s


def test_an_unknown_provider_is_named():
    p = Provisioner(FakeScheduler(), {"local": FakeProvider()})
    with pytest.raises(Exception, match="ray-autoscaler"):
        p.provider("ray-autoscaler")


SETTINGS = FabricSettings.load({"pools": [{"name": "default", "tiers": [
    {"name": "onprem"},
    {"name": "burst", "scale_out": "elastic", "provider": "local",
     "candidate_shapes": [{"name": "cpu-box", "profile": "cpu-only-box"}, {"name": "ghost", "profile": "no-such-profile"}]},
]}]})


def test_a_local_shape_naming_an_unknown_profile_is_a_problem_with_its_path():
    (p,) = profile_problems(SETTINGS, [])
    assert p.code == "unknown_profile" and p.path == "pools.0.tiers.1.candidate_shapes.1.profile"
    assert "no-such-profile" in p.message and "cpu-only-box" in p.message


def test_a_live_list_is_refused_with_every_problem_profiles_included():
    bad = [{"pool": "nowhere", "target_count": 1}, {"pool": "default", "target_count": 1, "shape": "ghost"},
           {"pool": "default", "target_count": 2}]
    with pytest.raises(SettingsError) as err:
        checked_entries(bad, SETTINGS)
    codes = {(p.code, p.path) for p in err.value.problems}
    assert ("unknown_profile", "hot_spares.1.shape") in codes
    assert any(path == "hot_spares.0.pool" for _, path in codes)
    assert any(code == "duplicate_hot_spare_pool" for code, _ in codes)
    (ok,) = checked_entries([{"pool": "default", "target_count": 1, "shape": "cpu-box"}], SETTINGS)
    assert ok.target_count == 1

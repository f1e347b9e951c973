"""A cloud node's probe actor hands its cloud's reclaim notices to the scheduler (``actors.spot_watch``),
over a real fake metadata service on loopback and a fake scheduler handle: no Ray started.

Only a node with a cloud label polls (none: nothing is built, nothing contacted); each notice is
delivered once, as ``handle_node_interruption(node, kind, deadline)`` plus a ``spot_notice`` event;
a rebalance then a spot notice are both delivered, in that order; a scheduler that is not there
or away gets the notice at the next poll; a failing poll never ends the loop."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from actors.probe import Probe
from actors.spot_watch import SPOT_NOTICE_EVENT, SpotWatch, spot_watch_for
from fabric.core.errors import SettingsError
from fabric.core.names import CLOUD_LABEL, PROFILE_LABEL, REGISTRY, SCHEDULER
from fabric.core.settings import FabricSettings
from fabric.core.settings_spot import SpotNoticeSettings
from fabric.core.spot import REBALANCE, SPOT_INTERRUPTION
from fabric.testing.fake_metadata import FakeMetadata
from fabric.testing.fake_ray import FakeHandle, FakeRayAdapter
from probes import RecordedSources
from probes.profiles import profile_path
from probes.spot import SpotReading

DEADLINE = time.time() + 120


class FakePsutil:
    def cpu_percent(self, interval=None):
        return 25.0

    def virtual_memory(self):
        return SimpleNamespace(percent=50.0)


class Scheduler:
    """The scheduler's two methods the watch calls, recorded."""

    def __init__(self) -> None:
        self.notices: list[tuple] = []
        self.events: list[tuple] = []

    def handle_node_interruption(self, node, kind="spot-interruption", deadline=None):
        self.notices.append((node, kind, deadline))
        return {"node_id": node, "kind": kind}

    def record_event(self, kind, data):
        self.events.append((kind, dict(data)))


@pytest.fixture
def md():
    with FakeMetadata() as fake:
        yield fake


def make(md: FakeMetadata | None, labels: dict[str, str], *, scheduler: bool = True, **spot):
    adapter = FakeRayAdapter()
    adapter.actors[REGISTRY] = FakeHandle(name=REGISTRY)
    sched = Scheduler()
    if scheduler:
        adapter.actors[SCHEDULER] = FakeHandle(sched, name=SCHEDULER)
    settings = {"poll_interval_s": 0.01, **({"metadata_url": md.url} if md is not None else {}), **spot}
    probe = Probe("n1", name="cpu-only-box", labels={PROFILE_LABEL: "cpu-only-box", **labels}, heartbeat_interval_s=1.0,
                  reprobe_interval_s=600.0, adapter=adapter, sources=RecordedSources(profile_path("cpu-only-box"), psutil=FakePsutil()),
                  source="cpu-only-box", spot_notices=settings)
    return SimpleNamespace(adapter=adapter, sched=sched, probe=probe, watch=probe.spot)


def test_a_node_without_a_cloud_label_builds_no_watch_and_contacts_nothing(md):
    f = make(md, {})
    assert f.watch is None and f.probe.info()["spot"] is None
    assert make(md, {CLOUD_LABEL: "mars"}).watch is None  # a cloud whose notices are not read
    assert make(md, {CLOUD_LABEL: "aws"}, enabled=False).watch is None

    async def beat_a_while():
        task = asyncio.get_running_loop().create_task(f.probe.run())
        await asyncio.sleep(0.1)
        task.cancel()

    asyncio.run(beat_a_while())
    assert md.requests == []


def test_the_probe_of_a_cloud_node_starts_its_watch_when_it_runs(md):
    f = make(md, {CLOUD_LABEL: "aws"})
    md.aws_instance_action("terminate", DEADLINE)

    async def beat_a_while():
        task = asyncio.get_running_loop().create_task(f.probe.run())
        await asyncio.sleep(0.2)
        task.cancel()

    asyncio.run(beat_a_while())
    assert f.watch.polls >= 1 and md.sent("PUT") and [k for _, k, _ in f.sched.notices] == [SPOT_INTERRUPTION]


def test_an_aws_node_delivers_a_spot_notice_once_with_its_deadline_and_an_event(md):
    f = make(md, {CLOUD_LABEL: "aws"})
    assert isinstance(f.watch, SpotWatch) and f.watch.cloud == "aws"
    assert asyncio.run(f.watch.check()) == [] and f.sched.notices == []
    md.aws_instance_action("terminate", DEADLINE)
    (notice,) = asyncio.run(f.watch.check())
    assert f.sched.notices == [("n1", SPOT_INTERRUPTION, float(int(DEADLINE)))]
    [(kind, data)] = f.sched.events
    assert kind == SPOT_NOTICE_EVENT and data["node_id"] == "n1" and data["cloud"] == "aws" and data["kind"] == SPOT_INTERRUPTION
    assert asyncio.run(f.watch.check()) == [] and len(f.sched.notices) == 1  # the same document again: not sent again
    info = f.probe.info()["spot"]
    assert info["polls"] == 3 and [d["key"] for d in info["delivered"]] == [notice.key] and info["last_error"] is None


def test_a_rebalance_then_a_spot_notice_are_both_delivered_in_that_order(md):
    f = make(md, {CLOUD_LABEL: "AWS"})  # the label's case does not matter
    md.aws_rebalance(time.time())
    asyncio.run(f.watch.check())
    md.aws_instance_action("terminate", DEADLINE)
    asyncio.run(f.watch.check())
    assert [(k, d is None) for _, k, d in f.sched.notices] == [(REBALANCE, True), (SPOT_INTERRUPTION, False)]
    g = make(md, {CLOUD_LABEL: "aws"})  # both up at the first poll: the rebalance first, the spot notice tightens it
    asyncio.run(g.watch.check())
    assert [k for _, k, _ in g.sched.notices] == [REBALANCE, SPOT_INTERRUPTION]


def test_gcp_and_azure_nodes_deliver_their_notices(md):
    f = make(md, {CLOUD_LABEL: "gcp"})
    md.gcp_preempted()
    before = time.time()
    asyncio.run(f.watch.check())
    asyncio.run(f.watch.check())
    [(_, kind, deadline)] = f.sched.notices
    assert kind == SPOT_INTERRUPTION and before + 30 <= deadline <= time.time() + 30
    a = make(md, {CLOUD_LABEL: "azure"})
    md.azure_events({"EventId": "e1", "EventType": "Preempt", "NotBefore": "Mon, 07 Dec 2026 12:00:00 GMT"})
    asyncio.run(a.watch.check())
    assert a.sched.notices == [("n1", SPOT_INTERRUPTION, 1_796_644_800.0)]


def test_a_malformed_document_is_a_note_and_nothing_is_delivered(md):
    f = make(md, {CLOUD_LABEL: "aws"})
    md.serve("/latest/meta-data/spot/instance-action", 200, b"{not json")
    assert asyncio.run(f.watch.check()) == [] and f.sched.notices == []
    assert len(f.watch.notes) == 1 and "not JSON" in f.watch.notes[0]


def test_a_scheduler_not_up_or_away_gets_the_notice_at_the_next_poll(md):
    f = make(md, {CLOUD_LABEL: "aws"}, scheduler=False)
    md.aws_instance_action("terminate", DEADLINE)
    assert asyncio.run(f.watch.check()) == [] and "no scheduler" in f.watch.last_error
    handle = f.adapter.actors[SCHEDULER] = FakeHandle(f.sched, name=SCHEDULER)
    handle.away = True
    assert asyncio.run(f.watch.check()) == [] and "ActorGone" in f.watch.last_error
    handle.away = False
    assert len(asyncio.run(f.watch.check())) == 1 and f.watch.last_error is None
    assert len(f.sched.notices) == 1


def test_a_failed_delivery_stops_the_round_so_a_later_notice_never_overtakes_it(md):
    f = make(md, {CLOUD_LABEL: "aws"})
    md.aws_rebalance(time.time())
    md.aws_instance_action("terminate", DEADLINE)
    f.adapter.actors[SCHEDULER].fail_next("handle_node_interruption", RuntimeError("restarting"))
    assert asyncio.run(f.watch.check()) == [] and f.sched.notices == []
    asyncio.run(f.watch.check())
    assert [k for _, k, _ in f.sched.notices] == [REBALANCE, SPOT_INTERRUPTION]


def test_an_event_that_is_not_recorded_does_not_undo_the_delivery(md):
    lines: list[str] = []
    f = make(md, {CLOUD_LABEL: "aws"})
    f.watch.log = lines.append
    f.adapter.actors[SCHEDULER].fail_next("record_event", RuntimeError("full"))
    md.aws_instance_action("stop", DEADLINE)
    assert len(asyncio.run(f.watch.check())) == 1 and asyncio.run(f.watch.check()) == []
    assert len(f.sched.notices) == 1 and "spot-interruption" in lines[0] and "not recorded" in lines[1]


def test_the_probe_runs_the_watch_and_a_failing_poll_never_ends_it():
    class Broken:
        calls = 0

        def poll(self):
            Broken.calls += 1
            if Broken.calls == 1:
                raise RuntimeError("poller bug")
            return SpotReading()

    adapter = FakeRayAdapter()
    watch = spot_watch_for("n1", {CLOUD_LABEL: "gcp"}, {"poll_interval_s": 0.01}, adapter, poller=Broken())

    async def run_a_while():
        task = asyncio.get_running_loop().create_task(watch.run())
        await asyncio.sleep(0.1)
        task.cancel()

    asyncio.run(run_a_while())
    assert Broken.calls >= 2 and watch.polls == Broken.calls - 1 and "poller bug" in watch.last_error


def test_the_spot_notices_settings_are_checked_at_the_edge():
    assert FabricSettings().spot_notices == SpotNoticeSettings(enabled=True, poll_interval_s=5.0, timeout_s=2.0, metadata_url=None)
    assert FabricSettings.load({"spot_notices": {"metadata_url": "http://127.0.0.2:8080"}}).spot_notices.metadata_url == "http://127.0.0.2:8080"
    with pytest.raises(SettingsError) as caught:
        FabricSettings.load({"spot_notices": {"metadata_url": "ftp://x", "poll_interval_s": 0, "every": 1}})
    paths = sorted(p.path for p in caught.value.problems)
    assert paths == ["spot_notices.every", "spot_notices.metadata_url", "spot_notices.poll_interval_s"], paths

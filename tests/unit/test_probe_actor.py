"""ProbeActor's logic (``actors.probe.Probe``) one beat at a time over a fake Ray seam, a recorded
node's ``Sources`` (with a fake psutil) and a manual clock: no Ray started.

A beat registers the node first, heartbeats after; a registry that lost the node gets it
registered again; a registry that is away costs a beat, not the probe; the re-probe reports when
it is due.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from actors.probe import Probe, sources_for
from fabric.core.errors import RegistrationError
from fabric.core.health import ManualClock
from fabric.core.names import LABEL_PREFIX, PROFILE_LABEL, RECORDING_ENV, REGISTRY
from fabric.testing.fake_ray import ActorGone, FakeHandle, FakeRayAdapter
from probes import LiveSources, RecordedSources
from probes.profiles import profile_path


class FakePsutil:
    def cpu_percent(self, interval=None):
        return 25.0

    def virtual_memory(self):
        return SimpleNamespace(percent=50.0)


def make(profile: str = "cpu-only-box"):
    clock = ManualClock(0.0)
    adapter = FakeRayAdapter()
    registry = adapter.actors[REGISTRY] = FakeHandle(name=REGISTRY)  # answers None to everything, records calls
    labels = {PROFILE_LABEL: profile, f"{LABEL_PREFIX}slots": "3"}
    probe = Probe("n1", name=profile, labels=labels, heartbeat_interval_s=1.0, reprobe_interval_s=10.0, adapter=adapter,
                  sources=RecordedSources(profile_path(profile), psutil=FakePsutil()), source=profile, clock=clock)
    return SimpleNamespace(clock=clock, adapter=adapter, registry=registry, probe=probe)


def test_the_first_beat_registers_then_beats_heartbeat_with_the_load():
    f = make()
    asyncio.run(f.probe.beat())
    [(node_id, caps, util)] = f.registry.called("register")
    assert node_id == "n1" and caps["name"] == "cpu-only-box" and caps["limitations"]["max_concurrent_tasks"] == 3
    assert util == {"cpu_percent": 25.0, "memory_percent": 50.0, "gpus": ()}
    asyncio.run(f.probe.beat())
    assert f.registry.called("heartbeat") == [("n1", util)]
    info = f.probe.info()
    assert info["registered"] and info["beats"] == 2 and info["last_error"] is None and info["source"] == "cpu-only-box"


def test_a_registry_that_lost_the_node_gets_it_registered_again():
    f = make()
    asyncio.run(f.probe.beat())
    f.registry.fail_next("heartbeat", RegistrationError("heartbeat from unregistered node n1", node_id="n1", field="node_id"))
    asyncio.run(f.probe.beat())
    assert not f.probe.registered and "unregistered" in f.probe.last_error
    asyncio.run(f.probe.beat())
    assert len(f.registry.called("register")) == 2 and f.probe.registered and f.probe.last_error is None


def test_a_refused_registration_other_than_a_lost_node_is_kept_and_not_retried_as_lost():
    f = make()
    f.registry.fail_next("register", RegistrationError("node n1 joined as 'a' but registers as 'b'", node_id="n1", field="capabilities.name"))
    asyncio.run(f.probe.beat())
    assert not f.probe.registered and "joined as" in f.probe.last_error and f.probe.beats == 0


def test_a_registry_away_costs_a_beat_not_the_probe():
    f = make()
    f.registry.away = True
    asyncio.run(f.probe.beat())
    assert f.probe.last_error.startswith("ActorGone") and f.probe.beats == 0
    f.registry.away = False
    asyncio.run(f.probe.beat())
    assert f.probe.registered and f.probe.last_error is None and f.probe.beats == 1


def test_the_reprobe_reports_when_due():
    f = make()
    asyncio.run(f.probe.beat())
    assert f.registry.called("report") == []
    f.clock.advance(10.0)
    asyncio.run(f.probe.beat())
    [(node_id, caps, degraded, util)] = f.registry.called("report")
    assert node_id == "n1" and caps["name"] == "cpu-only-box" and degraded == [] and util["cpu_percent"] == 25.0
    assert f.probe.next_probe == 20.0


def test_pause_is_measured_on_the_probe_clock():
    f = make()
    f.probe.pause(5.0)
    assert f.probe.paused_until == 5.0


def test_sources_for_a_profile_a_recording_or_the_live_machine(tmp_path):
    src, word = sources_for({PROFILE_LABEL: "edge-relay"}, environ={})
    assert isinstance(src, RecordedSources) and word == "edge-relay"
    src, word = sources_for({}, environ={RECORDING_ENV: str(profile_path("arm64-board"))})
    assert isinstance(src, RecordedSources) and word == str(profile_path("arm64-board"))
    src, word = sources_for({}, environ={})
    assert isinstance(src, LiveSources) and word == "live"

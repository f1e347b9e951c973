"""Warmth end to end without Ray (issue 15): the probe reports what its artifact cache holds and
prefetches on request; the registry stores it (``RegistryRecord.warm``, the whole record in the
change feed); ``to_node_record`` puts it in ``NodeRecord.warm``; the job book gives a job's
placement its template's artifacts, so a warm node ranks above a cold one."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from actors.probe import Probe
from actors.registry import Registry
from fabric.core.errors import RegistrationError
from fabric.core.health import ManualClock
from fabric.core.jobs.book import JobBook
from fabric.core.jobs.spec import JobSpec
from fabric.core.names import PROFILE_LABEL, REGISTRY
from fabric.core.placement import Requirement, place
from fabric.core.records import RegistryRecord
from fabric.core.settings import FabricSettings
from fabric.store import FabricStore
from fabric.testing.fake_ray import FakeHandle, FakeRayAdapter
from probes import RecordedSources
from probes.artifacts import ArtifactCache
from probes.profiles import profile_path
from placement_helpers import fleet, node
from fabric.core.capabilities import NodeCapabilities
from fabric.core.health import RayNodeView

A = "a" * 56


class FakePsutil:
    def cpu_percent(self, interval=None):
        return 25.0

    def virtual_memory(self):
        return SimpleNamespace(percent=50.0)


class FakeRay:
    """Ray's node table: the one node ``A``, alive, joined as a cpu_ffmpeg node called ``box``."""

    def alive_node(self, node_id):
        if node_id != A:
            return None
        return RayNodeView(node_id=A, alive=True, labels={"fabric.io/tier": "cpu_ffmpeg", "fabric.io/name": "box"},
                           resources={"fabric.slots": 1.0, "fabric.tier.cpu_ffmpeg": 1.0, "fabric.tier.relay": 1.0})


def caps():
    return NodeCapabilities(name="box", cpu_logical=4, cpu_physical=2, cpu_usable=4, memory_mib=8192).model_dump(mode="json")


@pytest.fixture
def artifact(tmp_path):
    f = tmp_path / "encoder.bin"
    f.write_bytes(b"encoder weights" * 100)
    return f.as_uri()


def probe_with_cache(tmp_path):
    adapter = FakeRayAdapter()
    registry = adapter.actors[REGISTRY] = FakeHandle(name=REGISTRY)
    cache = ArtifactCache(tmp_path / "cache")
    probe = Probe("n1", name="cpu-only-box", labels={PROFILE_LABEL: "cpu-only-box"}, heartbeat_interval_s=1.0,
                  reprobe_interval_s=10.0, adapter=adapter, clock=ManualClock(0.0), artifacts=cache,
                  sources=RecordedSources(profile_path("cpu-only-box"), psutil=FakePsutil()), source="cpu-only-box")
    return SimpleNamespace(probe=probe, registry=registry, cache=cache)


# -- the probe -------------------------------------------------------------------------------------
def test_the_probe_reports_warmth_after_registering_and_only_when_it_changes(tmp_path, artifact):
    f = probe_with_cache(tmp_path)
    asyncio.run(f.probe.beat())
    assert f.registry.called("report_warmth") == [("n1", [])]
    asyncio.run(f.probe.beat())
    assert len(f.registry.called("report_warmth")) == 1  # unchanged: not sent again
    f.cache.fetch([artifact])  # something else filled the cache: the next beat says so
    asyncio.run(f.probe.beat())
    assert f.registry.called("report_warmth")[-1] == ("n1", [artifact])
    assert f.probe.info()["warm"] == [artifact] and f.probe.last_error is None


def test_prefetch_fetches_reports_at_once_and_returns_each_result(tmp_path, artifact):
    f = probe_with_cache(tmp_path)
    asyncio.run(f.probe.beat())
    bad = (tmp_path / "missing.bin").as_uri()
    results = asyncio.run(f.probe.prefetch([artifact, bad]))
    assert [(r["uri"], r["ok"]) for r in results] == [(artifact, True), (bad, False)]
    assert "no such file" in results[1]["error"] and results[0]["bytes"] == 1500 and set(results[0]) == {
        "uri", "ok", "error", "bytes", "seconds"}
    assert f.registry.called("report_warmth")[-1] == ("n1", [artifact])  # without waiting for a beat
    asyncio.run(f.probe.beat())
    assert len(f.registry.called("report_warmth")) == 2


def test_prefetch_refuses_a_string_and_a_failed_report_is_retried_by_the_next_beat(tmp_path, artifact):
    f = probe_with_cache(tmp_path)
    with pytest.raises(TypeError):
        asyncio.run(f.probe.prefetch(artifact))
    asyncio.run(f.probe.beat())
    f.registry.fail_next("report_warmth", RuntimeError("registry restarting"))
    [r] = asyncio.run(f.probe.prefetch([artifact]))
    assert r["ok"] and "registry restarting" in f.probe.last_error
    asyncio.run(f.probe.beat())
    assert f.registry.called("report_warmth")[-1] == ("n1", [artifact])


# -- the registry and the record ------------------------------------------------------------------
@pytest.fixture
def registry(tmp_path):
    reg = Registry(FabricStore(tmp_path / "fabric.db"), FakeRay(), clock=ManualClock(1000.0))
    reg.register(A, caps())
    return reg


def test_the_registry_stores_warmth_sorted_and_publishes_the_whole_record(registry):
    page0 = registry.changes(0, registry.log.epoch)
    rec = registry.report_warmth(A, ["http://h/b.bin", "file:///a.bin", "file:///a.bin"])
    assert rec.warm == ("file:///a.bin", "http://h/b.bin") and registry.record(A).warm == rec.warm
    page = registry.changes(page0.seq, registry.log.epoch)
    [change] = page.changes
    assert change.kind == "record" and change.cause == "warmth reported" and change.record.warm == rec.warm
    registry.report_warmth(A, ["http://h/b.bin", "file:///a.bin"])
    assert registry.changes(page.seq, registry.log.epoch).changes == ()  # the same warmth: no change
    registry.heartbeat(A, {"cpu_percent": 5})
    registry.register(A, caps())  # a re-registration keeps what the store holds
    assert registry.record(A).warm == rec.warm


@pytest.mark.parametrize("warm, field", [("file:///a.bin", "warm"), ([""], "warm[0]"), ([3], "warm[0]"), (None, "warm")])
def test_a_malformed_warmth_report_is_refused_naming_the_field(registry, warm, field):
    before = registry.store.dump()
    with pytest.raises(RegistrationError) as err:
        registry.report_warmth(A, warm)
    assert err.value.field == field and registry.store.dump() == before


def test_warmth_from_an_unregistered_node_is_refused_as_lost(registry):
    with pytest.raises(RegistrationError) as err:
        registry.report_warmth("c" * 56, ["file:///a.bin"])
    assert err.value.field == "node_id" and "unregistered" in str(err.value)  # the probe registers again


def test_to_node_record_carries_warm_also_on_the_live_copy_path(registry):
    cold = registry.record(A)
    first = cold.to_node_record(1000.0)
    assert first.warm == frozenset()
    warm = registry.report_warmth(A, ["file:///a.bin"])
    warm_same_caps = warm.model_copy(update={"capabilities": cold.capabilities})  # what the feed's shortcut sees
    assert warm_same_caps.to_node_record(1000.0, previous=first).warm == {"file:///a.bin"}
    assert warm_same_caps.to_node_record(1000.0, previous=first) == warm_same_caps.to_node_record(1000.0)
    stored = RegistryRecord.model_validate_json(cold.model_dump_json(exclude={"warm"}))  # a record written before warmth
    assert stored.warm == ()


def test_a_warmth_change_reaches_the_schedulers_fleet(registry):
    from actors.fleet_feed import diff_node

    before = registry.record(A).to_node_record(1000.0)
    after = registry.report_warmth(A, ["file:///a.bin"]).to_node_record(1000.0)
    change = diff_node(A, before, after, "warmth reported")
    assert change.kind == "changed" and change.fields == {"warm": frozenset({"file:///a.bin"})}


# -- placement: the job book's context ------------------------------------------------------------
ARTS = ("file:///srv/enc/model.bin", "http://127.0.0.1:9/enc/table.bin")


def test_the_book_gives_a_job_its_templates_artifacts():
    settings = FabricSettings.load({"templates": {"encoder": {"artifacts": list(ARTS)}}})
    book = JobBook(settings.failure, settings)
    book.add("j1", JobSpec(name="enc", requirement=Requirement(num_cpus=1), template="encoder"), 0.0)
    book.add("j2", JobSpec(name="other", requirement=Requirement(num_cpus=1), template="plain"), 0.0)
    ctx = book.context(book.job("j1"), lambda n: None)
    assert ctx.template == "encoder" and ctx.template_images == ARTS and ctx.images == ARTS
    assert book.context(book.job("j2"), lambda n: None).images == ("plain",)
    bare = JobBook(settings.failure)  # a book without settings: warmth counts the template's name
    bare.add("j1", JobSpec(name="enc", requirement=Requirement(num_cpus=1), template="encoder"), 0.0)
    assert bare.context(bare.job("j1"), lambda n: None).images == ("encoder",)


def test_a_node_holding_the_templates_artifacts_ranks_above_a_cold_one():
    settings = FabricSettings.load({"templates": {"encoder": {"artifacts": list(ARTS)}}})
    book = JobBook(settings.failure, settings)
    book.add("j1", JobSpec(name="enc", requirement=Requirement(num_cpus=1), template="encoder"), 0.0)
    ctx = book.context(book.job("j1"), lambda n: None)
    f = fleet(node("a"), node("b", warm=frozenset(ARTS[:1])), node("c", warm=frozenset(ARTS)))
    d = place(f, Requirement(num_cpus=1), ctx, trace=True)
    assert d.node_id == "c"
    keys = {node_id: key for key, node_id in d.trace.survivors()}
    assert keys["a"][4] == 0 and keys["b"][4] == -1 and keys["c"][4] == -2  # the warmth component
    assert "warmth=-2" in d.explain()

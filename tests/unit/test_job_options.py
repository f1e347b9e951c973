"""Job options, pure: ``start_at`` (the ``scheduled`` state, placement ``placement_lead_s`` before
it), ``drain_strategy`` (the drain call's beats the job's, the job's beats the settings'),
``started_at`` / ``first_started_at`` (status, events, rows, metrics) and a job's restart history
cleared when a node provisioned for it registers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fabric.core.errors import RequirementError
from fabric.core.jobs import JobSpec, JobState
from fabric.core.jobs import stimuli as js
from fabric.core.jobs.book import JobBook, JobEvent, PlaceJob, summarize
from fabric.core.jobs.restarts import Restart
from fabric.core.jobs.rows import job_from_row, job_row
from fabric.core.jobs.start_at import placement_begins, placement_lead_s
from fabric.core.placement import PlacementContext, Requirement
from fabric.core.scheduling import NodeJoined, PlaceRequested, ProvisionNode, ProvisionStarted, SchedulerCore
from fabric.core.scheduling.metrics_view import series
from fabric.core.scheduling.provision_rows import provision_from_row, provision_row
from fabric.core.settings import FabricSettings, PoolTier
from fabric.core.errors import SettingsError

from test_cascade import CPU, SHAPE, cascade_settings, provisioned
from test_job_book import WHERE, Checked
from test_jobs_core import SPEC, Fleet, _settle
from test_scheduling import Clock, rec

J = JobState


def lead_settings(*leads: float) -> FabricSettings:
    return FabricSettings.load({"pools": [{"name": "default", "tiers": [
        {"name": f"t{i}", "placement_lead_s": lead, **({"scale_out": "elastic", "provider": "local", "candidate_shapes": [SHAPE]} if i else {})}
        for i, lead in enumerate(leads)]}]})


def book(settings: FabricSettings | None = None) -> Checked:
    b = Checked()
    b.book.settings = settings
    return b


# -- the options, validated -------------------------------------------------------------------------
def test_start_at_takes_epoch_seconds_or_an_aware_datetime():
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert JobSpec("j", start_at=at).start_at == at.timestamp()
    assert JobSpec("j", start_at=1_900_000_000).start_at == 1_900_000_000.0
    assert JobSpec("j").start_at is None and JobSpec("j").drain_strategy is None


@pytest.mark.parametrize("bad", [datetime(2030, 1, 1), "2030-01-01", -5, 0, float("nan"), True])
def test_a_bad_start_at_names_the_field(bad):
    with pytest.raises(RequirementError) as e:
        JobSpec("j", start_at=bad)
    assert e.value.field == "start_at"


def test_drain_strategy_is_a_migration_strategy():
    assert JobSpec("j", drain_strategy="overlap").drain_strategy == "overlap"
    with pytest.raises(RequirementError) as e:
        JobSpec("j", drain_strategy="teleport")
    assert e.value.field == "drain_strategy"


def test_placement_lead_s_defaults_by_provider_and_is_never_negative():
    assert PoolTier(name="t").effective_placement_lead_s == 0.0  # the fleet's own machines: at start_at
    assert PoolTier(name="t", provider="local").effective_placement_lead_s == 0.0
    assert PoolTier(name="t", provider="ray-autoscaler").effective_placement_lead_s == 300.0  # rented: time to boot
    assert PoolTier(name="t", provider="ray-autoscaler", placement_lead_s=0).effective_placement_lead_s == 0.0
    with pytest.raises(SettingsError, match="placement_lead_s"):
        lead_settings(-1)
    s = lead_settings(30, 120)
    assert placement_lead_s(s, None) == 120.0  # the slowest tier of the cascade
    assert placement_lead_s(s, "nope") == 0.0 and placement_lead_s(None, None) == 0.0
    assert placement_begins(JobSpec("j", start_at=1000.0), s) == 880.0
    assert placement_begins(JobSpec("j"), s) is None


# -- start_at ----------------------------------------------------------------------------------------
def test_a_job_waits_scheduled_until_its_lead_then_is_placed():
    b = book(lead_settings(60))
    b.add("j1", JobSpec("j", start_at=1000.0), now=100.0)
    rec = b.job("j1")
    assert rec.state == J.SCHEDULED and "start_at" in rec.reason
    assert b.due(939.0, WHERE) == []
    out = b.due(940.0, WHERE)
    assert [e.data["to"] for e in out if isinstance(e, JobEvent)] == ["pending"]
    assert [p.job_id for p in out if isinstance(p, PlaceJob)] == ["j1"] and rec.state == J.PENDING
    assert [h[1] for h in rec.history] == ["scheduled", "pending"]


@pytest.mark.parametrize("start_at", [50.0, 100.0, 130.0])
def test_a_start_at_passed_or_inside_the_lead_is_placed_at_once(start_at):
    b = book(lead_settings(30))
    b.add("j1", JobSpec("j", start_at=start_at), now=100.0)
    assert b.job("j1").state == J.PENDING
    assert [p.job_id for p in b.due(100.0, WHERE) if isinstance(p, PlaceJob)] == ["j1"]


def test_without_a_lead_placement_begins_at_start_at():
    b = book(FabricSettings())
    b.add("j1", JobSpec("j", start_at=200.0), now=100.0)
    assert b.due(199.9, WHERE) == [] and b.job("j1").state == J.SCHEDULED
    assert any(isinstance(p, PlaceJob) for p in b.due(200.0, WHERE))


def test_a_scheduled_job_stopped_stops_at_once():
    b = book()
    b.add("j1", JobSpec("j", start_at=1e9), now=1.0)
    b.stop("j1", 2.0)
    assert b.job("j1").state == J.STOPPED
    assert b.due(2e9, WHERE) == []


def test_a_scheduled_job_survives_a_restart_through_its_row_and_an_old_row_still_loads():
    b = book()
    b.add("j1", JobSpec("j", start_at=5000.0, drain_strategy="handover"), now=1.0)
    row = job_row(b.job("j1"))
    back = job_from_row(row)
    assert (back.state, back.spec.start_at, back.spec.drain_strategy) == (J.SCHEDULED, 5000.0, "handover")
    again = book()
    again.adopt(back)
    assert again.due(4999.0, WHERE) == [] and any(isinstance(p, PlaceJob) for p in again.due(5000.0, WHERE))
    old = {k: v for k, v in row.items() if k not in ("started_at", "first_started_at")}
    old["spec"] = {k: v for k, v in row["spec"].items() if k not in ("start_at", "drain_strategy")}
    old["state"] = "pending"
    rec = job_from_row(old)
    assert (rec.started_at, rec.first_started_at, rec.spec.start_at, rec.spec.drain_strategy) == (None, None, None, None)


def test_through_the_core_a_tick_moves_a_scheduled_job_on():
    f = Fleet()
    f.handle(js.JobSubmitted("job-1", JobSpec("w", Requirement(), start_at=f.now + 30)))
    f.handle(js.PlacementsDue())
    _settle(f)
    assert f.core.status("job-1").state == J.SCHEDULED and f.core.status("job-1").start_at == f.now + 30
    f.now += 30
    f.handle(js.JobsTick())
    _settle(f)
    assert f.core.status("job-1").state == J.RUNNING


# -- started_at / first_started_at -------------------------------------------------------------------
def test_started_at_is_the_current_instance_and_first_started_at_the_first():
    b = book()
    b.add("j1", JobSpec("j", max_restarts_per_hour=100), now=0.0)
    b.due(0.0, WHERE)
    b.placed("j1", "n0", 1, "primary@a", 1.0)
    assert b.job("j1").started_at is None
    out = b.started("j1", "primary@a", 2.0)
    (ev,) = [e for e in out if isinstance(e, JobEvent)]
    assert (ev.data["started_at"], ev.data["first_started_at"]) == (2.0, 2.0)
    b.died("j1", "primary@a", 10.0)
    assert (b.job("j1").started_at, b.job("j1").first_started_at) == (None, 2.0)
    b.due(20.0, WHERE)
    b.placed("j1", "n1", 2, "primary@b", 20.0)
    b.started("j1", "primary@b", 21.0)
    st = summarize(b.job("j1"), 22.0)
    assert (st.started_at, st.first_started_at) == (21.0, 2.0)
    back = job_from_row(job_row(b.job("j1")))
    assert (back.started_at, back.first_started_at) == (21.0, 2.0)


def test_a_migration_gives_the_job_a_new_started_at():
    b = book()
    b.add("j1", JobSpec("j"), now=0.0)
    b.due(0.0, WHERE)
    b.placed("j1", "n0", 1, "primary@a", 0.0)
    b.started("j1", "primary@a", 1.0)
    b.migrating("j1", 5.0, "move")
    assert b.job("j1").started_at == 1.0  # the source still serves
    out = b.migrated("j1", "n1", "primary@b", 2, 9.0, "move")
    assert (b.job("j1").started_at, b.job("j1").first_started_at) == (9.0, 1.0)
    assert [e.data["started_at"] for e in out if isinstance(e, JobEvent)] == [9.0]


def test_metrics_carry_each_jobs_starts_as_gauges():
    _, gauges = series({"job_starts": {"job-1": {"started_at": 5.0, "first_started_at": 2.0},
                                       "job-2": {"started_at": None, "first_started_at": 3.0}}})
    assert gauges[("fabric_job_started_at_seconds", (("job_id", "job-1"),))] == 5.0
    assert gauges[("fabric_job_first_started_at_seconds", (("job_id", "job-2"),))] == 3.0
    assert ("fabric_job_started_at_seconds", (("job_id", "job-2"),)) not in gauges


# -- drain_strategy ----------------------------------------------------------------------------------
def _drained_strategies(job_strategy: str | None, call_strategy: str | None) -> set[str]:
    f = Fleet()
    f.handle(js.JobSubmitted("job-1", JobSpec("w", Requirement(), max_restarts_per_hour=1000,
                                                 drain_strategy=job_strategy)))
    f.handle(js.PlacementsDue())
    _settle(f)
    node = f.core.status("job-1").node_id
    state = f.handle(js.DrainJobsRequested(node, timeout_s=60, strategy=call_strategy))
    return {f.core.migrations.get(j.migration_id).strategy.value for j in state.jobs.values() if j.migration_id}


def test_the_drain_calls_strategy_beats_the_jobs_which_beats_the_settings_default():
    default = FabricSettings().migration.default_strategy
    assert _drained_strategies(None, None) == {default}
    assert _drained_strategies("overlap", None) == {"overlap"}
    assert _drained_strategies("overlap", "stop_then_start") == {"stop_then_start"}


# -- restart history cleared by a node provisioned for the job ---------------------------------------
def test_a_node_provisioned_for_a_job_clears_its_restart_history():
    b = book()
    b.add("j1", JobSpec("j"), now=0.0)
    b.job("j1").restarts = [Restart(1.0), Restart(2.0)]
    (ev,) = b.provisioned_for("j1", "n9", 3.0)
    assert ev.kind == "restarts_cleared" and ev.data["cleared"] == 2 and b.job("j1").restarts == []
    assert summarize(b.job("j1"), 3.0).restarts_last_hour == 0
    assert b.provisioned_for("j1", "n9", 4.0) == []  # nothing left to clear: no event
    assert b.provisioned_for("nobody", "n9", 4.0) == []


def test_capacity_joined_for_a_job_clears_it_through_the_core():
    f = Fleet()
    f.handle(js.JobSubmitted("job-1", SPEC))
    f.handle(js.PlacementsDue())
    _settle(f)
    f.die("job-1", f.core.status("job-1").instance_key)
    assert f.core.book.job("job-1").restarts
    f.handle(js.CapacityJoined((("job-1", "n3"),)))
    assert f.core.book.job("job-1").restarts == []
    (ev,) = [e for e in f.events if e.kind == "restarts_cleared"]
    assert ev.data["job_id"] == "job-1" and ev.data["node_id"] == "n3"


def _a_job_that_needs_a_provision(job_id: str) -> tuple[SchedulerCore, ProvisionNode]:
    """A core whose fixed node two queued calls fill, then job ``job_id`` placed: the cascade's ask."""
    core = SchedulerCore(cascade_settings(), clock=Clock())
    core.handle(NodeJoined(rec("fixed-1", "cpu_ffmpeg", slots=2)))
    for i in range(2):
        core.handle(PlaceRequested(CPU, request_id=f"r{i}", queue=True))
    out = core.handle(PlaceRequested(CPU, PlacementContext(job="w", job_id=job_id)))
    (ask,) = [i for i in out if isinstance(i, ProvisionNode)]
    return core, ask


def test_the_cascade_remembers_which_job_a_provision_serves():
    core, ask = _a_job_that_needs_a_provision("job-7")
    (p,) = list(core.provisions)
    assert p.job_id == "job-7"
    assert provision_from_row(provision_row(p, 0.0), 0.0).job_id == "job-7"
    old = {k: v for k, v in provision_row(p, 0.0).items() if k != "job_id"}
    assert provision_from_row(old, 0.0).job_id is None
    core.handle(ProvisionStarted(ask.provision_id, "local-x", "local"))
    assert core.take_served() == []
    core.handle(NodeJoined(provisioned("ray-node-1", "local-x", "burst")))
    assert core.take_served() == [("job-7", "ray-node-1")] and core.take_served() == []


def test_a_node_that_registered_before_its_provider_answered_is_served_too():
    core, ask = _a_job_that_needs_a_provision("job-8")
    core.handle(NodeJoined(provisioned("ray-node-2", "local-y", "burst")))
    core.handle(ProvisionStarted(ask.provision_id, "local-y", "local"))
    assert core.take_served() == [("job-8", "ray-node-2")]


def test_tasks_and_jobless_provisions_serve_nobody():
    core = SchedulerCore(cascade_settings(), clock=Clock())
    core.handle(NodeJoined(rec("fixed-1", "cpu_ffmpeg", slots=2)))
    out = []
    for i in range(3):
        out += core.handle(PlaceRequested(CPU, request_id=f"r{i}", queue=True))
    (ask,) = [i for i in out if isinstance(i, ProvisionNode)]
    core.handle(ProvisionStarted(ask.provision_id, "local-z", "local"))
    core.handle(NodeJoined(provisioned("ray-node-3", "local-z", "burst")))
    assert core.take_served() == []


def test_datetime_and_epoch_give_the_same_schedule():
    at = datetime.now(timezone.utc) + timedelta(hours=1)
    assert JobSpec("j", start_at=at) == JobSpec("j", start_at=at.timestamp())


def test_a_fresh_book_without_settings_schedules_by_start_at_alone():
    b = JobBook(FabricSettings().failure)
    b.add("j1", JobSpec("j", start_at=10.0), 0.0)
    assert b.job("j1").state == J.SCHEDULED


# -- the decorator's arguments -----------------------------------------------------------------------
class Worker:
    def work(self) -> None: ...


def test_the_decorator_and_options_take_start_at_and_drain_strategy():
    from fabric import adaptive

    at = datetime(2031, 5, 6, tzinfo=timezone.utc)
    cls = adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=1, start_at=at, drain_strategy="handover")(Worker)
    assert (cls.spec.start_at, cls.spec.drain_strategy) == (at.timestamp(), "handover")
    later = cls.options(start_at=at.timestamp() + 60, drain_strategy=None)
    assert (later.spec.start_at, later.spec.drain_strategy) == (at.timestamp() + 60, None)
    assert later.requirement.num_cpus == 1
    with pytest.raises(RequirementError) as e:
        cls.options(drain_strategy="teleport")
    assert e.value.field == "drain_strategy"


def test_a_function_refuses_the_job_only_options():
    from fabric import adaptive

    def f() -> None: ...

    with pytest.raises(Exception, match="start_at"):
        adaptive.remote(min_tier="cpu_ffmpeg", start_at=1e9)(f)


def test_fabric_jobs_shows_the_start_times_and_its_json_carries_them():
    from fabric.cli.jobs_cmd import format_job, job_rows
    from fabric.core.jobs.book import JobStatus

    st = JobStatus("job-1", "w", J.RUNNING, start_at=100.0, started_at=150.0, first_started_at=120.0)
    (row,) = job_rows([st], {}, history=True)
    assert (row["start_at"], row["started_at"], row["first_started_at"]) == (100.0, 150.0, 120.0)
    lines = format_job(row, 200.0).splitlines()
    assert any(line.startswith("start at") for line in lines) and any(line.startswith("started ") for line in lines)
    (plain,) = job_rows([JobStatus("job-2", "w", J.PENDING)], {})
    assert (plain["start_at"], plain["started_at"]) == (None, None)
    assert not any(line.startswith("start") for line in format_job({**plain, "history": []}, 200.0).splitlines())


def test_the_grpc_job_message_carries_the_start_times_and_reads_back():
    from fabric.api.inspect import job_message
    from fabric.api.readers import job_status
    from fabric.core.jobs.book import JobStatus

    st = JobStatus("job-1", "w", J.SCHEDULED, start_at=100.0)
    back = job_status(job_message(st))
    assert (back.state, back.start_at, back.started_at, back.first_started_at) == (J.SCHEDULED, 100.0, None, None)
    ran = JobStatus("job-1", "w", J.RUNNING, started_at=150.0, first_started_at=120.0)
    assert job_status(job_message(ran)) == ran


def test_a_scheduled_job_held_by_a_new_cluster_stays_scheduled():
    from fabric.core.jobs.inherit import hold, to_hold

    from test_cold_start import OLD

    settings = FabricSettings()
    b = JobBook(settings.failure, settings)
    b.add("later", JobSpec("j", start_at=50_000.0), 100.0)
    out = hold(b, to_hold(list(b.jobs.values()), OLD, 10_000.0), 10_000.0)
    rec = b.job("later")
    assert rec.state == J.SCHEDULED and rec.dormant and not [e for e in out if e.kind == "job_state"]

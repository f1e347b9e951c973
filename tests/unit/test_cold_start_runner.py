"""The scheduler's job runner on a store another Ray cluster wrote (``actors.inherited``), without Ray:
a ``JobRunner`` over a real ``JobStore``, a fake launcher and a fake fleet, given the running
cluster's id as the scheduler would read it (``fabric.rayio.cluster_id``).

A runner of another cluster holds the jobs (nothing is started), says so, stamps the store with the
running cluster and resumes them when asked; one of the same cluster (a scheduler restart) and one
on a store with no stamp resume everything as before; the setting resumes them at once."""

import asyncio

from actors.inherited import CLUSTER_KEY, INHERITED_KEY
from actors.jobs import JobRunner
from actors.scheduler import Scheduler
from fabric.core.jobs import JobState
from fabric.rayio.metrics import RecordingMetrics
from fabric.store.jobs import JobStore

from test_job_runner import SPEC, FakeLauncher, settle, two_jobs_running
from test_scheduler_actor import FakeFeed, joined
from test_scheduling import Clock

HEAD = "127.0.0.6:6379"


def make(tmp_path, launcher, clock, cluster, settings=None):
    feed = FakeFeed([joined("n1", "cpu_ffmpeg"), joined("n2", "cpu_ffmpeg")])
    return Scheduler(settings, feed=feed, metrics=RecordingMetrics(), clock=clock, run_loop=False,
                     jobs=lambda s: JobRunner(s, JobStore(tmp_path / "jobs.db"), launcher, clock=clock, cluster=cluster))


def first_life(tmp_path, launcher, clock, cluster=("cluster-a", HEAD)) -> list[str]:
    """Cluster A runs two jobs, then is gone (its instances with it)."""
    async def go():
        sched = make(tmp_path, launcher, clock, cluster)
        await sched._sync()
        ids = await two_jobs_running(sched, launcher)
        assert all(sched.jobs.book.job(j).state == JobState.RUNNING for j in ids)
        sched.jobs.store.close()
        return ids

    ids = asyncio.run(go())
    launcher.live.clear()
    return ids


def meta(tmp_path, key):
    store = JobStore(tmp_path / "jobs.db")
    try:
        return store.get_meta(key)
    finally:
        store.close()


def test_a_new_cluster_holds_the_jobs_says_so_and_resumes_them_when_asked(tmp_path, capsys):
    clock, launcher = Clock(), FakeLauncher()
    ids = first_life(tmp_path, launcher, clock)
    assert meta(tmp_path, CLUSTER_KEY)["cluster_id"] == "cluster-a"
    started = len(launcher.started)
    clock.t += 3600

    async def cold_start():
        sched = make(tmp_path, launcher, clock, ("cluster-b", HEAD))
        await sched._sync()
        runner = sched.jobs
        for _ in range(3):
            runner.tick()
            await settle()
        assert len(launcher.started) == started  # nothing started again
        assert all(runner.book.job(j).state == JobState.RECOVERING and runner.book.job(j).reason.startswith("held:")
                   for j in ids)
        report = sched.inherited_store()
        assert report["line"] == ("found the store of another cluster (id cluster-a…, head 127.0.0.6:6379, last seen "
                                  "60 m ago): 2 jobs held; fabric up --resume resumes them")
        assert sched.inherited_store() == report  # said again while they are held
        assert [e["kind"] for e in runner.events_since(0, ["jobs_inherited"])] == ["jobs_inherited"]
        report = sched.inherited_store(resume=True)
        assert sorted(report["resumed_now"]) == sorted(ids) and report["line"].endswith("2 jobs resumed")
        await settle()
        runner.tick()
        await settle()
        assert len(launcher.started) == started + 2
        assert sched.inherited_store() is None  # said once
        runner.store.close()

    asyncio.run(cold_start())
    assert "2 jobs held" in capsys.readouterr().out
    assert meta(tmp_path, CLUSTER_KEY)["cluster_id"] == "cluster-b" and meta(tmp_path, INHERITED_KEY) is None


def test_the_same_cluster_and_an_unstamped_store_resume_everything(tmp_path):
    clock, launcher = Clock(), FakeLauncher()
    ids = first_life(tmp_path, launcher, clock, cluster=None)  # an older fabric: no stamp written
    assert meta(tmp_path, CLUSTER_KEY) is None
    started = len(launcher.started)

    async def restart(cluster):
        sched = make(tmp_path, launcher, clock, cluster)
        await sched._sync()
        sched.jobs.tick()
        await settle()
        assert sched.inherited_store() is None
        assert all(not sched.jobs.book.job(j).reason.startswith("held:") for j in ids)
        sched.jobs.store.close()

    asyncio.run(restart(("cluster-a", HEAD)))  # no stamp: the same cluster, and it is stamped now
    assert len(launcher.started) == started + 2  # the gone instances recovered, as ever
    assert meta(tmp_path, CLUSTER_KEY)["cluster_id"] == "cluster-a"
    asyncio.run(restart(("cluster-a", HEAD)))  # a scheduler restart on the same cluster
    assert meta(tmp_path, INHERITED_KEY) is None


def test_the_setting_resumes_another_clusters_jobs_at_the_start(tmp_path):
    clock, launcher = Clock(), FakeLauncher()
    ids = first_life(tmp_path, launcher, clock)
    started = len(launcher.started)

    async def cold_start():
        sched = make(tmp_path, launcher, clock, ("cluster-b", HEAD), settings={"store": {"resume_inherited": True}})
        await sched._sync()
        sched.jobs.tick()
        await settle()
        assert len(launcher.started) == started + 2
        report = sched.inherited_store()
        assert report["resumed"] and sorted(report["jobs"]) == sorted(ids)
        sched.jobs.store.close()

    asyncio.run(cold_start())

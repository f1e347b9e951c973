"""The scheduler's job runner without Ray (issue 14): ``actors.jobs.JobRunner`` inside a
``Scheduler`` driven by a fake fleet feed, a fake instance launcher (the Ray seam) and a real
``JobStore`` in a temporary folder. It places jobs with the scheduler's own core, starts and
watches instances through the launcher, recovers a dead one elsewhere, and a runner built again
over the same store (a scheduler restart) re-adopts the live instances and recovers the gone ones."""

import asyncio

import pytest

from actors.jobs import JobRunner
from actors.scheduler import Scheduler
from fabric.core.jobs import JobSpec, JobState
from fabric.core.placement import Requirement
from fabric.rayio.metrics import RecordingMetrics
from fabric.store.jobs import JobStore

from test_scheduler_actor import FakeFeed, joined
from test_scheduling import Clock

SPEC = JobSpec("enc", Requirement(min_tier="cpu_ffmpeg", num_cpus=0.5))


class Died(Exception):
    pass


class Call:
    """One actor method: ``remote()`` returns a future the test resolves."""

    def __init__(self) -> None:
        self.futures: list[asyncio.Future] = []

    def remote(self, *args):
        fut = asyncio.get_event_loop().create_future()
        self.futures.append(fut)
        return fut


class Instance:
    def __init__(self, job_id, key, node_id) -> None:
        self.job_id, self.key, self.node_id = job_id, key, node_id
        self.__fabric_started__ = Call()
        self.__fabric_watch__ = Call()
        self.__fabric_ping__ = Call()
        self.__fabric_shutdown__ = Call()
        self.killed = False

    def die(self) -> None:
        for call in (self.__fabric_started__, self.__fabric_watch__):
            for fut in call.futures:
                if not fut.done():
                    fut.set_exception(Died("the actor died"))


class FakeLauncher:
    def __init__(self) -> None:
        self.started: list[Instance] = []
        self.live: dict[tuple[str, str], Instance] = {}

    def start(self, job_id, key, node_id, cls_blob, args_blob, req, gpus=0.0):
        inst = Instance(job_id, key, node_id)
        self.started.append(inst)
        self.live[(job_id, key)] = inst
        return inst

    def find(self, job_id, key):
        return self.live.get((job_id, key))

    def kill(self, handle):
        handle.killed = True
        self.live.pop((handle.job_id, handle.key), None)

    def has_health(self, cls_blob):
        return False

    @staticmethod
    def death(exc):
        return (True, False, str(exc)) if isinstance(exc, Died) else None


def make(tmp_path, launcher, clock):
    feed = FakeFeed([joined("n1", "cpu_ffmpeg"), joined("n2", "cpu_ffmpeg")])
    sched = Scheduler(feed=feed, metrics=RecordingMetrics(), clock=clock, run_loop=False,
                      jobs=lambda s: JobRunner(s, JobStore(tmp_path / "jobs.db"), launcher, clock=clock))
    return sched


async def settle():
    """Let the runner's tasks run, and its launches (in a thread) finish."""
    for _ in range(20):
        await asyncio.sleep(0.005)


def test_a_job_is_placed_started_watched_and_recovered_elsewhere(tmp_path):
    clock, launcher = Clock(), FakeLauncher()

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        runner = sched.jobs
        job_id = runner.submit(SPEC, b"cls", b"args")
        runner.tick()
        await settle()
        assert len(launcher.started) == 1
        first = launcher.started[0]
        assert sched.core.ledger.get(runner.book.job(job_id).binding.allocation_id) is not None  # its slot is held
        first.__fabric_started__.futures[0].set_result(None)
        await settle()
        assert runner.book.job(job_id).state == JobState.RUNNING
        first.die()
        await settle()  # recovered at once, not at the next tick: its first restart waits for nothing
        rec = runner.book.job(job_id)
        assert rec.state == JobState.STARTING and "died" not in rec.reason
        assert [h[1] for h in rec.history][-2:] == ["recovering", "starting"]
        assert [a.node_id for a in sched.core.ledger.allocations().values()] == [rec.binding.node_id]  # the old slot went back
        second = launcher.started[-1]
        assert second.node_id != first.node_id and second.key != first.key
        second.__fabric_started__.futures[0].set_result(None)
        await settle()
        assert runner.book.job(job_id).state == JobState.RUNNING and runner.book.job(job_id).restarts_last_hour(clock.t) == 1
        assert runner.book.validate_state() == []

    asyncio.run(go())


async def two_jobs_running(sched, launcher) -> list[str]:
    """Submit two jobs to ``sched`` and let their instances start (every constructor answers); their ids."""
    ids = [sched.jobs.submit(SPEC, b"cls", b"args") for _ in range(2)]
    sched.jobs.tick()
    await settle()
    for inst in launcher.started:
        inst.__fabric_started__.futures[0].set_result(None)
    await settle()
    return ids


def test_a_restarted_runner_re_adopts_live_instances_and_recovers_the_gone_ones(tmp_path):
    clock, launcher = Clock(), FakeLauncher()

    async def first_life():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        return await two_jobs_running(sched, launcher)

    ids = asyncio.run(first_life())
    gone = launcher.started[0]
    launcher.live.pop((gone.job_id, gone.key))  # died while no scheduler watched
    started_before = len(launcher.started)

    async def second_life():
        sched = make(tmp_path, launcher, clock)  # a new process: everything from the store
        await sched._sync()
        runner = sched.jobs
        assert sorted(runner.book.jobs) == sorted(ids)
        runner.tick()  # resume, then place what is due
        await settle()
        kept = runner.book.job(launcher.started[1].job_id)
        assert kept.state == JobState.RUNNING and kept.binding.instance_key == launcher.started[1].key
        assert kept.binding.allocation_id in sched.core.ledger  # its slot held again in the new core
        redo = runner.book.job(gone.job_id)  # recovered in the same tick: its first restart waits for nothing
        assert redo.state == JobState.STARTING and redo.binding.instance_key != gone.key
        assert len(launcher.started) == started_before + 1 and launcher.started[-1].job_id == gone.job_id
        assert "gone while the scheduler was away" in " ".join(h[2] for h in redo.history)
        assert runner.book.validate_state() == []

    asyncio.run(second_life())


def test_after_a_restart_a_job_state_is_answered_only_once_checked_against_what_lives(tmp_path):
    clock, launcher = Clock(), FakeLauncher()

    async def first_life():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        job_id = sched.jobs.submit(SPEC, b"cls", b"args")
        sched.jobs.tick()
        await settle()
        launcher.started[0].__fabric_started__.futures[0].set_result(None)
        await settle()
        return job_id

    job_id = asyncio.run(first_life())
    gone = launcher.started[0]
    launcher.live.pop((gone.job_id, gone.key))  # died while no scheduler watched

    async def second_life():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        asked = asyncio.ensure_future(sched.job_status(job_id))
        listed = asyncio.ensure_future(sched.job_statuses())
        await settle()
        assert not asked.done() and not listed.done()  # the book still says running: not answered yet
        sched.jobs.tick()
        await settle()
        status = await asked
        assert status.state == JobState.STARTING and status.instance_key != gone.key
        assert [s.state for s in await listed] == [JobState.STARTING]

    asyncio.run(second_life())


def test_a_job_no_node_fits_waits_pending_and_is_placed_when_capacity_comes(tmp_path):
    clock, launcher = Clock(), FakeLauncher()
    big = JobSpec("big", Requirement(min_tier="cpu_ffmpeg", num_cpus=64))

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        job_id = sched.jobs.submit(big, b"cls", b"args")
        sched.jobs.tick()
        rec = sched.jobs.book.job(job_id)
        assert rec.state == JobState.PENDING and "waiting for a node" in rec.reason and not launcher.started
        assert [e["kind"] for e in sched.jobs.events_since(0)][-1] == "placement_failed"

    asyncio.run(go())


def test_the_runner_refuses_what_is_not_a_job(tmp_path):
    from fabric.core.errors import MessageError

    async def go():
        sched = make(tmp_path, FakeLauncher(), Clock())
        with pytest.raises(MessageError) as err:
            sched.jobs.submit({"name": "x"}, b"", b"")
        assert err.value.field == "spec"
        with pytest.raises(MessageError):
            sched.jobs.submit(SPEC, "not bytes", b"")

    asyncio.run(go())


def test_a_retried_submit_is_the_same_job_and_a_clashing_one_is_refused(tmp_path):
    from fabric.core.errors import InvalidSpecError

    async def go():
        sched = make(tmp_path, FakeLauncher(), Clock())
        await sched._sync()
        assert sched.jobs.submit(SPEC, b"cls", b"args", "job-1") == "job-1"
        assert sched.jobs.submit(SPEC, b"cls", b"args", "job-1") == "job-1"  # the caller never got the first answer
        assert list(sched.jobs.book.jobs) == ["job-1"]
        with pytest.raises(InvalidSpecError) as err:
            sched.jobs.submit(JobSpec("other"), b"cls", b"args", "job-1")
        assert err.value.field == "job_id"

    asyncio.run(go())


def test_a_stop_while_the_instance_is_being_created_leaves_nothing_running(tmp_path):
    import threading

    clock, launcher = Clock(), FakeLauncher()
    gate = threading.Event()
    slow_start = launcher.start

    def start(*args, **kwargs):
        gate.wait(5)  # Ray's named-actor registration, slow under load
        return slow_start(*args, **kwargs)

    launcher.start = start

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        job_id = sched.jobs.submit(SPEC, b"cls", b"args")
        sched.jobs.tick()
        await settle()
        assert sched.jobs.stop(job_id) in ("stopping", "stopped")
        await settle()
        gate.set()
        await settle()
        assert sched.jobs.book.job(job_id).state == JobState.STOPPED
        assert launcher.started and all(inst.killed for inst in launcher.started)  # created late, killed at once
        assert len(sched.core.ledger) == 0

    asyncio.run(go())


def test_a_job_no_node_fits_has_a_node_provisioned_for_it_and_is_placed_once_it_joins(tmp_path):
    from fabric.core.scheduling import NodeJoined
    from fabric.providers import ProvisionedNode
    from test_cascade import provisioned

    clock, launcher = Clock(), FakeLauncher()
    shape = {"name": "cpu-box", "profile": "cpu-only-box", "tier": "cpu_ffmpeg", "num_cpus": 2}
    settings = {"pools": [{"name": "default", "tiers": [
        {"name": "onprem"}, {"name": "burst", "scale_out": "elastic", "provider": "local", "candidate_shapes": [shape]}]}]}

    class Provider:
        name = "local"
        asked: list = []

        def provision(self, shape, *, pool, pool_tier, spare=False, tags=None):
            self.asked.append((pool, pool_tier, shape.name))
            return ProvisionedNode("local-1", "local", pool, pool_tier, shape, spare, 0.0, "local-1")

        def list(self):
            return []

    async def go():
        feed = FakeFeed([])
        sched = Scheduler(settings, feed=feed, metrics=RecordingMetrics(), clock=clock, run_loop=False,
                          jobs=lambda s: JobRunner(s, JobStore(tmp_path / "jobs.db"), launcher, clock=clock),
                          providers={"local": Provider()})
        await sched._sync()
        runner = sched.jobs
        job_id = runner.submit(SPEC, b"cls", b"args")
        runner.tick()
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert Provider.asked == [("default", "burst", "cpu-box")]  # the placement's provision was carried out
        assert runner.book.job(job_id).state == JobState.PENDING and "provisioning" in runner.book.job(job_id).reason
        sched._handle(NodeJoined(provisioned("n-burst", "local-1", "burst")))
        runner.node_joined()
        runner.tick()
        await settle()
        assert runner.book.job(job_id).binding.node_id == "n-burst" and launcher.started[-1].node_id == "n-burst"

    asyncio.run(go())


def test_a_node_of_a_spot_pool_tier_is_interruptible_capacity(tmp_path):
    from fabric.core.scheduling import NodeJoined
    from test_cascade import provisioned

    shape = {"name": "cpu-box", "profile": "cpu-only-box"}
    settings = {"pools": [{"name": "default", "tiers": [
        {"name": "onprem"},
        {"name": "spot", "scale_out": "elastic", "provider": "local", "launch_mode": "spot", "candidate_shapes": [shape]},
        {"name": "reserved", "scale_out": "elastic", "provider": "local", "launch_mode": "reserved", "candidate_shapes": [shape]}]}]}

    async def go():
        sched = Scheduler(settings, feed=FakeFeed([joined("n1", "cpu_ffmpeg")]), metrics=RecordingMetrics(), clock=Clock(),
                          run_loop=False, jobs=lambda s: JobRunner(s, JobStore(tmp_path / "jobs.db"), FakeLauncher(), clock=Clock()))
        await sched._sync()
        sched._handle(NodeJoined(provisioned("n-spot", "local-1", "spot")))
        sched._handle(NodeJoined(provisioned("n-res", "local-2", "reserved")))
        # launch_mode spot defaults reliability to interruptible (the resilience event's
        # "primary on interruptible capacity"); a fixed or a reserved pool tier is durable
        assert [sched.jobs._interruptible(n) for n in ("n-spot", "n-res", "n1")] == [True, False, False]

    asyncio.run(go())


class ListingLauncher(FakeLauncher):
    def instances(self):
        out = {}
        for job_id, key in self.live:
            out.setdefault(job_id, []).append(key)
        return out


def test_a_restarted_runner_rolls_a_migration_back_and_kills_the_target_it_left(tmp_path):
    from fabric.core.jobs.book import Binding

    clock, launcher = Clock(), ListingLauncher()

    async def first_life():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        job_id = sched.jobs.submit(SPEC, b"cls", b"args")
        sched.jobs.tick()
        await settle()
        launcher.started[0].__fabric_started__.futures[0].set_result(None)
        await settle()
        runner = sched.jobs
        rec = runner.book.job(job_id)
        runner.book.migrating(job_id, clock(), "migrating (overlap)")  # a saga in flight when the process died
        runner.persist()
        stray = launcher.start(job_id, "primary@7a7a7a7a", "n2", b"cls", b"args", None)  # its target, running
        return job_id, rec.binding, stray

    job_id, binding, stray = asyncio.run(first_life())

    async def second_life():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        runner = sched.jobs
        runner.tick()
        await settle()
        rec = runner.book.job(job_id)
        assert rec.state == JobState.RUNNING and rec.binding.instance_key == binding.instance_key
        assert stray.killed and (job_id, stray.key) not in launcher.live  # never two instances
        assert not getattr(launcher.live[(job_id, binding.instance_key)], "killed", False)
        assert [e for e in runner.events_since(0, ["instance_swept"]) if e["data"]["instance_key"] == stray.key]
        assert isinstance(rec.binding, Binding) and runner.book.validate_state() == []

    asyncio.run(second_life())


def test_a_poll_of_many_fleet_changes_is_written_once_and_places_waiting_jobs_once(tmp_path):
    """A page of joins and losses (thousands at fleet scale) is one write of the job store, not one
    or two per change; every change's event is in it, in order, and nothing is lost."""
    clock, launcher = Clock(), FakeLauncher()
    page = [joined(f"m{i}", "cpu_ffmpeg") for i in range(20)]

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        store = sched.jobs.store
        writes = {"state": 0, "events": 0}
        write, append = store.write, store.append_events

        def counted_write(*a, **kw):
            writes["state"] += 1
            return write(*a, **kw)

        def counted_append(events):
            writes["events"] += 1
            return append(events)

        store.write, store.append_events = counted_write, counted_append
        handled = sched.jobs.core.stimuli_handled
        before = sched.jobs.seq
        sched.feed.batches.append(page)
        await sched._sync()
        assert writes["events"] == 1 and writes["state"] <= 1
        assert sched.jobs.core.stimuli_handled - handled == 1  # one CapacityJoined for the whole page
        assert sched.jobs.seq - before == 20 and [seq for seq, _ in store.events(before)] == list(range(before + 1, before + 21))
        from actors.fleet_feed import FleetChange

        sched.feed.batches.append([FleetChange("lost", f"m{i}", cause="ray: node dead") for i in range(20)])
        await sched._sync()  # each loss is a stimulus of the jobs core; the page is still one write
        assert writes["events"] == 2 and sched.jobs.seq - before == 40
        assert [seq for seq, _ in store.events(before)] == list(range(before + 1, before + 41))

    asyncio.run(go())


# -- single-use jobs ---------------------------------------------------------------------------------
SINGLE_USE = JobSpec("enc", Requirement(min_tier="cpu_ffmpeg", num_cpus=0.5, exclusive=True), single_use=True)


class Provider:
    """A ``local`` provider that notes what it is asked to terminate (``fail``: it refuses)."""

    name = "local"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.terminated: list[str] = []

    def terminate(self, instance_id):
        if self.fail:
            raise RuntimeError("the provider is away")
        self.terminated.append(instance_id)

    def list(self):
        return []


def ending_port(scheduler):
    """The scheduler's task core port, noting each node the runner asks it to end and its answer."""
    from actors.job_ports import SchedulerTaskCore

    class EndingTaskCore(SchedulerTaskCore):
        def __init__(self, scheduler):
            super().__init__(scheduler)
            self.ended = []

        def end_node(self, node_id):
            started = super().end_node(node_id)
            self.ended.append((node_id, started))
            return started

    return EndingTaskCore(scheduler)


async def single_use_job_stopped(tmp_path, provider, provider_made: bool):
    """A single-use job placed on the fleet's one node (a provider's, or one joined by hand), started,
    then stopped; the scheduler, once its instance ended."""
    from fabric.core.scheduling import NodeJoined
    from test_cascade import provisioned

    clock, launcher = Clock(), FakeLauncher()
    settings = {"pools": [{"name": "default", "tiers": [
        {"name": "onprem"}, {"name": "burst", "scale_out": "elastic", "provider": "local",
                             "candidate_shapes": [{"name": "cpu-box", "profile": "cpu-only-box"}]}]}]}
    sched = Scheduler(settings, feed=FakeFeed([] if provider_made else [joined("n-hand", "cpu_ffmpeg")]),
                      metrics=RecordingMetrics(), clock=clock, run_loop=False, providers={"local": provider},
                      jobs=lambda s: JobRunner(s, JobStore(tmp_path / "jobs.db"), launcher, clock=clock, tasks=ending_port(s)))
    await sched._sync()
    if provider_made:
        sched._handle(NodeJoined(provisioned("n-prov", "local-1", "burst")))
    job_id = sched.jobs.submit(SINGLE_USE, b"cls", b"args")
    sched.jobs.tick()
    await settle()
    (inst,) = launcher.started
    inst.__fabric_started__.futures[0].set_result(None)
    await settle()
    assert sched.jobs.book.job(job_id).state == JobState.RUNNING
    sched.jobs.stop(job_id)
    await settle()
    inst.__fabric_shutdown__.futures[0].set_result(None)
    await settle()
    assert sched.jobs.book.job(job_id).state == JobState.STOPPED
    return sched, job_id


@pytest.mark.parametrize("provider_made", [True, False])
def test_a_stopped_single_use_job_ends_a_providers_node_and_leaves_a_hand_joined_one(tmp_path, provider_made):
    provider = Provider()

    async def go():
        sched, job_id = await single_use_job_stopped(tmp_path, provider, provider_made)
        node = "n-prov" if provider_made else "n-hand"
        assert sched.jobs.tasks.ended == [(node, provider_made)]
        (ev,) = sched.jobs.events_since(0, ["single_use_ended"])
        assert ev["data"] == {"job_id": job_id, "node_id": node, "node_terminated": provider_made}
        assert provider.terminated == (["local-1"] if provider_made else [])
        assert sched.core.fleet.get(node).cordoned == provider_made  # nothing lands on a node that goes
        notes = [e["data"] for e in sched.jobs.events_since(0, ["node_terminated"])]
        assert notes == ([{"provider": "local", "instance_id": "local-1", "reason": "single-use job ended"}]
                         if provider_made else [])

    asyncio.run(go())


def test_a_providers_refusal_to_end_a_single_use_node_is_said_and_nothing_else_breaks(tmp_path, capsys):
    async def go():
        sched, job_id = await single_use_job_stopped(tmp_path, Provider(fail=True), True)
        (ev,) = sched.jobs.events_since(0, ["single_use_ended"])
        assert ev["data"]["node_terminated"] and sched.jobs.book.validate_state() == []

    asyncio.run(go())
    assert "terminating node n-prov (local/local-1) failed: RuntimeError: the provider is away" in capsys.readouterr().out

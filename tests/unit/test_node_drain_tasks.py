"""A node has one drain (issue 21): the jobs core's ``NodeDrain``, whose ``waiting`` phase is where
the node's jobs leave *and* its running tasks finish. Ray is asked only once both are done (or the
deadline passed); the task core's book is the tasks part it carries out for that drain. Pure steps,
then the real ``Scheduler`` + ``JobRunner`` over a fake fleet."""

from __future__ import annotations

import asyncio

from fabric.core.jobs.drains import AskRayToDrain, NodeDrain, NodeDrainPhase
from fabric.core.placement import Requirement

from test_job_runner import FakeLauncher, make, settle
from test_scheduling import Clock

P = NodeDrainPhase
ONE_CPU = Requirement(min_tier="cpu_ffmpeg", num_cpus=1, fallback=False)


def test_with_its_jobs_off_a_drain_waits_for_the_running_tasks_then_asks_ray():
    d = NodeDrain("n1", [], 100.0, timeout_s=60, force=False, strategy=None)
    assert d.step(101.0, tasks_done=False) == []
    assert d.phase is P.WAITING and d.snapshot().tasks_finishing and d.snapshot().as_dict()["tasks_finishing"]
    assert d.step(105.0, tasks_done=False) == [] and d.phase is P.WAITING
    (ask,) = d.step(106.0, tasks_done=True)
    assert isinstance(ask, AskRayToDrain) and d.phase is P.DRAINING and not d.snapshot().tasks_finishing
    assert [p.value for p, _, _ in d.history] == ["migrating", "waiting", "draining"]


def test_the_deadline_ends_the_wait_for_tasks_as_it_ends_the_wait_for_jobs():
    d = NodeDrain("n1", [], 100.0, timeout_s=10, force=False, strategy=None)
    d.step(101.0, tasks_done=False)
    (ask,) = d.step(110.0, tasks_done=False)  # the task core's grace is the drain's deadline
    assert ask.reason == "IDLE_TERMINATION" and d.phase is P.DRAINING


def test_a_drain_with_nothing_running_asks_ray_at_once_as_before():
    d = NodeDrain("n1", [], 100.0, timeout_s=60, force=False, strategy=None)
    (ask,) = d.step(100.0)
    assert ask.node_id == "n1" and [p.value for p, _, _ in d.history] == ["migrating", "draining"]


def test_the_schedulers_drain_is_the_nodes_one_drain_and_ray_waits_for_its_running_call(tmp_path):
    clock, launcher = Clock(), FakeLauncher()
    asked: list[AskRayToDrain] = []

    async def go():
        sched = make(tmp_path, launcher, clock)
        await sched._sync()
        runner = sched.jobs
        runner.drains.ask_ray = asked.append  # what Ray would be asked, and when
        a = await sched.place_task(ONE_CPU)
        node = a.node_id
        assert await sched.drain(node, 300) == node  # the scheduler's drain call starts the node's one drain
        st = runner.drains.status(node)
        assert st.phase is P.WAITING and st.tasks_finishing and st.jobs == {}
        assert node in sched.core.drains  # the task core carries out the tasks part
        clock.t += 1
        runner.tick()
        assert asked == [] and runner.drains.status(node).tasks_finishing  # a call still runs there
        sched.release([a.allocation_id])  # it ends: the task core hands the node off
        await settle()
        assert node not in sched.core.drains and sched.core.node(node).status.value == "draining"
        runner.tick()
        assert [x.node_id for x in asked] == [node] and runner.drains.status(node).phase is P.DRAINING
        assert not runner.drains.status(node).tasks_finishing

    asyncio.run(go())

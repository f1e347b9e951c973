#!/usr/bin/env python
"""Write the jobs store fixture of the first format (schema 0: pickled rows, no schema version).

Run once, at the commit that added it (b5cfe88, before the store moved to versioned JSON rows), with the
code of that commit: ``python scripts/make_store_fixture_v0.py tests/fixtures/store/v0``. It drives
the real ``JobRunner`` of that day inside a ``Scheduler`` over a fake fleet (two CPU nodes) and a
fake instance launcher, so every row is exactly what a scheduler of that day wrote:

- ``solo``: a job submitted alone, running on a node;
- bundle ``pair``: a bundle with a resilience policy (a primary and a backup replica), both running;
- bundle ``fragile``: a bundle whose essential job died past its restart ceiling (0 an hour): broken;
- the events all of that emitted (job_state, placement_decision, bundle_updated, bundle_broken...).

``tests/unit/test_store_upgrade.py`` opens a copy of it with today's store and checks what it reads.
The user class is defined here (in ``__main__``), so its pickle carries it by value, as a driver's does.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

from ray import cloudpickle

from actors.fleet_feed import FleetChange
from actors.jobs import JobRunner
from actors.scheduler import Scheduler
from fabric.core.capabilities import Limitations, NodeCapabilities
from fabric.core.jobs import JobSpec
from fabric.core.jobs.bundles import Bundle
from fabric.core.placement import NodeRecord, Requirement
from fabric.rayio.metrics import RecordingMetrics
from fabric.store.jobs import JobStore


class Encoder:
    """The user's job class (pickled by value: it lives in ``__main__``)."""

    def __init__(self, rate: int = 30) -> None:
        self.rate = rate


class _Clock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


class _Feed:
    def __init__(self, batch: list) -> None:
        self.batches, self.outsiders = [batch], {}

    async def poll(self) -> list:
        return self.batches.pop(0) if self.batches else []

    async def set_cordoned(self, *a, **kw) -> None: ...

    async def mark_draining(self, *a, **kw) -> None: ...


class _Call:
    def __init__(self) -> None:
        self.futures: list[asyncio.Future] = []

    def remote(self, *args):
        fut = asyncio.get_event_loop().create_future()
        self.futures.append(fut)
        return fut


class _Instance:
    def __init__(self, job_id: str, key: str, node_id: str) -> None:
        self.job_id, self.key, self.node_id = job_id, key, node_id
        for hook in ("__fabric_started__", "__fabric_watch__", "__fabric_ping__", "__fabric_shutdown__"):
            setattr(self, hook, _Call())

    def die(self) -> None:
        for call in (self.__fabric_started__, self.__fabric_watch__):
            for fut in call.futures:
                if not fut.done():
                    fut.set_exception(_Died("the actor died"))


class _Died(Exception):
    pass


class _Launcher:
    def __init__(self) -> None:
        self.live: dict[tuple[str, str], _Instance] = {}

    def start(self, job_id, key, node_id, cls_blob, args_blob, req, gpus=0.0):
        inst = self.live[(job_id, key)] = _Instance(job_id, key, node_id)
        return inst

    def find(self, job_id, key):
        return self.live.get((job_id, key))

    def kill(self, handle) -> None:
        self.live.pop((handle.job_id, handle.key), None)

    def has_health(self, cls_blob) -> bool:
        return False

    @staticmethod
    def death(exc):
        return (True, False, str(exc)) if isinstance(exc, _Died) else None


def _node(node_id: str) -> FleetChange:
    caps = NodeCapabilities(name=node_id, cpu_logical=4, cpu_physical=4, cpu_usable=4, memory_mib=8192,
                            limitations=Limitations(max_concurrent_tasks=4))
    return FleetChange("joined", node_id, NodeRecord(node_id=node_id, name=node_id, capabilities=caps))


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.005)


async def _write(folder: Path) -> None:
    clock, launcher = _Clock(), _Launcher()
    store_path = folder / "fabric.jobs.db"
    sched = Scheduler(feed=_Feed([_node("node-a"), _node("node-b")]), metrics=RecordingMetrics(), clock=clock,
                      run_loop=False, jobs=lambda s: JobRunner(s, JobStore(store_path), launcher, clock=clock))
    await sched._sync()
    runner = sched.jobs

    async def start_all() -> None:
        runner.tick()
        await _settle()
        for inst in list(launcher.live.values()):
            for fut in inst.__fabric_started__.futures:
                if not fut.done():
                    fut.set_result(None)
        await _settle()

    spec = JobSpec("solo", Requirement(min_tier="cpu_ffmpeg", num_cpus=0.5), on_runtime_failure="prefer_spare")
    runner.submit(spec, cloudpickle.dumps(Encoder), cloudpickle.dumps(((), {"rate": 25})), job_id="solo")
    pair = Bundle(bundle_id="pair", resilience={"same_node": "forbid"}, jobs=[
        {"name": "encoder", "cls": Encoder, "kwargs": {"rate": 60}, "requirement": {"min_tier": "cpu_ffmpeg", "num_cpus": 0.5},
         "backup_overrides": {"rate": 30}},
        {"name": "muxer", "cls": Encoder, "requirement": {"num_cpus": 0.25}, "essential": False, "co_locate_with": ["encoder"]},
    ])
    runner.create_bundle(cloudpickle.dumps(pair))
    fragile = Bundle(bundle_id="fragile", jobs=[
        {"name": "once", "cls": Encoder, "requirement": {"num_cpus": 0.25}, "max_restarts_per_hour": 0}])
    runner.create_bundle(cloudpickle.dumps(fragile))
    await start_all()
    (once_id,) = [j for j, r in runner.book.jobs.items() if r.bundle_id == "fragile"]
    rec = runner.book.jobs[once_id]
    if rec.binding is not None:  # still running: it dies now, past its ceiling
        launcher.live[(once_id, rec.binding.instance_key)].die()
        await _settle()
    clock.t += 10
    runner.tick()
    await _settle()
    runner.persist()
    runner.store.close()
    states = {j: (r.state.value, r.bundle_id) for j, r in runner.book.jobs.items()}
    bundles = {b: r.state for b, r in runner.book.bundles.items()}
    print(f"wrote {store_path}: jobs {states}; bundles {bundles}; events up to {runner.seq}")


def main(argv: list[str]) -> int:
    folder = Path(argv[1] if len(argv) > 1 else "tests/fixtures/store/v0")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    asyncio.run(_write(folder))
    for extra in folder.glob("fabric.jobs.db-*"):  # WAL side files: the checkpointed file is the fixture
        extra.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

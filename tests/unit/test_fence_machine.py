"""At most one serving instance of a job, whatever the network does: a hypothesis state machine over
the jobs core (through ``handle`` only, ``validate_state()`` after every step) and a model of the
instances' side.

Nodes are cut off and healed; a cut node's instances run on and cannot renew; the fabric loses a
node (cut or only stalled), Ray holds a cut node's instances dead while they run on, and Ray's
kill reaches only nodes still connected; instances die; time passes; the scheduler restarts. An instance serves while it holds a lease: from its first grant
until ``lease_ttl_s`` after it sent the last renewal granted, and then it ends its own process. The
invariant, checked after every step: no job has two instances serving at once."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fabric.core.errors import FabricError
from fabric.core.jobs import stimuli as js
from fabric.core.jobs.state import KillInstance
from fabric.core.settings_fence import FenceSettings
from fabric.rayio.instances import GRANTED, REFUSED
from test_jobs_core import NODES, SPEC, Fleet, _settle
from test_scheduling import rec

TTL = FenceSettings().lease_ttl_s


class CutFleet(Fleet):
    """The pure executor, with links that can be cut: Ray's kill does not cross a cut."""

    def __init__(self) -> None:
        self.cut: set[str] = set()
        super().__init__()

    def _one(self, ins: Any) -> list[Any]:
        if isinstance(ins, KillInstance) and self.live.get((ins.job_id, ins.instance_key)) in self.cut:
            return []  # the kill never arrives: the instance runs on over there
        return super()._one(ins)


class FenceMachine(RuleBasedStateMachine):
    @initialize()
    def boot(self) -> None:
        self.f = CutFleet()
        self.until: dict[tuple[str, str], float] = {}
        """Instance -> when its lease runs out, on its own side (absent: never granted)."""
        self.refused: set[tuple[str, str]] = set()
        self.born: dict[tuple[str, str], float] = {}
        self.jobs = 0
        self.spare = 0
        self.migrated: set[str] = set()
        """Jobs an ``overlap`` migration moved: two instances serve during its window, by design."""

    def _renewals(self) -> None:
        """Each live instance on a connected node renews (or asks its first lease); each whose
        lease ran out, or that never got one within ``lease_ttl_s``, ends its own process."""
        now = self.f.now
        for inst, node in sorted(self.f.live.items()):
            self.born.setdefault(inst, now)
            if node not in self.f.cut and inst not in self.refused:
                answer = self.f.handle(js.LeaseAsked(*inst))
                if answer == GRANTED:
                    self.until[inst] = now + TTL
                elif answer == REFUSED:
                    self.refused.add(inst)
        for inst, node in sorted(self.f.live.items()):
            lapsed = self.until[inst] <= now if inst in self.until else now - self.born[inst] >= TTL or inst in self.refused
            if lapsed:
                del self.f.live[inst]
                if node not in self.f.cut:  # the raylet there saw the process end
                    self.f.handle(js.InstanceEnded(inst[0], inst[1], "its lease ended"))

    def _serving(self, inst: tuple[str, str]) -> bool:
        return inst in self.f.live and self.until.get(inst, -1.0) > self.f.now

    @rule()
    def submit(self) -> None:
        self.jobs += 1
        self.f.handle(js.JobSubmitted(f"job-{self.jobs}", SPEC))
        self.f.handle(js.PlacementsDue())
        _settle(self.f)
        self._renewals()

    @rule(dt=st.floats(0.5, 9.0))
    def time_passes(self, dt: float) -> None:
        self.f.now += dt
        self._renewals()
        self.f.handle(js.JobsTick())
        self.f.handle(js.PlacementsDue())
        _settle(self.f)
        self._renewals()

    @rule(node=st.sampled_from(NODES))
    def cut(self, node: str) -> None:
        self.f.cut.add(node)

    @rule(node=st.sampled_from(NODES))
    def heal(self, node: str) -> None:
        self.f.cut.discard(node)

    @precondition(lambda self: self.f.world.nodes)
    @rule(pick=st.integers(0, 20))
    def fleet_loses_a_node(self, pick: int) -> None:
        """Offline by missed heartbeats or dead to Ray: cut off, or only stalled."""
        node = sorted(self.f.world.nodes)[pick % len(self.f.world.nodes)]
        del self.f.world.nodes[node]
        self.f.handle(js.JobsNodeLost(node))
        self.spare += 1
        fresh = f"m{self.spare}"
        self.f.world.nodes[fresh] = rec(fresh, "cpu_ffmpeg")  # a new node (or the old one rejoined, with a new id)
        self.f.handle(js.CapacityJoined())
        _settle(self.f)

    @precondition(lambda self: self.f.cut)
    @rule(pick=st.integers(0, 20))
    def ray_holds_a_cut_node_dead(self, pick: int) -> None:
        """The watch of each instance on a cut node fails with 'its node has died'; the instances run on."""
        node = sorted(self.f.cut)[pick % len(self.f.cut)]
        for inst, where in sorted(self.f.live.items()):
            if where == node:
                self.f.handle(js.InstanceEnded(inst[0], inst[1], "The actor is dead because its node has died.",
                                               node_died=True))

    @precondition(lambda self: self.f.live)
    @rule(pick=st.integers(0, 50))
    def an_instance_dies(self, pick: int) -> None:
        inst = sorted(self.f.live)[pick % len(self.f.live)]
        if self.f.live[inst] not in self.f.cut:
            self.f.die(*inst)

    @precondition(lambda self: self.f.core.book.jobs)
    @rule(pick=st.integers(0, 20), strategy=st.sampled_from(["stop_then_start", "overlap", "handover"]))
    def migrate(self, pick: int, strategy: str) -> None:
        jobs = sorted(self.f.core.book.jobs)
        try:
            self.f.handle(js.MigrateRequested(jobs[pick % len(jobs)], strategy))
        except FabricError:
            return
        self.migrated.add(jobs[pick % len(jobs)]) if strategy == "overlap" else None

    @rule(pick=st.integers(0, 50))
    def a_step_lands(self, pick: int) -> None:
        self.f.land(pick)

    @rule()
    def restart(self) -> None:
        self.f.restart()
        _settle(self.f)

    @invariant()
    def at_most_one_serving_instance_per_job(self) -> None:
        if not hasattr(self, "f"):
            return
        serving: dict[str, list[str]] = {}
        for inst in self.f.live:
            if self._serving(inst):
                serving.setdefault(inst[0], []).append(inst[1])
        twice = {job: keys for job, keys in serving.items() if len(keys) > 1 and job not in self.migrated}
        assert not twice, f"jobs with two instances serving at {self.f.now}: {twice}"


TestFence = FenceMachine.TestCase
TestFence.settings = settings(max_examples=1000, stateful_step_count=40, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])

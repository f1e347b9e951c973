"""Random sequences over the job book (split from test_job_book.py, which holds its helpers):
after every step the book's state is valid, histories are legal, instance keys are unique and
every slot given is held by its bound job or released exactly once."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, settings as hsettings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fabric.core.jobs import JobBook, JobSpec
from fabric.core.jobs.book import RETRY_S, Binding, PlaceJob, ReleaseSlot, StartInstance, StopInstance
from fabric.core.settings import FabricSettings

from test_job_book import NODES, J, ctx, history_problems, where3
from test_job_book_bundles import make_bundle


# -- random sequences ------------------------------------------------------------------------------
STANDALONE = ("j0", "j1", "j2")


class BookMachine(RuleBasedStateMachine):
    """Random reports to one book over three standalone jobs and a bundle (two jobs, two replicas),
    three nodes, a clock that only moves forward. Reports name the job's own instance most of the
    time and a stale one (an instance already replaced, or another job's) otherwise."""

    @initialize(ceiling=st.sampled_from([0, 1, 2, 6]))
    def setup(self, ceiling):
        self.book = JobBook(FabricSettings.load({"failure": {"max_restarts_per_hour": ceiling}}).failure)
        self.now = 0.0
        self.keys = itertools.count()
        self.used_keys: list[str] = []
        self.given: list[int] = []
        self.released: list[int] = []
        self.later: dict[str, PlaceJob] = {}
        self.book.add_bundle("b1", make_bundle(same_node="forbid", same_zone="forbid"))
        self.bundle_added = False

    def _take(self, out):
        for i in out:
            if isinstance(i, ReleaseSlot):
                self.released.append(i.allocation_id)
            if isinstance(i, StartInstance):
                assert i.binding == self.book.job(i.job_id).binding
        return out

    def _pick(self, data, wanted):
        """A job in one of the ``wanted`` states when there is one (else any job), or None."""
        jobs = sorted(self.book.jobs)
        if not jobs:
            return None
        fitting = [j for j in jobs if self.book.jobs[j].state in wanted]
        return data.draw(st.sampled_from(fitting if fitting and data.draw(st.integers(0, 4)) else jobs))

    def _key(self, data, jid):
        rec = self.book.job(jid)
        if rec.binding is not None and data.draw(st.integers(0, 3)):
            return rec.binding.instance_key
        return data.draw(st.sampled_from(self.used_keys[-6:] or ["k-none"]))

    @rule(i=st.integers(0, len(STANDALONE) - 1), policy=st.sampled_from(["prefer_spare", "avoid_spare", "drop"]),
          essential=st.booleans())
    def add(self, i, policy, essential):
        jid = STANDALONE[i]
        if jid not in self.book.jobs:
            self.book.add(jid, JobSpec(name=f"job{i}", on_runtime_failure=policy, essential=essential), self.now)

    @rule()
    def add_the_bundle(self):
        if not self.bundle_added:
            self.bundle_added = True
            for rj in self.book.bundles["b1"].bundle.expand():
                self.book.add(f"b1/{rj.replica}/{rj.name}", rj.spec, self.now, bundle_id="b1", replica=rj.replica)

    @rule(dt=st.sampled_from([0.0, 0.5, 1.0, 5.0, 60.0, 700.0, 4000.0]))
    def tick(self, dt):
        self.now += dt

    def _place(self, p: PlaceJob, node, start=False):
        jid = p.job_id
        alloc = len(self.given)
        self.given.append(alloc)
        key = f"k{next(self.keys)}"
        self.used_keys.append(key)
        before = self.book.job(jid).state
        out = self._take(self.book.placed(jid, node, alloc, key, self.now, where3))
        starts = [i for i in out if isinstance(i, StartInstance)]
        if before in (J.PENDING, J.RECOVERING):
            assert starts == [StartInstance(jid, Binding(node, key, alloc))] and self.book.job(jid).state == J.STARTING
            if start:
                self._take(self.book.started(jid, key, self.now))
                assert self.book.job(jid).state == J.RUNNING
        else:  # stopped (or placed) meanwhile
            assert out == [ReleaseSlot(alloc)]

    @rule(data=st.data())
    def due(self, data):
        """The scheduler's pass: each due job is placed at once, left for later, or unplaced."""
        for p in self.book.due(self.now, where3):
            rec = self.book.job(p.job_id)
            assert rec.state in (J.PENDING, J.RECOVERING) and rec.binding is None and self.now >= rec.not_before
            b = self.book.bundles.get(rec.bundle_id) if rec.bundle_id else None
            assert b is None or b.state == "live"
            c = ctx(self.book, p, where3)
            assert c.job_id == p.job_id and c.recovering == rec.recovering and rec.exclude <= c.exclude_nodes
            what = data.draw(st.sampled_from([*NODES, *NODES, "later", "unplaced"]))
            if what == "later":
                self.later[p.job_id] = p
            elif what == "unplaced":
                self._take(self.book.unplaced(p.job_id, "no capacity", self.now))
                assert self.book.job(p.job_id).not_before == self.now + RETRY_S
            else:
                self._place(p, what, start=data.draw(st.booleans()))

    @rule(data=st.data())
    def place_later(self, data):
        if self.later:
            jid = data.draw(st.sampled_from(sorted(self.later)))
            self._place(self.later.pop(jid), data.draw(st.sampled_from(NODES)))

    @rule(data=st.data())
    def started(self, data):
        jid = self._pick(data, {J.STARTING})
        if jid is not None:
            self._take(self.book.started(jid, self._key(data, jid), self.now))

    @rule(data=st.data(), preempted=st.booleans(), invalid=st.sampled_from([None, None, None, None, "bad spec"]))
    def died(self, data, preempted, invalid):
        jid = self._pick(data, {J.STARTING, J.RUNNING, J.STOPPING})
        if jid is None:
            return
        key = self._key(data, jid)
        rec = self.book.job(jid)
        current = rec.binding is not None and rec.binding.instance_key == key
        before = (rec.state, rec.binding, list(rec.restarts), len(rec.history))
        out = self._take(self.book.died(jid, key, self.now, preempted=preempted, invalid_spec=invalid))
        if not current:
            assert out == [] and (rec.state, rec.binding, list(rec.restarts), len(rec.history)) == before
        else:
            assert rec.binding is None and ReleaseSlot(before[1].allocation_id) in out
            if before[0] == J.STOPPING:
                assert rec.state == J.STOPPED
            elif rec.state == J.RECOVERING:
                assert rec.exclude == {before[1].node_id} and len(rec.restarts) == len(before[2]) + 1
                assert rec.not_before >= self.now and rec.restarts[-1].counted == (not preempted)

    @rule(node=st.sampled_from(NODES), preempted=st.booleans())
    def node_lost(self, node, preempted):
        self._take(self.book.node_lost(node, self.now, preempted=preempted))
        assert self.book.on_node(node) == []

    @rule(data=st.data())
    def stop(self, data):
        if data.draw(st.integers(0, 2)) == 0:  # stops end jobs for good: not too often
            jid = self._pick(data, {J.RUNNING, J.STARTING, J.PENDING, J.RECOVERING})
            if jid is not None:
                rec = self.book.job(jid)
                bound = rec.binding
                out = self._take(self.book.stop(jid, self.now))
                if bound is not None and out:
                    assert StopInstance(jid, bound) in out and rec.state == J.STOPPING
                elif out:
                    assert rec.state == J.STOPPED

    @rule(data=st.data())
    def stopped(self, data):
        jid = self._pick(data, {J.STOPPING})
        if jid is not None:
            self._take(self.book.stopped(jid, self._key(data, jid), self.now))

    @invariant()
    def consistent(self):
        if not hasattr(self, "book"):
            return
        assert self.book.validate_state() == []
        assert history_problems(self.book) == []
        keys = [r.binding.instance_key for r in self.book.bound()]
        assert len(keys) == len(set(keys))
        # every slot the engine gave is either held by the job bound to it or given back, once
        held = [r.binding.allocation_id for r in self.book.bound()]
        assert len(self.released) == len(set(self.released)), self.released
        assert sorted(held + self.released) == sorted(self.given)
        b = self.book.bundles["b1"]
        if b.state == "broken":
            assert all(self.book.jobs[j].state in (J.STOPPING, J.STOPPED, J.DROPPED, J.FAILED) for j in b.jobs.values())


BookMachine.TestCase.settings = hsettings(max_examples=150, stateful_step_count=25, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
TestBookMachine = BookMachine.TestCase

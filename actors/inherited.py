"""The scheduler's jobs store and the Ray cluster it runs on: a new cluster holds another's jobs.

``StoreCluster`` stands beside the ``JobRunner``: when the runner has read its store back it compares
the cluster the store was written by (``meta`` ``cluster``) with the one running
(``fabric.rayio.cluster_id``). The same cluster (a scheduler restart, a fault-tolerant head restart),
or a store with no cluster recorded: nothing changes, everything resumes as it stood. Another cluster
(a cold start on the same store): the old cluster's sagas, drains and reclaim notices are dropped (their
nodes and instances are gone), its jobs are held (``fabric.core.jobs.inherit``), what was found is
kept (``meta`` ``inherited``, so a scheduler restart still reports it), and the store is stamped with
the running cluster. ``store.resume_inherited`` resumes them at once; ``resume()`` does later
(``fabric up --resume``). The stamp's ``last_seen`` is written again every ``TOUCH_S`` while it runs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from fabric.core.jobs.inherit import ClusterStamp, Inherited, held_now, hold, inherited_line, is_other_cluster, release, restamp, to_hold
from fabric.core.jobs.state import PlaceSoon

__all__ = ["CLUSTER_KEY", "INHERITED_KEY", "StoreCluster", "TOUCH_S"]

CLUSTER_KEY = "cluster"
INHERITED_KEY = "inherited"
TOUCH_S = 30.0
"""How often a running scheduler writes its cluster's ``last_seen`` to the store."""
_OLD_CLUSTER_STATE = ("migration", "drain", "notice")
"""``state`` rows of the old cluster a new one drops: they name its nodes and instances, all gone."""


class StoreCluster:
    """The running cluster's stamp on ``runner``'s store, and what it held of another cluster's.
    ``running``: the running cluster's id and head address (None: not known, nothing is checked)."""

    def __init__(self, runner: Any, running: tuple[str | None, str] | None, clock: Callable[[], float]) -> None:
        self.runner = runner
        self.store = runner.store
        self.running_id, self.head = running if running is not None else (None, "")
        self.clock = clock
        self.found: Inherited | None = Inherited.from_json(self.store.get_meta(INHERITED_KEY))
        """What this store held of another cluster (kept until resumed or nothing of it is held)."""
        self._touched = 0.0
        stored = ClusterStamp.from_json(self.store.get_meta(CLUSTER_KEY))
        self.other = stored if is_other_cluster(stored, self.running_id) else None
        """The cluster that wrote the store, when it is not the one running."""
        if self.other is not None:  # before the runner reads them back: the old cluster's moves are void
            self.store.write(state=[(kind, key, None) for kind in _OLD_CLUSTER_STATE for key, _ in self.store.state(kind)])

    def loaded(self, resume: bool) -> None:
        """The runner read its store back: hold another cluster's jobs (resumed at once with
        ``resume``), say so, and stamp the store with the running cluster."""
        now = self.clock()
        if self.other is not None:
            self.found = to_hold(list(self.runner.book.jobs.values()), self.other, now)
            self.runner.carry_out(hold(self.runner.book, self.found, now))
            print(f"[fabric.jobs] {inherited_line(self.found, now)}")
            self._keep()
        self.touch(now)
        if resume and self.found is not None and not self.found.resumed:
            self.resume()
        self.runner.persist()

    def touch(self, now: float | None = None) -> None:
        """Write the running cluster's stamp (``last_seen`` now), at most every ``TOUCH_S``."""
        now = self.clock() if now is None else now
        if self.running_id is None or now - self._touched < TOUCH_S:
            return
        self._touched = now
        stored = ClusterStamp.from_json(self.store.get_meta(CLUSTER_KEY))
        self.store.put_meta({CLUSTER_KEY: restamp(stored, self.running_id, self.head, now).to_json()})

    def resume(self) -> list[str]:
        """Resume the held jobs (placed from now on); the ids resumed."""
        if self.found is None or self.found.resumed:
            return []
        now = self.clock()
        ids, events = release(self.runner.book, self.found, now)
        self.found = replace(self.found, jobs=tuple(ids), resumed=True)
        self._keep()
        self.runner.apply([*events, PlaceSoon()])
        return ids

    def report(self, resume: bool = False) -> dict[str, Any] | None:
        """What was found (``Inherited.to_json``, with ``line``: the one line to print, and
        ``resumed_now``: the ids resumed by this call); None when nothing of another cluster was.
        ``resume``: the held jobs are resumed first."""
        resumed = self.resume() if resume else []
        found = self.found
        if found is None:
            return None
        if found.resumed:  # said once: a later fabric up finds nothing to say
            self.found = None
        else:
            found = replace(found, jobs=held_now(self.runner.book, found))
            if not found.jobs:  # every one stopped meanwhile: nothing is held any more
                self.found = None
                self._keep()
                return None
        return {**found.to_json(), "line": inherited_line(found, self.clock()), "resumed_now": resumed}

    def _keep(self) -> None:
        """Keep what was found while jobs are held (a restarted scheduler still reports them)."""
        held = self.found is not None and not self.found.resumed
        self.store.put_meta({INHERITED_KEY: self.found.to_json() if held and self.found is not None else None})

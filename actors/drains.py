"""DrainRunner: node drains, evictions, reclaim notices and rebalancing, carried out in the scheduler
(cordons and drains, spot interruptions, the reconfiguration engine's moves).

The decisions are the jobs core's (``fabric.core.jobs.node_moves``: one ``NodeDrain`` per node,
the notices, rebalance); this class reads each request into a stimulus, hands it to the job
runner (``JobRunner.handle``) and answers; it carries out Ray's drain (``ask_ray``): for an
ordinary drain with IDLE_TERMINATION after the fabric's probe left the node (Ray refuses an idle
termination while any actor runs there; accepted, the raylet exits), for a reclaim notice with
PREEMPTION and its deadline. Ray's answer, a refusal too, goes back as ``RayDrainAnswered``.
Every drain and notice is a row of the job store: a restarted scheduler reads them back (``load``)
and the core carries the drains in progress on.
"""

from __future__ import annotations

import asyncio
from typing import Any

from actors.job_ports import RayDrainPort
from fabric.core.jobs.drains import AskRayToDrain, DrainState, NodeDrains, NodeInterruptionState
from fabric.core.jobs.stimuli import DrainJobsRequested, DrainsFollowed, EvictRequested, RayDrainAnswered, WithdrawRequested
from fabric.store.job_rows import decode_drain, decode_notice, encode_drain, encode_notice, read_rows

class DrainRunner:
    """One scheduler's drains (see the module docstring)."""

    def __init__(self, ray_drain: RayDrainPort, jobs: Any) -> None:
        self.ray_drain = ray_drain
        self.jobs = jobs
        self._written: dict[tuple[str, str], bytes] = {}
        """The ``state`` rows last written (drains, notices), by kind and key: only changes are written."""
        self._final: set[tuple[str, str]] = set()
        """Keys of drains whose row was written after they ended (final: not encoded again)."""

    @property
    def drains(self) -> NodeDrains:
        return self.jobs.core.drains

    @property
    def interruptions(self) -> dict[str, NodeInterruptionState]:
        return self.jobs.core.notices

    @property
    def asks(self) -> dict[str, AskRayToDrain]:
        return self.jobs.core.asks

    @property
    def rebalancing(self) -> dict[str, str]:
        return self.jobs.core.rebalancing

    # -- the store --------------------------------------------------------------------------------------
    def load(self, store: Any) -> None:
        """Read back the drains and reclaim notices a scheduler before this one kept (a restart):
        every drain, in progress or ended; every notice, its node again under notice (what dies with
        it is not counted). The core carries the drains in progress on once the fleet is known."""
        for key, blob, d in read_rows(store, "drain", decode_drain, "drains"):
            self.drains.adopt(d)
            self._written[("drain", key)] = blob
        for node_id, blob in store.state("notice"):
            try:
                latest = next((d for d in reversed(self.drains.every()) if d.node_id == node_id), None)
                notice = decode_notice(blob, latest)
            except Exception as exc:
                print(f"[fabric.drains] notice for {node_id!r} could not be read back: {type(exc).__name__}: {exc}")
                continue
            self._written[("notice", node_id)] = blob
            if notice is not None:
                self.interruptions[node_id] = notice
                self.jobs.core.preempting.add(node_id)

    def changed_rows(self) -> list[tuple[str, str, bytes | None]]:
        """The ``state`` rows that changed since the last call (None: delete), for the job store's
        next write; every drain kept (in progress, and the last ended ones) and every notice."""
        rows: dict[tuple[str, str], bytes] = {}
        for d in self.drains.every():
            key = ("drain", f"{d.node_id}@{d.started!r}")
            if key in self._final:  # written once it had ended: it no longer changes, its row is not built again
                rows[key] = self._written[key]
                continue
            rows[key] = encode_drain(d)
            if d.terminal:
                self._final.add(key)
        for node_id, notice in self.interruptions.items():
            rows[("notice", node_id)] = encode_notice(notice)
        out: list[tuple[str, str, bytes | None]] = [(k, key, blob) for (k, key), blob in rows.items()
                                                    if self._written.get((k, key)) != blob]
        out += [(k, key, None) for (k, key) in self._written if (k, key) not in rows]
        self._written = rows
        self._final &= set(rows)
        return out

    # -- requests ---------------------------------------------------------------------------------------
    async def drain(self, node_id: str, timeout_s: float | None = None, force: bool = False, strategy: str | None = None,
                    interruption: str | None = None, deadline: float | None = None) -> DrainState:
        """Start (or tighten) the node's drain; its snapshot once the cordon is in the registry and
        the migrations it started have placed their targets (or could not)."""
        self.jobs.handle(DrainJobsRequested(node_id, timeout_s, force, strategy, interruption, deadline))
        await self.jobs.cordoned()
        self.jobs.handle(DrainsFollowed())
        state = self.drains.status(node_id)
        assert state is not None
        return state

    async def interrupt(self, node_id: str, kind: str, deadline: float | None) -> NodeInterruptionState:
        notice = self.jobs.handle(DrainJobsRequested(node_id, interruption=kind, deadline=deadline))
        await self.jobs.cordoned()
        self.jobs.handle(DrainsFollowed())
        return notice

    def evict(self, node_id: str) -> list[str]:
        """Stop the node's jobs now (cordoned first); each recovers by its policy."""
        return self.jobs.handle(EvictRequested(node_id))

    def withdraw(self, node_id: str) -> DrainState | None:
        """An uncordon: the drain (and a notice) is withdrawn; its migrations in flight run on. Once
        Ray accepted to drain the node there is no undrain: ``TransitionError``."""
        return self.jobs.handle(WithdrawRequested(node_id))

    def status(self, node_id: str) -> DrainState | None:
        return self.drains.status(node_id)

    # -- Ray's drain ------------------------------------------------------------------------------------
    def ask_ray(self, ask: AskRayToDrain) -> None:
        asyncio.get_event_loop().create_task(self._ask_ray(ask))

    async def _ask_ray(self, ask: AskRayToDrain) -> None:
        accepted, message = await self.ray_drain.drain(ask)
        self.jobs.handle(RayDrainAnswered(ask.node_id, accepted, message, ask.reason))


__all__ = ["DrainRunner"]

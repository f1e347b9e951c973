"""A simulated fleet for the control plane: thousands of nodes that exist only in a node table.

The real fleet actors (``RegistryActor``, ``HealthMonitorActor``, the scheduler's ``FleetFeed``)
read Ray's node table through ``fabric.rayio.adapter.RayAdapter``. ``SimRayAdapter`` is that
adapter with one difference: the nodes of a ``SimNodeTable`` are listed beside Ray's own rows
(the head). Everything else (named actors, the GCS address, errors) is Ray's. The actors run their
production code over it; only the node table is simulated.

A simulated node has no raylet, so no probe actor can run on it: the simulator's processes make
the calls its probe would make (``register``, ``heartbeat``, ``report`` on the registry), and
``SimRayAdapter`` answers the health monitor's "is this node's probe there?" with the table (a
simulated node that is alive has its probe) instead of starting an actor pinned to a node Ray does
not have. ``drain_node`` on a simulated node is accepted and marks it draining in the table.

``SimNodeTable`` is a file (a pickle replaced atomically by its one writer, the simulator's
driver), so the actors in other processes read the same table; a reader loads it again only when
the file changed (``os.stat``: a few microseconds a call otherwise).

``fleet_payloads`` builds what the nodes say: each bundled probe recording probed as on a real node
(``probes.node.probe_node`` over ``RecordedSources``), in a plausible mix, renamed per node.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
from pathlib import Path
from typing import Any

from fabric.core.health import RayNodeView
from fabric.core.names import (NAME_LABEL, POOL_LABEL, PROFILE_LABEL, SLOTS_RESOURCE, TIER_LABEL, TIER_RESOURCE_PREFIX,
                               ZONE_LABEL, probe_actor_name)
from fabric.rayio.adapter import RayAdapter

__all__ = ["PROFILE_MIX", "SimNodeTable", "SimProbePresent", "SimRayAdapter", "fleet_payloads", "sim_node_id", "sim_row"]

PROFILE_MIX = (("cpu-only-box", 50), ("gpu-cuda-workstation", 15), ("amd-discrete-vaapi", 10), ("intel-igpu-nuc", 10),
               ("steamdeck-apu", 5), ("arm64-board", 5), ("edge-relay", 5))
"""A plausible fleet: mostly CPU boxes, a few GPU machines of each kind, small boards and relays."""

_PREFIX = "5e"
"""Simulated node ids start with this (56 hex digits in all, as Ray's do)."""


def sim_node_id(i: int) -> str:
    """The ``i``-th simulated node's id: 56 hex digits, like a Ray node id."""
    return f"{_PREFIX}{i:054x}"


def sim_row(node_id: str, name: str, caps: Any, zone: str, profile: str) -> RayNodeView:
    """The node table's row for a simulated node that joined with ``caps`` (as ``fabric join``
    would start its raylet: tier and name labels, a slot and tier resources)."""
    labels = {TIER_LABEL: caps.tier.value, NAME_LABEL: name, ZONE_LABEL: zone, POOL_LABEL: "default",
              PROFILE_LABEL: profile}
    resources = {SLOTS_RESOURCE: float(caps.limitations.max_concurrent_tasks),
                 **{f"{TIER_RESOURCE_PREFIX}{t.value}": 1.0 for t in caps.tiers}}
    return RayNodeView(node_id=node_id, alive=True, labels=labels, resources=resources, hostname=name)


def fleet_payloads(size: int, seed: int = 13, start: int = 0) -> list[tuple[str, str, str, dict[str, Any], RayNodeView]]:
    """``size`` simulated nodes from index ``start``: (node id, name, profile, capabilities as the
    probe sends them, node-table row), drawn from ``PROFILE_MIX``."""
    from probes import RecordedSources
    from probes.node import probe_node
    from probes.profiles import profile_path

    probed = {name: probe_node(RecordedSources(profile_path(name))) for name, _ in PROFILE_MIX}
    choices = [name for name, weight in PROFILE_MIX for _ in range(weight)]
    rnd = random.Random(seed * 1_000_003 + start)
    out = []
    for i in range(start, start + size):
        profile = rnd.choice(choices)
        node_id, name = sim_node_id(i), f"sim-{i:05d}"
        caps = probed[profile].model_copy(update={"name": name})
        out.append((node_id, name, profile, caps.model_dump(mode="json"), sim_row(node_id, name, caps, "abc"[i % 3], profile)))
    return out


class SimNodeTable:
    """The simulated rows of the node table, in files: one writer (``write``), any number of
    readers (``rows``). The table is a base file, rewritten only when much changed, and a small
    delta file beside it (the rows changed or gone since the base): a reader reloads the base only
    when it was rewritten and otherwise applies the delta, so following churn costs a reader
    about what changed, as following Ray's own table would, not a whole table per change."""

    REBASE_SHARE = 0.05
    """The delta grows to this share of the table (at least ``REBASE_MIN`` rows), then the base is rewritten."""
    REBASE_MIN = 200

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.delta_path = self.path.with_name(self.path.name + ".delta")
        self._stamps: tuple[tuple[int, int, int] | None, tuple[int, int, int] | None] = (None, None)
        self._base: dict[str, RayNodeView] = {}
        self._rows: dict[str, RayNodeView] = {}
        self._listed: list[RayNodeView] = []
        self._written: dict[str, RayNodeView] | None = None
        """The writer's last base (None: none written by this instance)."""

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def write(self, rows: dict[str, RayNodeView]) -> None:
        """Replace the table (atomically: readers see the old one or the new one): the delta from
        the last base when it is small, else a new base and an empty delta."""
        base = self._written
        if base is not None:
            delta: dict[str, RayNodeView | None] = {k: v for k, v in rows.items() if base.get(k) is not v and base.get(k) != v}
            delta.update({k: None for k in base if k not in rows})
            if len(delta) <= max(self.REBASE_MIN, int(self.REBASE_SHARE * len(rows))):
                self._dump(self.delta_path, delta)
                return
        self._dump(self.delta_path, {})  # readers of the new base must not apply the old delta to it
        self._dump(self.path, rows)
        self._dump(self.delta_path, {})
        self._written = dict(rows)

    def _dump(self, path: Path, obj: Any) -> None:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".sim-nodes-")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)

    @staticmethod
    def _stamp(path: Path) -> tuple[int, int, int] | None:
        """Inode, mtime and size: every write is a new file (``os.replace``), so a new inode."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def rows(self) -> dict[str, RayNodeView]:
        """Node id -> row, as last written."""
        stamps = (self._stamp(self.path), self._stamp(self.delta_path))
        if stamps == self._stamps:
            return self._rows
        if stamps[0] is None:
            self._stamps, self._base, self._rows, self._listed = stamps, {}, {}, []
            return self._rows
        if stamps[0] != self._stamps[0]:
            with open(self.path, "rb") as f:
                self._base = pickle.load(f)
        delta: dict[str, RayNodeView | None] = {}
        if stamps[1] is not None:
            try:
                with open(self.delta_path, "rb") as f:
                    delta = pickle.load(f)
            except (FileNotFoundError, EOFError):
                delta = {}
        rows = dict(self._base)
        for k, v in delta.items():
            if v is None:
                rows.pop(k, None)
            else:
                rows[k] = v
        self._rows, self._listed, self._stamps = rows, list(rows.values()), stamps
        return self._rows

    def listed(self) -> list[RayNodeView]:
        self.rows()
        return self._listed


class SimProbePresent:
    """What ``SimRayAdapter.get_actor`` answers for an alive simulated node's probe: it is there
    (the simulator beats for it). Calls on it are refused: nothing real stands behind it."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"simulated node {self.node_id[:12]}'s probe takes no calls ({name})")


class SimRayAdapter(RayAdapter):
    """``RayAdapter`` whose node table is Ray's plus the rows of a ``SimNodeTable``."""

    def __init__(self, table_path: str | Path) -> None:
        self.table = SimNodeTable(table_path)
        self.drained: set[str] = set()

    def _sim(self, node_id: str) -> RayNodeView | None:
        return self.table.rows().get(node_id)

    def list_nodes(self) -> list[RayNodeView]:
        return super().list_nodes() + self.table.listed()

    def alive_node(self, node_id: str) -> RayNodeView | None:
        row = self._sim(node_id)
        if row is not None:
            return row if row.alive else None
        return super().alive_node(node_id)

    def get_actor(self, name: str) -> Any | None:
        node_id = name.rsplit(".", 1)[-1]
        row = self._sim(node_id)
        if row is not None and name == probe_actor_name(node_id):
            return SimProbePresent(node_id) if row.alive else None
        return super().get_actor(name)

    def kill_actor(self, name: str) -> None:
        node_id = name.rsplit(".", 1)[-1]
        if self._sim(node_id) is not None:
            return
        super().kill_actor(name)

    def ensure_probe(self, probe_actor: Any, node: RayNodeView, *, heartbeat_interval_s: float, reprobe_interval_s: float,
                     spot_notices: dict[str, Any] | None = None) -> Any:
        if self._sim(node.node_id) is not None:
            return SimProbePresent(node.node_id)
        return super().ensure_probe(probe_actor, node, heartbeat_interval_s=heartbeat_interval_s,
                                    reprobe_interval_s=reprobe_interval_s, spot_notices=spot_notices)

    def drain_node(self, node_id: str, reason: str, message: str = "", deadline_s: float | None = None) -> tuple[bool, str]:
        row = self._sim(node_id)
        if row is None:
            return super().drain_node(node_id, reason, message, deadline_s)
        if not row.alive:
            return False, f"no alive Ray node {node_id[:12]!r}"
        self.drained.add(node_id)
        return True, ""

    def draining_nodes(self) -> dict[str, float | None]:
        return {**super().draining_nodes(), **{n: None for n in self.drained if self._sim(n) is not None}}

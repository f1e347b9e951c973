"""The health policy: the fleet's membership and health rules as a pure state machine.

Inputs are facts the monitor actor gathers (a snapshot of Ray's node table, the registry's last
heartbeat per node, a probe's degradation report) plus the time from an injected clock; outputs
are typed fleet events (``fabric.core.events``) that carry each node's new status. Nothing here does
I/O or imports Ray, so a unit test runs hours of policy in milliseconds with a ``ManualClock``.

The rules (all timings from ``HealthSettings``):

- A fabric node (one whose Ray labels carry ``fabric.io/tier``) that Ray shows alive and we have
  not seen is *added* (``active``). Nodes without fabric labels (a bare head node) are ignored.
- Ray declaring a node dead, or no heartbeat for ``offline_after_s`` (``join_timeout_s`` for
  the first one, while the node's probe actor starts) (by default 3 missed beats =
  15 s), makes it ``offline`` (*lost*). It is not ``dead`` yet: the drain grace
  (``drain_grace_s``) runs first, so a partition heals without churn.
- A lost node whose heartbeats resume (Ray still had it) is *recovered* (``active``).
- A node lost for the whole drain grace goes ``dead`` and is *collected*; its id is never
  re-added. A machine that rejoins gets a new Ray node id, hence a new record, and may appear
  before the old one is collected (the new node appears before the old one drains: two
  separate nodes).
- Flap damping is per node *name* (a rejoin is a new id but the same machine): each time a name
  goes from online (some node of that name active) to offline or back is a toggle; ``flap_toggles``
  toggles inside ``flap_window_s`` hold the name off placement for ``flap_hold_s``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from fabric.core.events import (
    NodeAdded,
    NodeCollected,
    NodeDegraded,
    NodeFlapHeld,
    NodeFlapReleased,
    NodeLost,
    NodeRecovered,
)
from fabric.core.clock import Clock
from fabric.core.health.nodes import RayNodeView
from fabric.core.lifecycle import NodeStatus, check_transition
from fabric.core.settings import HealthSettings

Event = NodeAdded | NodeLost | NodeRecovered | NodeDegraded | NodeFlapHeld | NodeFlapReleased | NodeCollected
"""Every event the policy decides."""


@dataclass
class NodeHealth:
    """What the policy knows about one node id."""

    node_id: str
    name: str
    status: NodeStatus = NodeStatus.ACTIVE
    since: float = 0.0
    """When the node entered ``status``."""
    last_beat: float = 0.0
    """Latest heartbeat (or first sighting, before the first beat)."""
    ray_dead: bool = False
    """Ray declared it dead: it can never come back under this id."""
    degraded: tuple[str, ...] = ()
    heard: bool = False
    """A heartbeat arrived since it was added (before that, ``join_timeout_s`` applies)."""


@dataclass
class FlapHistory:
    """Online/offline toggles of one node name, and its hold."""

    online: bool | None = None
    toggles: list[float] = field(default_factory=list)
    held_until: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"online": self.online, "toggles": list(self.toggles), "held_until": self.held_until}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FlapHistory":
        return cls(online=data.get("online"), toggles=[float(t) for t in data.get("toggles", ())], held_until=data.get("held_until"))


class HealthPolicy:
    """The health rules over an injected clock. Every ``observe_*``/``tick`` call returns the
    events it decided, in order; the caller applies their statuses and publishes them."""

    def __init__(self, settings: HealthSettings | None = None, *, clock: Clock) -> None:
        self.settings = settings or HealthSettings()
        self.clock = clock
        self.nodes: dict[str, NodeHealth] = {}
        self.flaps: dict[str, FlapHistory] = {}
        self.collected: set[str] = set()
        self._seq = 0

    # -- inputs ---------------------------------------------------------------------------
    def observe_ray(self, rows: Iterable[RayNodeView], stimulus_id: str | None = None) -> list[Event]:
        """A snapshot of Ray's node table: new alive fabric nodes are added, known nodes Ray no
        longer has alive are lost."""
        now = self.clock()
        sid = stimulus_id or self._stimulus("ray-nodes")
        events: list[Event] = []
        alive: dict[str, RayNodeView] = {r.node_id: r for r in rows if r.alive and r.is_fabric_node}
        for node_id, row in alive.items():
            if node_id in self.nodes or node_id in self.collected:
                continue
            node = NodeHealth(node_id=node_id, name=row.name, since=now, last_beat=now)
            self.nodes[node_id] = node
            events.append(NodeAdded(node_id=node_id, name=node.name, at=now, stimulus_id=sid))
            events += self._name_changed(node.name, now, sid)
            events += self._hold_if_held(node, now, sid)
        for node in list(self.nodes.values()):
            if node.node_id in alive or node.ray_dead:
                continue
            node.ray_dead = True
            if node.status in (NodeStatus.ACTIVE, NodeStatus.DRAINING):
                events += self._lose(node, now, sid, "ray: node dead", ray_dead=True)
        return events

    def observe_heartbeats(self, beats: Mapping[str, float], stimulus_id: str | None = None) -> list[Event]:
        """The latest heartbeat time per node id (the registry's ``last_seen``). A beat newer than a
        node's loss brings it back, unless Ray declared it dead."""
        now = self.clock()
        sid = stimulus_id or self._stimulus("heartbeats")
        events: list[Event] = []
        for node_id, at in beats.items():
            node = self.nodes.get(node_id)
            if node is None or at < node.last_beat or (at == node.last_beat and node.heard):
                continue
            node.last_beat = float(at)
            node.heard = True
            if node.status is NodeStatus.OFFLINE and not node.ray_dead and at > node.since:
                self._set_status(node, NodeStatus.ACTIVE, now)
                events.append(NodeRecovered(node_id=node_id, name=node.name, at=now, stimulus_id=sid,
                                            status=NodeStatus.ACTIVE, reason="heartbeats resumed"))
                events += self._name_changed(node.name, now, sid)
        return events

    def heartbeat(self, node_id: str, at: float | None = None, stimulus_id: str | None = None) -> list[Event]:
        """One heartbeat from ``node_id`` (at ``at``, default now)."""
        return self.observe_heartbeats({node_id: self.clock() if at is None else at}, stimulus_id)

    def observe_degradation(self, node_id: str, reasons: Iterable[str], stimulus_id: str | None = None) -> list[Event]:
        """A probe's current degradation reasons for ``node_id`` (empty: healthy)."""
        node = self.nodes.get(node_id)
        if node is None:
            return []
        now = self.clock()
        sid = stimulus_id or self._stimulus("probe-report")
        reasons = tuple(sorted(set(reasons)))
        if reasons == node.degraded:
            return []
        before, node.degraded = node.degraded, reasons
        if reasons:
            return [NodeDegraded(node_id=node_id, name=node.name, at=now, stimulus_id=sid, reasons=reasons)]
        return [NodeRecovered(node_id=node_id, name=node.name, at=now, stimulus_id=sid,
                              reason=f"degradation cleared ({'; '.join(before)})")]

    def tick(self, stimulus_id: str | None = None) -> list[Event]:
        """The passage of time: missed heartbeats, drain graces ending, flap holds ending."""
        now = self.clock()
        sid = stimulus_id or self._stimulus("tick")
        s = self.settings
        events: list[Event] = []
        for node in list(self.nodes.values()):
            if node.status in (NodeStatus.ACTIVE, NodeStatus.DRAINING) and not node.ray_dead:
                silent = now - node.last_beat
                if silent > (s.offline_after_s if node.heard else max(s.offline_after_s, s.join_timeout_s)):
                    events += self._lose(node, now, sid, f"missed heartbeats for {silent:.1f} s")
            elif node.status is NodeStatus.OFFLINE and now - node.since >= s.drain_grace_s:
                lost_for = now - node.since
                self._set_status(node, NodeStatus.DEAD, now)
                del self.nodes[node.node_id]
                self.collected.add(node.node_id)
                events.append(NodeCollected(node_id=node.node_id, name=node.name, at=now, stimulus_id=sid, lost_for_s=lost_for))
        for name, hist in self.flaps.items():
            if hist.held_until is not None and now >= hist.held_until:
                hist.held_until = None
                events += [NodeFlapReleased(node_id=n.node_id, name=name, at=now, stimulus_id=sid) for n in self._named(name)]
        return events

    # -- queries ---------------------------------------------------------------------------
    def held_until(self, name: str) -> float | None:
        """When ``name``'s flap hold ends (None: not held)."""
        hist = self.flaps.get(name)
        if hist is None or hist.held_until is None or self.clock() >= hist.held_until:
            return None
        return hist.held_until

    def status(self, node_id: str) -> NodeStatus | None:
        node = self.nodes.get(node_id)
        if node is not None:
            return node.status
        return NodeStatus.DEAD if node_id in self.collected else None

    # -- persistence (the monitor reloads this after a restart) ----------------------------
    def restore(self, nodes: Iterable[NodeHealth], flaps: Mapping[str, Mapping[str, Any]] | None = None,
                collected: Iterable[str] = ()) -> None:
        """Reload state saved elsewhere (registry records, the flap table, collected ids)."""
        for node in nodes:
            if node.status is NodeStatus.DEAD:
                self.collected.add(node.node_id)
            else:
                self.nodes[node.node_id] = node
        for name, data in (flaps or {}).items():
            self.flaps[name] = FlapHistory.from_json(data)
        self.collected.update(collected)

    def flaps_json(self) -> dict[str, dict[str, Any]]:
        """The flap histories worth keeping across a restart: each name that toggled, is held, or
        is offline. A name online with no toggle is left out (a fresh history of it, made at its
        next observation, is the same), so the document stays as small as the flapping part of the
        fleet, not the fleet."""
        return {name: hist.to_json() for name, hist in self.flaps.items()
                if hist.toggles or hist.held_until is not None or hist.online is False}

    def validate_state(self) -> None:
        """Invariants; tests call it after every step."""
        for node_id, node in self.nodes.items():
            assert node.node_id == node_id, (node_id, node)
            assert node.status is not NodeStatus.DEAD, f"dead node {node_id} still tracked"
            assert node_id not in self.collected, f"collected node {node_id} still tracked"
        now = self.clock()
        for name, hist in self.flaps.items():
            assert all(t <= now for t in hist.toggles), (name, hist)
            assert hist.toggles == sorted(hist.toggles), (name, hist)

    # -- internals -------------------------------------------------------------------------
    def _stimulus(self, what: str) -> str:
        self._seq += 1
        return f"{what}-{self._seq}"

    def _set_status(self, node: NodeHealth, target: NodeStatus, now: float) -> None:
        check_transition(f"node {node.node_id[:12]} ({node.name})", node.status, target)
        if target is not node.status:
            node.status = target
            node.since = now

    def _lose(self, node: NodeHealth, now: float, sid: str, reason: str, ray_dead: bool = False) -> list[Event]:
        self._set_status(node, NodeStatus.OFFLINE, now)
        events: list[Event] = [NodeLost(node_id=node.node_id, name=node.name, at=now, stimulus_id=sid, reason=reason, ray_dead=ray_dead)]
        return events + self._name_changed(node.name, now, sid)

    def _named(self, name: str) -> list[NodeHealth]:
        return [n for n in self.nodes.values() if n.name == name]

    def _name_changed(self, name: str, now: float, sid: str) -> list[Event]:
        """Record a toggle when ``name`` went online<->offline; hold it when it flaps."""
        online = any(n.status is NodeStatus.ACTIVE for n in self._named(name))
        hist = self.flaps.setdefault(name, FlapHistory())
        if hist.online is None or hist.online == online:
            hist.online = online
            return []
        hist.online = online
        s = self.settings
        hist.toggles = [t for t in hist.toggles if now - t < s.flap_window_s] + [now]
        if len(hist.toggles) < s.flap_toggles or (hist.held_until is not None and hist.held_until > now):
            return []
        hist.held_until = now + s.flap_hold_s
        count, hist.toggles = len(hist.toggles), []
        return [NodeFlapHeld(node_id=n.node_id, name=name, at=now, stimulus_id=sid, until=hist.held_until, toggles=count)
                for n in self._named(name)]

    def _hold_if_held(self, node: NodeHealth, now: float, sid: str) -> list[Event]:
        hist = self.flaps.get(node.name)
        if hist is None or hist.held_until is None or hist.held_until <= now:
            return []
        return [NodeFlapHeld(node_id=node.node_id, name=node.name, at=now, stimulus_id=sid, until=hist.held_until, toggles=0)]

"""The health policy: seed 002 § 4's membership and health rules as a pure state machine.

Inputs are facts the monitor actor gathers (a snapshot of Ray's node table, the registry's last
heartbeat per node, a probe's degradation report) plus the time from an injected clock; outputs
are typed fleet events (``fabric.core.events``) that carry each node's new status. Nothing here does
I/O or imports Ray, so a unit test runs hours of policy in milliseconds with a ``ManualClock``.

The rules (all timings from ``HealthSettings``):

- A fabric node (one whose Ray labels carry ``fabric.io/tier``) that Ray shows alive and we have
  not seen is *added* (``active``). Nodes without fabric labels (a bare head node) are ignored.
- Ray declaring a node dead, or no heartbeat for ``offline_after_s`` (``join_timeout_s`` for
  the first one, while the node's probe actor starts) (seed 002: 3 missed beats =
  90 s; 45 s over DERP), makes it ``offline`` (*lost*). It is not ``dead`` yet: the drain grace
  (``drain_grace_s``) runs first, so a partition heals without churn.
- A lost node whose heartbeats resume (Ray still had it) is *recovered* (``active``).
- A node lost for the whole drain grace goes ``dead`` and is *collected*; its id is never
  re-added. A machine that rejoins gets a new Ray node id, hence a new record, and may appear
  before the old one is collected (seed 002: "new node appears before old node drains": two
  separate nodes).
- Flap damping is per node *name* (a rejoin is a new id but the same machine): each time a name
  goes from online (some node of that name active) to offline or back is a toggle; ``flap_toggles``
  toggles inside ``flap_window_s`` hold the name off placement for ``flap_hold_s``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from fabric.core.capabilities import NodeCapabilities
from fabric.core.events import (
    NodeAdded,
    NodeCollected,
    NodeDegraded,
    NodeFlapHeld,
    NodeFlapReleased,
    NodeLost,
    NodeRecovered,
)
from fabric.core.lifecycle import NodeStatus, check_transition
from fabric.core.names import NAME_LABEL, PROFILE_LABEL, TIER_LABEL, TIER_RESOURCE_PREFIX
from fabric.core.settings import HealthSettings


Clock = Callable[[], float]
Event = NodeAdded | NodeLost | NodeRecovered | NodeDegraded | NodeFlapHeld | NodeFlapReleased | NodeCollected


class ManualClock:
    """A clock that moves only when told: ``clock()`` is the time, ``advance(s)`` moves it."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@dataclass(frozen=True)
class RayNodeView:
    """One row of Ray's node table, reduced to what the policy reads."""

    node_id: str
    alive: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, float] = field(default_factory=dict)
    hostname: str = ""
    address: str = ""

    @classmethod
    def from_ray(cls, row: Mapping[str, Any]) -> "RayNodeView":
        """From one dict of ``ray.nodes()`` (``NodeID``, ``Alive``, ``Labels``, ``Resources``...)."""
        return cls(
            node_id=str(row.get("NodeID", "")),
            alive=bool(row.get("Alive", False)),
            labels=dict(row.get("Labels") or {}),
            resources=dict(row.get("Resources") or {}),
            hostname=str(row.get("NodeManagerHostname", "") or ""),
            address=str(row.get("NodeManagerAddress", "") or ""),
        )

    @property
    def is_fabric_node(self) -> bool:
        """Joined through the fabric (``fabric join``/``start-head``/``LocalFabric``): has a tier label."""
        return TIER_LABEL in self.labels

    @property
    def name(self) -> str:
        """The stable name: the ``fabric.io/name`` label, else the hostname, else a short id."""
        return self.labels.get(NAME_LABEL) or self.hostname or self.node_id[:12]

    @property
    def profile(self) -> str | None:
        """The bundled profile this node was started from, when it was."""
        return self.labels.get(PROFILE_LABEL)

    @property
    def joined_tiers(self) -> frozenset[str]:
        """The tiers the node joined Ray serving: its ``fabric.tier.<name>`` resources
        (``NodeCapabilities.to_ray_resources``). Fixed for the raylet's lifetime."""
        return frozenset(k[len(TIER_RESOURCE_PREFIX):] for k, v in self.resources.items()
                         if k.startswith(TIER_RESOURCE_PREFIX) and v > 0)


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
    """Seed 002's health rules over an injected clock. Every ``observe_*``/``tick`` call returns the
    events it decided, in order; the caller applies their statuses and publishes them."""

    def __init__(self, settings: HealthSettings | None = None, clock: Clock = time.time) -> None:
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
        return {name: hist.to_json() for name, hist in self.flaps.items()}

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


@dataclass
class ProbeWatch:
    """What the monitor knows about one node's probe actor."""

    restarts: int = 0
    """Times the probe was started again because it was missing (however many times it died)."""
    attempts: int = 0
    """Restarts since the probe was last up for ``stable_after_s``: they set the backoff."""
    next_restart_at: float = 0.0
    """The earliest time of the next restart."""
    up_since: float | None = None
    """Since when the probe has been seen present, without a gap."""
    last_restart_at: float | None = None


class ProbeRestarts:
    """When to start a node's probe actor again (pure, clock injected; the monitor acts on it).

    A probe that dies past its Ray restart budget stays dead and nothing else restarts it; its node
    then stops heartbeating and leaves placement for good (issue 12). So the monitor looks for the
    probe of every live node that has gone quiet, and when it is missing starts it again: at once
    the first time, then no sooner than ``initial_backoff_s`` after the last restart, doubling up to
    ``max_backoff_s``, however many times it died. A probe up for ``stable_after_s`` resets the
    backoff. Only quiet nodes are looked up: a beating node's probe is alive by definition, so a
    healthy fleet costs no Ray calls."""

    def __init__(self, *, initial_backoff_s: float = 1.0, max_backoff_s: float = 60.0, stable_after_s: float = 60.0,
                 clock: Clock = time.time) -> None:
        if not 0 < initial_backoff_s <= max_backoff_s:
            raise ValueError(f"backoff must satisfy 0 < initial ({initial_backoff_s}) <= max ({max_backoff_s})")
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self.stable_after_s = stable_after_s
        self.clock = clock
        self.watches: dict[str, ProbeWatch] = {}

    def quiet(self, last_beats: Mapping[str, float], quiet_after_s: float) -> list[str]:
        """The node ids (of ``last_beats``: node id -> latest beat) silent for over ``quiet_after_s``:
        the ones whose probe is worth looking up."""
        now = self.clock()
        return sorted(n for n, at in last_beats.items() if now - at > quiet_after_s)

    def observe(self, node_id: str, present: bool) -> bool:
        """The probe of ``node_id`` is (or is not) there now; True when the caller should start it
        again now (the restart is counted, and the next one backed off)."""
        now = self.clock()
        watch = self.watches.setdefault(node_id, ProbeWatch())
        if present:
            if watch.up_since is None:
                watch.up_since = now
            elif watch.attempts and now - watch.up_since >= self.stable_after_s:
                watch.attempts = 0
                watch.next_restart_at = 0.0
            return False
        watch.up_since = None
        if now < watch.next_restart_at:
            return False
        watch.next_restart_at = now + self.backoff_s(watch.attempts)
        watch.attempts += 1
        watch.restarts += 1
        watch.last_restart_at = now
        return True

    def backoff_s(self, attempts: int) -> float:
        """The wait after the restart number ``attempts + 1`` since the probe was last stable."""
        return min(self.max_backoff_s, self.initial_backoff_s * 2.0 ** min(attempts, 64))

    def keep_only(self, node_ids: Iterable[str]) -> None:
        """Forget the nodes not in ``node_ids`` (dead, collected): their probes are not coming back."""
        keep = set(node_ids)
        for node_id in [n for n in self.watches if n not in keep]:
            del self.watches[node_id]

    @property
    def total_restarts(self) -> int:
        return sum(w.restarts for w in self.watches.values())

    def status(self) -> dict[str, dict[str, Any]]:
        """Per node id: restarts, current backoff attempts, next allowed restart, last restart."""
        return {n: {"restarts": w.restarts, "attempts": w.attempts, "next_restart_at": w.next_restart_at,
                    "last_restart_at": w.last_restart_at} for n, w in self.watches.items()}


def detect_degradation(baseline: NodeCapabilities, current: NodeCapabilities) -> tuple[str, ...]:
    """What ``current`` lost against ``baseline`` (the capabilities the node joined with): GPUs that
    vanished, hardware encoders and working ffmpeg encoders that stopped working, tiers no longer
    served. Empty when nothing was lost (gaining is not degradation)."""
    reasons: list[str] = []
    now_gpus = {(g.vendor, g.model) for g in current.gpus}
    for g in baseline.gpus:
        if (g.vendor, g.model) not in now_gpus:
            reasons.append(f"gpu vanished: {g.model}")
    if len(current.gpus) < len(baseline.gpus) and not reasons:
        reasons.append(f"gpu count dropped: {len(baseline.gpus)} -> {len(current.gpus)}")
    enc_before = {c for g in baseline.gpus for c in g.encoders}
    enc_now = {c for g in current.gpus for c in g.encoders}
    reasons += [f"hardware encoder stopped: {c}" for c in sorted(enc_before - enc_now)]
    reasons += [f"ffmpeg encoder stopped: {e}" for e in sorted(set(baseline.ffmpeg.working) - set(current.ffmpeg.working))]
    reasons += [f"tier no longer served: {t.value}" for t in baseline.tiers if t not in current.tiers]
    return tuple(reasons)


__all__ = [
    "Clock", "Event", "FlapHistory", "HealthPolicy", "ManualClock", "NodeHealth", "ProbeRestarts", "ProbeWatch", "RayNodeView",
    "detect_degradation",
]

"""The health rules and their edge cases, as health-policy rules over an injected clock (no Ray)."""

from __future__ import annotations

import pytest

from fabric.core.capabilities import FfmpegInfo, GpuInfo, GpuVendor, NodeCapabilities
from fabric.core.errors import TransitionError
from fabric.core.events import NodeAdded, NodeCollected, NodeDegraded, NodeFlapHeld, NodeFlapReleased, NodeLost, NodeRecovered, parse_event
from fabric.core.health import HealthPolicy, ManualClock, NodeHealth, ProbeRestarts, RayNodeView, detect_degradation
from fabric.core.lifecycle import NodeStatus, check_transition
from fabric.core.settings import HealthSettings

SEED = HealthSettings(heartbeat_interval_s=30, offline_after_s=90)  # 30 s beats, offline at 90 s, grace 300 s, 3 toggles/300 s -> 600 s


def ray_node(node_id: str, name: str | None = None, alive: bool = True, fabric: bool = True) -> RayNodeView:
    labels = {"fabric.io/tier": "cpu_ffmpeg", "fabric.io/name": name or node_id} if fabric else {}
    return RayNodeView(node_id=node_id, alive=alive, labels=labels)


class Harness:
    """A policy, its clock, and the events it produced so far; validates state after every step."""

    def __init__(self, settings: HealthSettings = SEED) -> None:
        self.clock = ManualClock()
        self.policy = HealthPolicy(settings, clock=self.clock)
        self.events: list = []
        self.ray: dict[str, RayNodeView] = {}

    def _got(self, evs):
        self.policy.validate_state()
        for e in evs:  # every event round-trips through its dict form (it crosses actor boundaries)
            assert parse_event(e.model_dump()) == e
        self.events += evs
        return evs

    def join(self, node_id, name=None):
        self.ray[node_id] = ray_node(node_id, name)
        return self._got(self.policy.observe_ray(self.ray.values()))

    def kill(self, node_id):
        self.ray[node_id] = RayNodeView(node_id, alive=False, labels=self.ray[node_id].labels)
        return self._got(self.policy.observe_ray(self.ray.values()))

    def beat(self, node_id):
        return self._got(self.policy.heartbeat(node_id))

    def run(self, seconds, beating=(), step=1.0):
        """Advance the clock ``seconds`` in ``step`` steps, ``beating`` nodes heartbeating every
        interval, the monitor ticking every step."""
        out, t, next_beat = [], 0.0, 0.0
        while t < seconds - 1e-9:
            self.clock.advance(step)
            t += step
            if t >= next_beat:
                for n in beating:
                    out += self.beat(n)
                next_beat += self.policy.settings.heartbeat_interval_s
            out += self._got(self.policy.tick())
            out += self._got(self.policy.observe_ray(self.ray.values()))
        return out


def kinds(events):
    return [type(e).__name__ for e in events]


def test_new_fabric_node_is_added_active_and_bare_nodes_are_ignored():
    h = Harness()
    evs = h.policy.observe_ray([ray_node("a"), ray_node("head", fabric=False)])
    assert kinds(evs) == ["NodeAdded"] and evs[0].node_id == "a" and evs[0].status is NodeStatus.ACTIVE
    assert h.policy.status("a") is NodeStatus.ACTIVE and h.policy.status("head") is None
    assert h.policy.observe_ray([ray_node("a")]) == []  # idempotent


def test_beating_node_stays_active_for_hours():
    h = Harness()
    h.join("a")
    assert h.run(4 * 3600, beating=["a"], step=5.0) == []
    assert h.policy.status("a") is NodeStatus.ACTIVE


def test_three_missed_beats_mark_offline_at_90s_not_before():
    h = Harness()
    h.join("a")
    h.beat("a")
    assert h.run(90, step=1.0) == []  # 90 s of silence is exactly the limit
    evs = h.run(1, step=1.0)
    assert kinds(evs) == ["NodeLost"] and evs[0].status is NodeStatus.OFFLINE and "missed heartbeats" in evs[0].reason
    assert not evs[0].ray_dead


def test_new_node_gets_the_join_timeout_for_its_first_beat():
    h = Harness(HealthSettings(offline_after_s=90, join_timeout_s=120))
    h.join("a")
    assert h.run(120) == []  # its probe actor is still starting: not offline at 90 s
    assert kinds(h.run(1)) == ["NodeLost"]
    h2 = Harness(HealthSettings(offline_after_s=90, join_timeout_s=120))
    h2.join("b")
    h2.clock.advance(10)
    h2.beat("b")
    assert h2.run(90) == [] and kinds(h2.run(1)) == ["NodeLost"]  # after the first beat: 90 s


def test_ray_declaring_a_node_dead_marks_it_offline_at_once():
    h = Harness()
    h.join("a")
    evs = h.kill("a")
    assert kinds(evs) == ["NodeLost"] and evs[0].ray_dead and evs[0].reason == "ray: node dead"
    assert h.policy.status("a") is NodeStatus.OFFLINE


def test_node_missing_from_ray_table_is_lost_too():
    h = Harness()
    h.join("a")
    assert kinds(h.policy.observe_ray([])) == ["NodeLost"]


def test_lost_node_is_not_dead_before_the_drain_grace_then_collected():
    h = Harness()
    h.join("a")
    h.kill("a")
    assert h.run(SEED.drain_grace_s - 1) == []
    assert h.policy.status("a") is NodeStatus.OFFLINE
    evs = h.run(1)
    assert kinds(evs) == ["NodeCollected"] and evs[0].status is NodeStatus.DEAD and evs[0].lost_for_s >= SEED.drain_grace_s
    assert h.policy.status("a") is NodeStatus.DEAD and "a" not in h.policy.nodes
    # Ray still lists the dead id: it is never re-added.
    assert h.policy.observe_ray([ray_node("a")]) == []


def test_network_partition_goes_offline_not_dead_and_recovers_when_beats_resume():
    # Ray still has the node (its raylet is fine), only heartbeats stop: offline after 90 s,
    # and a heartbeat within the drain grace brings it back without churn.
    h = Harness()
    h.join("a")
    h.beat("a")
    lost = h.run(120)
    assert kinds(lost) == ["NodeLost"]
    assert h.run(100) == []  # still inside the drain grace: not dead
    assert h.policy.status("a") is NodeStatus.OFFLINE
    back = h.beat("a")
    assert kinds(back) == ["NodeRecovered"] and back[0].status is NodeStatus.ACTIVE and back[0].reason == "heartbeats resumed"


def test_partition_longer_than_the_grace_is_collected():
    h = Harness()
    h.join("a")
    h.beat("a")
    evs = h.run(90 + 1 + SEED.drain_grace_s + 1)
    assert kinds(evs) == ["NodeLost", "NodeCollected"]
    assert h.beat("a") == []  # a beat from a collected id changes nothing


def test_old_beat_arriving_late_does_not_revive():
    h = Harness()
    h.join("a")
    h.beat("a")
    h.run(100)
    before = h.clock()
    assert h.policy.heartbeat("a", at=before - 50) == []  # a beat older than the loss
    assert h.policy.status("a") is NodeStatus.OFFLINE


def test_ray_dead_node_never_recovers_by_heartbeat():
    h = Harness()
    h.join("a")
    h.kill("a")
    h.clock.advance(1)
    assert h.beat("a") == []
    assert h.policy.status("a") is NodeStatus.OFFLINE


def test_derp_latency_heartbeat_timeout_45s():
    # over a DERP relay beats arrive 200-500 ms late; the timeout is raised to 45 s.
    derp = HealthSettings(heartbeat_interval_s=30, offline_after_s=45)
    h = Harness(derp)
    h.join("a")
    for _ in range(20):  # 10 minutes of beats, each 0.5 s late
        h.clock.advance(30.5)
        assert h.beat("a") == [] and h.policy.tick() == []
    h.clock.advance(45)
    assert h.policy.tick() == []
    h.clock.advance(0.5)
    assert kinds(h.policy.tick()) == ["NodeLost"]


def test_flapping_three_toggles_in_300s_holds_600s():
    h = Harness()
    h.join("a1", name="box")
    assert kinds(h.kill("a1")) == ["NodeLost"]  # toggle 1: online -> offline
    h.clock.advance(30)
    assert kinds(h.join("a2", name="box")) == ["NodeAdded"]  # toggle 2: rejoined (a new Ray id)
    h.clock.advance(30)
    evs = h.kill("a2")  # toggle 3 within 300 s: the name is held (both of its records)
    assert kinds(evs) == ["NodeLost", "NodeFlapHeld", "NodeFlapHeld"]
    assert {e.node_id for e in evs[1:]} == {"a1", "a2"}
    held = evs[1]
    assert held.until == pytest.approx(h.clock() + 600) and held.toggles == 3
    assert h.policy.held_until("box") == pytest.approx(h.clock() + 600)
    h.clock.advance(10)
    evs = h.join("a3", name="box")  # a rejoin during the hold is held too
    assert kinds(evs) == ["NodeAdded", "NodeFlapHeld"] and evs[1].node_id == "a3"
    h.clock.advance(600 - 10 - 1)
    assert not [e for e in h.policy.tick() if isinstance(e, NodeFlapReleased)]
    assert h.policy.held_until("box") is not None
    h.clock.advance(1)
    rel = [e for e in h.policy.tick() if isinstance(e, NodeFlapReleased)]
    assert [e.node_id for e in rel] == ["a3"] and h.policy.held_until("box") is None


def test_toggles_spread_over_more_than_the_window_do_not_hold():
    h = Harness()
    h.join("a1", name="box")
    h.kill("a1")
    h.clock.advance(200)
    h.join("a2", name="box")
    h.clock.advance(200)  # the first toggle is now outside the 300 s window
    assert kinds(h.kill("a2")) == ["NodeLost"]
    assert h.policy.held_until("box") is None


def test_partition_flap_by_heartbeats_holds():
    s = HealthSettings(heartbeat_interval_s=1, offline_after_s=3, drain_grace_s=100, flap_window_s=60, flap_hold_s=120)
    h = Harness(s)
    h.join("a", name="box")
    h.beat("a")
    evs = h.run(5)  # lost (toggle 1)
    evs += h.beat("a")  # back (toggle 2)
    evs += h.run(5)  # lost again (toggle 3): held
    assert kinds(evs) == ["NodeLost", "NodeRecovered", "NodeLost", "NodeFlapHeld"]


def test_new_node_appearing_before_the_old_one_drains_is_a_separate_record():
    # the race: the machine rejoins (new Ray id) while its old record is still offline.
    h = Harness()
    h.join("old", name="box")
    h.kill("old")
    h.clock.advance(5)
    evs = h.join("new", name="box")
    assert kinds(evs) == ["NodeAdded"] and evs[0].node_id == "new"
    assert h.policy.status("old") is NodeStatus.OFFLINE and h.policy.status("new") is NodeStatus.ACTIVE
    evs = h.run(SEED.drain_grace_s, beating=["new"])
    assert [(type(e).__name__, e.node_id) for e in evs] == [("NodeCollected", "old")]
    assert h.policy.status("new") is NodeStatus.ACTIVE


def test_new_node_before_the_old_one_is_even_lost_keeps_both_and_no_toggle():
    h = Harness()
    h.join("old", name="box")
    h.join("new", name="box")
    assert kinds(h.kill("old")) == ["NodeLost"]
    assert h.policy.flaps["box"].toggles == []  # the name never went offline


def test_degradation_and_recovery_events():
    h = Harness()
    h.join("a")
    evs = h.policy.observe_degradation("a", ["gpu vanished: RTX 4070"])
    assert kinds(evs) == ["NodeDegraded"] and evs[0].reasons == ("gpu vanished: RTX 4070",) and evs[0].status is None
    assert h.policy.observe_degradation("a", ["gpu vanished: RTX 4070"]) == []
    back = h.policy.observe_degradation("a", [])
    assert kinds(back) == ["NodeRecovered"] and "degradation cleared" in back[0].reason
    assert h.policy.observe_degradation("unknown", ["x"]) == []


def test_drain_then_lost_then_collected():
    h = Harness()
    h.join("a")
    # An operator drain is the registry's to write (mark_draining); the monitor learns the status
    # from the registry's records, as it does on start (HealthMonitorActor._restore).
    joined = h.policy.nodes["a"]
    h.policy.restore([NodeHealth(node_id="a", name=joined.name, status=NodeStatus.DRAINING, since=h.clock(),
                                 last_beat=joined.last_beat, heard=joined.heard)])
    h.policy.validate_state()
    assert h.policy.status("a") is NodeStatus.DRAINING
    assert kinds(h.kill("a")) == ["NodeLost"]
    assert kinds(h.run(SEED.drain_grace_s)) == ["NodeCollected"]


def test_restore_after_monitor_restart_keeps_timers_and_flaps():
    h = Harness()
    h.join("a1", name="box")
    h.kill("a1")
    h.clock.advance(100)
    saved_nodes = [NodeHealth(**vars(n)) for n in h.policy.nodes.values()]
    fresh = HealthPolicy(SEED, clock=h.clock)
    fresh.restore(saved_nodes, h.policy.flaps_json(), collected={"gone"})
    fresh.validate_state()
    assert fresh.status("a1") is NodeStatus.OFFLINE and fresh.status("gone") is NodeStatus.DEAD
    h.clock.advance(SEED.drain_grace_s - 100)
    assert kinds(fresh.tick()) == ["NodeCollected"]  # the grace counted from the original loss
    assert fresh.flaps["box"].online is False


def test_events_carry_stimulus_ids():
    h = Harness()
    evs = h.policy.observe_ray([ray_node("a")], stimulus_id="ray-nodes-x")
    assert evs[0].stimulus_id == "ray-nodes-x"
    assert h.policy.tick() == []
    evs = h.policy.observe_ray([])
    assert evs[0].stimulus_id.startswith("ray-nodes-")


@pytest.mark.parametrize(
    ("frm", "to", "ok"),
    [
        ("active", "offline", True), ("offline", "active", True), ("offline", "dead", True),
        ("active", "draining", True), ("draining", "active", True), ("dead", "active", False), ("dead", "offline", False),
    ],
)
def test_transition_table(frm, to, ok):
    if ok:
        assert check_transition("n", NodeStatus(frm), NodeStatus(to)) is NodeStatus(to)
    else:
        with pytest.raises(TransitionError) as err:
            check_transition("n", NodeStatus(frm), NodeStatus(to))
        assert err.value.from_state == frm and err.value.to_state == to


def _caps(**kw) -> NodeCapabilities:
    gpu = GpuInfo(vendor=GpuVendor.NVIDIA, model="NVIDIA GeForce RTX 4070", vram_mib=12282, discrete=True, cuda=True, encoders=("h264", "hevc"))
    base = dict(name="qfox-1", cpu_logical=12, cpu_physical=6, cpu_usable=12, memory_mib=32000, gpus=(gpu,),
                ffmpeg=FfmpegInfo(listed=("h264_nvenc", "libx264"), working=("h264_nvenc", "libx264")))
    base.update(kw)
    return NodeCapabilities(**base)


def test_detect_degradation_gpu_vanished_and_encoder_stopped():
    before = _caps()
    assert detect_degradation(before, before) == ()
    no_gpu = _caps(gpus=(), ffmpeg=FfmpegInfo(listed=("h264_nvenc", "libx264"), working=("libx264",)))
    reasons = detect_degradation(before, no_gpu)
    assert "gpu vanished: NVIDIA GeForce RTX 4070" in reasons
    assert "ffmpeg encoder stopped: h264_nvenc" in reasons
    assert "tier no longer served: gpu_cuda" in reasons
    assert detect_degradation(no_gpu, before) == ()  # gaining is not degradation


def test_ray_node_view_from_ray_row():
    row = {"NodeID": "ab" * 28, "Alive": True, "Labels": {"fabric.io/tier": "relay", "fabric.io/name": "edge", "fabric.io/profile": "edge-relay"},
           "Resources": {"CPU": 1.0}, "NodeManagerHostname": "h", "NodeManagerAddress": "127.0.0.1"}
    v = RayNodeView.from_ray(row)
    assert v.is_fabric_node and v.name == "edge" and v.profile == "edge-relay" and v.alive
    bare = RayNodeView.from_ray({"NodeID": "cd" * 28, "Alive": False, "NodeManagerHostname": "h"})
    assert not bare.is_fabric_node and bare.name == "h"


# -- self-healing probes (issue 12): when the monitor starts a missing probe actor again ------------
def restarts_policy(**kw):
    clock = ManualClock(0.0)
    return ProbeRestarts(clock=clock, **kw), clock


def test_a_missing_probe_is_restarted_at_once_then_backed_off_doubling_to_a_ceiling():
    p, clock = restarts_policy(initial_backoff_s=1.0, max_backoff_s=60.0, stable_after_s=60.0)
    starts = []
    for _ in range(600):  # ten minutes of a probe that dies the moment it starts, one look a second
        clock.advance(1.0)
        if p.observe("n", present=False):
            starts.append(clock())
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert starts[0] == 1.0  # the first restart does not wait
    assert gaps[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0] and set(gaps[6:]) == {60.0}  # then doubles to the ceiling
    assert p.watches["n"].restarts == len(starts) > 3  # however many times it died: never given up
    assert p.total_restarts == len(starts) and p.status()["n"]["restarts"] == len(starts)


def test_a_probe_up_for_a_while_resets_the_backoff():
    p, clock = restarts_policy(initial_backoff_s=1.0, max_backoff_s=60.0, stable_after_s=30.0)
    for _ in range(5):  # five quick deaths: the next restart waits 16 s
        assert p.observe("n", present=False)
        clock.advance(p.watches["n"].next_restart_at - clock())
    assert p.watches["n"].attempts == 5
    p.observe("n", present=True)
    clock.advance(10.0)
    p.observe("n", present=True)  # up 10 s: not yet stable
    assert p.watches["n"].attempts == 5
    clock.advance(25.0)
    p.observe("n", present=True)  # up 35 s: stable, backoff forgotten
    assert p.watches["n"].attempts == 0
    assert p.observe("n", present=False)  # so the next death restarts it at once
    clock.advance(0.5)
    assert not p.observe("n", present=False)  # and the one after waits the initial backoff
    clock.advance(0.5)
    assert p.observe("n", present=False)
    assert p.watches["n"].restarts == 7


def test_a_brief_return_does_not_reset_the_backoff():
    p, clock = restarts_policy(initial_backoff_s=2.0, max_backoff_s=10.0, stable_after_s=60.0)
    assert p.observe("n", present=False)  # t=0: at once; the next no sooner than t=2
    clock.advance(2.0)
    assert p.observe("n", present=False)  # t=2: the next no sooner than t=6
    clock.advance(1.0)
    p.observe("n", present=True)  # up for a second...
    clock.advance(1.0)
    assert not p.observe("n", present=False)  # ... and dead again at t=4: still backed off
    clock.advance(2.0)
    assert p.observe("n", present=False)  # t=6
    assert p.watches["n"].attempts == 3 and p.backoff_s(3) == 10.0


def test_only_quiet_nodes_are_looked_up_and_dead_ones_forgotten():
    p, clock = restarts_policy()
    clock.advance(100.0)
    assert p.quiet({"beating": 99.5, "quiet": 90.0, "new": 100.0}, quiet_after_s=2.0) == ["quiet"]
    p.observe("a", present=False)
    p.observe("b", present=False)
    p.keep_only(["b"])
    assert set(p.watches) == {"b"}


def test_restart_backoff_settings_are_checked():
    with pytest.raises(ValueError):
        ProbeRestarts(initial_backoff_s=0.0, clock=ManualClock())
    with pytest.raises(ValueError):
        ProbeRestarts(initial_backoff_s=10.0, max_backoff_s=1.0, clock=ManualClock())


def test_the_flap_document_keeps_only_what_a_restart_needs():
    """Every node has a flap history, but only names that toggled, are held or are offline go into
    the document the monitor writes (10,000 online nodes would otherwise rewrite 10,000 entries on
    every join); a restored monitor still counts the kept toggles toward a hold."""
    h = Harness()
    h.join("a1", name="steady")
    h.join("b1", name="gone")
    h.kill("b1")
    h.join("c1", name="flappy")
    h.kill("c1")
    h.join("c2", name="flappy")  # back: a toggle each way
    doc = h.policy.flaps_json()
    assert set(doc) == {"gone", "flappy"} and doc["gone"]["online"] is False and doc["flappy"]["toggles"]
    fresh = HealthPolicy(SEED, clock=h.clock)
    fresh.restore([NodeHealth(**vars(n)) for n in h.policy.nodes.values()], doc)
    assert fresh.flaps_json() == doc and "steady" not in fresh.flaps

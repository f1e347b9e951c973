"""``fabric join --supervise``'s rules (``fabric.cli.supervise.Supervisor``) over a scripted node:
what makes it start a new node, what never does, its bounded backoff and its stop."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from fabric.cli import node as node_cli
from fabric.cli.supervise import BACKOFF_S, Sight, Supervisor, SupervisePolicy

POLICY = SupervisePolicy(check_every_s=0.5, stable_s=60.0, unknown_grace_s=10.0, fleet_grace_s=5.0, stop_grace_s=3.0)


def alive(node: str = "n1", **kw) -> Sight:
    return Sight(ray_start_running=True, raylet_pid=100, raylet_running=True, node_id=node, ray="alive", **kw)


@dataclass
class ScriptedNode:
    """A node whose looks are scripted per start (a list of sights per incarnation; the last repeats),
    on a fake clock that ``wait`` moves on. ``stop_after`` asks the supervisor to stop after that many
    seconds of waiting in all."""

    script: list[list[Sight]]
    stop_after: float = 1e9
    now: float = 0.0
    starts: list[float] = field(default_factory=list)
    stops: list[tuple[float, float]] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    _looks: int = 0

    def start(self) -> int:
        self.starts.append(self.now)
        self._looks = 0
        return 1000 + len(self.starts)

    def look(self) -> Sight:
        sights = self.script[min(len(self.starts) - 1, len(self.script) - 1)]
        sight = sights[min(self._looks, len(sights) - 1)]
        self._looks += 1
        return sight

    def stop(self, grace_s: float) -> None:
        self.stops.append((self.now, grace_s))

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        return self.stopping()

    def stopping(self) -> bool:
        return self.now >= self.stop_after


def run(node: ScriptedNode, policy: SupervisePolicy = POLICY) -> tuple[Supervisor, list[str]]:
    lines: list[str] = []
    sup = Supervisor(node, policy, lines.append, clock=lambda: node.now)
    assert sup.run() == 0
    return sup, lines


def test_a_healthy_node_is_never_restarted_and_a_stop_stops_it_once():
    node = ScriptedNode([[Sight(ray_start_running=True), alive()]], stop_after=300)
    sup, lines = run(node)
    assert len(node.starts) == 1 and sup.restarts == 0
    assert node.stops == [(300.0, POLICY.stop_grace_s)]
    assert lines[0] == "started ray start --block (pid 1001)"
    assert "node n1 is alive (raylet pid 100)" in lines and lines[-1] == "stopped"


def test_ray_start_exiting_starts_a_new_node_with_a_bounded_backoff():
    node = ScriptedNode([[Sight(ray_start_running=False, exit_code=1)]], stop_after=400)
    sup, lines = run(node)
    delays = [w for w in node.waits if w != POLICY.check_every_s]
    assert delays[:8] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert max(delays) == BACKOFF_S[-1]
    assert len(node.starts) == sup.restarts + 1 and len(node.stops) == len(node.starts)
    assert "ray start (pid 1001) exited with code 1: node stopped; starting a new one in 1 s (restart 1)" in lines


def test_a_node_alive_long_enough_resets_the_backoff():
    dies = [Sight(ray_start_running=False, exit_code=1)]
    long_life = [alive()] * 140 + dies  # alive 70 s, past stable_s, then ray start exits
    node = ScriptedNode([dies, dies, dies, long_life, dies], stop_after=200)
    run(node)
    delays = [w for w in node.waits if w != POLICY.check_every_s]
    assert delays[:5] == [1.0, 2.0, 4.0, 1.0, 2.0]


def test_dead_to_the_head_while_the_raylet_runs_is_restarted_at_once():
    orphan = Sight(ray_start_running=True, raylet_pid=100, raylet_running=True, node_id="n1", ray="dead")
    node = ScriptedNode([[alive(), alive(), orphan], [alive("n2")]], stop_after=60)
    sup, lines = run(node)
    assert sup.restarts == 1 and node.starts == [0.0, 2.5]
    assert node.stops[0] == (1.5, POLICY.stop_grace_s)  # the orphan is stopped at the look that saw it
    assert ("the head's node table says node n1 is dead while its raylet (pid 100) still runs: node stopped; "
            "starting a new one in 1 s (restart 1)") in lines
    assert "node n2 is alive (raylet pid 100)" in lines


def test_a_raylet_gone_while_ray_start_runs_is_restarted():
    gone = Sight(ray_start_running=True, raylet_pid=100, raylet_running=False, node_id="n1", ray="alive")
    node = ScriptedNode([[alive(), gone], [alive()]], stop_after=30)
    sup, lines = run(node)
    assert sup.restarts == 1
    assert any(line.startswith("the raylet (pid 100) ended while ray start still runs") for line in lines)


def test_an_unreachable_head_is_never_a_reason_however_long():
    cut = Sight(ray_start_running=True, raylet_pid=100, raylet_running=True, node_id="n1", ray="unreachable")
    node = ScriptedNode([[alive(), *([cut] * 500), alive()]], stop_after=600)
    sup, _ = run(node)
    assert sup.restarts == 0 and len(node.starts) == 1


@pytest.mark.parametrize("unlisted_looks, restarted", [(19, False), (24, True)])
def test_a_node_the_head_does_not_list_is_restarted_after_the_grace(unlisted_looks, restarted):
    unknown = Sight(ray_start_running=True, raylet_pid=100, raylet_running=True, node_id="n1", ray="unknown")
    node = ScriptedNode([[alive(), *([unknown] * unlisted_looks), alive()], [alive()]], stop_after=40)
    sup, lines = run(node)
    assert sup.restarts == int(restarted)
    assert any("the head has not listed node n1 for 10 s" in line for line in lines) == restarted


def test_the_fleet_forgetting_a_node_it_listed_restarts_it_but_never_listing_it_does_not():
    listed, gone = alive(fleet="listed"), alive(fleet="gone")
    node = ScriptedNode([[listed, *([gone] * 14)], [alive(fleet="listed")]], stop_after=30)
    sup, lines = run(node)
    assert sup.restarts == 1
    assert any(line.startswith("the fleet has not listed node n1 as alive for 5 s") for line in lines)

    never = ScriptedNode([[alive(fleet="gone")]], stop_after=120)
    sup, _ = run(never)
    assert sup.restarts == 0


def test_a_stop_during_the_backoff_starts_nothing_more():
    node = ScriptedNode([[Sight(ray_start_running=False, exit_code=1)]], stop_after=0.8)
    sup, lines = run(node)
    assert len(node.starts) == 1 and lines[-1] == "stopped"


def test_join_takes_supervise_and_its_api_options():
    import argparse

    parser = argparse.ArgumentParser()
    node_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["join", "--address", "10.0.0.1:6379", "--supervise", "--api", "10.0.0.1:50051",
                              "--api-token-file", "/tmp/t", "--", "--num-cpus=1"])
    assert args.supervise and args.api == "10.0.0.1:50051" and args.api_token_file == "/tmp/t"
    with pytest.raises(SystemExit):
        parser.parse_args(["start-head", "--supervise"])


def test_a_malformed_api_address_is_refused_with_exit_2(capsys):
    import argparse

    parser = argparse.ArgumentParser()
    node_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["join", "--address", "127.0.0.1:6379", "--supervise", "--api", "nohost", "--profile",
                              "edge-relay", "--dry-run"])
    assert node_cli.run_start(args) == 2
    assert "fabric join: error: --api:" in capsys.readouterr().err

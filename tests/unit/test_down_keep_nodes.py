"""``fabric.down`` / ``fabric down`` without a cluster: the provider-started nodes are terminated by
default and kept with ``keep_nodes`` / ``--keep-nodes``; the actors stop either way."""

from __future__ import annotations

import pytest

from fabric.cli import lifecycle as cli_lifecycle
from fabric.cli import main
from fabric.core.names import HEALTH, REGISTRY, SCHEDULER
from fabric.runtime import lifecycle


class FakeDriver:
    """The Ray seam ``down`` uses: named actors that ``kill`` removes."""

    def __init__(self) -> None:
        self.actors = {REGISTRY: object(), HEALTH: object(), SCHEDULER: object()}
        self.killed: list[str] = []

    def is_initialized(self) -> bool:
        return True

    def named_actors(self) -> list[str]:
        return list(self.actors)

    def get_actor(self, name: str) -> object | None:
        return self.actors.get(name)

    def kill(self, handle: object) -> None:
        name = next(n for n, h in self.actors.items() if h is handle)
        self.killed.append(name)
        del self.actors[name]

    def get(self, ref: object, timeout_s: float) -> object:
        return ref


class FakeSchedulerClient:
    calls: list[str] = []

    def __init__(self, handle: object, answer: object) -> None:
        pass

    def close_migrations(self, grace_s: float) -> int:
        FakeSchedulerClient.calls.append("close_migrations")
        return 0

    def close_providers(self) -> int:
        FakeSchedulerClient.calls.append("close_providers")
        return 2


class FakeSession:
    def disconnect(self) -> None:
        pass


@pytest.fixture
def driver(monkeypatch):
    d = FakeDriver()
    FakeSchedulerClient.calls = []
    monkeypatch.setattr(lifecycle.sessions, "driver", lambda: d)
    monkeypatch.setattr(lifecycle.sessions, "session", lambda _driver=None: FakeSession())
    monkeypatch.setattr(lifecycle, "SchedulerClient", FakeSchedulerClient)
    return d


def test_down_terminates_the_provider_nodes_by_default(driver):
    stopped = lifecycle.down(timeout_s=1)
    assert FakeSchedulerClient.calls == ["close_migrations", "close_providers"]
    assert set(stopped) == {REGISTRY, HEALTH, SCHEDULER} and driver.actors == {}


def test_down_keep_nodes_stops_the_actors_and_leaves_the_provider_nodes(driver):
    stopped = lifecycle.down(timeout_s=1, keep_nodes=True)
    assert FakeSchedulerClient.calls == ["close_migrations"]  # migrations still end; no node is terminated
    assert set(stopped) == {REGISTRY, HEALTH, SCHEDULER} and driver.actors == {}


@pytest.mark.parametrize("flag", [False, True])
def test_the_cli_passes_keep_nodes_and_says_what_it_kept(monkeypatch, capsys, flag):
    import fabric

    seen: list[bool] = []

    class Ray:
        def shutdown(self) -> None:
            pass

    monkeypatch.setattr(cli_lifecycle, "connect", lambda address, command: Ray())
    monkeypatch.setattr(fabric, "down", lambda timeout_s=30.0, keep_nodes=False, **_: seen.append(keep_nodes) or [REGISTRY])
    assert main(["down", "--address", "127.0.0.1:1", *(["--keep-nodes"] if flag else [])]) == 0
    out = capsys.readouterr().out
    assert seen == [flag] and f"stopped {REGISTRY}" in out
    assert ("keep running (--keep-nodes)" in out) is flag and ("terminated the nodes" in out) is not flag


def test_down_help_says_what_it_does_and_what_keep_nodes_keeps(capsys):
    with pytest.raises(SystemExit):
        main(["down", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(not Ray)" not in text
    assert "terminate the nodes its providers started" in text and "--keep-nodes" in text
    assert "leave the nodes the fabric's providers started running" in text


class OptionsDriver:
    def __init__(self) -> None:
        self.options: dict[str, object] = {}

    def start_actor(self, actor_class: object, name: str, *args: object, **options: object) -> str:
        self.options = options
        return name


def test_the_scheduler_s_process_keeps_its_child_processes_when_it_exits():
    # the local provider's nodes are the scheduler's children: Ray would kill them with it
    assert lifecycle.SCHEDULER_ENV == {"RAY_kill_child_processes_on_worker_exit": "0"}
    d = OptionsDriver()
    lifecycle.start_actor(d, object, SCHEDULER, {}, env=lifecycle.SCHEDULER_ENV)
    assert d.options["runtime_env"] == {"env_vars": {"RAY_kill_child_processes_on_worker_exit": "0"}}
    assert d.options["lifetime"] == "detached" and d.options["max_restarts"] == -1
    lifecycle.start_actor(d, object, REGISTRY, None)
    assert "runtime_env" not in d.options  # the other actors start as before

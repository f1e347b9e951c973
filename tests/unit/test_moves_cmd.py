"""``fabric drain|evict|migrate|migrations|interrupt`` (issue 16) over a fake handle, no Ray: the
commands are registered (``drain`` moved out of ``ops``, ``--grace`` kept as an alias of
``--timeout``), each calls the handle's method with what was typed, prints the state readably in 80
columns (or as JSON), and exits 0 / 1 (the outcome failed) / 2 (refused)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field

import pytest

from fabric.cli import build_parser
from fabric.cli.moves_cmd import (
    drain_with, evict_with, format_migrations, interrupt_with, migrate_with, migration_rows, migrations_with,
)
from fabric.core.errors import MigrationError, NodeNotFoundError

NOW = 1_000_000.0


@dataclass(frozen=True)
class State:
    """Stands in for the scheduler's MigrationState (the fields the contract names)."""

    migration_id: str
    job_id: str
    strategy: str = "handover"
    phase: str = "placing"
    source_node: str = "aaaa1111"
    source_key: str = "primary@1"
    target_node: str | None = None
    target_key: str | None = None
    reason: str = ""
    started_at: float = NOW - 42
    phase_deadline: float | None = None
    past_point_of_no_return: bool = False
    history: tuple = ()

    @property
    def terminal(self) -> bool:
        return self.phase in ("done", "aborted", "lost")


DRAIN = {"node_id": "f" * 56, "phase": "waiting", "started": NOW - 10, "timeout_s": 300.0, "force": True,
         "strategy": "handover", "reason": "", "ray_drain": None, "interruption": None, "deadline": NOW + 290,
         "terminal": False, "jobs": {"encode-1": {"job_id": "encode-1", "status": "migrating", "migration_id": "m-7", "reason": ""},
                                     "relay-2": {"job_id": "relay-2", "status": "stuck", "migration_id": None,
                                                 "reason": "no node fits the target"}}}


class Drained:
    """A DrainState-like object: what the CLI reads is its ``as_dict()``."""

    def __init__(self, **over) -> None:
        self.d = {**DRAIN, **over}

    def as_dict(self) -> dict:
        return dict(self.d)


@dataclass
class FakeHandle:
    answers: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)

    def _answer(self, name, *args, **kwargs):
        self.calls.append((name, args, kwargs))
        a = self.answers[name]
        if isinstance(a, BaseException):
            raise a
        return a(*args, **kwargs) if callable(a) else a

    def drain(self, node, **kw): return self._answer("drain", node, **kw)
    def drain_status(self, node): return self._answer("drain_status", node)
    def evict(self, node): return self._answer("evict", node)
    def migrate_job(self, job, **kw): return self._answer("migrate_job", job, **kw)
    def migration(self, mid): return self._answer("migration", mid)
    def migrations(self): return self._answer("migrations")
    def handle_node_interruption(self, node, **kw): return self._answer("handle_node_interruption", node, **kw)
    def records(self): return self._answer("records")


@dataclass(frozen=True)
class Rec:
    node_id: str
    name: str


def parse(*argv):
    return build_parser().parse_args(list(argv))


def run(fn, handle, *argv, **kw):
    out, err = io.StringIO(), io.StringIO()
    code = fn(handle, parse(*argv), out, err, **kw)
    return code, out.getvalue(), err.getvalue()


def test_the_commands_are_registered_and_drain_is_no_longer_ops():
    for argv in (("drain", "n"), ("evict", "n"), ("migrate", "j"), ("migrations",), ("interrupt", "n")):
        assert parse(*argv).func.__name__ == f"run_{argv[0]}"
    assert parse("drain", "n", "--grace", "12").timeout == 12.0  # the old flag, same meaning
    assert parse("drain", "n", "--timeout", "7").timeout == 7.0
    assert parse("cordon", "n").op == "cordon"  # ops keeps cordon/uncordon
    with pytest.raises(SystemExit):
        parse("drain", "n", "--strategy", "teleport")
    with pytest.raises(SystemExit):
        parse("interrupt", "n", "--kind", "hurricane")


def test_drain_calls_the_handle_and_prints_phase_ray_and_each_job_in_80_columns():
    h = FakeHandle({"drain": Drained()})
    code, out, _ = run(drain_with, h, "drain", "cpu-only-box", "--timeout", "300", "--force", "--strategy", "handover",
                       now=lambda: NOW)
    assert code == 0
    assert h.calls == [("drain", ("cpu-only-box",), {"timeout_s": 300.0, "force": True, "strategy": "handover"})]
    lines = out.splitlines()
    assert lines[:2] == ["drain cpu-only-box (ffffffffffff): waiting", "  deadline in 290s, force, strategy handover"]
    assert "  ray: not asked yet" in lines
    assert any(line.split()[:3] == ["encode-1", "migrating", "m-7"] for line in lines)
    assert any(line.split()[:3] == ["relay-2", "stuck", "-"] and "no node fits" in line for line in lines)
    assert max(map(len, lines)) <= 80


def test_drain_defaults_go_unset_and_json_is_the_state_dict():
    h = FakeHandle({"drain": Drained(ray_drain="accepted", phase="done")})
    code, out, _ = run(drain_with, h, "drain", "n", "--json")
    assert code == 0 and h.calls[0][2] == {"timeout_s": None, "force": False, "strategy": None}
    got = json.loads(out)
    assert got["phase"] == "done" and got["ray_drain"] == "accepted" and got["jobs"]["encode-1"]["migration_id"] == "m-7"


def test_a_drain_ray_refused_exits_1_and_shows_the_refusal():
    h = FakeHandle({"drain": Drained(phase="failed", ray_drain="refused: The node to be idle terminated is no longer idle.",
                                     jobs={})})
    code, out, _ = run(drain_with, h, "drain", "n", now=lambda: NOW)
    assert code == 1
    assert "  ray: refused: The node to be idle terminated is no longer idle." in out and "no jobs on the node" in out


def test_drain_status_shows_the_drain_or_says_there_is_none():
    code, out, _ = run(drain_with, FakeHandle({"drain_status": Drained()}), "drain", "n", "--status", now=lambda: NOW)
    assert code == 0 and out.startswith("drain n (ffffffffffff): waiting")
    code, _, err = run(drain_with, FakeHandle({"drain_status": None}), "drain", "n", "--status")
    assert code == 1 and "n has no drain" in err


def test_drain_wait_prints_each_phase_once_until_the_drain_ends():
    later = iter([Drained(), Drained(phase="draining", ray_drain=None, jobs={}), Drained(phase="done", terminal=True,
                                                                                          ray_drain="accepted", jobs={})])
    h = FakeHandle({"drain": Drained(), "drain_status": lambda node: next(later)})
    slept: list[float] = []
    code, out, _ = run(drain_with, h, "drain", "n", "--wait", now=lambda: NOW, sleep=slept.append)
    assert code == 0 and [c[0] for c in h.calls] == ["drain", "drain_status", "drain_status", "drain_status"]
    heads = [line for line in out.splitlines() if line.startswith("drain n")]
    assert heads == ["drain n (ffffffffffff): waiting", "drain n (ffffffffffff): draining", "drain n (ffffffffffff): done"]
    assert len(slept) == 3


def test_drain_wait_exits_1_for_a_drain_that_ends_otherwise_or_outlasts_the_wait():
    h = FakeHandle({"drain": Drained(), "drain_status": Drained(phase="partial", terminal=True)})
    code, out, _ = run(drain_with, h, "drain", "n", "--wait", "--json", now=lambda: NOW, sleep=lambda s: None)
    assert code == 1 and json.loads(out)["phase"] == "partial"
    h = FakeHandle({"drain": Drained(), "drain_status": Drained()})
    code, _, err = run(drain_with, h, "drain", "n", "--wait", "--wait-timeout", "0", now=lambda: NOW, sleep=lambda s: None)
    assert code == 1 and "n still waiting after 0s (the drain goes on)" in err and len(h.calls) == 1


def test_fabric_version_prints_the_package_version(capsys):
    from fabric import __version__

    with pytest.raises(SystemExit) as done:
        parse("--version")
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"fabric {__version__}"


def test_a_refusal_by_the_fabric_exits_2_naming_it_and_a_fabric_not_up_exits_1():
    code, out, err = run(drain_with, FakeHandle({"drain": NodeNotFoundError("ghost")}), "drain", "ghost")
    assert (code, out) == (2, "") and err.strip() == "fabric drain: no node known as 'ghost'"
    code, _, err = run(evict_with, FakeHandle({"evict": RuntimeError("the fabric's scheduler is not up")}), "evict", "n")
    assert code == 1 and "not up" in err


def test_evict_lists_the_jobs_stopped():
    code, out, _ = run(evict_with, FakeHandle({"evict": ["j1", "j2"]}), "evict", "n")
    assert (code, out) == (0, "evict n: 2 jobs stopped: j1, j2\n")
    code, out, _ = run(evict_with, FakeHandle({"evict": []}), "evict", "n", "--json")
    assert (code, json.loads(out)) == (0, [])


def test_migrate_without_wait_prints_the_id_and_passes_strategy_and_target():
    h = FakeHandle({"migrate_job": "m-9"})
    code, out, _ = run(migrate_with, h, "migrate", "job-1", "--strategy", "overlap", "--to", "gpu-box")
    assert (code, out) == (0, "migration m-9: job-1 -> gpu-box\n")
    assert h.calls == [("migrate_job", ("job-1",), {"strategy": "overlap", "target_node": "gpu-box",
                                                    "override_reservation": False})]


def _polls(*states):
    it = iter(states)
    return lambda mid: next(it)


def test_migrate_wait_prints_every_phase_once_even_those_passed_between_polls_and_exits_by_outcome():
    h0 = (("placing", NOW, ""),)
    h1 = h0 + (("preparing", NOW + 0.5, ""), ("ready", NOW + 1.0, ""))
    h2 = h1 + (("cutting", NOW + 1.2, ""), ("resuming", NOW + 1.3, ""), ("done", NOW + 1.5, ""))
    states = [State("m-1", "job-1", phase="placing", started_at=NOW, history=h0),
              State("m-1", "job-1", phase="ready", started_at=NOW, history=h1),
              State("m-1", "job-1", phase="ready", started_at=NOW, history=h1),
              State("m-1", "job-1", phase="done", started_at=NOW, history=h2)]
    sleeps = []
    code, out, _ = run(migrate_with, FakeHandle({"migrate_job": "m-1", "migration": _polls(*states)}), "migrate", "job-1",
                       "--wait", sleep=sleeps.append, now=lambda: 0.0)
    assert code == 0 and len(sleeps) == 3
    phases = [line.split()[0] for line in out.splitlines()[1:-1]]
    assert phases == ["placing", "preparing", "ready", "cutting", "resuming", "done"]
    assert out.splitlines()[-1] == "migration m-1: done"

    aborted = State("m-2", "job-1", phase="aborted", reason="target raised InvalidSpecError",
                    history=(("placing", NOW, ""), ("aborted", NOW + 1, "target raised InvalidSpecError")))
    code, out, _ = run(migrate_with, FakeHandle({"migrate_job": "m-2", "migration": _polls(aborted)}), "migrate", "job-1",
                       "--wait", sleep=lambda s: None)
    assert code == 1 and out.splitlines()[-1] == "migration m-2: aborted (target raised InvalidSpecError)"


def test_migrate_wait_gives_up_after_its_timeout_saying_the_migration_goes_on():
    clock = iter(range(0, 10_000, 100))
    stuck = State("m-3", "job-1", phase="preparing")
    code, _, err = run(migrate_with, FakeHandle({"migrate_job": "m-3", "migration": lambda mid: stuck}), "migrate", "job-1",
                       "--wait", "--wait-timeout", "250", sleep=lambda s: None, now=lambda: float(next(clock)))
    assert code == 1 and "still preparing after 250s" in err


def test_migrate_refused_exits_2():
    code, _, err = run(migrate_with, FakeHandle({"migrate_job": MigrationError("job-1 is already migrating (m-1)")}),
                       "migrate", "job-1")
    assert code == 2 and "already migrating" in err


def test_migrations_table_fits_80_columns_with_node_names_and_ages():
    long_id = "m-" + "9" * 30
    states = [State("m-1", "job-1", strategy="stop_then_start", phase="stopping_source", source_node="aaaa1111",
                    target_node="bbbb2222", started_at=NOW - 42),
              State(long_id, "a-very-long-job-identifier", phase="starting_target", source_node="cccc",
                    target_node=None, started_at=NOW - 4000)]
    h = FakeHandle({"migrations": states, "records": [Rec("aaaa1111", "gpu-cuda-workstation"), Rec("bbbb2222", "cpu-only-box")]})
    code, out, _ = run(migrations_with, h, "migrations", now=lambda: NOW)
    lines = out.splitlines()
    assert code == 0 and max(map(len, lines)) <= 80
    assert lines[0].split() == ["ID", "JOB", "STRATEGY", "PHASE", "SOURCE", "->", "TARGET", "AGE"]
    assert lines[1].split() == ["m-1", "job-1", "stop_then_start", "stopping_source", "gpu-cuda", "->", "cpu-only", "42s"]
    assert lines[2].split()[-3:] == ["->", "-", "67m"]
    code, out, _ = run(migrations_with, h, "migrations", "--json", now=lambda: NOW)
    rows = json.loads(out)
    assert rows[0]["source_name"] == "gpu-cuda-workstation" and rows[0]["age_s"] == 42.0 and rows[1]["target_node"] is None
    assert format_migrations(migration_rows([], NOW)) == "no migrations"


def test_interrupt_sends_an_absolute_deadline_from_seconds_from_now():
    notice = {"node_id": "f" * 56, "kind": "spot-interruption", "deadline": NOW + 40, "noticed_at": NOW,
              "drain": {**DRAIN, "interruption": "spot-interruption", "deadline": NOW + 10}}
    h = FakeHandle({"handle_node_interruption": notice})
    code, out, _ = run(interrupt_with, h, "interrupt", "spot-1", "--deadline", "40", now=lambda: NOW)
    assert code == 0
    assert h.calls == [("handle_node_interruption", ("spot-1",), {"kind": "spot-interruption", "deadline": NOW + 40})]
    lines = out.splitlines()
    assert lines[0] == "interrupt spot-1: spot-interruption, deadline in 40s"
    assert lines[1:3] == ["drain spot-1 (ffffffffffff): waiting", "  spot-interruption, deadline in 10s, force, strategy handover"]
    h = FakeHandle({"handle_node_interruption": {**notice, "kind": "rebalance", "deadline": None}})
    code, out, _ = run(interrupt_with, h, "interrupt", "n", "--kind", "rebalance", now=lambda: NOW)
    assert h.calls[0][2] == {"kind": "rebalance", "deadline": None} and "rebalance, no deadline" in out
    code, _, err = run(interrupt_with, FakeHandle(), "interrupt", "n", "--deadline", "-1")
    assert code == 2 and "--deadline" in err

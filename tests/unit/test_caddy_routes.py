"""Edge routes (issue 17): ``route_plan`` / ``caddy_config`` (pure) and ``RouteWatcher`` over a fake
handle and a fake Caddy admin, and ``fabric routes``' argument checks. The real Caddy is in
tests/integration/test_routes_caddy.py."""

from __future__ import annotations

import argparse
import json
import threading
from types import SimpleNamespace

import pytest

from fabric.cli import build_parser
from fabric.cli.routes_cmd import run_routes
from fabric.core.jobs.book import Binding, JobStatus
from fabric.core.jobs.states import JobState
from fabric.core.settings_routes import RouteSettings
from fabric.runtime.routes import (
    CaddyLoadError, RouteNode, RouteWatcher, caddy_config, describe, post_load, route_plan, write_config,
)

ROUTES = {"web.example": RouteSettings(job="web", port=18080)}


def job(job_id="job-1", name="web", state=JobState.RUNNING, node="n1", bundle=None, replica=0):
    return JobStatus(job_id, name, state, bundle, replica, Binding(node, f"{replica}-abc") if node else None)


def node(node_id="n1", address="127.0.0.2", ports=frozenset({"18080/tcp"})):
    return RouteNode(node_id, address, ports)


def _routes(cfg):
    return cfg["apps"]["http"]["servers"]["fabric_routes"]["routes"]


def _dials(cfg):
    return {r["match"][0]["host"][0]: r["handle"][0]["upstreams"][0]["dial"] for r in _routes(cfg) if "match" in r}


# -- the pure config ---------------------------------------------------------------------------------
def test_one_route_proxies_its_host_to_the_jobs_node_and_port():
    cfg = caddy_config(ROUTES, [job()], [node()], admin="127.0.0.1:3019", listen="127.0.0.1:18443")
    assert cfg["admin"] == {"listen": "127.0.0.1:3019", "config": {"persist": False}}
    server = cfg["apps"]["http"]["servers"]["fabric_routes"]
    assert server["listen"] == ["127.0.0.1:18443"]
    assert server["automatic_https"] == {"disable": True}
    first, last = server["routes"]
    assert first == {"match": [{"host": ["web.example"]}], "terminal": True,
                     "handle": [{"handler": "reverse_proxy", "upstreams": [{"dial": "127.0.0.2:18080"}]}]}
    assert last["handle"][0]["handler"] == "static_response" and last["handle"][0]["status_code"] == 404
    assert "match" not in last  # the catch-all is last: every other host is a 404
    json.dumps(cfg)  # plain JSON


def test_the_upstream_follows_the_binding():
    before = caddy_config(ROUTES, [job(node="n1")], [node("n1", "127.0.0.2"), node("n2", "127.0.0.3")])
    after = caddy_config(ROUTES, [job(node="n2")], [node("n1", "127.0.0.2"), node("n2", "127.0.0.3")])
    assert _dials(before) == {"web.example": "127.0.0.2:18080"}
    assert _dials(after) == {"web.example": "127.0.0.3:18080"}


def test_a_route_by_job_id_wins_over_names_and_ipv6_is_bracketed():
    jobs = [job("job-1", node="n1"), job("job-2", name="job-1", node="n2")]
    plan = route_plan({"a.example": RouteSettings(job="job-1", port=18080)}, jobs,
                      [node("n1", "::1"), node("n2", "127.0.0.3")])
    assert [(u.host, u.job_id, u.dial) for u in plan.routed] == [("a.example", "job-1", "[::1]:18080")]


@pytest.mark.parametrize("jobs, nodes, why", [
    ([], [node()], "no job named 'web'"),
    ([job(state=JobState.RECOVERING, node=None)], [node()], "no running instance (state recovering)"),
    ([job(state=JobState.STOPPED)], [node()], "no running instance (state stopped)"),
    ([job()], [], "no known address"),
    ([job()], [node(address=None)], "no known address"),
    ([job()], [node(ports=frozenset({"9000/tcp"}))], "does not declare it"),
    ([job()], [node(ports=frozenset({"18080/udp"}))], "does not declare it"),
    ([job("job-1"), job("job-2", node="n2")], [node(), node("n2")], "2 running jobs are named 'web'"),
    ([job("job-1", bundle="b1"), job("job-2", node="n2", bundle="b2")], [node(), node("n2")], "name one by its job id"),
])
def test_unroutable_routes_are_left_out_and_say_why(jobs, nodes, why):
    routes = {**ROUTES, "ok.example": RouteSettings(job="other", port=7000)}
    jobs = [*jobs, job("job-9", name="other", node="n9")]
    nodes = [*nodes, node("n9", "127.0.0.9", frozenset({"7000/tcp"}))]
    plan = route_plan(routes, jobs, nodes)
    assert why in plan.unroutable["web.example"]
    assert [u.host for u in plan.routed] == ["ok.example"]
    assert _dials(plan.config()) == {"ok.example": "127.0.0.9:7000"}
    assert any(line.startswith("web.example unroutable: ") for line in describe(plan))


def test_unknown_ports_are_not_checked():
    plan = route_plan(ROUTES, [job()], [RouteNode("n1", "127.0.0.2", None)])
    assert [u.dial for u in plan.routed] == ["127.0.0.2:18080"]


def test_a_bundles_replicas_route_to_the_primary_else_the_backup():
    primary, backup = job("job-p", bundle="b1", replica=0, node="n1"), job("job-b", bundle="b1", replica=1, node="n2")
    nodes = [node("n1", "127.0.0.2"), node("n2", "127.0.0.3")]
    assert _dials(caddy_config(ROUTES, [backup, primary], nodes)) == {"web.example": "127.0.0.2:18080"}
    down = job("job-p", bundle="b1", replica=0, node=None, state=JobState.RECOVERING)
    assert _dials(caddy_config(ROUTES, [down, backup], nodes)) == {"web.example": "127.0.0.3:18080"}


def test_a_migrating_job_routes_to_its_source_until_the_binding_moves():
    assert _dials(caddy_config(ROUTES, [job(state=JobState.MIGRATING)], [node()])) == {"web.example": "127.0.0.2:18080"}


def test_hosts_are_in_sorted_order_whatever_the_mapping_order():
    routes = {h: RouteSettings(job="web", port=18080) for h in ("c.example", "a.example", "b.example")}
    assert [r["match"][0]["host"][0] for r in _routes(caddy_config(routes, [job()], [node()])) if "match" in r] == \
        ["a.example", "b.example", "c.example"]


def test_write_config_is_atomic_json(tmp_path):
    target = tmp_path / "sub" / "caddy.json"
    write_config(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in target.parent.iterdir()] == ["caddy.json"]  # no temporary left behind


# -- the watcher, over a fake handle and a fake admin ------------------------------------------------
class FakeHandle:
    def __init__(self, jobs, nodes, routes=None):
        self.jobs_, self.nodes_ = jobs, nodes
        self.settings = SimpleNamespace(routes=routes or ROUTES)
        self.reads = 0

    def settings_in_force(self):
        return self.settings


def bindings(h):
    h.reads += 1
    if isinstance(h.jobs_, Exception):
        raise h.jobs_
    return list(h.jobs_), list(h.nodes_)


class FakeAdmin:
    def __init__(self, fail=0):
        self.loaded: list[tuple[str, dict]] = []
        self.fail = fail

    def __call__(self, admin, config):
        if self.fail:
            self.fail -= 1
            raise CaddyLoadError(admin, "unreachable (refused)")
        self.loaded.append((admin, json.loads(json.dumps(config))))


def test_refresh_writes_and_loads_only_on_a_change(tmp_path):
    h, admin = FakeHandle([job(node="n1")], [node("n1", "127.0.0.2"), node("n2", "127.0.0.3")]), FakeAdmin()
    path = tmp_path / "caddy.json"
    w = RouteWatcher(h, path, "127.0.0.1:3019", bindings=bindings, post=admin)
    assert w.refresh() is True
    assert _dials(json.loads(path.read_text())) == {"web.example": "127.0.0.2:18080"}
    assert [a for a, _ in admin.loaded] == ["127.0.0.1:3019"]
    assert w.refresh() is False and w.refresh() is False  # same bindings: nothing rewritten, nothing reloaded
    assert (w.writes, w.loads, len(admin.loaded)) == (1, 1, 1)
    h.jobs_ = [job(node="n2")]  # the job recovered elsewhere
    assert w.refresh() is True
    assert _dials(json.loads(path.read_text())) == {"web.example": "127.0.0.3:18080"}
    assert _dials(admin.loaded[-1][1]) == {"web.example": "127.0.0.3:18080"}
    assert (w.writes, w.loads) == (2, 2)


def test_refresh_without_reload_writes_only(tmp_path):
    admin = FakeAdmin()
    w = RouteWatcher(FakeHandle([job()], [node()]), tmp_path / "c.json", bindings=bindings, post=admin)
    assert w.refresh(reload=False) is True and admin.loaded == []
    assert w.plan is not None and [u.host for u in w.plan.routed] == ["web.example"]


def test_routes_default_to_the_settings_in_force(tmp_path):
    routes = {"other.example": RouteSettings(job="web", port=18080)}
    w = RouteWatcher(FakeHandle([job()], [node()], routes=routes), tmp_path / "c.json", bindings=bindings, post=FakeAdmin())
    w.refresh()
    assert _dials(w.config) == {"other.example": "127.0.0.2:18080"}


def test_a_failed_load_is_reported_and_retried_on_the_next_poll(tmp_path):
    h, admin, lines = FakeHandle([job()], [node()]), FakeAdmin(fail=2), []
    w = RouteWatcher(h, tmp_path / "c.json", bindings=bindings, post=admin, report=lines.append, interval_s=0.001)
    w.run(max_polls=4)
    assert len(admin.loaded) == 1 and w.loads == 1 and w.writes == 1
    assert w.last_error is None
    assert sum("CaddyLoadError" in line for line in lines) == 1  # the same failure is told once
    assert "web.example -> 127.0.0.2:18080 (job job-1)" in lines


def test_a_failed_read_is_reported_and_the_watcher_keeps_polling(tmp_path):
    h, admin, lines = FakeHandle(RuntimeError("scheduler restarting"), [node()]), FakeAdmin(), []
    w = RouteWatcher(h, tmp_path / "c.json", bindings=bindings, post=admin, report=lines.append, interval_s=0.001)
    w.run(max_polls=2)
    assert h.reads == 2 and admin.loaded == [] and "scheduler restarting" in (w.last_error or "")
    h.jobs_ = [job()]
    w.run(max_polls=1)
    assert len(admin.loaded) == 1 and w.last_error is None


def test_start_and_stop_poll_in_a_thread(tmp_path):
    h, admin = FakeHandle([job(node="n1")], [node("n1", "127.0.0.2"), node("n2", "127.0.0.3")]), FakeAdmin()
    seen = threading.Event()

    def counting(handle):
        out = bindings(handle)
        if handle.reads >= 3:
            seen.set()
        return out

    w = RouteWatcher(h, tmp_path / "c.json", bindings=counting, post=admin, interval_s=0.01).start()
    try:
        assert seen.wait(10)
        h.jobs_ = [job(node="n2")]
        reads = h.reads
        deadline = threading.Event()
        while len(admin.loaded) < 2 and not deadline.wait(0.01):
            if h.reads > reads + 500:
                break
    finally:
        w.stop()
    assert _dials(admin.loaded[-1][1]) == {"web.example": "127.0.0.3:18080"}


def test_a_watcher_refuses_a_bad_interval(tmp_path):
    for bad in (0, -1, True, "1"):
        with pytest.raises(ValueError):
            RouteWatcher(FakeHandle([], []), tmp_path / "c.json", interval_s=bad)


def test_post_load_to_nothing_is_a_caddy_load_error():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(CaddyLoadError) as info:
        post_load(f"127.0.0.1:{port}", {"apps": {}}, timeout_s=2)
    assert "unreachable" in str(info.value) and info.value.admin == f"127.0.0.1:{port}"


# -- the command's arguments -------------------------------------------------------------------------
def test_the_command_is_registered_with_its_options():
    args = build_parser().parse_args(["routes", "--caddy", "c.json"])
    assert (args.caddy, args.watch, args.admin, args.listen, args.interval) == ("c.json", False, "127.0.0.1:2019", ":8080", 0.5)
    assert args.func is run_routes
    with pytest.raises(SystemExit):
        build_parser().parse_args(["routes"])  # --caddy is required


@pytest.mark.parametrize("extra, field", [(["--admin", "nohost"], "--admin"), (["--admin", "h:99999"], "--admin"),
                                          (["--listen", "a b"], "--listen"), (["--interval", "0"], "--interval")])
def test_bad_arguments_exit_2_before_connecting(extra, field, capsys):
    args = build_parser().parse_args(["routes", "--caddy", "c.json", *extra])
    assert run_routes(args) == 2
    assert field in capsys.readouterr().err


def test_a_bad_settings_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "s.yaml"
    bad.write_text("routes:\n  Bad_Host: {job: web, port: 80}\n")
    args = argparse.Namespace(caddy=str(tmp_path / "c.json"), watch=False, admin="127.0.0.1:2019", listen=":8080",
                              interval=0.5, settings=str(bad), address="auto")
    assert run_routes(args) == 2
    assert "routes.Bad_Host" in capsys.readouterr().err

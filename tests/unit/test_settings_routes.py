"""``routes:`` in the settings (issue 17 edge routes): host names, job names and ports are checked
at the edge, each problem naming its field; whether the job declares the port is a live matter."""

from __future__ import annotations

import pytest

from fabric.core.errors import SettingsError
from fabric.core.settings import FabricSettings
from fabric.core.settings_routes import RouteSettings, host_problem


def _paths(data: dict) -> dict[str, str]:
    with pytest.raises(SettingsError) as info:
        FabricSettings.load(data)
    return {p.path: p.message for p in info.value.problems}


def test_default_has_no_routes_and_a_route_loads():
    assert FabricSettings.load({}).routes == {}
    s = FabricSettings.load({"routes": {"channel.example": {"job": "encode", "port": 1935},
                                        "*.apps.example": {"job": "job-1234abcd", "port": 18080}}})
    assert s.routes["channel.example"] == RouteSettings(job="encode", port=1935)
    assert s.routes["*.apps.example"].port == 18080


def test_routes_survive_a_json_round_trip():
    s = FabricSettings.load({"routes": {"a.example": {"job": "web", "port": 80}}})
    assert FabricSettings.load(s.model_dump(mode="json")) == s


@pytest.mark.parametrize("host", ["Channel.example", "bad_host", "-a.example", "a-.example", "a..example", ".a",
                                  "a.", "x" * 64 + ".example", "10.0.0.1", "a b", "caf\u00e9.example", "", "*.",
                                  ("a." * 127) + "ab"])
def test_bad_host_names_are_refused_naming_the_route(host):
    problems = _paths({"routes": {host: {"job": "web", "port": 80}}})
    assert any(path.startswith("routes.") for path in problems), problems
    assert host_problem(host) is not None


@pytest.mark.parametrize("host", ["a", "a.example", "xn--caf-dma.example", "a-b.c-d.example", "*.example", "x" * 63])
def test_good_host_names(host):
    assert host_problem(host) is None


def test_every_route_problem_at_once_with_its_field():
    problems = _paths({"routes": {"a.example": {"job": "", "port": 0}, "b.example": {"job": "web", "port": 65536},
                                  "c.example": {"job": " web", "port": 80}, "d.example": {"port": 80},
                                  "e.example": {"job": "web", "port": 80, "proto": "udp"}}})
    assert {"routes.a.example.job", "routes.a.example.port", "routes.b.example.port", "routes.c.example.job",
            "routes.d.example.job", "routes.e.example.proto"} <= set(problems)


def test_a_port_is_an_integer_not_a_string_or_bool():
    assert "routes.a.example.port" in _paths({"routes": {"a.example": {"job": "web", "port": "80/tcp"}}})
    assert "routes.a.example.port" in _paths({"routes": {"a.example": {"job": "web", "port": 1.5}}})


def test_routes_must_be_a_mapping():
    assert "routes" in _paths({"routes": [{"job": "web", "port": 80}]})

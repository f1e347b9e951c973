"""A registration, report or heartbeat with a value of the wrong type in any field is refused with a
``RegistrationError`` naming that field, never a ``TypeError``: every path into a good message,
each given a number, a string, a list of the wrong things, a dict or None."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fabric.core.capabilities import NodeCapabilities, names
from fabric.core.errors import RegistrationError
from fabric.core.messages import read_heartbeat, read_registration, read_report
from fabric.testing.fuzz import paths, with_value

NODE = "a" * 56
GPU = {"index": 0, "vendor": "nvidia", "model": "NVIDIA GeForce RTX 4070", "discrete": True, "cuda": True,
       "vram_mib": 12282, "bus": "pcie", "encoders": ["h264_nvenc", "hevc_nvenc"], "decoders": ["h264"]}
CAPS = NodeCapabilities(name="box", cpu_logical=4, cpu_physical=2, cpu_usable=4, memory_mib=8192, roles=["relay"],
                        gpus=[GPU], limitations={"max_concurrent_tasks": 2, "notes": ["a note"]},
                        ffmpeg={"listed": ["libx264", "h264_nvenc"], "working": ["libx264"]}).model_dump(mode="json")
UTIL = {"cpu_percent": 1.0, "memory_percent": 40.0, "gpus": [{"index": 0, "gpu_percent": 50.0, "encoder_percent": None}]}
WRONG = (1.5, 3, -1, True, None, "h264", "", [1.0], [[1]], [None], {"a": 1}, [{"a": 1}], math.nan)


def outcome(read: Any) -> str:
    """``ok``, or the field a ``RegistrationError`` named; any other exception fails the test."""
    try:
        read()
    except RegistrationError as exc:
        assert exc.field, exc
        return str(exc.field)
    return "ok"


@pytest.mark.parametrize("path", paths(CAPS), ids=lambda p: ".".join(map(str, p)))
def test_a_wrong_type_in_any_capabilities_field_is_refused_naming_it(path: tuple) -> None:
    refused = 0
    for value in WRONG:
        doc = with_value(CAPS, path, value)
        for read in (lambda: read_registration(NODE, doc), lambda: read_report(NODE, doc, ["x"])):
            field = outcome(read)
            assert field == "ok" or field.startswith("capabilities"), (path, value, field)
            refused += field != "ok"
    assert refused, path  # every field refuses some wrong type


@pytest.mark.parametrize("path", paths(UTIL), ids=lambda p: ".".join(map(str, p)))
def test_a_wrong_type_in_any_utilization_field_is_refused_naming_it(path: tuple) -> None:
    refused = 0
    for value in WRONG:
        doc = with_value(UTIL, path, value)
        for read in (lambda: read_heartbeat(NODE, doc), lambda: read_registration(NODE, CAPS, doc)):
            field = outcome(read)
            assert field == "ok" or field.startswith("utilization"), (path, value, field)
            refused += field != "ok"
    assert refused, path


@pytest.mark.parametrize("field", ["roles", "gpus.0.encoders", "gpus.0.decoders"])
@pytest.mark.parametrize("value", [1.5, 3, True, "relay", [[1]], [None]])
def test_names_fields_refuse_a_scalar_a_string_or_a_list_of_other_things(field: str, value: Any) -> None:
    path = tuple(int(p) if p.isdigit() else p for p in field.split("."))
    with pytest.raises(RegistrationError) as caught:
        read_registration(NODE, with_value(CAPS, path, value))
    assert caught.value.field == f"capabilities.{field}"


def test_names_keeps_a_list_tuple_or_set_of_strings() -> None:
    assert names(["b", "a"], "codec") == ["b", "a"]
    assert sorted(names({"x", "y"}, "role")) == ["x", "y"]
    with pytest.raises(ValueError, match="a list of codec names, got str"):
        names("h264", "codec")
    with pytest.raises(ValueError, match="with a int among them"):
        names(["a", 1], "codec")


def _events() -> list[dict[str, Any]]:
    from fabric.core.events import NodeCordoned, NodeDegraded, NodeFlapHeld, NodeLost

    base = dict(node_id=NODE, name="box", at=100.0, stimulus_id="s")
    return [e.model_dump(mode="json") for e in (NodeLost(**base, reason="x"), NodeDegraded(**base, reasons=("gpu vanished: X",)),
                                                NodeFlapHeld(**base, until=700.0, toggles=3), NodeCordoned(**base))]


@pytest.mark.parametrize("event", _events(), ids=lambda e: e["kind"])
def test_a_wrong_type_in_any_field_of_an_event_is_refused_naming_it(event: dict[str, Any]) -> None:
    from fabric.core.messages import read_events

    for path in paths(event):
        refused = 0
        for value in WRONG:
            field = outcome(lambda: read_events([with_value(event, path, value)], now=100.0))
            assert field == "ok" or field.startswith("events[0]") or field.startswith("events.0"), (path, value, field)
            refused += field != "ok"
        assert refused, path

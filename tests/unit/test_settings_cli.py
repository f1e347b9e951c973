"""``fabric settings validate | schema | example``: run in-process through the CLI's ``main``. No Ray."""

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from fabric.cli import main
from fabric.cli.settings_cmd import example_text
from fabric.core.settings import FabricSettings

THREE_MISTAKES = textwrap.dedent("""\
    # a settings file with three mistakes
    health:
      ofline_after_s: 90
      heartbeat_interval_s: 30
    scaling:
      group_size: many
    drain:
      timeout_s: -10
    """)


def _run(capsys, *argv):
    code = main(["settings", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_validate_reports_all_three_mistakes_with_their_lines(tmp_path, capsys):
    f = tmp_path / "fabric.yaml"
    f.write_text(THREE_MISTAKES)
    code, out, _ = _run(capsys, "validate", str(f))
    assert code == 2
    lines = out.splitlines()
    assert lines[0] == f"{f}:3: health.ofline_after_s: unknown key `ofline_after_s` (did you mean `offline_after_s`?)"
    assert lines[1].startswith(f"{f}:6: scaling.group_size: ") and "valid integer" in lines[1]
    assert lines[2].startswith(f"{f}:8: drain.timeout_s: ") and "greater than 0" in lines[2]
    assert lines[3:] == [f"{f}: invalid, 3 problems"]


def test_validate_json_lists_the_problems(tmp_path, capsys):
    f = tmp_path / "fabric.yaml"
    f.write_text(THREE_MISTAKES)
    code, out, _ = _run(capsys, "validate", "--json", str(f))
    assert code == 2
    problems = json.loads(out)
    assert [(p["line"], p["path"]) for p in problems] == [(3, "health.ofline_after_s"), (6, "scaling.group_size"), (8, "drain.timeout_s")]
    assert problems[0]["suggestion"] == "offline_after_s" and problems[1]["suggestion"] is None
    assert all({"line", "path", "message", "suggestion"} <= set(p) for p in problems)


def test_validate_a_valid_file_exits_0(tmp_path, capsys):
    f = tmp_path / "fabric.yaml"
    f.write_text("health:\n  offline_after_s: 120\n")
    assert _run(capsys, "validate", str(f))[:2] == (0, f"{f}: valid\n")
    assert _run(capsys, "validate", "--json", str(f))[:2] == (0, "[]\n")


def test_validate_an_unreadable_or_broken_file_exits_2(tmp_path, capsys):
    missing = tmp_path / "nope.yaml"
    code, out, _ = _run(capsys, "validate", str(missing))
    assert code == 2 and out.startswith(f"{missing}: cannot read settings file")
    broken = tmp_path / "broken.yaml"
    broken.write_text("health: [1,\n")
    code, out, _ = _run(capsys, "validate", str(broken))
    assert code == 2 and out.startswith(f"{broken}:2: not valid YAML")


def test_schema_is_json_with_the_top_level_fields(tmp_path, capsys):
    code, out, _ = _run(capsys, "schema")
    assert code == 0
    schema = json.loads(out)
    assert set(schema["properties"]) == set(FabricSettings.model_fields)
    target = tmp_path / "schema.json"
    assert _run(capsys, "schema", "--output", str(target))[:2] == (0, "")
    assert json.loads(target.read_text()) == schema


def test_the_example_validates_against_the_schema(capsys):
    jsonschema = pytest.importorskip("jsonschema")
    _, out, _ = _run(capsys, "schema")
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(example_text()))


def test_example_prints_the_shipped_file(capsys):
    code, out, _ = _run(capsys, "example")
    assert code == 0 and out == example_text()
    assert out == (Path(__file__).resolve().parents[2] / "fabric" / "data" / "fabric.yaml").read_text(encoding="utf-8")
    assert out.startswith("# adaptive-fabric settings")


def test_settings_without_a_subcommand_prints_help(capsys):
    code, out, _ = _run(capsys)
    assert code == 2 and "validate" in out and "schema" in out


def test_show_prints_the_settings_as_a_file_that_loads_back(tmp_path):
    from fabric.cli.settings_cmd import settings_text

    settings = FabricSettings.load({"health": {"offline_after_s": 120}, "routes": {"a.example": {"job": "enc", "port": 80}}})
    f = tmp_path / "shown.yaml"
    f.write_text(settings_text(settings, as_json=False))
    assert FabricSettings.from_yaml(f) == settings
    assert FabricSettings.load(json.loads(settings_text(settings, as_json=True))) == settings


def test_show_says_why_when_it_cannot_connect(capsys):
    """Ray is forbidden in unit tests: ``show`` against an address with nothing there exits 1 (the
    fabric is not up there) with a reason."""
    code, out, err = _run(capsys, "show", "--address", "127.0.0.1:1")
    assert code == 1 and out == "" and "cannot connect" in err

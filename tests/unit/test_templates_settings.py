"""``FabricSettings.templates`` (issue 15, warmth): a template's artifacts are file:// or http(s)://
URIs, every bad one a ``SettingsError`` problem naming its place; ``template_artifacts`` is what
warmth counts (the template's own name when the settings list none, as the spare reconcile does)."""

from __future__ import annotations

import pytest

from fabric.core.errors import SettingsError
from fabric.core.settings import FabricSettings, template_artifacts
from fabric.core.spares.reconcile import warm_units

GOOD = ("file:///srv/models/encoder.bin", "http://127.0.0.1:8080/a/weights.tar", "https://example.org/x/y.onnx")


def problems(data) -> list[tuple[str, str]]:
    with pytest.raises(SettingsError) as err:
        FabricSettings.load(data)
    return [(p.code, p.path) for p in err.value.problems]


def test_templates_load_and_template_artifacts_reads_them():
    s = FabricSettings.load({"templates": {"encoder": {"artifacts": list(GOOD)}, "bare": {}}})
    assert s.templates["encoder"].artifacts == GOOD
    assert template_artifacts(s, "encoder") == GOOD
    assert template_artifacts(s, "bare") == ("bare",)  # an entry without artifacts: the name itself
    assert template_artifacts(s, "unlisted") == ("unlisted",)
    assert template_artifacts(s, None) == () and template_artifacts(s, "") == ()
    assert FabricSettings().templates == {}


def test_template_artifacts_agrees_with_the_spare_reconcile():
    s = FabricSettings.load({"templates": {"encoder": {"artifacts": list(GOOD[:2])}}})
    table = {name: t.artifacts for name, t in s.templates.items()}
    for t in ("encoder", "other"):
        assert template_artifacts(s, t) == warm_units([t], table)


@pytest.mark.parametrize("uri", [
    "s3://bucket/key.bin", "ftp://host/file", "/srv/plain/path.bin", "file://relative/x.bin", "file:///",
    "file:///srv/dir/", "file:///srv/..", "http://", "http:///no-host.bin", "http://host", "http://host/", "",
])
def test_a_bad_artifact_uri_names_its_index(uri):
    assert ("value_error" if uri else "string_too_short", "templates.encoder.artifacts.1") in problems(
        {"templates": {"encoder": {"artifacts": [GOOD[0], uri]}}})


def test_every_problem_at_once_with_the_other_sections():
    got = problems({"templates": {"encoder": {"artifacts": ["s3://b/k", GOOD[0], 7]}, "dec": {"images": []}},
                    "hot_spares": [{"pool": "nowhere"}]})
    assert ("value_error", "templates.encoder.artifacts.0") in got
    assert ("string_type", "templates.encoder.artifacts.2") in got
    assert ("extra_forbidden", "templates.dec.images") in got
    assert ("unknown_pool", "hot_spares.0.pool") in got  # the semantic checks still ran


def test_templates_must_be_a_mapping_of_mappings():
    assert [p for p in problems({"templates": ["encoder"]}) if p[1].startswith("templates")]
    assert [p for p in problems({"templates": {"encoder": {"artifacts": "file:///x/y.bin"}}}) if p[1].startswith("templates.encoder")]


def test_templates_from_yaml(tmp_path):
    f = tmp_path / "fabric.yaml"
    f.write_text("templates:\n  encoder:\n    artifacts: [file:///srv/models/encoder.bin]\n")
    assert template_artifacts(FabricSettings.from_yaml(f), "encoder") == ("file:///srv/models/encoder.bin",)


def test_templates_survive_a_dump_and_load():
    s = FabricSettings.load({"templates": {"encoder": {"artifacts": list(GOOD)}}})
    again = FabricSettings.load(s.model_dump(mode="json"))
    assert again == s and again.differing_fields(FabricSettings()) == ["templates"]

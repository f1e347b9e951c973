"""``fabric.core.settings_check``: every problem of a settings file, each at its line, with a hint."""

import textwrap

from fabric.core.errors import SettingsProblem
from fabric.core.settings_check import check_settings_file, check_settings_text, locate


def _check(text: str):
    return check_settings_text(textwrap.dedent(text).lstrip("\n"), "f.yaml")


def test_a_valid_document_has_no_problems():
    assert _check("health:\n  offline_after_s: 120\n") == []
    assert _check("") == []  # an empty file is the defaults


def test_every_problem_comes_with_its_line_and_list_indices():
    problems = _check("""
        pools:
          - name: default
            tiers:
              - name: fixed
              - name: burst
                packing: bin_pack
                nmae: x
        health:
          heartbeat_interval_s: -5
        """)
    found = [(q.line, q.path, q.suggestion) for q in problems]
    assert (6, "pools[0].tiers[1].packing", "binpack") in found
    assert (7, "pools[0].tiers[1].nmae", "name") in found
    assert (9, "health.heartbeat_interval_s", None) in found
    assert [q.line for q in problems] == sorted(q.line for q in problems)


def test_an_unknown_key_is_matched_against_its_own_models_fields():
    (q,) = _check("scaling:\n  burst_queue_dept: 3\n")
    assert (q.line, q.path, q.code, q.suggestion) == (2, "scaling.burst_queue_dept", "extra_forbidden", "burst_queue_depth")
    assert "unknown key" in q.message
    (q,) = _check("halth: {}\n")
    assert (q.line, q.path, q.suggestion) == (1, "halth", "health")
    (q,) = _check("health:\n  zzzzzz: 1\n")
    assert q.suggestion is None  # nothing close: no guess


def test_a_misspelt_tier_or_literal_is_suggested():
    (q,) = _check("operations:\n  enc:\n    min_tier: gpu_cdua\n")
    assert (q.line, q.path, q.suggestion) == (3, "operations.enc.min_tier", "gpu_cuda")


def test_a_route_host_with_dots_is_found_whole():
    (q,) = _check("routes:\n  a.example: {job: enc, port: 99999}\n")
    assert (q.line, q.path) == (2, "routes.a.example.port")
    assert "99999" in q.message


def test_a_missing_field_points_at_its_parent():
    (q,) = _check("hot_spares:\n  - target_count: 1\n")
    assert (q.line, q.path, q.code) == (2, "hot_spares[0].pool", "missing")


def test_semantic_problems_have_lines_too():
    problems = _check("""
        pools:
          - name: a
          - name: a
        """)
    assert [(q.line, q.path, q.code) for q in problems] == [(3, "pools[1].name", "duplicate_pool")]


def test_file_problems_have_no_path_and_a_line_when_the_parser_says(tmp_path):
    (q,) = check_settings_file(tmp_path / "missing.yaml")
    assert (q.line, q.path, q.code) == (None, "", "unreadable")
    bad = tmp_path / "bad.yaml"
    bad.write_text("health:\n  offline_after_s: [1,\n")
    (q,) = check_settings_file(bad)
    assert q.code == "bad_yaml" and q.line == 3 and "\n" not in q.message


def test_locate_keeps_a_path_that_is_not_in_the_document():
    import yaml

    root = yaml.compose("health: {}\n", Loader=yaml.SafeLoader)
    q = locate(root, SettingsProblem("x", "pools.0.tiers.1.name", "m"))
    assert (q.line, q.path) == (1, "pools[0].tiers[1].name")

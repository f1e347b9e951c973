"""The ``migration:``, ``rebalance:`` and ``drain:`` settings sections (issue 16): their
defaults, every field documented, every bad value a ``SettingsError`` problem naming its field,
and the old names of the shared settings pieces still importable from ``fabric.core.settings``."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from fabric.core import settings_moves
from fabric.core.errors import SettingsError
from fabric.core.settings import FabricSettings


def problems(data) -> list[tuple[str, str]]:
    with pytest.raises(SettingsError) as err:
        FabricSettings.load(data)
    return [(p.code, p.path) for p in err.value.problems]


def test_defaults_are_seed_000s():
    s = FabricSettings.load()
    m = s.migration
    assert (m.place_s, m.prepare_s, m.ready_s, m.cut_s, m.resume_s, m.stop_source_s, m.start_target_s) == (
        30, 120, 30, 30, 30, 30, 120)
    assert (m.default_strategy, m.close_grace_s) == ("stop_then_start", 5)
    r = s.rebalance
    assert (r.enabled, r.max_concurrent, r.cooldown_s, r.strategy, r.settle_s) == (True, 1, 600, None, 2.0)
    d = s.drain
    assert (d.timeout_s, d.spot_drain_s, d.rebalance_drain_s, d.interruption_margin_s) == (300, 90, 300, 30)
    assert FabricSettings() == s


def test_sections_load_from_yaml(tmp_path):
    f = tmp_path / "fabric.yaml"
    f.write_text("migration: {prepare_s: 5, default_strategy: handover}\n"
                 "rebalance: {enabled: false, max_concurrent: 3, strategy: overlap}\n"
                 "drain: {timeout_s: 12.5, interruption_margin_s: 0}\n")
    s = FabricSettings.from_yaml(f)
    assert (s.migration.prepare_s, s.migration.default_strategy, s.migration.place_s) == (5, "handover", 30)
    assert (s.rebalance.enabled, s.rebalance.max_concurrent, s.rebalance.strategy) == (False, 3, "overlap")
    assert (s.drain.timeout_s, s.drain.interruption_margin_s, s.drain.spot_drain_s) == (12.5, 0, 90)
    assert FabricSettings.load(s.model_dump()) == s
    assert s.differing_fields(FabricSettings()) == ["migration", "rebalance", "drain"]


def test_every_bad_value_is_reported_at_once_naming_its_field():
    got = problems({
        "migration": {"place_s": 0, "cut_s": -1, "start_target_s": float("inf"), "default_strategy": "teleport",
                      "close_grace_s": -0.5, "surprise": 1},
        "rebalance": {"max_concurrent": 0, "cooldown_s": -1, "strategy": "live", "settle_s": float("nan"),
                      "enabled": "perhaps"},
        "drain": {"timeout_s": 0, "spot_drain_s": -3, "rebalance_drain_s": "long", "interruption_margin_s": -1},
    })
    paths = {path for _, path in got}
    assert paths == {
        "migration.place_s", "migration.cut_s", "migration.start_target_s", "migration.default_strategy",
        "migration.close_grace_s", "migration.surprise",
        "rebalance.max_concurrent", "rebalance.cooldown_s", "rebalance.strategy", "rebalance.settle_s",
        "rebalance.enabled",
        "drain.timeout_s", "drain.spot_drain_s", "drain.rebalance_drain_s", "drain.interruption_margin_s",
    }
    assert ("extra_forbidden", "migration.surprise") in got and ("literal_error", "rebalance.strategy") in got


def test_a_bad_section_is_reported_beside_a_semantic_problem_elsewhere():
    got = problems({"drain": {"timeout_s": -1}, "pools": [{"name": "a"}, {"name": "a"}]})
    assert ("greater_than", "drain.timeout_s") in got and ("duplicate_pool", "pools.1.name") in got


def test_a_section_that_is_not_a_mapping_is_refused():
    assert [path for _, path in problems({"drain": 5, "migration": [1]})] == ["migration", "drain"]


def test_every_field_is_documented_and_strategies_match_the_literal():
    models = [v for v in vars(settings_moves).values()
              if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == settings_moves.__name__]
    assert {m.__name__ for m in models} == {"MigrationSettings", "RebalanceSettings", "DrainSettings"}
    assert [f"{m.__name__}.{n}" for m in models for n, f in m.model_fields.items() if not f.description] == []
    assert settings_moves.STRATEGIES == ("stop_then_start", "overlap", "handover")
    for name in ("migration", "rebalance", "drain"):
        assert FabricSettings.model_fields[name].description


def test_shared_pieces_keep_their_old_import_path():
    from fabric.core import settings, settings_types
    assert settings._Model is settings_types._Model
    assert settings.PositiveSeconds is settings_types.PositiveSeconds
    assert settings.NonNegFloat is settings_types.NonNegFloat
    assert issubclass(settings_moves.DrainSettings, settings._Model)
    with pytest.raises(ValidationError):
        FabricSettings().drain.timeout_s = 1  # frozen like every section

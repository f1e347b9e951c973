"""FabricSettings: zero-config defaults, YAML, and SettingsError listing every problem."""

import math

import pytest

from fabric import ComputeTier, FabricSettings, SettingsError


def codes(err: SettingsError) -> list[tuple[str, str]]:
    return [(p.code, p.path) for p in err.problems]


def test_defaults_are_a_working_fabric():
    s = FabricSettings.load()
    assert [p.name for p in s.pools] == ["default"]
    (tier,) = s.default_pool.tiers
    assert tier.scale_out == "fixed" and tier.provider == "static"
    h = s.health
    assert (h.heartbeat_interval_s, h.offline_after_s, h.drain_grace_s) == (5, 15, 300)
    assert (h.flap_toggles, h.flap_window_s, h.flap_hold_s) == (3, 300, 600)
    assert s.store.kind == "sqlite"
    assert s.problems() == []


def test_seed_002_operations_are_presets():
    s = FabricSettings.load()
    lupine = s.operation("lupine")
    assert lupine.min_tier is ComputeTier.GPU_CUDA and lupine.fallback is False
    assert lupine.effective_floor is ComputeTier.GPU_CUDA
    enc = s.operation("vaapi_encode")
    assert (enc.min_tier, enc.effective_floor) == (ComputeTier.GPU_VAAPI, ComputeTier.CPU_FFMPEG)
    assert s.operation("flac").effective_floor is ComputeTier.RELAY


def test_unknown_operation_lists_known_ones():
    with pytest.raises(KeyError, match="lupine"):
        FabricSettings.load().operation("nope")


def test_every_semantic_problem_is_reported_at_once():
    with pytest.raises(SettingsError) as exc:
        FabricSettings.load({
            "pools": [
                {"name": "a", "tiers": [{"name": "x"}, {"name": "x"}]},
                {"name": "a", "tiers": [{"name": "cloud", "scale_out": "elastic"}]},
            ],
            "operations": {"bad": {"min_tier": "cpu_ffmpeg", "floor": "gpu_cuda", "pool": "nope"}},
            "hot_spares": [{"pool": "ghost"}],
        })
    got = codes(exc.value)
    assert ("duplicate_pool_tier", "pools.0.tiers.1.name") in got
    assert ("multiple_fixed_tiers", "pools.0.tiers") in got
    assert ("duplicate_pool", "pools.1.name") in got
    assert ("elastic_without_shapes", "pools.1.tiers.0.candidate_shapes") in got
    assert ("elastic_without_provider", "pools.1.tiers.0.provider") in got
    assert ("floor_above_min_tier", "operations.bad.floor") in got
    assert ("unknown_pool", "operations.bad.pool") in got
    assert ("unknown_pool", "hot_spares.0.pool") in got


def test_every_structural_problem_is_reported_at_once():
    with pytest.raises(SettingsError) as exc:
        FabricSettings.load({
            "pools": [{"name": "a", "tiers": [{"name": "x", "packing": "weird"}]}],
            "operations": {"o": {"min_tier": "gpu_foo", "num_cpus": math.nan}},
            "health": {"heartbeat_interval_s": -1},
            "typo_field": 1,
        })
    got = {path: code for code, path in codes(exc.value)}
    paths = {p for _, p in codes(exc.value)}
    assert "pools.0.tiers.0.packing" in paths
    assert "operations.o.min_tier" in paths and "operations.o.num_cpus" in paths
    assert "health.heartbeat_interval_s" in paths
    assert "typo_field" in paths
    assert got["typo_field"] == "extra_forbidden"
    assert "pools.0.tiers" not in paths  # the item's problem, not a spurious "too short"
    assert any("gpu_cuda" in p.message for p in exc.value.problems if p.path == "operations.o.min_tier")


def test_elastic_pool_tier_with_shapes_is_valid():
    s = FabricSettings.load({"pools": [{"name": "burst", "tiers": [
        {"name": "fixed"},
        {"name": "local", "scale_out": "elastic", "provider": "local", "max_nodes": 2,
         "candidate_shapes": [{"name": "cpu-box", "tier": "cpu_ffmpeg", "num_cpus": 2, "profile": "cpu-only-box"}]},
    ]}]})
    assert s.pool("burst").tiers[1].candidate_shapes[0].tier is ComputeTier.CPU_FFMPEG
    assert s.pool(None).name == "burst"


def test_spot_defaults_to_interruptible_and_cannot_be_durable():
    s = FabricSettings.load({"pools": [{"name": "p", "tiers": [{"name": "s", "launch_mode": "spot"}]}]})
    assert s.default_pool.tiers[0].effective_reliability == "interruptible"
    with pytest.raises(SettingsError) as exc:
        FabricSettings.load({"pools": [{"name": "p", "tiers": [{"name": "s", "launch_mode": "spot", "reliability": "durable"}]}]})
    assert ("spot_durable", "pools.0.tiers.0.reliability") in codes(exc.value)


def test_offline_timeout_shorter_than_a_heartbeat_is_refused():
    with pytest.raises(SettingsError) as exc:
        FabricSettings.load({"health": {"heartbeat_interval_s": 30, "offline_after_s": 10}})
    assert ("offline_before_heartbeat", "health.offline_after_s") in codes(exc.value)


def test_yaml_round_trip(tmp_path):
    f = tmp_path / "fabric.yaml"
    f.write_text(
        "health:\n  heartbeat_interval_s: 45  # Tailscale DERP latency\n  offline_after_s: 135\n"
        "operations:\n  thumbs:\n    min_tier: gpu_apu\n    floor: cpu_ffmpeg\n"
        "nodes:\n  steamdeck:\n    max_concurrent_tasks: 2\n"
    )
    s = FabricSettings.from_yaml(f)
    assert s.health.heartbeat_interval_s == 45
    assert s.operation("thumbs").effective_floor is ComputeTier.CPU_FFMPEG
    assert "lupine" not in s.operations  # an explicit operations map replaces the presets
    assert s.nodes["steamdeck"].max_concurrent_tasks == 2


def test_yaml_errors_are_settings_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [unclosed\n")
    with pytest.raises(SettingsError) as exc:
        FabricSettings.from_yaml(bad)
    assert exc.value.problems[0].code == "bad_yaml"
    with pytest.raises(SettingsError) as exc:
        FabricSettings.from_yaml(tmp_path / "missing.yaml")
    assert exc.value.problems[0].code == "unreadable"
    with pytest.raises(SettingsError) as exc:
        FabricSettings.load(["not", "a", "mapping"])  # type: ignore[arg-type]
    assert exc.value.problems[0].code == "not_a_mapping"


def test_every_field_is_documented():
    from pydantic import BaseModel

    from fabric.core import settings as mod

    models = [v for v in vars(mod).values() if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == mod.__name__ and not v.__name__.startswith("_")]
    undocumented = [f"{m.__name__}.{n}" for m in models for n, f in m.model_fields.items() if not f.description]
    assert undocumented == []


# -- structural and semantic problems in one report (issue 11) ------------------------------------------
def test_structural_and_semantic_problems_are_reported_together(tmp_path):
    f = tmp_path / "fabric.yaml"
    f.write_text(
        "pools:\n"
        "  - name: a\n"
        "    tiers: [{name: x, packing: sideways}]\n"
        "  - name: a\n"
        "operations:\n"
        "  enc: {min_tier: cpu_ffmpeg, pool: ghost}\n"
    )
    with pytest.raises(SettingsError) as exc:
        FabricSettings.from_yaml(f)
    assert sorted(codes(exc.value)) == [
        ("duplicate_pool", "pools.1.name"),
        ("literal_error", "pools.0.tiers.0.packing"),
        ("unknown_pool", "operations.enc.pool"),
    ]
    assert all(p.message for p in exc.value.problems)


def test_semantic_checks_over_valid_pieces_keep_their_original_paths():
    with pytest.raises(SettingsError) as exc:
        FabricSettings.load({
            "pools": [
                {"name": "bad", "tiers": [{"name": "t", "scale_out": "sideways"}]},
                {"name": "ok"},
                {"name": "two", "tiers": [{"name": "x"}, {"name": 5}, {"name": "x"}]},
            ],
            "operations": {"broken": {"min_tier": "gpu_nope"}, "inverted": {"min_tier": "cpu_ffmpeg", "floor": "gpu_cuda"}},
            "hot_spares": [{"pool": "ok", "target_count": -1}, {"pool": "ghost"}, {"pool": "ok", "exclusive": True}],
            "health": {"heartbeat_interval_s": 30, "offline_after_s": 10},
        })
    got = codes(exc.value)
    assert ("literal_error", "pools.0.tiers.0.scale_out") in got
    assert ("string_type", "pools.2.tiers.1.name") in got
    assert ("duplicate_pool_tier", "pools.2.tiers.2.name") in got  # index 2 in the document, not 1 among the valid ones
    assert ("multiple_fixed_tiers", "pools.2.tiers") in got
    assert ("floor_above_min_tier", "operations.inverted.floor") in got
    assert any(path == "operations.broken.min_tier" for _, path in got)
    assert ("greater_than_equal", "hot_spares.0.target_count") in got
    assert ("unknown_pool", "hot_spares.1.pool") in got
    assert ("exclusive_without_reservation", "hot_spares.2.exclusive") in got
    assert ("offline_before_heartbeat", "health.offline_after_s") in got
    # hot_spares.2 is the first *valid* entry for pool "ok": not a duplicate
    assert ("duplicate_hot_spare_pool", "hot_spares.2.pool") not in got


def test_a_pool_whose_name_cannot_be_read_makes_no_reference_unknown():
    with pytest.raises(SettingsError) as exc:
        FabricSettings.load({
            "pools": [{"name": 7}, {"name": "b"}],
            "operations": {"enc": {"pool": "maybe-7"}},
            "hot_spares": [{"pool": "maybe-7"}],
        })
    got = codes(exc.value)
    assert [path for _, path in got] == ["pools.0.name"]  # pool 0 could be anything: no false unknown_pool


def test_missing_sections_stand_for_their_defaults_beside_a_structural_problem():
    with pytest.raises(SettingsError) as exc:
        FabricSettings.load({"queue_timeout_s": -1, "hot_spares": [{"pool": "default"}, {"pool": "nope"}]})
    assert sorted(codes(exc.value)) == [("greater_than", "queue_timeout_s"), ("unknown_pool", "hot_spares.1.pool")]


def test_differing_fields_names_top_level_fields():
    a = FabricSettings.load({"health": {"heartbeat_interval_s": 1, "offline_after_s": 3}})
    b = FabricSettings.load({"health": {"heartbeat_interval_s": 2, "offline_after_s": 3}, "queue_timeout_s": 5})
    assert a.differing_fields(b) == ["health", "queue_timeout_s"]
    assert a.differing_fields(FabricSettings.load(a.model_dump(mode="json"))) == []


def test_settings_conflict_error_pickles_and_names_the_fields():
    import pickle

    from fabric.core.errors import FabricError, SettingsConflictError

    err = SettingsConflictError(("health", "pools"))
    assert isinstance(err, FabricError)
    assert "health" in str(err) and "pools" in str(err) and "fabric down" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is SettingsConflictError and back.fields == ("health", "pools") and str(back) == str(err)


# -- the file edge is bounded: nothing the parser or the reader does escapes untyped (issue 12) ---------
def _yaml_refusal(tmp_path, data: bytes):
    """The one problem ``from_yaml`` finds in a file holding ``data``. File-level problems carry
    the file's path; a document too deep or too big carries the path where the walk stopped."""
    f = tmp_path / "s.yaml"
    f.write_bytes(data)
    with pytest.raises(SettingsError) as exc:
        FabricSettings.from_yaml(f)
    (problem,) = exc.value.problems
    assert problem.path == str(f) or problem.code in ("too_deep", "too_large")
    return problem, exc.value


@pytest.mark.parametrize("text, cause", [
    ("queue_timeout_s: 0x_\n", ValueError),           # int("", 16) inside PyYAML's resolver
    ("store: {path: 2001-13-01}\n", ValueError),      # "month must be in 1..12"
    ("queue_timeout_s: " + "9" * 5000 + "\n", ValueError),  # past int()'s 4300-digit limit
])
def test_yaml_values_the_parser_cannot_build_are_bad_yaml(tmp_path, text, cause):
    problem, err = _yaml_refusal(tmp_path, text.encode())
    assert problem.code == "bad_yaml" and "cannot be read" in problem.message
    assert isinstance(err.__cause__, cause)


@pytest.mark.parametrize("text", [
    "[" * 5000,
    "{a: " * 3000 + "1" + "}" * 3000,
    "\n".join(" " * i + "a:" for i in range(1000)),
    "a: &a [*a]\n",                                   # contains itself
])
def test_deep_or_self_containing_yaml_is_too_deep(tmp_path, text):
    problem, _ = _yaml_refusal(tmp_path, text.encode())
    assert problem.code == "too_deep"


def test_an_alias_bomb_is_too_large_before_validation(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 6)]
    lines.append("operations: {x: {capabilities: *a5}}")   # a million tags from 60 lines
    problem, _ = _yaml_refusal(tmp_path, "\n".join(lines).encode())
    assert problem.code == "too_large"


def test_non_utf8_bytes_are_not_utf8(tmp_path):
    problem, err = _yaml_refusal(tmp_path, b"queue_timeout_s: 30\nstore: {path: \x8b}\n")
    assert problem.code == "not_utf8" and "byte 34" in problem.message
    assert isinstance(err.__cause__, UnicodeDecodeError)


def test_utf16_with_a_byte_order_mark_is_read(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_bytes("queue_timeout_s: 42\n".encode("utf-16"))
    assert FabricSettings.from_yaml(str(f)).queue_timeout_s == 42


def test_a_file_over_the_size_cap_is_refused_unread(tmp_path):
    problem, _ = _yaml_refusal(tmp_path, b"#" * (1 << 20) + b"\nqueue_timeout_s: 30\n")
    assert problem.code == "too_large"


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    import os
    import threading

    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def load():
        try:
            FabricSettings.from_yaml(fifo)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # the old code blocks in open(): release it, then fail
        with open(fifo, "w"):
            pass
        pytest.fail("from_yaml blocked on a FIFO")
    assert isinstance(outcome[0], SettingsError) and outcome[0].problems[0].code == "unreadable"


def test_a_path_that_is_not_a_path_is_refused():
    with pytest.raises(SettingsError) as exc:
        FabricSettings.from_yaml(5)
    assert exc.value.problems[0].code == "not_a_path"


def test_load_refuses_deep_and_self_containing_documents():
    deep: dict = {}
    for _ in range(5000):
        deep = {"a": deep}
    loop: dict = {"a": None}
    loop["a"] = loop
    for data in ({"nodes": deep}, {"operations": loop}):
        with pytest.raises(SettingsError) as exc:
            FabricSettings.load(data)
        assert [p.code for p in exc.value.problems] == ["too_deep"]
        assert exc.value.problems[0].path.startswith(next(iter(data)))


def test_a_key_too_long_to_print_does_not_break_the_report():
    # the key is refused structurally; the semantic pass over the valid pieces names it too
    with pytest.raises(SettingsError) as exc:
        FabricSettings.load({"operations": {10**5000: {}}})
    assert [p.code for p in exc.value.problems] == ["string_type"]


def test_a_tier_whose_repr_raises_is_a_settings_problem_not_its_exception():
    class Opaque:
        def __repr__(self):
            raise RuntimeError("no repr")  # escaped pydantic out of ComputeTier.parse's message before

    with pytest.raises(SettingsError) as exc:
        FabricSettings.load({"operations": {"x": {"min_tier": Opaque(), "floor": "t" * 10_000}}})
    assert {(p.path, p.code) for p in exc.value.problems} == {("operations.x.min_tier", "value_error"),
                                                              ("operations.x.floor", "value_error")}
    assert all(len(p.message) < 200 for p in exc.value.problems)

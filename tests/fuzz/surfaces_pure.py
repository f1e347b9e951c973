"""Fuzz surfaces over the fabric's pure boundaries, registered into ``fabric.testing.fuzz.SURFACES``.

Settings (YAML text, YAML bytes, ``FabricSettings.load`` over dicts), ``Requirement(**kw)``, the
decorator (``adaptive.remote(**kw)`` and ``.options(**kw)``: decorating only, never ``.remote()``),
and, through ``surfaces_probes``, every probe parser and recorded machines. Imported by
``test_fuzz.py`` and ``scripts/fuzz.py``.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from fabric.runtime.client import adaptive
from fabric.core.errors import RequirementError, SettingsError
from fabric.core.placement import Requirement
from fabric.core.settings import FabricSettings
from fabric.testing.fuzz import Surface, register
from fabric.core.tiers import ComputeTier
from fuzz_values import HUGE_INTS, big_text, digit_strings, json_values, lines_of, mutate, mutations, values

import surfaces_probes  # noqa: F401  - registers the probe surfaces

# -- settings ----------------------------------------------------------------------------------
_RICH_SETTINGS: dict[str, Any] = {
    "pools": [
        {"name": "default", "tiers": [
            {"name": "fixed"},
            {"name": "burst", "provider": "local", "scale_out": "elastic", "max_nodes": 4, "launch_mode": "spot",
             "candidate_shapes": [{"name": "cpu-only-box", "tier": "cpu_ffmpeg", "num_cpus": 4, "capabilities": ["arch:x86_64"]}]},
        ]},
        {"name": "gpu"},
    ],
    "operations": {"enc": {"min_tier": "gpu_vaapi", "floor": "cpu_ffmpeg", "pool": "gpu", "capabilities": ["ffmpeg:h264_vaapi"]}},
    "health": {"heartbeat_interval_s": 1, "offline_after_s": 3},
    "failure": {"max_restarts_per_hour": 2},
    "hot_spares": [{"pool": "default", "target_count": 1, "reserved_for": ["t"], "exclusive": True}],
    "store": {"path": "/tmp/fabric.db"},
    "nodes": {"n1": {"max_concurrent_tasks": 2}},
    "queue_timeout_s": 30,
}
_DOCS = [_RICH_SETTINGS, FabricSettings().model_dump(mode="json")]

# Texts that broke the YAML parser or the loader in the fuzz run, and their relatives.
_YAML_SNIPPETS = [
    "0x_", "a: 0x_", "0o_", "0b_", "a: 2001-13-01", "a: 2001-02-30", "a: 0000-01-01", "a: 2001-12-14t21:59:43.10+99:00",
    "!!binary zz", "a: !!binary '=='", "? [a]\n: b", "a: &a [*a]", "&a [*a, *a]", "!!python/object:os.system x",
    "%YAML 9.9\n---\na: 1", "--- !!set {a, b}", "a: !!timestamp 2001-13-01", "a: !!int 0x_", "a: !!float x",
    "a: *unknown", "\t- tab", "- - - - -", "{a: [1, {b: }", "queue_timeout_s: .nan", "queue_timeout_s: -.inf",
    "pools: []", "pools: [{name: ''}]", "operations: {x: {min_tier: gpu_apu, floor: gpu_cuda}}",
]


def _billion_laughs(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append(f"operations: {{x: {{capabilities: *a{levels - 1}}}}}")
    return "\n".join(lines)


_deep_yaml = st.one_of(
    st.integers(50, 100_000).map(lambda n: "[" * n),
    st.integers(50, 20_000).map(lambda n: "[" * n + "]" * n),
    st.integers(50, 20_000).map(lambda n: "{a: " * n + "1" + "}" * n),
    st.integers(50, 3_000).map(lambda n: "\n".join(" " * i + "a:" for i in range(n))),
    st.integers(50, 3_000).map(lambda n: "\n".join(" " * i + "-" for i in range(n))),
)
def _dump_mutated(case: tuple[int, list]) -> str:
    """A settings document with edits applied, as YAML ("" when the edits made it undumpable)."""
    try:
        return yaml.safe_dump(mutate(copy.deepcopy(_DOCS[case[0]]), case[1]), allow_unicode=True, width=10**9)
    except (RecursionError, yaml.YAMLError, ValueError, TypeError):
        return ""


_yaml_of_docs = st.tuples(st.sampled_from(range(len(_DOCS))), mutations(json_values)).map(_dump_mutated)


yaml_texts = st.one_of(
    st.sampled_from(_YAML_SNIPPETS),
    lines_of(st.sampled_from(_YAML_SNIPPETS), digit_strings().map(lambda d: f"queue_timeout_s: {d}"),
             digit_strings().map(lambda d: f"a: 0x{d}"), st.sampled_from(["pools:", "- name: x", "  tiers:", "operations:"])),
    _deep_yaml,
    st.integers(2, 9).map(_billion_laughs),
    _yaml_of_docs,
    st.text(),
)


class _Folder:
    """A temporary folder for one surface's run (files written there, one per example)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.n = 0

    def setup(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="fabric-fuzz-"))

    def teardown(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None

    def write(self, data: bytes) -> Path:
        if self.path is None:  # run outside run_surface (a test calling the surface by hand)
            self.setup()
        self.n += 1
        target = self.path / f"settings-{self.n % 8}.yaml"
        target.write_bytes(data)
        return target


_text_folder = _Folder()
_bytes_folder = _Folder()


def _from_yaml_text(case: tuple[str, bool]) -> None:
    text, as_str = case
    path = _text_folder.write(text.encode("utf-8", "surrogatepass"))
    FabricSettings.from_yaml(str(path) if as_str else path)


register(Surface(
    name="settings_yaml_text", strategy=st.tuples(yaml_texts, st.booleans()), call=_from_yaml_text,
    typed=(SettingsError,), setup=_text_folder.setup, teardown=_text_folder.teardown,
    description="FabricSettings.from_yaml over a file holding hostile YAML text",
))

_BOMS = [b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff", b""]
yaml_bytes = st.one_of(
    st.binary(max_size=200),
    st.tuples(st.sampled_from(_BOMS), yaml_texts, st.sampled_from(["utf-8", "utf-16", "utf-16-le", "utf-32", "latin-1"])).map(
        lambda t: t[0] + t[1].encode(t[2], "replace")),
    st.tuples(yaml_texts, st.binary(min_size=1, max_size=8), st.integers(0, 10_000)).map(
        lambda t: t[0].encode("utf-8", "surrogatepass")[: t[2]] + t[1] + t[0].encode("utf-8", "surrogatepass")[t[2]:]),
    st.integers(1 << 20, 3 << 20).map(lambda n: b"a: " + b"9" * n),
)


def _from_yaml_bytes(data: bytes) -> None:
    FabricSettings.from_yaml(_bytes_folder.write(data))


register(Surface(
    name="settings_yaml_bytes", strategy=yaml_bytes, call=_from_yaml_bytes, typed=(SettingsError,),
    setup=_bytes_folder.setup, teardown=_bytes_folder.teardown,
    description="FabricSettings.from_yaml over a file of arbitrary bytes (encodings, BOMs, garbage, over the size cap)",
))

settings_dicts = st.one_of(
    st.tuples(st.sampled_from(range(len(_DOCS))), mutations(values)).map(lambda t: mutate(copy.deepcopy(_DOCS[t[0]]), t[1])),
    st.dictionaries(st.one_of(st.sampled_from(list(FabricSettings.model_fields)), st.text(max_size=10), st.integers(), HUGE_INTS),
                    values, max_size=4),
    values,
)
register(Surface(
    name="settings_load", strategy=settings_dicts, call=FabricSettings.load, typed=(SettingsError,),
    description="FabricSettings.load over mutated settings documents and arbitrary values",
))

# -- requirement and decorator -------------------------------------------------------------------
_TIERS = st.sampled_from([t.value for t in ComputeTier] + list(ComputeTier) + [" GPU_CUDA ", "gpu_apu"])
_NUMBER = st.one_of(st.integers(0, 64), st.floats(0, 64, allow_nan=False))
_VALID: dict[str, st.SearchStrategy[Any]] = {
    "min_tier": _TIERS, "floor": _TIERS, "fallback": st.booleans(), "exclusive": st.booleans(),
    "num_cpus": _NUMBER, "memory_mib": st.integers(0, 1 << 20), "num_cores": st.integers(0, 64),
    "num_gpus": st.sampled_from([0, 0.5, 1, 2]), "gpu_model": st.text(min_size=1, max_size=12),
    "capabilities": st.lists(st.text(min_size=1, max_size=10), max_size=4),
    "ports": st.lists(st.one_of(st.sampled_from(["80/tcp", "1935/udp", " 8080/TCP "]), st.integers(0, 70000).map(lambda n: f"{n}/tcp")), max_size=3),
    "pool": st.sampled_from(["default", "gpu"]), "prefer": st.sampled_from(["highest", "lowest"]),
    "when_full": st.sampled_from(["spill", "wait"]), "scale": st.sampled_from(["degrade_first", "provision_first"]),
    "payload_size": st.integers(0, 1 << 40),
}
_AMOUNT_ATTACKS = st.one_of(HUGE_INTS, st.floats(allow_nan=True, allow_infinity=True), digit_strings(1, 500))


def _field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(valid, valid, values, _AMOUNT_ATTACKS)


requirement_kwargs = st.fixed_dictionaries({}, optional={name: _field(v) for name, v in _VALID.items()})


def _requirement(kw: dict[str, Any]) -> None:
    req = Requirement(**kw)
    hash(req), req == Requirement(**req.as_kwargs()), repr(req)  # a made requirement also round-trips


register(Surface(
    name="requirement", strategy=requirement_kwargs, call=_requirement, typed=(RequirementError,),
    description="Requirement(**kw) with wrong types, huge numbers, NaN/inf, huge strings and lists",
))

_DISPATCH_VALID: dict[str, st.SearchStrategy[Any]] = {
    "on_no_capacity": st.sampled_from(["queue", "raise"]), "queue_timeout_s": st.floats(0.1, 100),
    "max_retries": st.integers(-1, 5), "priority": st.integers(-5, 5), "name": st.text(min_size=1, max_size=10),
    "operation": st.sampled_from(["lupine", "vaapi_encode", "flac", "braid", "nope"]),
}
decorator_kwargs = st.fixed_dictionaries({}, optional={name: _field(v) for name, v in {**_VALID, **_DISPATCH_VALID}.items()})
decorator_calls = st.tuples(
    st.one_of(st.just(()), st.just(()), st.just(()), st.lists(values, max_size=2).map(tuple)),
    st.one_of(decorator_kwargs, st.dictionaries(st.text(max_size=12), values, max_size=3)),
    st.one_of(decorator_kwargs, st.dictionaries(st.text(max_size=12), values, max_size=3)),
)


def _target(x: Any) -> Any:
    return x


def _decorate(case: tuple[tuple, dict[str, Any], dict[str, Any]]) -> None:
    args, kw, overrides = case
    fn = adaptive.remote(*args, **kw)(_target)
    fn.options(**overrides)


register(Surface(
    name="decorator", strategy=decorator_calls, call=_decorate, typed=(RequirementError,),
    description="@adaptive.remote(**kw) and .options(**kw) (decorating only, never .remote())",
))

__all__ = ["yaml_texts", "yaml_bytes", "settings_dicts", "requirement_kwargs", "decorator_calls", "big_text"]

"""Write the settings reference and the example settings file from the settings models.

    .venv/bin/python scripts/settings_reference.py           # rewrite all three files
    .venv/bin/python scripts/settings_reference.py --check   # exit 1 when one is out of date

Both come from ``FabricSettings`` itself: every section and field, its type, default and unit,
and its docstring (pydantic keeps it as the field's description). So they stay true: a field added
without a docstring, or a default changed, shows here and the unit tests that compare these files
with what this script writes now fail until it is run again. Written:

- ``docs/settings.md``, the reference;
- ``fabric/data/fabric.yaml``, the example shipped in the wheel (``fabric settings example``),
  and its copy ``examples/fabric.yaml``: every value the default, the entries a list or mapping
  may hold shown as commented-out blocks.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
import types
import typing
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from fabric.core.settings import FabricSettings, HotSpareSettings, NodeOverride, NodeShape, TemplateSettings
from fabric.core.settings_check import unwrap_type
from fabric.core.settings_command import CommandScripts
from fabric.core.settings_routes import RouteSettings
from fabric.core.tiers import ComputeTier

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "settings.md"
EXAMPLE = ROOT / "fabric" / "data" / "fabric.yaml"
EXAMPLE_COPY = ROOT / "examples" / "fabric.yaml"
WIDTH = 100

# Values the commented-out example entries show where a field has no default (or the default says little).
SAMPLES: dict[tuple[type, str], Any] = {
    (NodeShape, "name"): "cpu-4",
    (NodeShape, "num_cpus"): 4.0,
    (NodeShape, "memory_mib"): 8192,
    (HotSpareSettings, "pool"): "default",
    (HotSpareSettings, "target_count"): 1,
    (TemplateSettings, "artifacts"): ["file:///srv/models/encoder.onnx"],
    (RouteSettings, "job"): "encode",
    (RouteSettings, "port"): 1935,
    (NodeOverride, "max_concurrent_tasks"): 2,
    (CommandScripts, "provision"): "/etc/fabric/provider/provision",
    (CommandScripts, "terminate"): "/etc/fabric/provider/terminate",
    (CommandScripts, "list"): "/etc/fabric/provider/list",
}
# The key a commented-out example entry of a mapping shows.
SAMPLE_KEYS = {"templates": "encoder", "routes": "channel.example", "nodes": "gpu-box-1", "operations": "transcode"}
# What a mapping's keys are, for the reference's type column.
KEY_NAMES = {"routes": "host name", "nodes": "node name", "templates": "template name", "operations": "operation name"}


# -- reading the models --------------------------------------------------------------------------------
def clean(doc: str | None) -> str:
    """A docstring as one paragraph of plain text: reST literals as Markdown ones, no citations."""
    text = " ".join((doc or "").split())
    text = re.sub(r"\(seed \d+(?: §[^:;)]*)?: ([^)]*)\)", r"(\1)", text)
    text = re.sub(r"\s*\([^()]*\bseed\b[^()]*\)", "", text, flags=re.IGNORECASE)
    text = re.sub(r"\bseed \d+ §\d+'s ", "", text, flags=re.IGNORECASE)
    text = re.sub(r"\s*\(issue \d+\)", "", text)
    text = text.replace("``", "`")
    first = text.split(" ", 1)[0]
    return text if "_" in first or "`" in first else text[:1].upper() + text[1:]


@dataclass(frozen=True)
class Field:
    """One settings field as the reference and the example show it."""

    name: str
    info: FieldInfo
    kind: str
    """``model`` (a section), ``list`` (of entries), ``map`` (name -> entry) or ``value``."""
    entry: type[BaseModel] | None
    """The section's or entry's model (None for a plain value)."""

    @property
    def doc(self) -> str:
        return clean(self.info.description)

    @property
    def required(self) -> bool:
        return self.info.default is PydanticUndefined and self.info.default_factory is None


def _model(tp: Any) -> type[BaseModel] | None:
    tp = unwrap_type(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def fields_of(model: type[BaseModel]) -> list[Field]:
    out = []
    for name, info in model.model_fields.items():
        tp = unwrap_type(info.annotation)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if _model(tp) is not None:
            out.append(Field(name, info, "model", _model(tp)))
        elif origin is tuple and args and _model(args[0]) is not None:
            out.append(Field(name, info, "list", _model(args[0])))
        elif origin is dict and len(args) == 2 and _model(args[1]) is not None:
            out.append(Field(name, info, "map", _model(args[1])))
        else:
            out.append(Field(name, info, "value", None))
    return out


def sections() -> list[tuple[str, type[BaseModel]]]:
    """Every settings model with the path it sits at (``pools[].tiers[]``), top level first."""
    out: list[tuple[str, type[BaseModel]]] = [("", FabricSettings)]
    for path, model in out:  # grows while it is walked: breadth first
        for f in fields_of(model):
            if f.entry is not None:
                below = {"model": "", "list": "[]", "map": f".<{KEY_NAMES.get(f.name, 'name')}>"}[f.kind]
                out.append((f"{path}.{f.name}{below}" if path else f"{f.name}{below}", f.entry))
    return out


def unit_of(name: str) -> str:
    if name.endswith("_s"):
        return "seconds"
    if name.endswith("_mib"):
        return "MiB"
    if name.endswith("utilization"):
        return "fraction of slots (0 to 1)"
    if name == "port" or name.endswith("_port"):
        return "TCP port"
    if name.endswith("_per_hour"):
        return "per trailing hour"
    if name in ("num_cpus", "num_gpus", "gpus"):
        return "CPUs" if name == "num_cpus" else "GPU devices"
    return ""


def _bounds(info: FieldInfo, tp: Any) -> list[str]:
    metadata = list(info.metadata)
    while True:  # constraints written inside Annotated (PositiveSeconds), possibly under `| None`
        if typing.get_origin(tp) is typing.Annotated:
            tp, *more = typing.get_args(tp)
            metadata += more
            continue
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(rest) == 1:
            tp = rest[0]
            continue
        break
    out = []
    for m in [x for m in metadata for x in (m.metadata if isinstance(m, FieldInfo) else [m])]:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", "length >="), ("max_length", "length <=")):
            value = getattr(m, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return out


def type_text(f: Field, paths: dict[type, str]) -> str:
    """The field's type in words (``number > 0``, ``one of `spread`, `binpack```, ``list of `pools[]```)."""
    def words(tp: Any) -> str:
        tp = unwrap_type(tp)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is typing.Literal:
            return "one of " + ", ".join(f"`{a}`" for a in args)
        if origin is tuple:
            item = _model(args[0])
            return f"list of {words(args[0])}s" if item is None else f"list of `{paths[item]}` entries"
        if origin is dict:
            value = _model(args[1])
            return f"mapping of {KEY_NAMES.get(f.name, 'name')} to `{paths[value]}`" if value is not None else "mapping"
        section = _model(tp)
        if section is not None:
            return f"section `{paths[section]}`"
        if isinstance(tp, type) and issubclass(tp, ComputeTier):
            return "compute tier"
        if isinstance(tp, type) and issubclass(tp, Enum):
            return "one of " + ", ".join(f"`{m.value}`" for m in tp)
        return {bool: "boolean", int: "integer", float: "number", str: "string"}.get(tp, str(tp))

    text = words(f.info.annotation)
    bounds = _bounds(f.info, f.info.annotation)
    if bounds:
        text += ", " + ", ".join(bounds)
    if type(None) in typing.get_args(f.info.annotation):
        text += ", or null"
    return text


def default_of(f: Field) -> Any:
    if f.info.default_factory is not None:
        return f.info.default_factory()  # type: ignore[call-arg]
    return f.info.default


def json_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (tuple, list)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    return value.value if isinstance(value, Enum) else value


def scalar(value: Any) -> str:
    """``value`` as YAML in one line (``null``, ``30.0``, ``[a, b]``, ``'1:2'``)."""
    return yaml.safe_dump([json_value(value)], default_flow_style=True, width=1 << 16, allow_unicode=True).strip()[1:-1]


def default_text(f: Field) -> str:
    if f.required:
        return "required"
    value = default_of(f)
    if f.kind == "model":
        return "its fields' defaults" if value is not None else "`null`"
    if f.kind == "list" and value:
        return "; ".join(f"`{scalar(v.model_dump(mode='json', exclude_defaults=True))}`" for v in value)
    if f.kind == "map" and value:
        return ", ".join(f"`{k}`" for k in value) + " (see the example file)"
    return f"`{scalar(value)}`"


# -- the reference -------------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_reference() -> str:
    found = sections()
    paths = {model: path for path, model in found}
    out = [
        "# Settings reference",
        "",
        "The fabric's configuration is one YAML file (`fabric up --config FILE`, or",
        "`fabric.up(FabricSettings.from_yaml(FILE))` from Python). A file needs only what differs from the",
        "defaults: with no file at all the fabric runs with one pool `default` whose one fixed pool tier",
        "holds every node. Every problem in a file is reported at once, each naming its field.",
        "",
        "Four commands help with the file; the first three need no cluster, `show` asks the running fabric:",
        "",
        "- `fabric settings example` prints a file with every section and field, each commented",
        "  (what it means, its unit, its default); every value in it is the default. The same file is",
        "  `examples/fabric.yaml` in the repository.",
        "- `fabric settings validate FILE` checks a file and lists every problem as",
        "  `FILE:LINE: path.to.field: message`, with `did you mean ...?` for a misspelt key or value;",
        "  `--json` prints the problems as a JSON list (`line`, `path`, `message`, `suggestion`, `code`).",
        "  It exits 0 when the file is valid, 2 when it is not or cannot be read.",
        "- `fabric settings schema` prints the JSON Schema of the settings (`--output FILE` writes it),",
        "  for editors that complete and check YAML against a schema.",
        "- `fabric settings show` prints the settings the running fabric uses, as YAML (`--json`: JSON);",
        "  it connects as the other commands do (`--address`, default `auto`).",
        "",
        "Units: a field ending in `_s` is in seconds, one ending in `_mib` in MiB. Compute tiers, best",
        "first: " + ", ".join(f"`{t.value}`" for t in sorted(ComputeTier, reverse=True)) + ".",
        "",
        "This page is generated from the settings models by `scripts/settings_reference.py`; a unit test",
        "fails when it no longer matches them.",
    ]
    for path, model in found:
        out += ["", f"## {'Top level' if not path else f'`{path}`'}", "", clean(model.__doc__), ""]
        out += ["| field | type | default | unit | meaning |", "|---|---|---|---|---|"]
        for f in fields_of(model):
            out.append(f"| `{f.name}` | {_cell(type_text(f, paths))} | {_cell(default_text(f))} | {unit_of(f.name)} | {_cell(f.doc)} |")
    return "\n".join(out) + "\n"


# -- the example file ----------------------------------------------------------------------------------
def _comment(f: Field, indent: int) -> list[str]:
    facts = [unit_of(f.name), "required" if f.required else ""]
    tail = f" ({'; '.join(x for x in facts if x)})" if any(facts) else ""
    return textwrap.wrap(f.doc + tail, WIDTH - indent - 2, initial_indent=" " * indent + "# ",
                         subsequent_indent=" " * indent + "# ", break_on_hyphens=False)


def _sample(model: type[BaseModel]) -> dict[str, Any]:
    return {f.name: SAMPLES.get((model, f.name), None if f.required else json_value(default_of(f))) for f in fields_of(model)}


def _entry(model: type[BaseModel], values: dict[str, Any], indent: int, docs: bool) -> list[str]:
    """The lines of one section or entry with these values (its fields' docs as comments when ``docs``)."""
    out: list[str] = []
    for n, f in enumerate(fields_of(model)):
        if docs and indent == 0 and n:
            out.append("")  # a blank line between top-level sections, for the eye
        if docs:
            out += _comment(f, indent)
        pad, value = " " * indent, values.get(f.name)
        if f.kind == "model" and f.entry is not None and value is None and not f.required:  # an optional section
            out += [f"{pad}{f.name}: null", *_commented([f"{pad}{f.name}:", *_entry(f.entry, _sample(f.entry), indent + 2, docs)])]
        elif f.kind == "model" and f.entry is not None:
            out += [f"{pad}{f.name}:", *_entry(f.entry, value or {}, indent + 2, docs)]
        elif f.kind == "list" and f.entry is not None:
            out += [f"{pad}{f.name}:" if value else f"{pad}{f.name}: []"]
            for k, item in enumerate(value or [_sample(f.entry)]):
                lines = _entry(f.entry, item, indent + 4, docs and k == 0)
                first = next(n for n, line in enumerate(lines) if not line.lstrip().startswith("#"))
                lines[first] = f"{pad}  - {lines[first].lstrip()}"
                out += lines if value else _commented([f"{pad}{f.name}:", *lines])
        elif f.kind == "map" and f.entry is not None:
            out += [f"{pad}{f.name}:" if value else f"{pad}{f.name}: {{}}"]
            items = value.items() if value else [(SAMPLE_KEYS.get(f.name, "name"), _sample(f.entry))]
            for k, (key, item) in enumerate(items):
                lines = [f"{pad}  {scalar(key)}:", *_entry(f.entry, item, indent + 4, docs and k == 0)]
                out += lines if value else _commented([f"{pad}{f.name}:", *lines])
        else:
            out.append(f"{pad}{f.name}: {scalar(value)}")
    return out


def _commented(lines: list[str]) -> list[str]:
    """An example entry, commented out where it stands (uncommented, it is valid YAML at that place)."""
    pad = min(len(line) - len(line.lstrip()) for line in lines)
    return [f"{line[:pad]}# {line[pad:]}" for line in lines]


def render_example() -> str:
    head = [
        "# adaptive-fabric settings: every section and every field, each with what it means, its unit",
        "# and its default.",
        "#",
        "# Every value below is the default, so this file gives the same settings as no file at all;",
        "# the commented-out blocks under an empty list or mapping (`hot_spares: []`, `routes: {}`, a",
        "# pool tier's `candidate_shapes: []`) are example entries to uncomment and edit. A real file",
        "# needs only what differs from the defaults.",
        "#",
        "#   fabric settings validate fabric.yaml   # every problem, with its line",
        "#   fabric up --config fabric.yaml",
        "#",
        "# docs/settings.md is the reference. Generated by scripts/settings_reference.py.",
        "",
    ]
    body = _entry(FabricSettings, FabricSettings().model_dump(mode="json"), 0, True)
    return "\n".join(head + body) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write docs/settings.md and the example settings file from the settings models")
    parser.add_argument("--check", action="store_true", help="only compare: exit 1 when a file differs from what would be written")
    args = parser.parse_args(argv)
    wanted = {REFERENCE: render_reference(), EXAMPLE: render_example(), EXAMPLE_COPY: render_example()}
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for p in stale:
            print(f"{p.relative_to(ROOT)} is out of date: run scripts/settings_reference.py", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(wanted[p], encoding="utf-8")
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

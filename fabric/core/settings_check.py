"""Checking a settings file without starting the fabric: every problem, each with its line.

``FabricSettings.from_yaml`` says what is wrong by dotted path (``pools.0.tiers.1.name``). A person
editing the file wants the line too, and a hint when a key is misspelt. ``check_settings_file``
reads the file through the same bounded edge (``fabric.core.settings_file``), validates it with
``FabricSettings.load`` (which reports every problem at once), then walks the YAML node tree
(PyYAML's ``compose``: every node keeps its position) and the settings models side by side along
each problem's path: the node gives the line, the model gives the field names an unknown key is
matched against (``difflib.get_close_matches``) and the choices a literal or a tier may take.

Pure: no Ray, no printing. ``fabric settings validate`` (``fabric.cli.settings_cmd``) formats the result.
"""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from fabric.core.errors import SettingsError, SettingsProblem
from fabric.core.settings import FabricSettings
from fabric.core.settings_file import clip, decode_settings, parse_yaml, read_settings_file

__all__ = ["LocatedProblem", "check_settings_file", "check_settings_text", "locate", "unwrap_type"]

#: The file-level problem codes (the whole file is at fault, not one key): their path is the file's.
FILE_CODES = frozenset({"not_a_path", "unreadable", "too_large", "not_utf8", "bad_yaml", "too_deep"})


@dataclass(frozen=True)
class LocatedProblem:
    """One problem in a settings file, where a person finds it."""

    line: int | None
    """1-based line of the offending key (or value); None when the whole file is at fault."""
    path: str
    """Where in the settings: ``health.offline_after_s``, ``pools[0].tiers[1].name``; "" for the file."""
    message: str
    """What is wrong."""
    suggestion: str | None
    """What was probably meant (a field name, a literal, a tier), or None."""
    code: str
    """The problem's stable code (``SettingsProblem.code``, pydantic's error type)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_settings_file(path: str | Path) -> list[LocatedProblem]:
    """Every problem in the settings file at ``path`` (none: it is valid), in line order."""
    p = Path(path)
    try:
        text = decode_settings(read_settings_file(p), str(p))
    except SettingsError as exc:
        return [_file_problem(q, exc) for q in exc.problems]
    return check_settings_text(text, str(p))


def check_settings_text(text: str, where: str = "<settings>") -> list[LocatedProblem]:
    """Every problem in settings YAML ``text`` (``where`` names it in file-level problems)."""
    try:
        data = parse_yaml(text, where)
    except SettingsError as exc:
        return [_file_problem(q, exc) for q in exc.problems]
    try:
        FabricSettings.load(data or {})
    except SettingsError as exc:
        import yaml  # only needed at this edge; parse_yaml has bounded the document already

        root = yaml.compose(text, Loader=yaml.SafeLoader)
        found = [locate(root, q) for q in exc.problems]
        return sorted(found, key=lambda q: (q.line or 0, q.path))
    return []


def _file_problem(problem: SettingsProblem, exc: SettingsError) -> LocatedProblem:
    """A problem of the whole file, with the line the YAML parser stopped at when it says."""
    cause = exc.__cause__
    mark = getattr(cause, "problem_mark", None) or getattr(cause, "context_mark", None)
    line = mark.line + 1 if mark is not None else getattr(cause, "line", None)
    message = problem.message
    what = getattr(cause, "problem", None)
    if problem.code == "bad_yaml" and isinstance(what, str):  # the parser's words without its multi-line excerpt
        context = getattr(cause, "context", None)
        message = f"not valid YAML: {context}: {what}" if isinstance(context, str) else f"not valid YAML: {what}"
    return LocatedProblem(line if isinstance(line, int) else None, "", message, None, problem.code)


# -- walking the YAML nodes and the models together ------------------------------------------------------
def unwrap_type(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and ``None`` alternatives: ``Annotated[int, ...] | None`` -> ``int``."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            rest = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(rest) != 1:
                return tp
            tp = rest[0]
        else:
            return tp


def _step_type(tp: Any, key: str) -> Any:
    """The type one step below ``tp`` (a model's field, a tuple's item, a mapping's value), or None."""
    tp = unwrap_type(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field = tp.model_fields.get(key)
        return None if field is None else field.annotation
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def _choices(tp: Any) -> list[str]:
    """The values a literal or an enum type may take (as written in a file), else []."""
    tp = unwrap_type(tp)
    if typing.get_origin(tp) is typing.Literal:
        return [str(a) for a in typing.get_args(tp)]
    if isinstance(tp, type) and issubclass(tp, Enum):
        return [str(m.value) for m in tp]
    return []


def _closest(word: str, choices: list[str]) -> str | None:
    matches = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _match_key(node: Any, parts: list[str], i: int) -> tuple[Any, Any, int] | None:
    """In mapping ``node``, the (key node, value node, parts used) whose key is ``parts[i:i+k]``
    joined by dots, longest first (a route's host name holds dots), or None."""
    for k in range(len(parts) - i, 0, -1):
        wanted = ".".join(parts[i:i + k])
        for key_node, value_node in node.value:
            if getattr(key_node, "value", None) == wanted and isinstance(key_node.value, str):
                return key_node, value_node, k
    return None


def _shown(shown: list[str], part: str, in_list: bool) -> None:
    if in_list:
        shown.append(f"[{part}]")
    else:
        shown.append(f".{part}" if shown else part)


def locate(root: Any, problem: SettingsProblem) -> LocatedProblem:
    """``problem`` with the line of its path in the composed YAML document ``root`` (the nearest
    ancestor present when the path is not in the file: a missing field, a default section), its
    path written with list indices (``pools[0].name``), and a suggestion where one is likely."""
    import yaml

    parts = problem.path.split(".") if problem.path else []
    node: Any = root
    tp: Any = FabricSettings
    parent_tp: Any = None
    line: int | None = root.start_mark.line + 1 if root is not None else None
    shown: list[str] = []
    i = 0
    while i < len(parts):
        part = parts[i]
        if part == "[key]":  # pydantic's marker for a mapping key that failed (a route's host name)
            i += 1
            continue
        used = 1
        in_list = False
        if isinstance(node, yaml.MappingNode):
            match = _match_key(node, parts, i)
            if match is None:
                node = None
            else:
                key_node, node, used = match
                line = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and part.isdigit():
            in_list = True
            index = int(part)
            node = node.value[index] if index < len(node.value) else None
            if node is not None:
                line = node.start_mark.line + 1
        else:
            in_list = part.isdigit() and typing.get_origin(unwrap_type(tp)) is tuple
            node = None
        key = ".".join(parts[i:i + used])
        _shown(shown, key, in_list)
        parent_tp, tp = tp, (_step_type(tp, key) if tp is not None else None)
        i += used
    message, suggestion = problem.message, None
    leaf = parts[-1] if parts else ""
    if problem.code == "extra_forbidden":
        model = unwrap_type(parent_tp)
        fields = list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []
        message = f"unknown key `{clip(leaf, 80)}`"
        suggestion = _closest(leaf, fields)
    elif isinstance(node, yaml.ScalarNode):
        value = clip(str(node.value), 80)
        choices = _choices(tp)
        if choices and value not in choices:
            suggestion = _closest(value, choices) or _closest(value.lower(), choices)
        if value not in message:
            message = f"{message} (got {value!r})" if node.tag.endswith(":str") else f"{message} (got {value})"
    return LocatedProblem(line, "".join(shown), message, suggestion, problem.code)

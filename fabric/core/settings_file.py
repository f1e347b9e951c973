"""Reading a settings file: bounded, never blocking, never recursing without limit (the edge of
``FabricSettings.from_yaml``). A settings file is a regular file of at most ``MAX_SETTINGS_BYTES``,
UTF-8 (or UTF-16/32 with a byte-order mark); a document nests at most ``MAX_SETTINGS_DEPTH``
levels (its value count is ``fabric.core.settings``' check). Every failure is a ``SettingsError``."""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

from fabric.core.bounded_read import TOO_LARGE, read_regular
from fabric.core.errors import SettingsError, SettingsProblem

#: A settings file larger than this is refused before it is read (real ones are a few KiB).
MAX_SETTINGS_BYTES = 1 << 20
#: Deepest nesting of lists and mappings in a settings document (the schema itself needs 9).
MAX_SETTINGS_DEPTH = 32


def read_settings_file(p: Path) -> bytes:
    """The bytes of settings file ``p``: a regular file of at most ``MAX_SETTINGS_BYTES``
    (``fabric.core.bounded_read``: a FIFO or a device never blocks the read)."""
    data, kind, why = read_regular(p, MAX_SETTINGS_BYTES)
    if data is not None:
        return data
    if kind == TOO_LARGE:
        raise SettingsError([SettingsProblem("too_large", str(p), f"settings file is larger than {MAX_SETTINGS_BYTES // 1024} KiB")])
    raise SettingsError([SettingsProblem("unreadable", str(p), f"cannot read settings file: {why or 'no such file'}")])


# UTF-32 first: its little-endian mark starts with UTF-16's.
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def decode_settings(data: bytes, where: str) -> str:
    """UTF-8 text, or UTF-16/32 when a byte-order mark says so (YAML 1.1 allows both)."""
    encoding = next((enc for bom, enc in _BOMS if data.startswith(bom)), "utf-8")
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise SettingsError([SettingsProblem(
            "not_utf8", where, f"settings file is not {encoding.upper().removesuffix('-SIG')} text: byte {exc.start}: {exc.reason}")]) from exc


class _TooDeep(Exception):
    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


def parse_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)`` with the nesting bounded while composing (PyYAML's composer
    recurses once per level) and every parser failure a ``SettingsError``."""
    import yaml  # only needed at this edge

    class BoundedLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > MAX_SETTINGS_DEPTH:
                    raise _TooDeep(self.peek_event().start_mark.line + 1)
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader: Any = None
    try:
        loader = BoundedLoader(text)  # the reader checks for unprintable characters here already
        return loader.get_single_data()
    except _TooDeep as exc:
        raise SettingsError([SettingsProblem("too_deep", where, f"settings nest deeper than {MAX_SETTINGS_DEPTH} levels (line {exc.line})")]) from exc
    except yaml.YAMLError as exc:
        raise SettingsError([SettingsProblem("bad_yaml", where, f"not valid YAML: {clip(str(exc))}")]) from exc
    except RecursionError as exc:  # a parser path the depth bound does not cover: still refused
        raise SettingsError([SettingsProblem("too_deep", where, "settings nest too deeply for the YAML parser")]) from exc
    except (ValueError, OverflowError, TypeError) as exc:
        # PyYAML's constructors raise these for values its resolver matched but cannot build:
        # "0x_" (int("", 16)), "2001-13-01" (month must be in 1..12), a 5,000-digit integer.
        raise SettingsError([SettingsProblem("bad_yaml", where, f"not valid YAML: a value cannot be read: {clip(str(exc))}")]) from exc
    finally:
        if loader is not None:
            loader.dispose()


def clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."

_read_settings_file = read_settings_file  # the name it had (kept for callers that still use it)

_decode_settings = decode_settings  # the name it had (kept for callers that still use it)

_parse_yaml = parse_yaml  # the name it had (kept for callers that still use it)

_clip = clip  # the name it had (kept for callers that still use it)

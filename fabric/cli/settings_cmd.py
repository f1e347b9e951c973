"""``fabric settings``: check a settings file, print its schema and an example, show what is in force.

- ``validate FILE`` reads the file as ``fabric up --config`` would and prints every problem at once,
  one line each, ``FILE:LINE: path.to.field: message``, with ``(did you mean `X`?)`` where a key or
  a value is probably misspelt, then a summary line; ``--json`` prints the problems as a JSON list
  instead. Exit 0 when the file is valid, 2 when it is not or cannot be read. No Ray.
- ``schema`` prints the settings' JSON Schema (``--output FILE`` writes it), for editors. No Ray.
- ``example`` prints the example file shipped in the package (every field, commented). No Ray.
- ``show`` prints the settings the running fabric uses (YAML; ``--json``): it connects as ``fabric
  nodes`` does (``--address``, default ``auto``, or ``--api HOST:PORT`` through the operator API
  without Ray) and exits 1 when the cluster cannot be reached or the fabric is not up there.

The checking itself is pure (``fabric.core.settings_check``); this module only prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from typing import Any

from fabric.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, api_address, bad_address, remote_parents, run_over_api

__all__ = ["add_parser", "example_text", "format_problems", "run_validate", "schema", "settings_file_problems", "settings_text"]

EXAMPLE_RESOURCE = "data/fabric.yaml"


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("settings", help="check a settings file; print the schema, an example, or the settings in force",
                              description="check a settings file without starting the fabric, print the settings' JSON "
                                          "Schema or an example file, or show the settings the running fabric uses")
    sub = p.add_subparsers(dest="settings_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: _usage(p))

    v = sub.add_parser("validate", help="check a settings file: every problem, each with its line",
                       description="check a settings file as 'fabric up --config' would, without starting anything; "
                                   "print every problem (FILE:LINE: path: message), exit 0 when valid, 2 when not")
    v.add_argument("file", metavar="FILE", help="the YAML settings file")
    v.add_argument("--json", action="store_true", help="print the problems as a JSON list (line, path, message, suggestion, code)")
    v.set_defaults(func=run_validate)

    s = sub.add_parser("schema", help="print the settings' JSON Schema (for editors)",
                       description="print the JSON Schema of the settings file, for editors that check YAML against one")
    s.add_argument("--output", metavar="FILE", default=None, help="write the schema to FILE instead of printing it")
    s.set_defaults(func=run_schema)

    e = sub.add_parser("example", help="print an example settings file (every field, commented)",
                       description="print the example settings file: every section and field with its meaning, unit "
                                   "and default; every value in it is the default")
    e.set_defaults(func=run_example)

    w = sub.add_parser("show", help="print the settings the running fabric uses",
                       description="print the settings in force on the running fabric, as YAML (or JSON)",
                       parents=remote_parents("print JSON instead of YAML"))
    w.set_defaults(func=run_show)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


# -- validate -------------------------------------------------------------------------------------------
def format_problems(file: str, problems: list[Any]) -> list[str]:
    """One line per problem (``FILE:LINE: path: message``), then the summary line."""
    lines = []
    for q in problems:
        where = f"{file}:{q.line}" if q.line is not None else file
        what = f"{q.path}: {q.message}" if q.path else q.message
        hint = f" (did you mean `{q.suggestion}`?)" if q.suggestion else ""
        lines.append(f"{where}: {what}{hint}")
    n = len(problems)
    lines.append(f"{file}: invalid, {n} problem{'s' if n != 1 else ''}" if n else f"{file}: valid")
    return lines


def settings_file_problems(path: str) -> list[str]:
    """``path``'s problems as ``validate`` prints them (``FILE:LINE: path: message``, then the summary
    line): the one form in which every command that reads a settings file (``up --config``,
    ``routes --config``, ``probe --config``) reports a bad one."""
    from fabric.core.settings_check import check_settings_file

    return format_problems(path, check_settings_file(path))


def run_validate(args: argparse.Namespace) -> int:
    from fabric.core.settings_check import check_settings_file

    problems = check_settings_file(args.file)
    if args.json:
        print(json.dumps([q.as_dict() for q in problems], indent=2))
    else:
        print("\n".join(format_problems(args.file, problems)))
    return 2 if problems else 0


# -- schema and example ---------------------------------------------------------------------------------
def schema() -> dict[str, Any]:
    """The settings file's JSON Schema (draft 2020-12, as pydantic writes it)."""
    from fabric.core.settings import FabricSettings

    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **FabricSettings.model_json_schema()}


def run_schema(args: argparse.Namespace) -> int:
    text = json.dumps(schema(), indent=2) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        print(f"fabric settings schema: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def example_text() -> str:
    """The example settings file shipped in the package."""
    return resources.files("fabric").joinpath(EXAMPLE_RESOURCE).read_text(encoding="utf-8")


def run_example(args: argparse.Namespace) -> int:
    sys.stdout.write(example_text())
    return 0


# -- show -----------------------------------------------------------------------------------------------
def settings_text(settings: Any, as_json: bool) -> str:
    """``settings`` (a ``FabricSettings``) as ``fabric settings show`` prints them: YAML in field
    order (a valid settings file), or JSON."""
    data = settings.model_dump(mode="json")
    if as_json:
        return json.dumps(data, indent=2) + "\n"
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _print_settings(settings: Any, args: argparse.Namespace) -> int:
    sys.stdout.write(settings_text(settings, args.json))
    return EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    if api_address(args):
        return run_over_api(args, "settings show", lambda client: _print_settings(client.settings_in_force(), args))
    if bad_address(args.address, "settings show"):
        return EXIT_USAGE
    from fabric.cli.connect import connect
    from fabric.runtime.control import FabricHandle

    import ray as ray_module

    ours = not ray_module.is_initialized()  # a driver that was connected already stays connected
    ray = connect(args.address, "settings show")  # on failure it has said why
    if ray is None:
        return EXIT_FAILED
    try:
        settings = FabricHandle().settings_in_force()
    except RuntimeError as exc:  # the fabric is not up here
        print(f"fabric settings show: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if ours:
            ray.shutdown()
    return _print_settings(settings, args)

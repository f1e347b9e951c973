"""Every ``fabric`` command's ``--help`` is plain text: no reStructuredText markup from docstrings."""

from __future__ import annotations

import argparse
import re

import pytest

from fabric.cli import build_parser

MARKUP = re.compile(r"``|:(class|func|meth|mod|attr):`")


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    found, stack = [], [("fabric", build_parser())]
    while stack:
        name, parser = stack.pop()
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend((f"{name} {sub}", p) for sub, p in action.choices.items())
    return found


PARSERS = _parsers()


def test_the_walk_finds_every_command_and_subcommand():
    names = {n for n, _ in PARSERS}
    assert {"fabric probe", "fabric join", "fabric status", "fabric drain", "fabric settings validate"} <= names


@pytest.mark.parametrize("name,parser", PARSERS, ids=[n for n, _ in PARSERS])
def test_help_has_no_markup(name, parser):
    text = parser.format_help()
    assert not MARKUP.search(text), f"{name} --help:\n{text}"

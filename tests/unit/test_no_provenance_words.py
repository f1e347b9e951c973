"""The repository speaks for itself: no source, doc or config file cites where the project came
from (the documents it was first written from, or a folder beside the repository); a pointer to
more goes into ``docs/``. A comment or a
docstring states the fact itself; a random-number seed (``random.seed``, ``--seed``, hypothesis)
is not such a word and does not match."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SUFFIXES = (".py", ".md", ".proto", ".toml", ".yaml", ".yml")
"""The files scanned: source, docs and configuration."""

SKIP_DIRS = frozenset({".git", ".venv", "venv", "__pycache__", "node_modules", "build", "dist",
                       ".mypy_cache", ".pytest_cache", ".hypothesis", ".ruff_cache", ".import_linter_cache"})
"""Folders that are not the project's own text (tools, caches, build output)."""

# Assembled from pieces so that this file does not match itself.
_SEED = "se" + "ed"
PROVENANCE = re.compile(
    "|".join([
        rf"\b{_SEED} ?0\d",          # a numbered source document, "(... 000 § Drain)"
        rf"\b{_SEED}'s\b",           # "the ...'s table"
        rf"\b{_SEED}s/",             # its folder
        r"\.\./" + "shared",          # a folder beside the repository
        r"\bthe " + r"specs?\b",      # "as the s-p-e-c says": name the rule, or the job's spec
        r"(?<![\w/.-])(?-i:API|DESIGN)" + r"\.md\b",  # documents outside the repository: point into docs/
    ]),
    re.IGNORECASE,
)
"""Words that say where the project came from instead of what it does."""


def scanned_files(root: Path = ROOT) -> list[Path]:
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        out += [Path(folder) / f for f in sorted(files) if f.endswith(SUFFIXES)]
    return out


def provenance_hits(root: Path = ROOT) -> list[str]:
    """Every line that cites where the project came from, as ``file:line: text``."""
    hits = []
    for path in scanned_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if PROVENANCE.search(line):
                hits.append(f"{path.relative_to(root)}:{n}: {line.strip()[:120]}")
    return hits


def test_no_file_says_where_the_project_came_from():
    hits = provenance_hits()
    assert not hits, "state the fact itself, not where it came from:\n" + "\n".join(hits)


def test_the_scan_finds_a_citation_and_spares_random_seeds(tmp_path):
    (tmp_path / "a.py").write_text(
        f'"""Drain timeouts ({_SEED} 000 § Drain)."""\n'
        "random.seed(0)\n"
        "parser.add_argument('--seed', type=int, default=0)\n"
        "settings = hypothesis.settings(derandomize=True)  # seed=0\n"
    )
    (tmp_path / "b.md").write_text(
        "See `../" + "shared/notes`.\nThe rules (" + "API" + ".md § Events).\nSee docs/operator-api.md.\n"
    )
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "c.py").write_text(f"# {_SEED} 002\n")
    assert provenance_hits(tmp_path) == [
        f"a.py:1: \"\"\"Drain timeouts ({_SEED} 000 § Drain).\"\"\"",
        "b.md:1: See `../" + "shared/notes`.",
        "b.md:2: The rules (" + "API" + ".md § Events).",
    ]

"""The README and docs/ link only to what exists: every relative link names a file of this
repository (and a heading of it, for an anchor), and a link that leaves the repository goes to
public documentation on an allowed host. The README stays a front page: at most 250 lines, its
quick start exactly ``./scripts/demo`` and ``./scripts/test``."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]

README_MAX_LINES = 250

ALLOWED_HOSTS = frozenset({
    "docs.ray.io",
    "github.com",  # only under the paths below
    "kubernetes.io",
    "prometheus.io",
    "grpc.io",
    "caddyserver.com",
    "www.apache.org",
    "docs.python.org",
    "www.python.org",
    "docs.pydantic.dev",
    "docs.pytest.org",
    "hypothesis.readthedocs.io",
    "import-linter.readthedocs.io",
    "ffmpeg.org",
})
"""Hosts a doc may link to: the public documentation of what the fabric builds on."""

ALLOWED_GITHUB_OWNERS = frozenset({"ray-project"})
"""On github.com, only these owners' repositories (Ray's own source and issues)."""

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_AUTOLINK = re.compile(r"<((?:https?|ftp|mailto|file):[^>\s]+)>")
_REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md and every Markdown file directly under docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans blanked out."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, _INLINE_CODE.sub("", line)))
    return out


def links(text: str) -> list[tuple[int, str]]:
    """Every link target in ``text``: inline links and images, autolinks, reference definitions."""
    found = []
    for n, line in prose_lines(text):
        found += [(n, m.group(1)) for m in _INLINE_LINK.finditer(line)]
        found += [(n, m.group(1)) for m in _AUTOLINK.finditer(line)]
        if m := _REF_DEF.match(line):
            found.append((n, m.group(1)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lowercase, punctuation dropped
    except ``-`` and ``_``, spaces turned into ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a file's headings (a repeated heading gets ``-1``, ``-2``, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(text):
        if m := _HEADING.match(line):
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def link_problem(source: Path, target: str, root: Path = ROOT) -> str | None:
    """Why ``target``, linked from ``source``, is not allowed; None when it is."""
    parts = urlsplit(target)
    if parts.scheme in ("http", "https"):
        host = (parts.hostname or "").lower()
        if host not in ALLOWED_HOSTS:
            return f"links outside the repository to {host!r}, not an allowed documentation host"
        if host == "github.com" and parts.path.strip("/").split("/")[0] not in ALLOWED_GITHUB_OWNERS:
            return f"links to a GitHub repository outside {sorted(ALLOWED_GITHUB_OWNERS)}"
        return None
    if parts.scheme or parts.netloc:
        return f"a {parts.scheme or '//'} link: only relative links and allowed https documentation"
    path = unquote(parts.path)
    if path.startswith("/"):
        return "an absolute path: write it relative to the linking file"
    resolved = (source.parent / path).resolve() if path else source.resolve()
    if not resolved.is_relative_to(root.resolve()):
        return "points outside the repository"
    if not resolved.exists():
        return f"{resolved.relative_to(root.resolve())} does not exist"
    if parts.fragment:
        if resolved.suffix != ".md" or not resolved.is_file():
            return "an anchor on something that is not a Markdown file"
        if parts.fragment not in anchors(resolved.read_text(encoding="utf-8")):
            return f"{resolved.name} has no heading #{parts.fragment}"
    return None


def problems(root: Path = ROOT) -> list[str]:
    """Every bad link in README.md and docs/*.md, as ``file:line: target: why``."""
    out = []
    for path in doc_files(root):
        if not path.is_file():
            continue
        for n, target in links(path.read_text(encoding="utf-8")):
            if why := link_problem(path, target, root):
                out.append(f"{path.relative_to(root)}:{n}: {target}: {why}")
    return out


def test_every_link_in_readme_and_docs_resolves():
    assert problems() == []


def test_the_checker_finds_a_broken_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Two words\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md) [ok](docs/a.md#two-words) [ok](https://docs.ray.io/en/latest/)\n"
        "[gone](docs/missing.md)\n"
        "[bad anchor](docs/a.md#three-words)\n"
        "[away](https://example.com/x)\n"
        "[up](../outside.md)\n"
        "```\n[in code](nowhere.md)\n```\n"
    )
    found = problems(tmp_path)
    assert [line.split(":")[1] for line in found] == ["2", "3", "4", "5"], found


@pytest.mark.parametrize(("heading", "anchor"), [
    ("What a restart resumes", "what-a-restart-resumes"),
    ("The `fabric` command", "the-fabric-command"),
    ("Moving work on purpose: migration, drain", "moving-work-on-purpose-migration-drain"),
    ("How a call is dispatched (and why it is fast)", "how-a-call-is-dispatched-and-why-it-is-fast"),
])
def test_slugs_follow_githubs_rule(heading, anchor):
    assert slug(heading) == anchor


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_quick_start_is_the_two_scripts():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "README.md has no '## Quick start' section"
    block = re.search(r"^```[a-z]*\n(.*?)^```", section.group(1), re.S | re.M)
    assert block, "the quick start has no code block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["./scripts/demo", "./scripts/test"]

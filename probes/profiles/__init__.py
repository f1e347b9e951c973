"""Bundled probe profiles: named recordings of real (or realistically constructed) machines.

Each profile is a folder ``probes/profiles/<name>/`` holding a recording in the layout of
``probes.sources`` (read it with ``probes.RecordedSources``), a ``profile.json`` (``name``,
``description``, ``roles``, ``expect_tier``) and a ``PROVENANCE.md`` saying, file by file, what
is a verbatim copy of a real tool output and what was constructed from which public facts.
Profiles let one machine stand in for a mixed fleet: tests, the demo and ``LocalFabric`` start
real Ray nodes whose probe reads a profile instead of the hardware.

Pure: no Ray, no probing here, just where the folders are.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["profiles", "profile_path", "profile_info"]


def _root() -> Path:
    return Path(str(resources.files(__name__)))


def profiles() -> list[str]:
    """Names of the bundled profiles, sorted."""
    root = _root()
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "profile.json").is_file())


def profile_path(name: str) -> Path:
    """The recording folder of profile ``name``; ``ValueError`` listing the profiles when unknown."""
    known = profiles()
    if name not in known:
        raise ValueError(f"unknown profile {name!r}; profiles: {', '.join(known)}")
    return _root() / name


def profile_info(name: str) -> dict[str, Any]:
    """The profile's ``profile.json`` (name, description, roles, expect_tier)."""
    return json.loads((profile_path(name) / "profile.json").read_text())

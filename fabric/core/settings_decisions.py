"""Settings of the placement decisions kept on the record (``decisions:``).

Every job placement, and a sample of the task placements and lease grants (every fallback, every
refusal and one in ``sample_one_in`` of the rest), is written to the event log with what decided
it, so ``fabric explain --event SEQ`` can say why and ``--replay`` can decide it again. What is
kept is bounded by a count and by bytes; the oldest go first."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from fabric.core.settings_types import SettingsModel


class DecisionSettings(SettingsModel):
    """Placement decisions on the record: which are kept, and how many."""

    enabled: bool = True
    """Record decisions; false: none is kept (``fabric explain --event`` then has nothing to show)."""
    sample_one_in: Annotated[int, Field(ge=1)] = 100
    """One in this many of the task placements and lease grants that neither fell back nor were
    refused is recorded (1: every one). Job placements, fallbacks and refusals always are."""
    max_records: Annotated[int, Field(ge=1)] = 2000
    """Decisions kept at most; the oldest is forgotten first."""
    max_bytes: Annotated[int, Field(ge=65_536)] = 64 * 1024 * 1024
    """Bytes kept at most (compressed decisions, the fleet slices and node records they read, the
    settings in force); the oldest decisions are forgotten first until it fits."""

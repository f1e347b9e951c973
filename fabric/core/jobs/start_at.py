"""When a job with a ``start_at`` begins to be placed (pure).

A job given ``start_at`` waits ``scheduled`` until its placement begins: ``start_at`` less the
``placement_lead_s`` of its pool's tiers (the largest: the cascade may fall through to any of them,
and the slowest to provision needs the longest lead). Its instance is created as soon as it is
placed, so its constructor may run up to that lead before ``start_at``. A ``start_at`` already
passed, or inside the lead, is placed at once.
"""

from __future__ import annotations

from fabric.core.jobs.spec import JobSpec
from fabric.core.settings import FabricSettings


def placement_lead_s(settings: FabricSettings | None, pool: str | None) -> float:
    """The largest ``placement_lead_s`` of the pool's tiers (0 with no settings or an unknown pool)."""
    if settings is None:
        return 0.0
    try:
        tiers = settings.pool(pool).tiers
    except KeyError:
        return 0.0
    return max((t.effective_placement_lead_s for t in tiers), default=0.0)


def placement_begins(spec: JobSpec, settings: FabricSettings | None) -> float | None:
    """When the job's placement begins (None: it has no ``start_at``)."""
    if spec.start_at is None:
        return None
    return spec.start_at - placement_lead_s(settings, spec.requirement.pool)


def waits(spec: JobSpec, settings: FabricSettings | None, now: float) -> bool:
    """Whether a job added at ``now`` is ``scheduled`` (its placement begins later)."""
    begins = placement_begins(spec, settings)
    return begins is not None and begins > now


__all__ = ["placement_begins", "placement_lead_s", "waits"]

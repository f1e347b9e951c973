"""Settings of node rejections: when a node that keeps failing to start jobs is kept off placement
(``rejections:``).

A job instance that ends on its node before it ever ran (its actor could not be created there, or
died while starting) is a *rejection* by that node. One rejection says little (a job can be at
fault as well as a node); ``escalation_count`` of them inside ``window_s`` mark the node unhealthy:
placement leaves it out until a job reaches running on it or ``unhealthy_cooldown_s`` has passed.
A job refused as an invalid spec is the job's own fault and never counts against the node."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from fabric.core.settings_types import NonNegFloat, PositiveSeconds, SettingsModel


class RejectionSettings(SettingsModel):
    """How many failed starts mark a node unhealthy, and for how long."""

    escalation_count: Annotated[int, Field(ge=1)] = 3
    """Rejections (a job instance ending on the node before it ran) that mark the node unhealthy ..."""
    window_s: PositiveSeconds = 5.0
    """... when they come inside this many seconds."""
    unhealthy_cooldown_s: NonNegFloat = 600.0
    """An unhealthy node is left out of placement until a job reaches running on it, or this long."""

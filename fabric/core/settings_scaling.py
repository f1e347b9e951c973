"""Settings of burst and utilisation scaling (``scaling:``); the rules they drive are
``fabric.core.scheduling.scaling``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from fabric.core.settings_types import NonNegFloat, PositiveSeconds, SettingsModel


class ScalingSettings(SettingsModel):
    """Burst and utilisation scaling."""

    enabled: bool = True
    """False: the scaler asks for nothing."""
    burst_queue_depth: Annotated[int, Field(ge=0)] = 8
    """A pool's queue deeper than this ..."""
    burst_window_s: PositiveSeconds = 30.0
    """... for this long is a burst: raise headroom, else provision a worker group."""
    group_interval_s: NonNegFloat = 60.0
    """At most one new worker group per pool tier in this long."""
    group_size: Annotated[int, Field(ge=1)] = 1
    """Nodes in one new worker group (fewer where ``max_nodes`` leaves less room)."""
    high_utilization: Annotated[float, Field(gt=0, le=1)] = 0.8
    """Utilisation (running / slots) over this ..."""
    high_window_s: PositiveSeconds = 300.0
    """... for this long raises a node's concurrency within its limitations, else scales out."""
    low_utilization: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """A pool's utilisation under this (its queue empty) ..."""
    low_window_s: PositiveSeconds = 900.0
    """... for this long scales idle provisioned nodes down to their pool tier's ``min_nodes``."""
    vertical_start_share: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    """Opt-in vertical scaling: a node joins with a slot cap of ``ceil(limit × share)``, at least 1, where
    the limit is its probed ``max_concurrent_tasks`` or a lower ``nodes.<name>.max_concurrent_tasks``; the
    high-utilisation rule raises the cap toward the limit while the node stays busy. Null (or ``enabled:
    false``): a node joins at its limit."""
    vertical_step: Annotated[int, Field(ge=1)] | None = None
    """Slots one raise adds (never past the limit); null: a raise goes straight to the limit."""

"""Settings for moving work on purpose: migration sagas, rebalancing, drains and interruptions (issue 16).

Three sections of ``FabricSettings``: ``migration:`` (a deadline per saga phase, the default
strategy, the grace ``fabric.down()`` gives in-flight migrations), ``rebalance:`` (the
reconfiguration engine: jobs running below their ``min_tier`` move up when better capacity joins)
and ``drain:`` (a drain's default timeout and how a provider's interruption notice sizes its
forced drain). Every field has a docstring and a
bad value is a ``SettingsError`` problem naming it (``drain.timeout_s``)."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field

from fabric.core.settings_types import NonNegFloat, PositiveSeconds, SettingsModel

Strategy = Literal["stop_then_start", "overlap", "handover"]
"""A migration strategy's wire name (``fabric.core.jobs.migration.MigrationStrategy`` values)."""

STRATEGIES: tuple[str, ...] = get_args(Strategy)
"""Every migration strategy, in the order the settings list them."""


class MigrationSettings(SettingsModel):
    """Per-phase deadlines of a migration saga: an expiry before the point
    of no return rolls back (the source keeps running), after it the saga fails forward."""

    place_s: PositiveSeconds = 30.0
    """Placing: the engine finds (or provisions) a target node."""
    prepare_s: PositiveSeconds = 120.0
    """Preparing: the target instance is created (overlap and handover: its constructor has run)."""
    ready_s: PositiveSeconds = 30.0
    """Handover: the target's ``__fabric_ready__`` has answered with its payload."""
    cut_s: PositiveSeconds = 30.0
    """Handover: the source's ``__fabric_cut__(payload)`` has answered with its position."""
    resume_s: PositiveSeconds = 30.0
    """Handover: the target's ``__fabric_resume__(position)`` has answered."""
    stop_source_s: PositiveSeconds = 30.0
    """The source instance has stopped (``__fabric_stop__`` when it defines one)."""
    start_target_s: PositiveSeconds = 120.0
    """stop_then_start: the target's constructor has run after the source stopped."""
    default_strategy: Strategy = "stop_then_start"
    """The strategy of a migration that names none."""
    close_grace_s: NonNegFloat = 5.0
    """How long ``fabric.down()`` waits for in-flight migrations to roll back (or fail forward)."""


class RebalanceSettings(SettingsModel):
    """Jobs placed below their ``min_tier`` (by fallback) move up when better capacity joins (seed
    002 § reconfiguration: node added -> rebalance). Tasks need nothing: new calls go to the best tier."""

    enabled: bool = True
    """False: jobs stay where fallback put them."""
    max_concurrent: Annotated[int, Field(ge=1)] = 1
    """Rebalancing migrations in flight at once, fabric-wide."""
    cooldown_s: NonNegFloat = 600.0
    """A job moved (by any migration) less than this long ago is not rebalanced."""
    strategy: Strategy | None = None
    """The strategy of a rebalancing move; None: ``handover`` when the job's class has the handover
    hooks, else ``stop_then_start`` (the runner decides)."""
    settle_s: NonNegFloat = 2.0
    """How long a joined node must have been serving before jobs move onto it."""


class DrainSettings(SettingsModel):
    """Drain timeouts, and how an interruption notice sizes its forced drain."""

    timeout_s: PositiveSeconds = 300.0
    """A drain's timeout when the operator names none: then it ends ``partial`` (or, forced, stops what is left)."""
    spot_drain_s: PositiveSeconds = 90.0
    """A spot interruption's drain timeout without a deadline (EC2's two-minute warning less the margin)."""
    rebalance_drain_s: PositiveSeconds = 300.0
    """A rebalance recommendation's drain timeout without a deadline."""
    interruption_margin_s: NonNegFloat = 30.0
    """With a deadline, the drain's timeout is ``deadline - now - interruption_margin_s`` (never below 0)."""
    ask_ray: bool = True
    """Ask Ray to drain a node the fabric emptied (``drain_node``; Ray has no undrain, and an idle
    node it drains goes away). False: the fabric's cordon only, so an uncordon brings the node back.
    A reclaim notice always tells Ray (PREEMPTION)."""

"""What the hot-spare reconciler asks for: small frozen instructions an actor carries out.

``reconcile`` (``fabric.core.spares.reconcile``) returns a list of these; the actor that drives
it (one ``SpareReconcilerActor`` per pool) turns each into a provider call, a tag write, a fetch
or an event, and reports the outcome back to the pool's ``SpareState``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from fabric.core.settings import NodeShape


@dataclass(frozen=True)
class SpareTags:
    """The tags a node provisioned for spares starts with (the provider labels it with them)."""

    spare: bool = True
    reserved_for: tuple[str, ...] = ()
    """Templates that rank the spare first."""
    exclusive: bool = False
    """With ``reserved_for``: nobody else may take it (``override_reservation`` aside)."""
    warm_for: tuple[str, ...] = ()
    """Templates whose artifacts the spare fetches once it registers."""


@dataclass(frozen=True)
class Provision:
    """Ask the pool tier's provider for one node of ``shape``, tagged ``tags``. ``provision_id``
    names it in every later report (``SpareState.provision_started / _failed / _done``); the
    provider labels the node with it so its registration can be matched back."""

    pool: str
    pool_tier: str
    shape: NodeShape
    tags: SpareTags
    provision_id: str


@dataclass(frozen=True)
class Abandon:
    """Give up a provision still in flight: terminate whatever the provider started for it.
    ``reason``: ``provision_timeout`` (it did not register within the pool tier's
    ``provision_timeout_s``; a backoff follows, as for a failure) or ``over_target`` (the target
    went down while it was in flight)."""

    provision_id: str
    reason: str


@dataclass(frozen=True)
class Reap:
    """Terminate a spare node the fabric provisioned (it carries no work). ``reason``:
    ``over_target`` (coldest first) or ``orphan`` (its pool's spare entry was removed)."""

    node_id: str
    reason: str


@dataclass(frozen=True)
class Tag:
    """Write a node's spare tags: ``spare=False`` takes the tag off (a spare that took work is an
    ordinary node from then on; an excess spare on registered hardware is released rather than
    terminated), ``spare=True`` writes ``reserved_for``/``exclusive`` (a node provisioned for
    spares that registered, or a live spare whose entry changed). ``reason``: ``consumed``,
    ``released``, ``provisioned``, ``spec_changed``."""

    node_id: str
    spare: bool
    reserved_for: tuple[str, ...] = ()
    exclusive: bool = False
    reason: str = ""


@dataclass(frozen=True)
class Underflow:
    """The ``spare_underflow`` event: pool ``pool`` has ``current`` live spares of ``target``
    (``onSpareUnderflow(pool, effective, target)``)."""

    pool: str
    current: int
    target: int


@dataclass(frozen=True)
class Prefetch:
    """Fetch ``artifacts`` (URIs, in ``warm_for`` order) into a spare's artifact cache: those of
    its ``warm_for`` templates it does not hold and was not asked for before."""

    node_id: str
    artifacts: tuple[str, ...]


SpareDecision = Union[Provision, Abandon, Reap, Tag, Underflow, Prefetch]
"""Anything ``reconcile`` returns."""

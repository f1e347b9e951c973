"""The placement engine (pure: no Ray): where a piece of work goes, and why.

``place(fleet, requirement, context=None, *, trace=False) -> Decision`` walks compute levels
from the requirement's ``min_tier`` down to its floor and, within a level, the pool's tiers in
cost order; runs nodes through the named hard filters (``filters.FILTER_NAMES``) and ranks
survivors by a ten-component lexicographic key (``keys.KEY_COMPONENTS``); provisions from an
elastic pool tier when nothing fits; otherwise defers. See DESIGN.md § Placement.

``place`` is the fast engine (``fabric.placement.fast``); ``fabric.placement.reference.place``
is the plain one it is tested against. Both are pure: ``fleet.commit(decision)`` acts.

Modules: ``requirement`` (Requirement), ``context`` (PlacementContext, Peer), ``records``
(NodeRecord), ``fleet`` (FleetView, PlacementStats), ``filters`` (the chain), ``keys`` (the
key), ``walk`` (step order, decision builders), ``reference``, ``fast``, ``decision``
(Decision, Allocation, PlacementTrace), ``explain``.
"""

from __future__ import annotations

from fabric.placement.context import TASK_CONTEXT, Peer, PlacementContext
from fabric.placement.decision import Allocation, Decision, PlacementTrace, TraceStep
from fabric.placement.fast import dry_run, place, place_many
from fabric.placement.filters import FILTER_NAMES, SLOT_FILTERS
from fabric.placement.fleet import FleetSnapshot, FleetView, PlacementStats
from fabric.placement.keys import KEY_COMPONENTS
from fabric.placement.records import NodeRecord
from fabric.placement.requirement import Requirement

__all__ = [
    "Allocation", "Decision", "FILTER_NAMES", "FleetSnapshot", "FleetView", "KEY_COMPONENTS", "NodeRecord", "Peer",
    "PlacementContext", "PlacementStats", "PlacementTrace", "Requirement", "SLOT_FILTERS", "TASK_CONTEXT",
    "TraceStep", "dry_run", "place", "place_many",
]

"""The placement engine (pure: no Ray): where a piece of work goes, and why.

``place(fleet, requirement, context=None, *, trace=False) -> Decision`` walks compute levels
from the requirement's ``min_tier`` down to its floor and, within a level, the pool's tiers in
cost order; runs nodes through the named hard filters and ranks survivors by a ten-component
lexicographic key; provisions from an elastic pool tier when nothing fits; otherwise defers.
See ``walk`` for the exact rules (resilience, ``when_full``, scale).

Hard filters, in order (``FILTER_NAMES``; a trace names the first one a node fails):
target_node, pool, pool_tier, excluded, status, cordoned, spare_reserved, capabilities, resources,
accelerator_type, label_selector, level, cpu, memory, cores, concurrency, ports, gpu, gpu_capacity,
exclusive, co_location, separation, zone. ``resources``, ``accelerator_type`` and ``label_selector``
are Ray's own terms, read from the Ray resources and labels the node joined with
(``NodeRecord.ray_resources``, ``ray_labels``). ``when_full="wait"`` waits on the slot filters (cpu, memory, concurrency, gpu_capacity).

Key components, smaller wins (``KEY_COMPONENTS``): resilience_violations, launching,
avoided_spare, tier, warmth, reservation, preferred_spare, packing, same_zone, node_id.
Packing ranks by ``NodeRecord.load`` = max(reported utilisation, reserved CPUs / (CPUs x
utilization_cap), running / max_concurrent_tasks): emptier first under spread, fuller under binpack.

Acting is separate: ``fleet.commit(decision)`` reserves, ``fleet.release(allocation)`` gives
back; counting placements and fallbacks (``decision.fallback_levels > 0``) is the scheduler's.
``place_many`` commits as it goes on the fleet it is given (pass ``fleet.copy()`` to keep one
untouched); ``dry_run`` is ``place`` with a trace.

``place`` is the fast engine (``fabric.core.placement.fast``); ``fabric.core.placement.reference.place``
is the plain one it is tested against (same decisions, same traces).

Modules: ``ray_terms`` (Ray's resources, label selector and accelerator type in a requirement;
``RayCallOptions``), ``requirement`` (Requirement), ``context`` (PlacementContext, Peer), ``records``
(NodeRecord), ``fleet`` (FleetView, FleetSnapshot), ``filters`` (the chain,
GPU choice, provisioning fit), ``keys`` (the key), ``walk`` (step order, decision builders),
``reference``, ``fast``, ``decision`` (Decision, Allocation), ``trace`` (PlacementTrace,
TraceStep), ``explain``, ``synth`` (synthetic fleets for tests and the benchmark).

Imports inside the package run one way (an import-linter ``acyclic_siblings`` contract checks
it): ray_terms < requirement, context, trace < records < filters < keys < explain < decision < walk, fleet <
reference < fast.
"""

from __future__ import annotations

from fabric.core.placement.context import TASK_CONTEXT, Peer, PlacementContext
from fabric.core.placement.decision import Allocation, Decision
from fabric.core.placement.fast import dry_run, place, place_many
from fabric.core.placement.filters import FILTER_NAMES, SLOT_FILTERS
from fabric.core.placement.fleet import FleetSnapshot, FleetView
from fabric.core.placement.keys import KEY_COMPONENTS
from fabric.core.placement.records import NodeRecord
from fabric.core.placement.requirement import Requirement
from fabric.core.placement.trace import PlacementTrace, TraceStep

__all__ = [
    "Allocation", "Decision", "FILTER_NAMES", "FleetSnapshot", "FleetView", "KEY_COMPONENTS", "NodeRecord", "Peer",
    "PlacementContext", "PlacementTrace", "Requirement", "SLOT_FILTERS", "TASK_CONTEXT",
    "TraceStep", "dry_run", "place", "place_many",
]

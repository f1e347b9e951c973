"""Hot spares, pure: what one pool's spares need, as decisions an actor carries out.

Modules: ``decisions`` (Provision, Abandon, Reap, Tag, Underflow, Prefetch), ``state``
(SpareState: provisions in flight, backoff, activity; ``validate_state``; the provision lifecycle,
``ProvisionPhase``, is the one every provision shares: ``fabric.core.provision_phase``),
``reconcile`` (``reconcile(pool, spec, fleet, settings, state, now, templates) -> [decision]``,
``survey``, warmth) and ``entries`` (the live list validated whole, ``diff_hot_spares``,
``spare_spec``); ``rows`` (a spare provision in flight as a versioned row, which the scheduler keeps
across restarts; not imported here). No Ray, no I/O, no clock reads: time comes in as an argument.
"""

from fabric.core.provision_phase import PROVISION_LIFECYCLE, ProvisionPhase
from fabric.core.spares.decisions import Abandon, Prefetch, Provision, Reap, SpareDecision, SpareTags, Tag, Underflow
from fabric.core.spares.entries import SpareSpec, diff_hot_spares, parse_hot_spares, spare_spec, validate_hot_spares
from fabric.core.spares.reconcile import PoolSpares, reconcile, survey, warm_artifacts, warm_units, warmth
from fabric.core.spares.state import BACKOFF_S, InFlight, SpareState, validate_state

__all__ = ["Abandon", "BACKOFF_S", "InFlight", "PROVISION_LIFECYCLE", "PoolSpares", "Prefetch", "Provision",
           "ProvisionPhase", "Reap", "SpareDecision", "SpareSpec", "SpareState", "SpareTags", "Tag", "Underflow",
           "diff_hot_spares", "parse_hot_spares", "reconcile", "spare_spec", "survey", "validate_hot_spares",
           "validate_state", "warm_artifacts", "warm_units", "warmth"]

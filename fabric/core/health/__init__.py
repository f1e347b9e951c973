"""The health rules of the fleet, pure: membership and health (``policy``), probe restarts
(``probes``), degradation (``degradation``), Ray's node table as the rules read it (``nodes``)
and the injected clock (``clock``). Nothing here does I/O or imports Ray; the monitor actor
(``actors/health.py``) gathers the facts, calls these and applies what they decide.

Modules import one way: clock, nodes, degradation < probes, policy (an import-linter
``acyclic_siblings`` contract checks it).
"""

from __future__ import annotations

from fabric.core.clock import Clock, ManualClock
from fabric.core.health.degradation import detect_degradation
from fabric.core.health.nodes import RayNodeView
from fabric.core.health.policy import Event, FlapHistory, HealthPolicy, NodeHealth
from fabric.core.health.probes import ProbeRestarts, ProbeWatch

__all__ = [
    "Clock", "Event", "FlapHistory", "HealthPolicy", "ManualClock", "NodeHealth", "ProbeRestarts", "ProbeWatch", "RayNodeView",
    "detect_degradation",
]

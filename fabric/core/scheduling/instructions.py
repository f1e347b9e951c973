"""What ``SchedulerCore.handle`` asks the actor to do. Every instruction carries the
``stimulus_id`` of the stimulus that produced it; it takes no part in equality, so a test can
compare instructions by what they ask for.

- ``Answer`` / ``Refused``: the reply to the caller of the stimulus itself (a ``NodeAssignment``,
  a ``LeaseGrant``; or the error its request fails with). ``reply`` picks it out of a list.
- ``Placed`` / ``Expired``: wake the caller waiting on a queued request (found a node; timed out).
- ``MarkDraining`` / ``SetCordoned``: write a node's drain or cordon to the registry.
- ``ProvisionNode`` / ``TerminateNode``: ask a pool tier's provider for a node, or to give one back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Union

from fabric.core.errors import CapacityError, FabricError
from fabric.core.settings import NodeShape

from fabric.core.scheduling.replies import NodeAssignment


@dataclass(frozen=True, slots=True)
class Answer:
    """The stimulus's reply to its caller."""

    value: Any
    """A ``NodeAssignment`` (place, select) or a ``LeaseGrant`` (lease)."""
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Refused:
    """The stimulus's request fails with ``error`` and changed nothing it asked for (a hard
    requirement no node serves, a requirement naming what the settings do not know, an unknown node)."""

    error: FabricError
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Placed:
    """A queued request found a node: dispatch it there."""

    request_id: str
    assignment: NodeAssignment
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Expired:
    """A queued request waited past its deadline: fail it with this error."""

    request_id: str
    error: CapacityError
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class MarkDraining:
    """A drained node has no fabric work left (or its grace ran out): set its registry status."""

    node_id: str
    reason: str = field(default="", compare=False, kw_only=True)
    """Why, for the registry's record of the change (its work ended, or the grace ran out)."""
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class SetCordoned:
    """Record the node's cordon (or its withdrawal) in the registry."""

    node_id: str
    cordoned: bool
    reason: str = field(default="", compare=False, kw_only=True)
    """Why, for the registry's record (``operator cordon``, ``operator drain``...)."""
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class ProvisionNode:
    """Have ``provider`` start a node of ``shape`` for ``pool`` / ``pool_tier``; report back with
    ``ProvisionStarted`` (its instance id) or ``ProvisionFailed``."""

    provision_id: str
    provider: str
    pool: str
    pool_tier: str
    shape: NodeShape
    reason: str = field(default="", compare=False, kw_only=True)
    stimulus_id: str = field(default="", compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class TerminateNode:
    """Have ``provider`` terminate the node ``instance_id`` it made (an abandoned provision, an idle
    provisioned node scaled down)."""

    provider: str
    instance_id: str
    node_id: str | None = None
    """The Ray node it registered as, when it did (a ``ray-autoscaler`` node's probe leaves it then)."""
    reason: str = field(default="", compare=False, kw_only=True)
    stimulus_id: str = field(default="", compare=False, kw_only=True)


Instruction = Union[Answer, Refused, Placed, Expired, MarkDraining, SetCordoned, ProvisionNode, TerminateNode]

REGISTRY_WRITES = (MarkDraining, SetCordoned)
"""Instructions the actor carries out by writing to the registry, in order."""


def reply(instructions: Iterable[Instruction], stimulus_id: str) -> Any:
    """The value of the ``Answer`` to ``stimulus_id`` (None when there is none); the error of its
    ``Refused`` is raised."""
    for ins in instructions:
        if isinstance(ins, Refused) and ins.stimulus_id == stimulus_id:
            raise ins.error
        if isinstance(ins, Answer) and ins.stimulus_id == stimulus_id:
            return ins.value
    return None

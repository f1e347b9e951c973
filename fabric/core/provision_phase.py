"""The life of a provision, shared by every kind of provision the fabric asks a provider for.

Both kinds live the same life, so they share one phase enum and one table (``Lifecycle``, STYLE.md
habit 4): the task core's provisions (``fabric.core.scheduling.provisions.PendingProvision`` in its
``ProvisionBook``) and a spare reconciler's (``fabric.core.spares.state.InFlight`` in its
``SpareState``, kept by the scheduler as ``fabric.core.spares.rows.KeptSpareProvision``).

``asked`` (a provider was asked to start a node) -> ``started`` (it answered with an instance id)
-> ``registered`` (the node joined the fleet). ``failed`` (the provider raised) and ``abandoned``
(timed out, or given up) end it early, from either ``asked`` or ``started``; an ``asked`` provision
may also register straight away (a ``ray-autoscaler`` node claimed by its pool tier before its
provider answered). The three ends are terminal; nothing goes back to ``asked``. A move outside
the table raises ``TransitionError`` naming the provision.

Only the in-flight phases (``IN_FLIGHT``) are ever persisted: a provision's row is deleted when it
ends. A row written before the phase was kept has none; ``phase_for`` derives it (an instance id
means the provider answered: ``started``).
"""

from __future__ import annotations

from enum import Enum

from fabric.core.lifecycle import Lifecycle


class ProvisionPhase(str, Enum):
    ASKED = "asked"
    """A provider was asked to start the node; it has not answered."""
    STARTED = "started"
    """The provider answered with the node's instance id; the node has not joined yet."""
    REGISTERED = "registered"
    """The node joined the fleet: the provision is fulfilled."""
    FAILED = "failed"
    """The provider could not start the node."""
    ABANDONED = "abandoned"
    """Given up: its timeout passed (or its pool no longer wants it); what was started is terminated."""

    def __str__(self) -> str:
        return self.value


_P = ProvisionPhase
_ENDS = (_P.REGISTERED, _P.FAILED, _P.ABANDONED)
PROVISION_LIFECYCLE: Lifecycle[ProvisionPhase] = Lifecycle(ProvisionPhase, [
    (_P.ASKED, _P.STARTED), *((_P.ASKED, to) for to in _ENDS), *((_P.STARTED, to) for to in _ENDS),
], reasons={_P.STARTED: "the provider answered already: a started provision does not go back to asked"})
"""Every move a provision may make (``PROVISION_LIFECYCLE.table()`` for the table)."""

IN_FLIGHT = frozenset({_P.ASKED, _P.STARTED})
"""The phases of a provision not yet ended (the only ones a book holds or a row keeps)."""


def phase_for(instance_id: str | None) -> ProvisionPhase:
    """The in-flight phase a provision known only by its instance id is in: ``started`` once the
    provider answered one, else ``asked`` (a row written before phases were kept, a provision built
    without one)."""
    return _P.ASKED if instance_id is None else _P.STARTED


__all__ = ["IN_FLIGHT", "PROVISION_LIFECYCLE", "ProvisionPhase", "phase_for"]

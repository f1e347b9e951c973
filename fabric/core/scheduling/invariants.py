"""The scheduler core's invariants, checked together (``SchedulerCore.validate_state``).

Each part checks its own (``problems()``); this adds what ties them: an allocation belongs to a
node in the fleet and to a call or a lease the lease book holds (and that lease lists it), the
fleet's usage is the ledger's sum, a drain's node is in the fleet and cordoned, counters are
never negative. Every scheduler test runs it, after every step in the property and fuzz tests.

It reads the core through ``CoreState``, the parts a check needs, so it imports the parts and not
``fabric.core.scheduling.core`` (which imports this module to validate itself)."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from fabric.core.placement import FleetView
from fabric.core.scheduling.drain import DrainBook
from fabric.core.scheduling.leases import LeaseBook
from fabric.core.scheduling.ledger import TASK, AllocationLedger
from fabric.core.scheduling.provisions import ProvisionBook
from fabric.core.scheduling.queue import DeferredQueue


class CoreState(Protocol):
    """What the invariants read of a scheduler core (``SchedulerCore`` is one)."""

    @property
    def counters(self) -> Mapping[str, object]:
        """Every counter by name: each a non-negative ``int``."""
        ...

    @property
    def stimuli_handled(self) -> int:
        """How many stimuli the core has handled: never fewer than it logged."""
        ...

    def stimulus_log(self) -> list[dict[str, Any]]:
        """The stimuli the core logged (bounded)."""
        ...

    @property
    def fleet(self) -> FleetView: ...

    @property
    def ledger(self) -> AllocationLedger: ...

    @property
    def queue(self) -> DeferredQueue: ...

    @property
    def leases(self) -> LeaseBook: ...

    @property
    def drains(self) -> DrainBook: ...

    @property
    def provisions(self) -> ProvisionBook: ...


class InvalidStateError(AssertionError):
    """The scheduler core's state broke an invariant: ``problems`` lists each one, in words."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("scheduler state is inconsistent:\n  " + "\n  ".join(self.problems))


def state_problems(core: CoreState) -> list[str]:
    """Every invariant the core breaks, in words (empty when none)."""
    out: list[str] = []
    for name, value in core.counters.items():
        if not isinstance(value, int) or value < 0:
            out.append(f"counters: {name} is {value!r}")
    if core.stimuli_handled < len(core.stimulus_log()):
        out.append("log: more stimuli logged than handled")
    out += core.queue.problems()
    lease_ids = set(core.leases.ids())
    out += core.ledger.problems(core.fleet, lease_ids)
    owners = {e.allocation.allocation_id: e.owner for e in core.ledger.entries()}
    out += core.leases.problems(owners)
    for e in core.ledger.entries():
        lease = core.leases.get(e.owner) if e.owner != TASK else None
        if lease is not None and e.allocation.allocation_id not in lease.allocation_ids:
            out.append(f"leases: allocation {e.allocation.allocation_id} is filed under lease {e.owner!r}, which does not list it")

    def cordoned(node_id: str) -> bool:
        rec = core.fleet.get(node_id)
        return rec is not None and rec.cordoned

    out += core.drains.problems(core.fleet.__contains__, cordoned)
    out += core.provisions.problems(r.node_id for r in core.fleet.records())
    return out

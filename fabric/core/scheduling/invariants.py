"""The scheduler core's invariants, checked together (``SchedulerCore.validate_state``).

Each part checks its own (``problems()``); this adds what ties them: an allocation belongs to a
node in the fleet and to a call or a lease the lease book holds (and that lease lists it), the
fleet's usage is the ledger's sum, a drain's node is in the fleet and cordoned, counters are
never negative. Every scheduler test runs it, after every step in the property and fuzz tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fabric.core.scheduling.ledger import TASK

if TYPE_CHECKING:
    from fabric.core.scheduling.core import SchedulerCore


class InvalidStateError(AssertionError):
    """The scheduler core's state broke an invariant: ``problems`` lists each one, in words."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("scheduler state is inconsistent:\n  " + "\n  ".join(self.problems))


def state_problems(core: "SchedulerCore") -> list[str]:
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

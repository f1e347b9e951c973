"""Settings of the fence: how long a job instance may serve without the fabric (``fence:``).

Every job instance holds a lease it renews with the scheduler every ``renew_every_s``. Its lease
runs ``lease_ttl_s`` from the moment it *sent* the renewal the scheduler granted, on its own
clock; with no grant for that long it ends its own process. The scheduler, on its clock, starts
a replacement for an instance it lost track of (its node lost, or no renewal) only once
``lease_ttl_s + margin_s`` have passed since the last renewal it granted: by then the old instance
has surely stopped, cut off or not, so no job ever has two instances serving. Only durations are
compared, each measured on one side."""

from __future__ import annotations

from pydantic import model_validator

from fabric.core.settings_types import NonNegFloat, PositiveSeconds, SettingsModel


class FenceSettings(SettingsModel):
    """The job instances' leases (the fence that keeps a job to one serving instance)."""

    lease_ttl_s: PositiveSeconds = 20.0
    """How long an instance serves after the last renewal the scheduler granted; then it ends its
    own process (a node cut off from the fabric stops its jobs by itself)."""
    renew_every_s: PositiveSeconds = 4.0
    """How often an instance renews its lease; at most half of ``lease_ttl_s``, so one lost renewal
    is not the end of it."""
    margin_s: NonNegFloat = 2.0
    """What the scheduler waits beyond ``lease_ttl_s`` before a replacement starts: room for two
    clocks that tick at slightly different rates and for the old process to end."""

    @model_validator(mode="after")
    def _renew_well_within_the_lease(self) -> "FenceSettings":
        if self.renew_every_s * 2 > self.lease_ttl_s:
            raise ValueError(f"renew_every_s ({self.renew_every_s:g}) must be at most half of lease_ttl_s "
                             f"({self.lease_ttl_s:g})")
        return self

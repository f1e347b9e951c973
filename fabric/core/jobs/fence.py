"""The fence: at most one serving instance of a job, whatever the network does.

Every instance holds a lease. It asks the scheduler to renew it every ``renew_every_s``; the jobs
core grants a renewal only to the instance the job is bound to (or a migration's target), and
notes when (``Leases.granted``). The instance counts its lease from the moment it *sent* the
renewal that was granted, on its own clock, and ends its own process ``lease_ttl_s`` later
without a newer grant; it runs its user's constructor only once it holds one.

So the last moment an instance can serve is the last grant plus ``lease_ttl_s`` (a send is never
after the grant it gets), and the core starts a replacement for an instance it lost track of (its
actor reported dead with its node, its renewals stopped) only past ``Leases.ends``: the last grant,
plus ``lease_ttl_s``, plus ``margin_s``. Ray declaring a node dead is no fence (the cut-off side
never hears it); this is. A node the fleet loses (offline) while its instances' leases are live
takes nothing away at once: those instances are ``suspects``, still their jobs', until their leases
end without a renewal (the jobs recover then, as they could at the earliest anyway) or a renewal
comes back (a link that healed in time: nothing moved).

After a scheduler restart the grants are unknown: every lease may have been renewed just before,
so the restart's time stands in for each instance bound then (``floors``). An instance that never
got a grant never served, and once its job is unbound it never will (its renewals are refused).

Pure: the core's clock is the only clock (durations on the scheduler's side only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fabric.core.settings_fence import FenceSettings

GRANTED = "granted"
REFUSED = "refused"


@dataclass
class Leases:
    """The grants the core made, by instance key."""

    settings: FenceSettings = field(default_factory=FenceSettings)
    grants: dict[str, float] = field(default_factory=dict)
    """Instance key -> the core's time of the last renewal granted."""
    floors: dict[str, float] = field(default_factory=dict)
    """Instance key -> a restart's time, for each instance bound when the core restarted: its lease
    may have been renewed up to then."""

    suspects: dict[str, str] = field(default_factory=dict)
    """Instance key -> node: instances on a node the fleet lost while their leases were live. They
    stay their jobs' until the lease ends without a renewal (then the job recovers) or a renewal
    comes (the link is back: nothing moved)."""

    def granted(self, key: str, now: float) -> None:
        self.grants[key] = now
        self.suspects.pop(key, None)

    def live(self, key: str, now: float) -> bool:
        """Whether ``key``'s instance may still hold its lease at ``now``."""
        ends = self.ends(key)
        return ends is not None and ends > now

    def last_grant(self, key: str) -> float | None:
        """When ``key``'s lease was last renewed, as far as anyone can tell (None: never)."""
        times = [t for t in (self.grants.get(key), self.floors.get(key)) if t is not None]
        return max(times) if times else None

    def ends(self, key: str) -> float | None:
        """When ``key``'s instance has surely stopped serving (None: it never held a lease)."""
        last = self.last_grant(key)
        return None if last is None else last + self.settings.lease_ttl_s + self.settings.margin_s

    def expired(self, now: float) -> list[str]:
        """Keys granted a renewal (since this core began) whose leases have surely ended: their
        instances stopped themselves."""
        limit = self.settings.lease_ttl_s + self.settings.margin_s
        out = [k for k, at in self.grants.items() if now > at + limit]
        return out + [k for k in self.suspects if k not in self.grants and not self.live(k, now)]

    def forget(self, key: str) -> None:
        self.grants.pop(key, None)
        self.floors.pop(key, None)
        self.suspects.pop(key, None)

    def restarted(self, now: float, keys: list[str]) -> None:
        """A restarted core: what was granted before is unknown, so the lease of each instance in
        ``keys`` (those bound, and migrations' targets) counts as renewed now."""
        self.grants.clear()
        self.suspects.clear()
        self.floors = {k: now for k in keys}

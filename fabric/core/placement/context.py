"""Placement context for long-running work (jobs, bundle replicas, recovery, migration).

A task is placed by its ``Requirement`` alone; a job also carries *where it stands*: which
replica it is and where the other replica sits (best-effort resilience), which peers of its own
replica are already placed (intra-replica rules), whether it is recovering (runtime-failure
policy) or launching (spare policy), a pinned target, nodes to keep away from, its template
(warmth and spare reservation).

``PlacementContext()`` (all defaults) is what a plain task gets: no peers, no pin, and the
launch spare policy ``avoid_spare`` (hot spares are reserve; the ``onLaunch`` default).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from fabric.core.errors import RequirementError

_ALLOW_FORBID = ("allow", "forbid")
_ZONE_RULE = ("hard", "soft", "off")
_FAILURE = ("prefer_spare", "avoid_spare", "drop")
_LAUNCH = ("avoid_spare", "allow_spare")


@dataclass(frozen=True, slots=True)
class Peer:
    """A job of the same replica that is already placed."""

    job: str
    """The peer's job name within the replica."""
    node_id: str
    """Where it runs."""
    zone: str | None = None
    """That node's zone (for the intra-replica zone rule)."""
    rule_less: bool = True
    """The peer declared neither ``co_locate_with`` nor ``separate_from`` (``same_node_default``)."""


@dataclass(frozen=True, slots=True)
class PlacementContext:
    """Where a job stands when it is placed. Every field has a default that means "no rule"."""

    replica_index: int = 0
    """0 for the primary, 1 for the backup (at most one backup)."""
    other_node: str | None = None
    """Node of the other replica's copy of this job, when it is placed."""
    other_zone: str | None = None
    """Zone of that node."""
    other_cloud: str | None = None
    """Cloud of that node."""
    same_node: str = "allow"
    """``forbid``: best-effort, keep off the other replica's node."""
    same_az: str = "allow"
    """``forbid``: best-effort, keep out of the other replica's zone."""
    same_cloud: str = "allow"
    """``forbid``: best-effort, keep out of the other replica's cloud."""
    job: str | None = None
    """This job's name within its replica (peers refer to it by this name)."""
    job_id: str | None = None
    """Fleet-wide job id; a committed allocation binds it to the node."""
    co_locate_with: tuple[str, ...] = ()
    """Hard: run on the node of each of these peers that is placed."""
    separate_from: tuple[str, ...] = ()
    """Hard: never on the node of any of these peers."""
    group_separate_from: tuple[str, ...] = ()
    """Hard, inherited: peers kept apart from another job of this job's co-location group (or from
    this job, through theirs). The group shares one node, so the first of it placed again after a
    failure must already keep off their nodes, or the rest of the group could never follow."""
    same_node_default: bool = False
    """Hard: a job that declares neither rule co-locates with every rule-less placed peer."""
    group_cpus: float = 0.0
    """The CPUs this job's whole co-location group asks for (0: no group). While none of the group
    is placed, the first of it takes a node (or has one provisioned) that fits them all."""
    group_memory_mib: float = 0.0
    """The memory the whole group asks for, likewise."""
    group_jobs: int = 0
    """How many jobs the group holds (each takes a slot), likewise."""
    intra_zone: str = "soft"
    """Intra-replica zone rule: ``hard`` (must share a placed peer's zone), ``soft`` (ranks), ``off``."""
    peers: tuple[Peer, ...] = ()
    """Jobs of the same replica already placed."""
    target_node: str | None = None
    """Hard pin (migration target); a pinned placement never provisions."""
    exclude_nodes: frozenset[str] = field(default_factory=frozenset)
    """Recovery exclusion: never these nodes (the node the job just failed on, a migration source)."""
    recovering: bool = False
    """True when re-placing after a runtime failure: ``on_runtime_failure`` is the spare policy."""
    on_runtime_failure: str = "avoid_spare"
    """``prefer_spare`` | ``avoid_spare`` | ``drop`` (a dropped job is never re-placed)."""
    launch_policy: str = "avoid_spare"
    """First placement: ``avoid_spare`` ranks unconsumed spares last; ``allow_spare`` lifts that."""
    override_reservation: bool = False
    """May take a spare exclusively reserved for other templates."""
    template: str | None = None
    """The job's template (warmth, spare reservation)."""
    template_images: tuple[str, ...] = ()
    """Images the template needs; warmth counts those a node holds (default: the template itself)."""

    def __post_init__(self) -> None:
        for name in ("same_node", "same_az", "same_cloud"):
            if getattr(self, name) not in _ALLOW_FORBID:
                raise RequirementError(name, f"must be 'allow' or 'forbid'; got {getattr(self, name)!r}", getattr(self, name))
        if self.intra_zone not in _ZONE_RULE:
            raise RequirementError("intra_zone", f"must be one of {', '.join(_ZONE_RULE)}", self.intra_zone)
        if self.on_runtime_failure not in _FAILURE:
            raise RequirementError("on_runtime_failure", f"must be one of {', '.join(_FAILURE)}", self.on_runtime_failure)
        if self.launch_policy not in _LAUNCH:
            raise RequirementError("launch_policy", f"must be one of {', '.join(_LAUNCH)}", self.launch_policy)
        if self.recovering and self.on_runtime_failure == "drop":
            raise RequirementError("on_runtime_failure", "a job whose policy is 'drop' is never re-placed", "drop")
        if self.replica_index not in (0, 1):
            raise RequirementError("replica_index", "0 (primary) or 1 (backup)", self.replica_index)
        if not isinstance(self.exclude_nodes, frozenset):
            object.__setattr__(self, "exclude_nodes", frozenset(self.exclude_nodes))

    # -- what the engine reads -------------------------------------------------------------
    @property
    def avoid_spares(self) -> bool:
        """Whether the policy in force ranks an unconsumed spare last (key component 3)."""
        if self.recovering:
            return self.on_runtime_failure == "avoid_spare"
        return self.launch_policy == "avoid_spare"

    @property
    def prefer_spares(self) -> bool:
        """Whether an unconsumed spare ranks first among equals (key component 7)."""
        return self.recovering and self.on_runtime_failure == "prefer_spare"

    @property
    def images(self) -> tuple[str, ...]:
        """What warmth is counted against."""
        if self.template_images:
            return self.template_images
        return (self.template,) if self.template else ()

    @property
    def resilience_forbids(self) -> bool:
        """Any ``forbid`` flag with the other replica placed."""
        return self.other_node is not None and "forbid" in (self.same_node, self.same_az, self.same_cloud)

    def sized_for(self, group: Sequence[Any]) -> "PlacementContext":
        """This context for the first of a co-location group placed, ``group`` the requirements of
        every job of it (this one's included): its node is chosen for all of them (``need``)."""
        return replace(self, group_cpus=sum(r.num_cpus for r in group), group_memory_mib=sum(r.memory_mib for r in group),
                       group_jobs=len(group))

    def need(self, req: Any) -> tuple[float, float, int]:
        """The CPUs, memory and slots a node must have free for ``req`` placed in this context: the
        whole co-location group's while none of it is placed (its first mover sizes the node for
        all of them), else ``req``'s own and one slot. What is reserved is always ``req``'s own."""
        if self.group_jobs > 1 and not self.co_locate_nodes:
            return max(req.num_cpus, self.group_cpus), max(req.memory_mib, self.group_memory_mib), self.group_jobs
        return req.num_cpus, req.memory_mib, 1

    @property
    def co_locate_nodes(self) -> frozenset[str]:
        """Nodes this job must run on (each placed co-location peer's node)."""
        wanted = set(self.co_locate_with)
        if self.same_node_default and not self.co_locate_with and not self.separate_from:
            return frozenset(p.node_id for p in self.peers if p.rule_less or p.job in wanted)
        return frozenset(p.node_id for p in self.peers if p.job in wanted)

    @property
    def separate_nodes(self) -> frozenset[str]:
        """Nodes this job must not run on."""
        avoid = set(self.separate_from) | set(self.group_separate_from)
        return frozenset(p.node_id for p in self.peers if p.job in avoid)

    @property
    def peer_zones(self) -> frozenset[str]:
        """Zones of placed peers (for the intra-replica zone rule)."""
        return frozenset(p.zone for p in self.peers if p.zone is not None)

    @property
    def simple(self) -> bool:
        """True when key components 1, 5, 6, 7 and 9 are equal for every node (the fast path)."""
        return (
            not self.resilience_forbids
            and not self.images
            and self.template is None
            and not self.prefer_spares
            and not (self.intra_zone == "soft" and self.peer_zones)
        )


#: The context of a plain task.
TASK_CONTEXT = PlacementContext()

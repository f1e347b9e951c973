"""Bundles: the unit of long-running work an operator submits (a bundle).

A ``Bundle`` runs a **primary** copy (replica 0) and, only when it carries a ``ResiliencePolicy``,
one **backup** (replica 1); the copy count is derived (``replica_count``), never set. Each copy holds
the bundle's ``BundleJob``s, the atomic placeable units. ``Bundle.expand`` turns the bundle into one
``ReplicaJob`` per (replica, job), each with the ``JobSpec`` the scheduler keeps; ``Bundle.context``
builds the ``PlacementContext`` the engine places one of them with: the resilience flags (the
backup's, best-effort), the intra-replica rules (hard), the spare policy in force.

The models check the *shape* of what they are given (types, literals, name lengths) and refuse a
bad field with a pydantic ``ValidationError`` naming it. What only makes sense across the bundle
(duplicate names, rules naming unknown jobs, rules that contradict each other, ``single_use``
without ``exclusive``, pools and capabilities the settings do not know) is
``fabric.core.jobs.validation``'s: it reports every such problem at once instead of the first.

A co-location rule is a *group*: ``a.co_locate_with=["b"]`` puts a and b (and whatever either is
co-located with) on one node, whichever of them is placed first; ``same_node_default`` adds every
job that declares neither rule to one group. A separation rule holds both ways. ``context`` hands
the engine the closure, so the order jobs are placed in does not change what the rules mean.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, Iterable, Literal, Mapping, TypeVar

from pydantic import (
    AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, StrictInt, ValidatorFunctionWrapHandler,
    field_validator, model_validator,
)

from fabric.core.errors import InvalidSpecError, RequirementError
from fabric.core.jobs.spec import MAX_HOURLY_RESTARTS, MAX_NAME, MAX_RULES, JobSpec, start_at_seconds
from fabric.core.placement import Peer, PlacementContext, Requirement
from fabric.core.settings import FabricSettings

#: Most jobs one bundle may hold (per replica).
MAX_JOBS = 64
#: Longest pool name a bundle may name (the requirement's own bound).
MAX_POOL_NAME = 256

AllowForbid = Literal["allow", "forbid"]
PeerTuple = tuple[str, str] | tuple[str, str, str | None]
"""A placed peer as ``(job, node_id[, zone])`` (``Bundle.context`` also takes ``Peer``s)."""


def _printable(value: str) -> str:
    if not value.isprintable():
        raise ValueError("must be printable (no control characters)")
    return value


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME), AfterValidator(_printable)]
"""A bundle id, job name, template or rule entry: non-empty, printable, at most 128 characters."""
PoolName = Annotated[str, Field(min_length=1, max_length=MAX_POOL_NAME), AfterValidator(_printable)]


_REQUIREMENT_FIELDS = frozenset(inspect.signature(Requirement).parameters) - {"preset"}


def no_defaults(cls: Any) -> JobSpec | None:
    return None


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True, use_attribute_docstrings=True)


class ResiliencePolicy(_Model):
    """Present on a bundle: a backup replica (index 1) is expanded too. Its flags are best-effort
    (the placement key's first component), never hard: reported through ``resilience_degraded``."""

    pool: PoolName | None = None
    """Where the backup goes (None: the bundle's pool). The cross-cloud DR pattern."""
    same_node: AllowForbid = "forbid"
    """``forbid``: keep the backup off the primary's node whenever a compliant node fits."""
    same_zone: AllowForbid = "forbid"
    """``forbid``: keep it out of the primary's zone."""
    same_cloud: AllowForbid = "allow"
    """``forbid``: keep it out of the primary's cloud."""


class BundleJob(_Model):
    """One job of a bundle (each replica runs a copy). Fields left None take the defaults of the
    job's class (its ``@adaptive.remote`` options, passed to ``to_spec``), else ``JobSpec``'s."""

    name: Name
    """Unique within the bundle; rules and ``start_bundle_job`` refer to it."""
    cls: Any = None
    """The class to run (pickled beside the job's spec; the scheduler never imports it)."""
    args: tuple[Any, ...] = ()
    """Constructor positional arguments."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Constructor keyword arguments."""
    requirement: Requirement = Field(default_factory=Requirement)
    """What the job needs. A dict is ``Requirement(**dict)``; its keys are also what overrides the
    class's decorator requirement (or the ``operation`` preset) in ``to_spec``. A ``Requirement`` is
    used as it is."""
    operation: Name | None = None
    """A named requirement preset of the settings (``requirement`` keys override its fields); may
    also be given as ``requirement={"operation": ...}``."""
    on_runtime_failure: Literal["prefer_spare", "avoid_spare", "drop"] | None = None
    """Re-place preferring a spare, re-place avoiding spares, or do not re-place."""
    max_restarts_per_hour: Annotated[StrictInt, Field(ge=0, le=MAX_HOURLY_RESTARTS)] | None = None
    """The job's own restart ceiling (None: its policy's, else the flat setting)."""
    essential: StrictBool | None = None
    """Losing it for good breaks the bundle (None: the class's, else True)."""
    template: Name | None = None
    """Template for warmth and spare reservation."""
    co_locate_with: Annotated[list[Name], Field(max_length=MAX_RULES)] = Field(default_factory=list)
    """Hard: on one node with these jobs of the same replica."""
    separate_from: Annotated[list[Name], Field(max_length=MAX_RULES)] = Field(default_factory=list)
    """Hard: never on a node with these jobs of the same replica."""
    exclusive: StrictBool = False
    """A node of its own (co-located peers excepted); sets the requirement's ``exclusive``."""
    single_use: StrictBool = False
    """Terminate its (provisioned) node when it ends; needs ``exclusive``."""
    start_mode: Literal["auto", "manual"] = "auto"
    """``manual``: expanded but dormant until ``start_bundle_job``."""
    backup_overrides: dict[str, Any] = Field(default_factory=dict)
    """Constructor keyword arguments that differ on the backup (merged over ``kwargs`` there)."""
    start_at: float | None = None
    """When the job starts: a timezone-aware ``datetime`` or epoch seconds, held as epoch seconds.
    Until its pool tier's ``placement_lead_s`` before it the job waits ``scheduled`` (None: the
    class's, else at once)."""
    drain_strategy: Literal["stop_then_start", "overlap", "handover"] | None = None
    """How a drain of its node migrates it (None: the class's, else the settings' default); a
    strategy given on the drain call beats it."""

    _given: frozenset[str] | None = PrivateAttr(default=None)
    """Keys of a requirement given as a dict (None: given as a ``Requirement``)."""

    @model_validator(mode="wrap")
    @classmethod
    def _keep_requirement_keys(cls, data: object, handler: ValidatorFunctionWrapHandler) -> "BundleJob":
        given: frozenset[str] | None = frozenset()
        if isinstance(data, Mapping) and "requirement" in data:
            req = data["requirement"]
            if isinstance(req, Mapping):
                req = dict(req)
                data = dict(data)
                if "operation" in req:
                    op = req.pop("operation")
                    if data.get("operation") not in (None, op):
                        raise ValueError("operation: given twice with different values (field and requirement key)")
                    data["operation"] = op
                data["requirement"] = req
                given = frozenset(k for k in req if isinstance(k, str))
            elif isinstance(req, Requirement):
                given = None
        job: BundleJob = handler(data)
        if isinstance(data, Mapping):
            if given is None and job.operation is not None:
                raise ValueError("operation: a preset takes its overrides as a requirement dict, not a Requirement")
            job._given = given
        return job

    @field_validator("start_at", mode="before")
    @classmethod
    def _start_at(cls, value: object) -> float | None:
        try:
            return start_at_seconds(value)
        except RequirementError as e:
            raise ValueError(e.reason) from e

    @field_validator("requirement", mode="before")
    @classmethod
    def _build_requirement(cls, value: object) -> Requirement:
        if isinstance(value, Requirement):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"must be a mapping of Requirement fields or a Requirement, got {type(value).__name__}")
        unknown = sorted(repr(k) for k in value if k not in _REQUIREMENT_FIELDS)
        if unknown:
            raise ValueError(f"unknown requirement field(s) {', '.join(unknown)}")
        return Requirement(**value)  # a RequirementError is a ValueError: pydantic names the field

    # -- derived ---------------------------------------------------------------------------
    @property
    def rule_less(self) -> bool:
        """Declares neither ``co_locate_with`` nor ``separate_from`` (``same_node_default``)."""
        return not self.co_locate_with and not self.separate_from

    def requirement_for(self, defaults: JobSpec | None = None, settings: FabricSettings | None = None) -> Requirement:
        """The job's requirement before its replica's pool is applied: the ``operation`` preset (from
        ``settings``; None: the default settings) or the class's decorator requirement, with the
        keys given here over it; ``exclusive=True`` applied. ``RequirementError`` names a bad field."""
        given = self._given
        if given is None:  # a Requirement object: used as it is
            req = self.requirement
        else:
            overrides = {k: v for k, v in self.requirement.as_kwargs().items() if k in given}
            if self.operation is not None:
                req = Requirement.from_operation(self.operation, settings, **overrides)
            elif defaults is not None and not given:
                req = defaults.requirement
            elif defaults is not None:
                req = defaults.requirement.replace(**overrides)
            else:
                req = self.requirement
        if self.exclusive and not req.exclusive:
            req = req.replace(exclusive=True)
        return req

    def to_spec(self, pool: str | None = None, defaults: JobSpec | None = None, *,
                settings: FabricSettings | None = None) -> JobSpec:
        """The ``JobSpec`` for this job: fields left None here take ``defaults``' values (the class's
        decorator options), else ``JobSpec``'s; the requirement's pool is ``pool`` when given.
        ``InvalidSpecError`` naming the field when the result is inconsistent (a rule naming the
        job itself, ``single_use`` without ``exclusive``, an unknown operation)."""
        try:
            req = self.requirement_for(defaults, settings)
            if pool is not None and req.pool != pool:
                req = req.replace(pool=pool)
            base = defaults if defaults is not None else JobSpec(name=self.name)
            return JobSpec(
                name=self.name, requirement=req,
                on_runtime_failure=_first(self.on_runtime_failure, base.on_runtime_failure),
                max_restarts_per_hour=_first(self.max_restarts_per_hour, base.max_restarts_per_hour),
                essential=_first(self.essential, base.essential),
                template=_first(self.template, base.template),
                co_locate_with=tuple(self.co_locate_with), separate_from=tuple(self.separate_from),
                single_use=self.single_use, start_mode=self.start_mode,
                health_period_s=base.health_period_s, health_timeout_s=base.health_timeout_s,
                health_failures=base.health_failures, call_timeout_s=base.call_timeout_s,
                start_at=_first(self.start_at, base.start_at),
                drain_strategy=_first(self.drain_strategy, base.drain_strategy),
            )
        except RequirementError as e:
            raise InvalidSpecError(f"job {self.name!r}: {e.message}", field=e.field) from e


_T = TypeVar("_T")


def _first(value: _T | None, default: _T) -> _T:
    return default if value is None else value


@dataclass(frozen=True)
class ReplicaJob:
    """One (replica, job) of an expanded bundle: what the runtime starts."""

    replica: int
    name: str
    spec: JobSpec
    cls: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Constructor keyword arguments (the backup's ``backup_overrides`` merged in)."""

    @property
    def key(self) -> str:
        """``"replica/name"``: the key of ``BundleStatus.jobs``."""
        return f"{self.replica}/{self.name}"


class Bundle(_Model):
    """The unit of work an operator submits: a primary copy of its jobs, and a backup copy when it
    carries a resilience policy."""

    bundle_id: Name
    """Unique id (printable, at most 128 characters)."""
    pool: PoolName = "default"
    """The one pool the primary is placed into (walking its tiers in order)."""
    resilience: ResiliencePolicy | None = None
    """Present: a backup replica is expanded too."""
    on_launch: Literal["avoid_spare", "allow_spare"] = "avoid_spare"
    """Whether the bundle's first placement may take an unconsumed hot spare."""
    override_reservation: StrictBool = False
    """May take a spare exclusively reserved for other templates."""
    same_node_default: StrictBool = False
    """Hard: every job declaring neither rule shares one node (per replica)."""
    intra_zone: Literal["hard", "soft", "off"] = "soft"
    """Jobs of one replica share a zone: ``hard`` (must), ``soft`` (ranks), ``off``."""
    jobs: Annotated[list[BundleJob], Field(min_length=1, max_length=MAX_JOBS)]
    """The jobs of each replica."""

    # -- shape -----------------------------------------------------------------------------
    @property
    def replica_count(self) -> int:
        """1, or 2 with a resilience policy (no N-way redundancy)."""
        return 2 if self.resilience is not None else 1

    @property
    def job_names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.jobs)

    def job(self, name: str) -> BundleJob:
        """The job called ``name`` (the first, if the name is duplicated); ``InvalidSpecError``
        (field ``job``) when the bundle has none."""
        for j in self.jobs:
            if j.name == name:
                return j
        raise InvalidSpecError(f"bundle {self.bundle_id!r} has no job {name!r}; jobs: {list(self.job_names)}", field="job")

    def replica_pool(self, replica: int) -> str:
        """The pool replica ``replica`` is placed from; ``InvalidSpecError`` (field ``replica``) for
        a replica the bundle does not have."""
        if isinstance(replica, bool) or replica not in range(self.replica_count):
            raise InvalidSpecError(f"bundle {self.bundle_id!r} has replicas {list(range(self.replica_count))}, not {replica!r}",
                                   field="replica")
        if replica == 1 and self.resilience is not None and self.resilience.pool is not None:
            return self.resilience.pool
        return self.pool

    # -- rules -----------------------------------------------------------------------------
    def co_location_groups(self) -> list[frozenset[str]]:
        """Jobs that share a node, as disjoint groups (union of ``co_locate_with`` edges between jobs
        of the bundle, plus one group of the rule-less jobs under ``same_node_default``); a job with
        no co-location is a group of one. Rules naming unknown jobs are ignored here."""
        names = set(self.job_names)
        parent = {n: n for n in names}

        def find(n: str) -> str:
            while parent[n] != n:
                parent[n] = parent[parent[n]]
                n = parent[n]
            return n

        def union(a: str, b: str) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        for j in self.jobs:
            for other in j.co_locate_with:
                if other in names:
                    union(j.name, other)
        if self.same_node_default:
            rule_less = [j.name for j in self.jobs if j.rule_less]
            for other in rule_less[1:]:
                union(rule_less[0], other)
        groups: dict[str, set[str]] = {}
        for n in names:
            groups.setdefault(find(n), set()).add(n)
        return sorted((frozenset(g) for g in groups.values()), key=lambda g: min(g))

    def co_located_with(self, name: str) -> frozenset[str]:
        """The other jobs of ``name``'s co-location group."""
        for g in self.co_location_groups():
            if name in g:
                return g - {name}
        return frozenset()

    def separated_from(self, name: str) -> frozenset[str]:
        """Jobs ``name`` must not share a node with: its own ``separate_from`` and every job whose
        ``separate_from`` names it (a separation holds both ways)."""
        out = {o for j in self.jobs if j.name == name for o in j.separate_from}
        out.update(j.name for j in self.jobs if name in j.separate_from)
        out.discard(name)
        return frozenset(out)

    def group_separations(self, name: str) -> frozenset[str]:
        """Jobs ``name`` must keep away from because its co-location group must: every separation of
        a member of ``name``'s group, widened to the separated jobs' own groups, less the job's own
        ``separated_from`` (reported there) and its group."""
        mine = {name} | self.co_located_with(name)
        out: set[str] = set()
        for m in mine:
            for o in self.separated_from(m):
                out.add(o)
                out.update(self.co_located_with(o))
        return frozenset(out - mine - self.separated_from(name))

    # -- expansion and placement context ---------------------------------------------------------
    def expand(self, defaults_for: Callable[[Any], JobSpec | None] = no_defaults, *,
               settings: FabricSettings | None = None) -> list[ReplicaJob]:
        """One ``ReplicaJob`` per replica and job, replica 0 first, jobs in bundle order: replica 0
        from the bundle's pool, replica 1 (with a resilience policy) from ``resilience.pool`` or the
        bundle's pool, its constructor keywords with ``backup_overrides`` merged in.
        ``defaults_for(cls)`` gives a job class's decorator defaults (None: none)."""
        out = []
        for replica in range(self.replica_count):
            pool = self.replica_pool(replica)
            for j in self.jobs:
                kwargs = {**j.kwargs, **j.backup_overrides} if replica == 1 else dict(j.kwargs)
                spec = j.to_spec(pool, defaults_for(j.cls), settings=settings)
                out.append(ReplicaJob(replica=replica, name=j.name, spec=spec, cls=j.cls, args=tuple(j.args), kwargs=kwargs))
        return out

    def context(
        self, replica: int, job: str, *,
        peers: Iterable[Peer | PeerTuple] = (),
        other_node: str | None = None,
        other_zone: str | None = None,
        other_cloud: str | None = None,
        recovering: bool = False,
        exclude_nodes: Iterable[str] = frozenset(),
        target_node: str | None = None,
        first_placement: bool = True,
        spec: JobSpec | None = None,
        job_id: str | None = None,
    ) -> PlacementContext:
        """The engine's context for ``job`` of ``replica``.

        - Resilience (best-effort): the backup carries the policy's flags against ``other_node``
          (/zone/cloud: where the primary's copy runs). The primary is placed first and carries
          none, unless it is ``recovering`` with the backup placed (``other_node`` given): then the
          same flags apply the other way.
        - Intra-replica rules (hard): the job's co-location group and separations (both ways, see
          the module docstring), ``same_node_default``, ``intra_zone``; ``peers`` are the jobs of
          the same replica already placed, as ``Peer``s or ``(job, node_id[, zone])`` tuples (their
          ``rule_less`` is taken from the bundle).
        - Spares: recovering, the job's ``on_runtime_failure`` is the policy; a first placement
          follows the bundle's ``on_launch``; any other placement (a migration, a manual start of
          an already-placed job) carries no spare penalty (``allow_spare``): the reserve is
          protected by reservation there.

        ``spec`` is the job's expanded ``JobSpec`` (for its policy and template; None: the bundle
        job's own fields over ``JobSpec``'s defaults). ``job_id`` binds a committed allocation."""
        self.replica_pool(replica)
        bj = self.job(job)
        policy = spec.on_runtime_failure if spec is not None else _first(bj.on_runtime_failure, "avoid_spare")
        template = spec.template if spec is not None else bj.template
        flags = ("allow", "allow", "allow")
        pol = self.resilience
        if pol is not None and (replica == 1 or (recovering and other_node is not None)):
            flags = (pol.same_node, pol.same_zone, pol.same_cloud)
        return PlacementContext(
            replica_index=replica, job=job, job_id=job_id,
            other_node=other_node, other_zone=other_zone, other_cloud=other_cloud,
            same_node=flags[0], same_az=flags[1], same_cloud=flags[2],
            co_locate_with=tuple(sorted(self.co_located_with(job))),
            separate_from=tuple(sorted(self.separated_from(job))),
            group_separate_from=tuple(sorted(self.group_separations(job))),
            same_node_default=self.same_node_default, intra_zone=self.intra_zone,
            peers=tuple(self._peer(p) for p in peers),
            target_node=target_node, exclude_nodes=frozenset(exclude_nodes),
            recovering=recovering, on_runtime_failure=policy,
            launch_policy=self.on_launch if first_placement else "allow_spare",
            override_reservation=self.override_reservation, template=template,
        )

    def _peer(self, p: Peer | PeerTuple) -> Peer:
        if isinstance(p, Peer):
            job, node_id, zone = p.job, p.node_id, p.zone
        elif isinstance(p, tuple) and len(p) in (2, 3):
            job, node_id, zone = p[0], p[1], (p[2] if len(p) == 3 else None)
        else:
            raise InvalidSpecError(f"a peer is a Peer or a (job, node_id[, zone]) tuple, got {p!r}", field="peers")
        known = [j for j in self.jobs if j.name == job]
        rule_less = known[0].rule_less if known else (p.rule_less if isinstance(p, Peer) else True)
        return Peer(job=job, node_id=node_id, zone=zone, rule_less=rule_less)


class BundleStatus(_Model):
    """What ``h.bundle(id)`` reports."""

    bundle_id: str
    state: Literal["live", "broken", "deleting"]
    """``live`` | ``broken`` (an essential job ultimately lost) | ``deleting``."""
    replicas: Annotated[int, Field(ge=1, le=2)]
    """How many copies the bundle runs."""
    jobs: dict[str, str] = Field(default_factory=dict)
    """``"replica/name"`` -> job id."""
    reasons: list[str] = Field(default_factory=list)
    """Why it is broken (empty when live)."""

    @field_validator("state", mode="before")
    @classmethod
    def _state_value(cls, v: object) -> object:
        return getattr(v, "value", v)  # a BundleState member is accepted as its value

_no_defaults = no_defaults  # the name it had (kept for callers that still use it)

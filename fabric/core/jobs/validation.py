"""Checking a bundle before it is submitted (admission): every problem at once.

- ``validate_bundle(bundle, settings, fleet=None) -> ValidationReport``: the static shape — pools
  the settings know, unique job names, rules naming jobs of the bundle and not contradicting each
  other (a co-location group holding two jobs one of which separates from the other, or two jobs
  claiming one host port), ``single_use`` only with ``exclusive``, requirements the settings can
  satisfy (a known operation, capability tags a node or a candidate shape can carry). With a
  ``fleet``, a job no node could *ever* serve (ignoring load, cordons and status: the nodes as if
  idle) is a **warning** ``no_node_fits``: workers may join a fixed pool later. A pool whose elastic
  tier has a candidate shape that would serve it is not even a warning.
- ``validate_bundle_admission(bundle, settings, fleet) -> Admission``: the errors first; else
  every replica's jobs placed now, in order, on a copy of the fleet (commits count capacity), and
  what would not place. A ``provision`` decision counts as placed; the node it would create is not
  modelled, so later jobs do not see its capacity (nor count it against ``max_nodes``).
- ``place_dry_run(bundle, settings, fleet, replica, job) -> Decision`` with a trace: that job's
  earlier peers (and, for the backup, the whole primary) placed on a copy first, so the rules and
  the resilience flags apply. The given fleet never changes.

Errors and warnings are ``ValidationIssue(code, path, message)``; paths are dotted like the
settings' (``jobs.1.name``, ``resilience.pool``, ``jobs.0.requirement.capabilities``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal

from fabric.core.capabilities import ROLES, GpuVendor
from fabric.core.errors import InvalidSpecError, RequirementError
from fabric.core.jobs.bundles import Bundle, BundleJob, no_defaults
from fabric.core.jobs.spec import JobSpec
from fabric.core.lifecycle import NodeStatus
from fabric.core.placement import Decision, FleetView, NodeRecord, Peer, PlacementContext, Requirement, dry_run, place
from fabric.core.placement.filters import provision_shape
from fabric.core.settings import FabricSettings
from fabric.core.tiers import ComputeTier

DefaultsFor = Callable[[Any], "JobSpec | None"]


@dataclass(frozen=True)
class ValidationIssue:
    """One problem: a stable ``code``, the dotted ``path`` in the bundle, what is wrong."""

    code: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<bundle>'}: {self.message} [{self.code}]"


@dataclass(frozen=True)
class ValidationReport:
    """Errors reject a submission; warnings (capacity misses where workers may join) do not."""

    errors: tuple[ValidationIssue, ...] = ()
    warnings: tuple[ValidationIssue, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.errors

    def codes(self) -> set[str]:
        """Every error and warning code (tests and logs)."""
        return {i.code for i in self.errors + self.warnings}


@dataclass(frozen=True)
class Unplaceable:
    """A job of one replica that would not place now."""

    replica: int
    job: str
    reason: str


@dataclass(frozen=True)
class Admission:
    """``ok``; ``validation_errors`` (``errors``); ``no_capacity`` (``unplaceable``)."""

    kind: Literal["ok", "validation_errors", "no_capacity"]
    errors: tuple[ValidationIssue, ...] = ()
    unplaceable: tuple[Unplaceable, ...] = ()

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


# -- static checks -------------------------------------------------------------------------------
def validate_bundle(bundle: Bundle, settings: FabricSettings, fleet: FleetView | None = None, *,
                    defaults_for: DefaultsFor = no_defaults) -> ValidationReport:
    """Every error and warning of ``bundle`` against ``settings`` (and ``fleet``); never raises on
    a bundle the models accepted. ``defaults_for(cls)`` gives a job class's decorator defaults."""
    errors: list[ValidationIssue] = []
    warnings: list[ValidationIssue] = []
    _check_pools(bundle, settings, errors, warnings)
    _check_names(bundle, errors)
    reqs = _check_requirements(bundle, settings, defaults_for, errors)
    _check_rules(bundle, reqs, errors)
    if fleet is not None:
        _check_fleet(bundle, settings, fleet, reqs, warnings)
    return ValidationReport(errors=tuple(errors), warnings=tuple(warnings))


def _pool_problem(name: str, settings: FabricSettings) -> str | None:
    try:
        settings.pool(name)
    except KeyError:
        return f"unknown pool {name!r}; pools: {sorted(p.name for p in settings.pools)}"
    return None


def _check_pools(bundle: Bundle, settings: FabricSettings, errors: list[ValidationIssue],
                 warnings: list[ValidationIssue]) -> None:
    problem = _pool_problem(bundle.pool, settings)
    if problem:
        errors.append(ValidationIssue("unknown_pool", "pool", problem))
    if bundle.resilience is not None and bundle.resilience.pool is not None:
        problem = _pool_problem(bundle.resilience.pool, settings)
        if problem:
            errors.append(ValidationIssue("unknown_pool", "resilience.pool", problem))
    for i, j in enumerate(bundle.jobs):
        pool = j.requirement.pool
        if pool is None:
            continue
        try:
            j.requirement.validate_against(settings)  # the scheduler's own check (check_requirement)
        except RequirementError as e:
            errors.append(ValidationIssue("unknown_pool", f"jobs.{i}.requirement.pool", e.reason))
            continue
        if pool != bundle.pool:
            warnings.append(ValidationIssue(
                "pool_ignored", f"jobs.{i}.requirement.pool",
                f"a bundle places its primary in its own pool {bundle.pool!r}: the job's pool {pool!r} is ignored"))


def _check_names(bundle: Bundle, errors: list[ValidationIssue]) -> None:
    seen: dict[str, int] = {}
    for i, j in enumerate(bundle.jobs):
        if j.name in seen:
            errors.append(ValidationIssue("duplicate_job_name", f"jobs.{i}.name",
                                          f"job name {j.name!r} is already used by jobs.{seen[j.name]}"))
        else:
            seen[j.name] = i


def _check_rules(bundle: Bundle, reqs: dict[int, Requirement], errors: list[ValidationIssue]) -> None:
    """``reqs``: the resolved requirements (a job whose requirement did not resolve is read as given)."""
    names = set(bundle.job_names)
    for i, j in enumerate(bundle.jobs):
        for rule in ("co_locate_with", "separate_from"):
            for k, other in enumerate(getattr(j, rule)):
                path = f"jobs.{i}.{rule}.{k}"
                if other == j.name:
                    errors.append(ValidationIssue("rule_conflict", path, f"job {j.name!r} names itself"))
                elif other not in names:
                    errors.append(ValidationIssue("unknown_job", path, f"no job {other!r} in the bundle; jobs: {sorted(names)}"))
        exclusive = reqs[i].exclusive if i in reqs else (j.exclusive or j.requirement.exclusive)
        if j.single_use and not exclusive:
            errors.append(ValidationIssue("single_use_needs_exclusive", f"jobs.{i}.single_use",
                                          "single_use needs exclusive=True (its node is terminated when it ends)"))
    groups = bundle.co_location_groups()
    group_of = {n: g for g in groups for n in g}
    for i, j in enumerate(bundle.jobs):
        for k, other in enumerate(j.separate_from):
            if other != j.name and other in group_of.get(j.name, ()):
                why = "it also co-locates with it" if other in j.co_locate_with else "their co-location rules put them on one node"
                errors.append(ValidationIssue("rule_conflict", f"jobs.{i}.separate_from.{k}",
                                              f"job {j.name!r} separates from {other!r} but {why} (group {sorted(group_of[j.name])})"))
    index = {j.name: i for i, j in reversed(list(enumerate(bundle.jobs)))}
    for g in groups:
        claimed: dict[str, str] = {}
        for name in sorted(g, key=lambda n: index[n]):
            i = index[name]
            for port in (reqs[i] if i in reqs else bundle.jobs[i].requirement).ports:
                if port in claimed:
                    errors.append(ValidationIssue("rule_conflict", f"jobs.{i}.requirement.ports",
                                                  f"jobs {claimed[port]!r} and {name!r} share a node but both claim host port {port}"))
                else:
                    claimed[port] = name


#: Capability tags a node's probe can produce (``NodeCapabilities.capability_tags``): flat tags and
#: ``prefix:value`` forms, the closed ones checked against their vocabularies.
_FLAT_TAGS = frozenset({"cuda", "vaapi-encode", "framebuffer", "tailnet"})
_OPEN_PREFIXES = ("arch:", "ffmpeg:", "gpu-model:", "encode:", "decode:")
_CLOSED = {
    "gpu:": frozenset(v.value for v in GpuVendor),
    "tier:": frozenset(t.value for t in ComputeTier),
    "role:": frozenset(ROLES),
}


def known_capability(tag: str, settings: FabricSettings) -> bool:
    """A node could carry ``tag``: one a probe reports, or one a candidate shape declares."""
    if tag in _FLAT_TAGS:
        return True
    for prefix in _OPEN_PREFIXES:
        if tag.startswith(prefix) and len(tag) > len(prefix):
            return True
    for prefix, values in _CLOSED.items():
        if tag.startswith(prefix):
            return tag[len(prefix):] in values
    return any(tag in s.capabilities for p in settings.pools for t in p.tiers for s in t.candidate_shapes)


def _check_requirements(bundle: Bundle, settings: FabricSettings, defaults_for: DefaultsFor,
                        errors: list[ValidationIssue]) -> dict[int, Requirement]:
    """The resolved requirement of each job the settings can satisfy, by job index."""
    out: dict[int, Requirement] = {}
    for i, j in enumerate(bundle.jobs):
        try:
            defaults = defaults_for(j.cls)
            req = j.requirement_for(defaults if isinstance(defaults, JobSpec) else None, settings)
        except RequirementError as e:
            path = f"jobs.{i}.operation" if e.field == "operation" else f"jobs.{i}.requirement.{e.field}"
            errors.append(ValidationIssue("unsatisfiable", path, e.reason))
            continue
        except Exception as e:  # noqa: BLE001 - a caller's defaults_for must not make validation raise
            errors.append(ValidationIssue("unsatisfiable", f"jobs.{i}", f"the job's class defaults could not be read: {e!r}"))
            continue
        unknown = sorted(c for c in req.capabilities if not known_capability(c, settings))
        if unknown:
            errors.append(ValidationIssue("unsatisfiable", f"jobs.{i}.requirement.capabilities",
                                          f"no node can carry capability {', '.join(map(repr, unknown))} "
                                          "(not a tag a probe reports nor one a candidate shape declares)"))
            continue
        out[i] = req
    return out


def _idle(rec: NodeRecord) -> NodeRecord:
    """The node as it could serve once idle and in service (what "ever" means for ``no_node_fits``)."""
    return rec.evolve(status=NodeStatus.ACTIVE, utilization=0.0, running=0, cordoned=False, flap_held=False,
                      unhealthy=False, reserved_cpus=0.0, reserved_memory_mib=0.0, gpu_reserved=(), ports=frozenset(),
                      jobs=frozenset(), exclusive_job=None, launching=False)


def _check_fleet(bundle: Bundle, settings: FabricSettings, fleet: FleetView, reqs: dict[int, Requirement],
                 warnings: list[ValidationIssue]) -> None:
    pools = []
    for r in range(bundle.replica_count):
        pool = bundle.replica_pool(r)
        if pool not in pools and _pool_problem(pool, settings) is None:
            pools.append(pool)
    if not pools:
        return
    idle = FleetView([_idle(rec) for rec in fleet.records() if rec.status is not NodeStatus.DEAD], settings)
    for pool in pools:
        for i, req in reqs.items():
            req = req.replace(pool=pool) if req.pool != pool else req
            ctx = PlacementContext(job=bundle.jobs[i].name, launch_policy="allow_spare", override_reservation=True,
                                   template=bundle.jobs[i].template)
            d = place(idle, req, ctx)
            if d.status != "deferred" or _some_shape_fits(settings, pool, req, ctx):
                continue
            warnings.append(ValidationIssue(
                "no_node_fits", f"jobs.{i}",
                f"no node of pool {pool!r} could ever serve job {bundle.jobs[i].name!r} and no candidate shape would "
                f"({d.reason}); it waits until a worker that fits joins"))


def _some_shape_fits(settings: FabricSettings, pool: str, req: Requirement, ctx: PlacementContext) -> bool:
    """An elastic tier of ``pool`` could create a node for ``req`` (ignoring ``max_nodes``: nodes end)."""
    for pt in settings.pool(pool).tiers:
        for level in req.levels:
            if provision_shape(pt, 0, req, ctx, level) is not None:
                return True
    return False


# -- placement viability --------------------------------------------------------------------------
def validate_bundle_admission(bundle: Bundle, settings: FabricSettings, fleet: FleetView, *,
                              defaults_for: DefaultsFor = no_defaults) -> Admission:
    """"Would each replica place right now?": the validation errors first; else every replica's
    jobs placed in order on ``fleet.copy()`` and what would not place (``no_capacity``)."""
    report = validate_bundle(bundle, settings, defaults_for=defaults_for)
    if report.errors:
        return Admission("validation_errors", errors=report.errors)
    work = fleet.copy()
    missing: list[Unplaceable] = []
    for replica, name, d in _place_replicas(bundle, settings, work, defaults_for):
        if d.status == "deferred":
            missing.append(Unplaceable(replica, name, d.reason))
    if missing:
        return Admission("no_capacity", unplaceable=tuple(missing))
    return Admission("ok")


def place_dry_run(bundle: Bundle, settings: FabricSettings, fleet: FleetView, replica: int, job: str, *,
                  defaults_for: DefaultsFor = no_defaults) -> Decision:
    """One replica's job through the engine with its trace, acting on nothing: the job's earlier
    peers (for the backup, the primary first) are placed on a copy of ``fleet`` so the rules apply.
    ``InvalidSpecError`` naming ``replica`` or ``job`` when the bundle has no such one."""
    bundle.replica_pool(replica)
    bundle.job(job)
    work = fleet.copy()
    target = (replica, job)
    for r, name, d in _place_replicas(bundle, settings, work, defaults_for, stop_at=target):
        if (r, name) == target:
            return d
    raise InvalidSpecError(f"job {job!r} of replica {replica} was not reached", field="job")  # pragma: no cover


def _place_replicas(bundle: Bundle, settings: FabricSettings, work: FleetView, defaults_for: DefaultsFor,
                    stop_at: tuple[int, str] | None = None) -> Iterator[tuple[int, str, Decision]]:
    """Yield ``(replica, job, decision)`` placing each replica's jobs in order on ``work``,
    committing as it goes; the ``stop_at`` job is decided with a trace and not committed."""
    placed: dict[tuple[int, str], str] = {}
    seen: set[tuple[int, str]] = set()
    for replica in range(bundle.replica_count):
        pool = bundle.replica_pool(replica)
        peers: list[Peer] = []
        for j in bundle.jobs:
            if (replica, j.name) in seen:
                continue  # a duplicated name: the first job of that name stands for it
            seen.add((replica, j.name))
            spec = _spec(j, pool, settings, defaults_for)
            other = placed.get((1 - replica, j.name)) if replica == 1 else None
            other_rec = work.get(other) if other is not None else None
            ctx = bundle.context(
                replica, j.name, peers=peers, spec=spec, job_id=f"{bundle.bundle_id}/{replica}/{j.name}",
                other_node=other, other_zone=other_rec.zone if other_rec else None,
                other_cloud=other_rec.cloud if other_rec else None)
            group = [g for g in bundle.jobs if g.name in ctx.co_locate_with]
            if group and not any((replica, g.name) in placed for g in group):  # the first of its group: sized for all
                reqs = [spec.requirement] + [_spec(g, pool, settings, defaults_for).requirement for g in group]
                ctx = ctx.sized_for(reqs)
            if stop_at == (replica, j.name):
                yield replica, j.name, dry_run(work, spec.requirement, ctx)
                return
            d = place(work, spec.requirement, ctx)
            if d.status == "placed" and d.node_id is not None:
                work.commit(d)
                placed[(replica, j.name)] = d.node_id
                rec = work.get(d.node_id)
                peers.append(Peer(job=j.name, node_id=d.node_id, zone=rec.zone if rec else None, rule_less=j.rule_less))
            yield replica, j.name, d


def _spec(j: BundleJob, pool: str, settings: FabricSettings, defaults_for: DefaultsFor) -> JobSpec:
    return j.to_spec(pool, defaults_for(j.cls), settings=settings)

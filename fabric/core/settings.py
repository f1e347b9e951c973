"""Fabric settings: pools and pool tiers, operations, health timing, spares, scaling, restart ceilings, store.

Configuration is data. Every field has a docstring; ``FabricSettings.load`` (and ``from_yaml``)
validate at the edge and raise ``SettingsError`` carrying *every* problem found, each with a
code, a dotted path and a message. The edge also bounds what it reads: a settings file is a
regular file of at most 1 MiB, UTF-8 (or UTF-16/32 with a byte-order mark), and a document nests
at most 32 levels and holds at most 100,000 values (YAML aliases counted where they expand), so
no input can make the loader recurse, block or validate for ever. The defaults are a working zero-configuration fabric: one
pool ``default`` with one fixed pool tier holding every node, SQLite store, the default health timings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, TypeVar

from pydantic import Field, ValidationError, field_validator

from fabric.core.errors import SettingsError, SettingsProblem
from fabric.core.settings_file import (  # noqa: F401 - the file edge, re-exported where it always was
    MAX_SETTINGS_BYTES, MAX_SETTINGS_DEPTH, clip, decode_settings, parse_yaml, read_settings_file,
)
from fabric.core.settings_api import ApiSettings
from fabric.core.settings_command import CommandScripts
from fabric.core.settings_fence import FenceSettings
from fabric.core.settings_moves import DrainSettings, MigrationSettings, RebalanceSettings
from fabric.core.settings_rejections import RejectionSettings
from fabric.core.settings_scaling import ScalingSettings
from fabric.core.settings_routes import HostName, RouteSettings
from fabric.core.settings_decisions import DecisionSettings
from fabric.core.settings_spot import SpotNoticeSettings
from fabric.core.settings_store import StoreSettings
from fabric.core.settings_templates import (  # noqa: F401 - re-exported where they were
    ARTIFACT_SCHEMES as ARTIFACT_SCHEMES, TemplateSettings as TemplateSettings, template_artifacts as template_artifacts,
)
from fabric.core.settings_types import NonNegFloat, PositiveSeconds, SettingsModel  # noqa: F401 - re-exported where they were
from fabric.core.tiers import ComputeTier

# The names these had here before they became public where they live (kept for their callers).
_Model = SettingsModel
_clip, _decode_settings, _parse_yaml, _read_settings_file = clip, decode_settings, parse_yaml, read_settings_file

#: Most values (mappings, lists and scalars) in one settings document, aliases expanded.
MAX_SETTINGS_VALUES = 100_000

_M = TypeVar("_M", bound=SettingsModel)


def _tier(v: Any) -> ComputeTier:
    # Type and length first: parse() puts repr(v) in its message, and a repr that raises anything
    # but ValueError (an object's own, RecursionError) would escape pydantic's validation.
    if isinstance(v, ComputeTier):
        return v
    if not isinstance(v, str):
        raise ValueError(f"a compute tier is a tier name, got {type(v).__name__}")
    if len(v) > 64:
        raise ValueError(f"unknown compute tier (a {len(v)}-character string)")
    return ComputeTier.parse(v)


class NodeShape(SettingsModel):
    """A node an elastic pool tier can create."""

    name: str = Field(min_length=1)
    """Shape name (an instance type, or a bundled profile name for the local provider)."""
    tier: ComputeTier = ComputeTier.CPU_FFMPEG
    """Best compute tier a node of this shape serves."""
    num_cpus: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 2.0
    """CPUs the node brings (its fabric slots follow from them)."""
    memory_mib: Annotated[int, Field(ge=0)] = 4096
    """Memory the node brings."""
    gpus: Annotated[int, Field(ge=0)] = 0
    """GPU devices the node brings."""
    gpu_model: str | None = None
    """GPU model (normalised label name) when ``gpus`` > 0."""
    capabilities: tuple[str, ...] = ()
    """Capability tags the node will carry (``arch:aarch64``, ``ffmpeg:h264_vaapi``...)."""
    profile: str | None = None
    """Bundled profile (recording) the local provider starts the node from."""
    zone: str | None = None
    """Zone label of the nodes of this shape (the placement's ``same_az`` rule reads it)."""
    cloud: str | None = None
    """Cloud label of the nodes of this shape (``aws``, ``gcp``, ``azure``; the ``same_cloud`` rule reads it)."""

    _v_tier = field_validator("tier", mode="before")(classmethod(lambda cls, v: _tier(v)))


RENTED_LEAD_S = 300.0
"""``PoolTier.placement_lead_s``'s default where machines are rented: time for one to boot and join."""


class PoolTier(SettingsModel):
    """One homogeneous capacity segment of a pool."""

    name: str = Field(min_length=1)
    """Unique within its pool."""
    provider: Literal["static", "local", "ray-autoscaler", "command"] = "static"
    """Who creates nodes: ``static`` (none: nodes join by hand), ``local`` (real ``ray start`` on this
    machine), ``ray-autoscaler`` (``request_resources`` on a real cluster), ``command`` (the
    operator's scripts in ``command``)."""
    packing: Literal["binpack", "spread"] = "spread"
    """``spread`` prefers the emptiest node (lowest utilisation); ``binpack`` the fullest."""
    scale_out: Literal["fixed", "elastic"] = "fixed"
    """``fixed``: the nodes that joined; ``elastic``: may provision from ``candidate_shapes``."""
    max_nodes: Annotated[int, Field(ge=0)] | None = None
    """Cap on nodes in this pool tier; at the cap it cannot provision and the cascade spills on."""
    min_nodes: Annotated[int, Field(ge=0)] = 0
    """Elastic pool tiers: idle scale-down keeps at least this many (non-spare) nodes."""
    launch_mode: Literal["on-demand", "spot", "reserved"] = "on-demand"
    """How the provider pays for nodes."""
    reliability: Literal["durable", "interruptible"] | None = None
    """Defaults to ``interruptible`` for spot, ``durable`` otherwise."""
    candidate_shapes: tuple[NodeShape, ...] = ()
    """Shapes an elastic pool tier provisions, first fitting wins."""
    provision_timeout_s: PositiveSeconds = 600.0
    """How long a provisioned node may stay launching before its work is placed again."""
    placement_lead_s: NonNegFloat | None = None
    """How long before a job's ``start_at`` its placement begins (time for a node to be provisioned);
    0: at ``start_at``. Defaults to 300 s for a pool tier whose machines are rented (``ray-autoscaler``,
    ``command``), 0 for the fleet's own (``static``, ``local``)."""
    command: CommandScripts | None = None
    """``provider: command`` only: the provision, terminate and list executables and how they run."""

    @property
    def effective_reliability(self) -> str:
        """``reliability``, or its default for the launch mode."""
        if self.reliability is not None:
            return self.reliability
        return "interruptible" if self.launch_mode == "spot" else "durable"

    @property
    def effective_placement_lead_s(self) -> float:
        """``placement_lead_s``, or its default for the provider."""
        if self.placement_lead_s is not None:
            return self.placement_lead_s
        return RENTED_LEAD_S if self.provider in ("ray-autoscaler", "command") else 0.0


class Pool(SettingsModel):
    """A named, ordered list of pool tiers: the order is the cost cascade (cheapest first)."""

    name: str = Field(min_length=1)
    """Unique pool name; requirements and hot spares refer to it."""
    tiers: tuple[PoolTier, ...] = Field(default=(PoolTier(name="fixed"),), min_length=1)
    """Pool tiers in cost order."""


class OperationSpec(SettingsModel):
    """A named requirement preset."""

    min_tier: ComputeTier = ComputeTier.RELAY
    """Best tier the work asks for."""
    floor: ComputeTier | None = None
    """Lowest tier it may degrade to; None with ``fallback`` true means down to ``relay``."""
    fallback: bool = True
    """False makes the requirement hard: it never degrades below ``min_tier``."""
    num_cpus: NonNegFloat = 1.0
    """CPUs reserved on the node while the work runs."""
    memory_mib: Annotated[int, Field(ge=0)] = 0
    """Memory reserved on the node while the work runs."""
    num_gpus: NonNegFloat = 0.0
    """GPU capacity (fraction of one device) the work needs."""
    gpu_model: str | None = None
    """GPU model the work needs (normalised label name, e.g. ``GeForce-RTX-4070``)."""
    capabilities: tuple[str, ...] = ()
    """Capability tags the node must carry."""
    pool: str | None = None
    """Pool to place into (None: ``default``)."""
    when_full: Literal["spill", "wait"] = "spill"
    """A full best level spills down or waits for a slot."""
    description: str = ""
    """What the operation is, for people reading ``fabric explain``."""

    _v_tiers = field_validator("min_tier", "floor", mode="before")(
        classmethod(lambda cls, v: None if v is None else _tier(v))
    )

    @property
    def effective_floor(self) -> ComputeTier:
        """The lowest tier this operation may run on."""
        if not self.fallback:
            return self.min_tier
        return self.floor if self.floor is not None else ComputeTier.RELAY


def _default_operations() -> dict[str, OperationSpec]:
    return {
        "lupine": OperationSpec(min_tier=ComputeTier.GPU_CUDA, fallback=False, description="CUDA-only; hard-fails without a CUDA node"),
        "vaapi_encode": OperationSpec(min_tier=ComputeTier.GPU_VAAPI, floor=ComputeTier.CPU_FFMPEG, description="hardware encode, falls back to CPU ffmpeg"),
        "flac": OperationSpec(min_tier=ComputeTier.CPU_FFMPEG, floor=ComputeTier.RELAY, description="audio FFT: any tier"),
        "braid": OperationSpec(min_tier=ComputeTier.CPU_FFMPEG, floor=ComputeTier.RELAY, description="STRAND/CROSSING/PIST braid math: CPU acceptable"),
    }


class HealthSettings(SettingsModel):
    """Health timings. All configurable, all testable with small values."""

    heartbeat_interval_s: PositiveSeconds = 5.0
    """How often a probe actor heartbeats (short enough that a node cut off from the head stops
    getting new work within ``offline_after_s``)."""
    offline_after_s: PositiveSeconds = 15.0
    """Missed heartbeats for this long (3 beats) mark a node offline: no new work goes there. Its
    jobs move once their leases end (``fence.lease_ttl_s``), whether or not it is offline by then."""
    drain_grace_s: NonNegFloat = 300.0
    """A lost node stays (draining/offline) this long before it is marked dead and collected."""
    flap_toggles: Annotated[int, Field(ge=2)] = 3
    """This many online/offline toggles ..."""
    flap_window_s: PositiveSeconds = 300.0
    """... inside this window ..."""
    flap_hold_s: NonNegFloat = 600.0
    """... hold the node off placement for this long."""
    join_timeout_s: PositiveSeconds = 120.0
    """How long a newly added node may take to send its first heartbeat (its probe actor starting)
    before it is marked offline; after the first beat ``offline_after_s`` applies."""
    monitor_interval_s: PositiveSeconds = 1.0
    """How often the health monitor polls Ray's node table."""
    reprobe_interval_s: PositiveSeconds = 300.0
    """How often a probe actor re-probes its node for degradation."""
    heartbeat_transport: Literal["ray", "udp"] = "ray"
    """How probes send their heartbeats: ``ray``, a Ray call to the registry each beat; ``udp``,
    signed datagrams to the registry (``fabric.rayio.heartbeat_channel``), with every tenth beat a
    Ray call. A Ray call costs the registry what Ray costs per call (about 640 µs of its CPU on a
    2-core machine), so past a few thousand nodes ``udp`` is what keeps the registry up
    (``docs/benchmarks.md``)."""


class FailurePolicySettings(SettingsModel):
    """Restart ceilings (a rate per trailing hour)."""

    max_restarts_per_hour: Annotated[int, Field(ge=0)] = 6
    """Restarts a job may take in a trailing hour before it is ultimately lost."""
    prefer_spare_max_restarts_per_hour: Annotated[int, Field(ge=0)] | None = None
    """Ceiling for ``prefer_spare`` jobs (None: ``max_restarts_per_hour``)."""
    avoid_spare_max_restarts_per_hour: Annotated[int, Field(ge=0)] | None = None
    """Ceiling for ``avoid_spare`` jobs (None: ``max_restarts_per_hour``)."""
    min_recovery_interval_s: NonNegFloat = 5.0
    """Consecutive recoveries of one job are at least this far apart."""


class HotSpareSettings(SettingsModel):
    """Hot spares kept warm for one pool."""

    pool: str
    """The pool these spares serve (one entry per pool)."""
    target_count: Annotated[int, Field(ge=0)] = 0
    """Unconsumed spares to keep warm."""
    shape: str | None = None
    """Candidate shape name to provision (None: the pool's first elastic shape); one of the candidate shapes of the pool's elastic pool tiers."""
    warm_for: tuple[str, ...] = ()
    """Job templates whose artefacts a new spare pre-fetches."""
    reserved_for: tuple[str, ...] = ()
    """Templates that rank these spares first."""
    exclusive: bool = False
    """With ``reserved_for``: nobody else may take them (unless ``override_reservation``)."""
    provision_backoff_s: NonNegFloat = 60.0
    """Wait after a failed spare provision before the next attempt."""


class NodeOverride(SettingsModel):
    """Per-node overrides of probed limitations, keyed by node name in ``FabricSettings.nodes``."""

    max_concurrent_tasks: Annotated[int, Field(ge=1)] | None = None
    """Replaces the probed ``max_concurrent_tasks`` (None: keep the probe's)."""


class FabricSettings(SettingsModel):
    """The whole fabric's configuration. Zero configuration is a working fabric."""

    pools: tuple[Pool, ...] = Field(default=(Pool(name="default"),), min_length=1)
    """Pools; the first is the default when a requirement names none."""
    operations: dict[str, OperationSpec] = Field(default_factory=_default_operations)
    """Named requirement presets (``@adaptive.remote(operation=...)``)."""
    health: HealthSettings = Field(default_factory=HealthSettings)
    """Heartbeat, offline, drain-grace and flap-damping timings."""
    failure: FailurePolicySettings = Field(default_factory=FailurePolicySettings)
    """Restart ceilings for long-running jobs."""
    rejections: RejectionSettings = Field(default_factory=RejectionSettings)
    """Nodes that keep failing to start jobs are kept off placement for a while."""
    hot_spares: tuple[HotSpareSettings, ...] = ()
    """Hot spares per pool."""
    scaling: ScalingSettings = Field(default_factory=ScalingSettings)
    """Burst and utilisation scaling."""
    templates: dict[str, TemplateSettings] = Field(default_factory=dict)
    """Job templates by name: the artifacts each needs (``templates: {encoder: {artifacts: [file:///...]}}``)."""
    routes: dict[HostName, RouteSettings] = Field(default_factory=dict)
    """Edge routes by host name: a job and its declared port (``routes: {channel.example: {job: encode, port: 1935}}``); ``fabric routes --caddy``."""
    fence: FenceSettings = Field(default_factory=FenceSettings)
    """Job instances' leases: at most one serving instance of a job, whatever the network does."""
    migration: MigrationSettings = Field(default_factory=MigrationSettings)
    """Migration sagas: a deadline per phase and the default strategy."""
    rebalance: RebalanceSettings = Field(default_factory=RebalanceSettings)
    """Jobs running below their ``min_tier`` move up when better capacity joins."""
    drain: DrainSettings = Field(default_factory=DrainSettings)
    """Drain timeouts and the spot-interruption sizing."""
    spot_notices: SpotNoticeSettings = Field(default_factory=SpotNoticeSettings)
    """Nodes with a cloud label read their cloud's own spot and rebalance notices from its instance metadata."""
    decisions: DecisionSettings = Field(default_factory=DecisionSettings)
    """Placement decisions kept on the record for ``fabric explain --event`` (sampled, bounded)."""
    store: StoreSettings = Field(default_factory=StoreSettings)
    """Where the registry keeps durable state."""
    api: ApiSettings = Field(default_factory=ApiSettings)
    """The operator API (gRPC and the JSON view): loopback unless ``allow_remote``, port 0 = a free one."""
    nodes: dict[str, NodeOverride] = Field(default_factory=dict)
    """Overrides by node name (e.g. a lower ``max_concurrent_tasks``)."""
    queue_timeout_s: PositiveSeconds = 300.0
    """How long queued work waits for capacity before ``CapacityError``."""

    # -- construction at the edge --------------------------------------------------------
    @classmethod
    def load(cls, data: "dict[str, Any] | FabricSettings | None" = None) -> "FabricSettings":
        """Validate ``data``; ``SettingsError`` lists every problem: the structural ones (a bad
        literal, a wrong type, an unknown field) and the semantic ones of ``problems()`` together.
        When the structure is invalid the semantic checks run over the pieces that are valid on
        their own (each pool, pool tier, operation, hot-spare entry, the health timings), with the
        paths those pieces have in ``data``."""
        if data is None:
            data = {}
        if isinstance(data, FabricSettings):
            data = data.model_dump()
        if not isinstance(data, dict):
            raise SettingsError([SettingsProblem("not_a_mapping", "", f"settings must be a mapping, got {type(data).__name__}")])
        shape = _shape_problem(data)
        if shape is not None:
            raise SettingsError([shape])
        try:
            settings = cls.model_validate(data)
        except ValidationError as exc:
            raise SettingsError(_problems_from(exc) + _semantic_problems(_pieces_of_raw(data))) from None
        problems = settings.problems()
        if problems:
            raise SettingsError(problems)
        return settings

    @classmethod
    def from_yaml(cls, path: "str | Path") -> "FabricSettings":
        """Read and validate a YAML settings file (every problem at once, as ``load``).

        The file problems are ``SettingsError`` too, with the file's path as the problem's path:
        ``not_a_path`` (``path`` is not a str or Path), ``unreadable`` (missing, unreadable, or
        not a regular file: a FIFO or a device is refused, never waited on), ``too_large`` (over
        ``MAX_SETTINGS_BYTES``), ``not_utf8``, ``bad_yaml`` (a syntax error, or a value YAML
        cannot build: ``0x_``, month 13), ``too_deep`` (nested past ``MAX_SETTINGS_DEPTH``)."""
        if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
            raise SettingsError([SettingsProblem("not_a_path", "", f"a settings file path is a str or Path, got {type(path).__name__}")])
        p = Path(path)
        text = decode_settings(read_settings_file(p), str(p))
        return cls.load(parse_yaml(text, str(p)) or {})

    def problems(self) -> list[SettingsProblem]:
        """Every semantic problem (structure is already valid): duplicates, unknown references,
        floors above their min tier, impossible pool tiers."""
        return _semantic_problems(_Pieces(
            pools=[(i, p.name, list(enumerate(p.tiers))) for i, p in enumerate(self.pools)],
            pool_names_known=True,
            operations=list(self.operations.items()),
            hot_spares=list(enumerate(self.hot_spares)),
            health=self.health,
            scaling=self.scaling,
        ))

    def differing_fields(self, other: "FabricSettings") -> list[str]:
        """The top-level fields whose values differ between ``self`` and ``other``, in field order."""
        mine, theirs = self.model_dump(mode="json"), other.model_dump(mode="json")
        return [name for name in type(self).model_fields if mine.get(name) != theirs.get(name)]

    # -- lookups ---------------------------------------------------------------------------
    @property
    def default_pool(self) -> Pool:
        return self.pools[0]

    def pool(self, name: str | None) -> Pool:
        """The named pool (``None``: the default); ``KeyError`` when unknown."""
        if name is None:
            return self.default_pool
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)

    def operation(self, name: str) -> OperationSpec:
        """The named operation; ``KeyError`` listing the known ones when unknown."""
        try:
            return self.operations[name]
        except KeyError:
            raise KeyError(f"unknown operation {name!r}; operations: {sorted(self.operations)}") from None


def _part(key: Any) -> str:
    """One dotted-path component, shown safely whatever the key is (a 5,000-digit int, a tuple)."""
    if isinstance(key, str):
        return clip(key, 80)
    if isinstance(key, int) and not isinstance(key, bool) and -(10**30) < key < 10**30:
        return str(key)
    if isinstance(key, (int, float, bool)) or key is None:
        return clip(repr(key) if not isinstance(key, int) else f"<{key.bit_length()}-bit int>", 80)
    return f"<{type(key).__name__}>"


def _shape_problem(data: Any) -> SettingsProblem | None:
    """The first way ``data`` is too deep or too big to validate, or None. Iterative: a document
    nested a million levels, or one that contains itself (a YAML ``&a [*a]``), only ends the walk."""
    count = 0
    stack: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    while stack:
        node, path = stack.pop()
        count += 1
        if count > MAX_SETTINGS_VALUES:
            return SettingsProblem("too_large", ".".join(path), f"settings hold more than {MAX_SETTINGS_VALUES} values")
        if isinstance(node, dict):
            children: Any = node.items()
        elif isinstance(node, (list, tuple, set, frozenset)):
            children = enumerate(node)
        else:
            continue
        if count + len(stack) + len(node) > MAX_SETTINGS_VALUES:
            return SettingsProblem("too_large", ".".join(path), f"settings hold more than {MAX_SETTINGS_VALUES} values")
        if len(path) >= MAX_SETTINGS_DEPTH:
            return SettingsProblem("too_deep", ".".join(path), f"settings nest deeper than {MAX_SETTINGS_DEPTH} levels")
        stack.extend((child, (*path, _part(key))) for key, child in children)
    return None


# -- semantic checks, over whole settings or over the valid pieces of invalid ones ----------------------
@dataclass
class _Pieces:
    """What the semantic checks look at, each piece with its index (or key) in the document."""

    pools: list[tuple[int, str | None, list[tuple[int, PoolTier]]]]
    """(index, name or None when unreadable, the valid pool tiers with their indices)."""
    pool_names_known: bool
    """Every pool's name is known: only then can a reference to a pool be called unknown."""
    operations: list[tuple[str, OperationSpec]]
    hot_spares: list[tuple[int, HotSpareSettings]]
    health: HealthSettings | None
    scaling: "ScalingSettings | None" = None


def _semantic_problems(pieces: _Pieces) -> list[SettingsProblem]:
    out: list[SettingsProblem] = []
    pool_names: set[str] = set()
    for i, name, tiers in pieces.pools:
        if name is not None:
            if name in pool_names:
                out.append(SettingsProblem("duplicate_pool", f"pools.{i}.name", f"pool {name!r} is defined twice"))
            pool_names.add(name)
        out += _pool_tier_problems(i, name, tiers)
    known = sorted(pool_names)
    for name, op in pieces.operations:
        path = f"operations.{name}"
        if op.floor is not None and op.floor > op.min_tier:
            out.append(SettingsProblem("floor_above_min_tier", f"{path}.floor", f"floor {op.floor} is above min_tier {op.min_tier}"))
        if op.floor is not None and not op.fallback and op.floor != op.min_tier:
            out.append(SettingsProblem("floor_without_fallback", f"{path}.floor", "a hard operation (fallback: false) cannot have a lower floor"))
        if pieces.pool_names_known and op.pool is not None and op.pool not in pool_names:
            out.append(SettingsProblem("unknown_pool", f"{path}.pool", f"unknown pool {op.pool!r}; pools: {known}"))
    seen_spare_pools: set[str] = set()
    # each named pool's elastic candidate shapes (from its pool tiers that read)
    elastic_shapes = {name: [sh.name for _, t in tiers if t.scale_out == "elastic" for sh in t.candidate_shapes]
                      for _, name, tiers in pieces.pools if name is not None}
    for k, hs in pieces.hot_spares:
        path = f"hot_spares.{k}"
        if pieces.pool_names_known and hs.pool not in pool_names:
            out.append(SettingsProblem("unknown_pool", f"{path}.pool", f"unknown pool {hs.pool!r}; pools: {known}"))
        elif hs.pool in seen_spare_pools:
            out.append(SettingsProblem("duplicate_hot_spare_pool", f"{path}.pool", f"pool {hs.pool!r} has two hot-spare entries; one per pool"))
        seen_spare_pools.add(hs.pool)
        shapes = elastic_shapes.get(hs.pool)
        if hs.shape is not None and shapes is not None and hs.shape not in shapes:
            out.append(SettingsProblem(
                "unknown_shape", f"{path}.shape",
                f"shape {hs.shape!r} is no candidate shape of pool {hs.pool!r}'s elastic pool tiers; shapes: {shapes}"))
        if hs.exclusive and not hs.reserved_for:
            out.append(SettingsProblem("exclusive_without_reservation", f"{path}.exclusive", "exclusive spares need reserved_for templates"))
    h = pieces.health
    if h is not None and h.offline_after_s < h.heartbeat_interval_s:
        out.append(SettingsProblem("offline_before_heartbeat", "health.offline_after_s", f"offline_after_s ({h.offline_after_s}) is shorter than one heartbeat ({h.heartbeat_interval_s})"))
    sc = pieces.scaling
    if sc is not None and sc.low_utilization >= sc.high_utilization:
        out.append(SettingsProblem("low_above_high", "scaling.low_utilization", f"low_utilization ({sc.low_utilization}) is not below high_utilization ({sc.high_utilization})"))
    return out


def _pool_tier_problems(i: int, pool_name: str | None, tiers: list[tuple[int, PoolTier]]) -> list[SettingsProblem]:
    out: list[SettingsProblem] = []
    shown = repr(pool_name) if pool_name is not None else f"#{i}"
    tier_names: set[str] = set()
    fixed = 0
    for j, pt in tiers:
        path = f"pools.{i}.tiers.{j}"
        if pt.name in tier_names:
            out.append(SettingsProblem("duplicate_pool_tier", f"{path}.name", f"pool tier {pt.name!r} appears twice in pool {shown}"))
        tier_names.add(pt.name)
        if pt.scale_out == "fixed":
            fixed += 1
            if pt.candidate_shapes:
                out.append(SettingsProblem("shapes_on_fixed", f"{path}.candidate_shapes", "a fixed pool tier cannot provision; remove its candidate shapes or make it elastic"))
        else:
            if not pt.candidate_shapes:
                out.append(SettingsProblem("elastic_without_shapes", f"{path}.candidate_shapes", "an elastic pool tier needs at least one candidate shape"))
            if pt.provider == "static":
                out.append(SettingsProblem("elastic_without_provider", f"{path}.provider", "an elastic pool tier needs a provider: 'local', 'ray-autoscaler' or 'command'"))
        if (pt.provider == "command") != (pt.command is not None):
            out.append(SettingsProblem("command_without_scripts" if pt.command is None else "scripts_without_command", f"{path}.command",
                                       "a 'command' pool tier needs a command block (provision, terminate, list)" if pt.command is None
                                       else f"a command block is read only by provider 'command', not {pt.provider!r}"))
        if pt.max_nodes is not None and pt.min_nodes > pt.max_nodes:
            out.append(SettingsProblem("min_above_max", f"{path}.min_nodes", f"min_nodes ({pt.min_nodes}) is above max_nodes ({pt.max_nodes})"))
        if pt.launch_mode == "spot" and pt.reliability == "durable":
            out.append(SettingsProblem("spot_durable", f"{path}.reliability", "spot capacity cannot be durable"))
    if fixed > 1:
        out.append(SettingsProblem("multiple_fixed_tiers", f"pools.{i}.tiers", f"pool {shown} has {fixed} fixed pool tiers; at most one"))
    return out


def _valid(model: type[_M], raw: Any) -> _M | None:
    """``raw`` as ``model``, or None when it is not valid (its problems are reported structurally)."""
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None


def _pieces_of_raw(data: dict[str, Any]) -> _Pieces:
    """The independently valid pieces of a settings document whose whole failed to validate.
    A missing section stands for its default; a section of the wrong shape contributes nothing."""
    fields = FabricSettings.model_fields
    raw_pools = data.get("pools", [p.model_dump() for p in fields["pools"].default])
    pools: list[tuple[int, str | None, list[tuple[int, PoolTier]]]] = []
    names_known = isinstance(raw_pools, (list, tuple))
    for i, raw in enumerate(raw_pools if names_known else ()):
        if not isinstance(raw, dict):
            names_known = False
            continue
        # the name alone, checked by the field itself: a pool whose tiers are wrong still has a name
        named = _valid(Pool, {"name": raw["name"]}) if "name" in raw else None
        if named is None:
            names_known = False
        raw_tiers = raw.get("tiers", [t.model_dump() for t in Pool.model_fields["tiers"].default])
        tiers = [(j, tier) for j, raw_tier in enumerate(raw_tiers if isinstance(raw_tiers, (list, tuple)) else ())
                 if (tier := _valid(PoolTier, raw_tier)) is not None]
        pools.append((i, named.name if named is not None else None, tiers))
    if "operations" not in data:
        operations = list(_default_operations().items())
    else:
        raw_ops = data["operations"]
        operations = [(_part(k), op) for k, v in (raw_ops.items() if isinstance(raw_ops, dict) else ())
                      if (op := _valid(OperationSpec, v)) is not None]
    raw_spares = data.get("hot_spares", ())
    hot_spares = [(k, hs) for k, v in enumerate(raw_spares if isinstance(raw_spares, (list, tuple)) else ())
                  if (hs := _valid(HotSpareSettings, v)) is not None]
    health = _valid(HealthSettings, data.get("health", {}))
    scaling = _valid(ScalingSettings, data.get("scaling", {}))
    return _Pieces(pools=pools, pool_names_known=names_known, operations=operations, hot_spares=hot_spares, health=health,
                   scaling=scaling)


def _problems_from(exc: ValidationError) -> list[SettingsProblem]:
    problems = [_problem_from(e) for e in exc.errors()]
    # pydantic also reports a tuple as "too short" when its only items failed; the item's own
    # problem is the useful one, so drop a length complaint about a path that has deeper problems.
    return [
        p for p in problems
        if not (p.code == "too_short" and any(q.path.startswith(p.path + ".") for q in problems))
    ]


def _problem_from(err: Mapping[str, Any]) -> SettingsProblem:
    path = ".".join(_part(p) for p in err.get("loc", ()))
    msg = err.get("msg", "invalid")
    ctx_err = (err.get("ctx") or {}).get("error")
    if ctx_err is not None:
        msg = str(ctx_err)
    return SettingsProblem(err.get("type", "invalid"), path, msg)

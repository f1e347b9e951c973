"""What one piece of work needs: the ``Requirement`` the placement engine places.

A requirement is built on every task call, so it is a plain slotted class with explicit,
cheap validation (a few microseconds) rather than a pydantic model. It is immutable and
hashable; ``class_key`` is the tuple of everything that affects placement, so two calls with
the same key are the same *requirement class* (a later issue grants leases per class).

Defaults (decided here, documented in API terms):

- ``min_tier`` defaults to ``relay``: "any node", and because the engine prefers the highest
  tier that serves, an unqualified requirement still lands on the best node that fits.
  The decorator's documented examples always name a ``min_tier`` or an operation.
- ``floor`` defaults to ``relay`` when ``fallback`` is true (degrade all the way, the
  ``_fallback`` loop) and to ``min_tier`` when ``fallback=False`` (hard).
- ``num_cpus`` defaults to 1 (Ray's default for a task); ``memory_mib`` to 0.
- ``payload_size`` is carried for callers and metrics; it does not affect placement and is
  not part of ``class_key``.

Every argument is type-checked before any arithmetic or hashing touches it, and bounded: amounts
at most ``MAX_AMOUNT`` (no node has 10**15 CPUs or MiB; a bigger int would overflow ``float()``),
names and tags at most ``MAX_NAME`` characters, at most ``MAX_ITEMS`` capabilities or ports. So any
bad value, however hostile (``ports=5``, ``num_cpus=10**400``, an object whose ``==`` raises), is a
``RequirementError`` naming the field, with the value shown cut short.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import TYPE_CHECKING, Any

from fabric.core.errors import RequirementError
from fabric.core.placement.ray_terms import (
    LabelTerm, RayCallOptions, check_fabric_labels, parse_accelerator_type, parse_label_selector, parse_resources,
    ray_call_options,
)
from fabric.core.tiers import ComputeTier

if TYPE_CHECKING:  # pragma: no cover
    from fabric.core.settings import FabricSettings

_TIER_BY_NAME: dict[str, ComputeTier] = {t.value: t for t in ComputeTier}
_PORT = re.compile(r"^(\d{1,5})/(tcp|udp)$")
_PREFER = ("highest", "lowest")
_WHEN_FULL = ("spill", "wait")
_SCALE = ("degrade_first", "provision_first")
#: Largest CPU, memory, core or GPU amount a requirement may ask for.
MAX_AMOUNT = 1e15
#: Longest GPU model, pool name or capability tag.
MAX_NAME = 256
#: Most capabilities, or ports, one requirement may name.
MAX_ITEMS = 256
_MAX_PAYLOAD = 1 << 63
_COLLECTIONS = (list, tuple, set, frozenset)
_CLASS_IDS: dict[tuple, int] = {}
_CLASS_IDS_MAX = 100_000
_NEXT_CLASS_ID = itertools.count(1)


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters; never raises (a
    5,000-digit int, a self-containing list or an object whose ``repr`` raises is still shown)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<{value.bit_length()}-bit int>"
    if isinstance(value, str) and len(value) > limit:
        value = value[:limit]
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - RecursionError, ValueError, or a hostile __repr__
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_tier(field: str, value: Any) -> ComputeTier:
    if isinstance(value, ComputeTier):
        return value
    if isinstance(value, str) and len(value) <= MAX_NAME:
        tier = _TIER_BY_NAME.get(value) or _TIER_BY_NAME.get(value.strip().lower())
        if tier is not None:
            return tier
    valid = ", ".join(_TIER_BY_NAME)
    raise RequirementError(field, f"unknown compute tier {shown(value)}; valid tiers: {valid}", value)


def _amount(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequirementError(field, f"must be a number, got {type(value).__name__}", value)
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise RequirementError(field, "must be a finite number (not NaN or infinity)", value)
    if value < 0:
        raise RequirementError(field, "must not be negative", value)
    if value > MAX_AMOUNT:  # before float(): an int past 1e308 would overflow it
        raise RequirementError(field, f"must be at most {MAX_AMOUNT:g}, got {shown(value)}", value)
    return float(value)


def _choice(field: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise RequirementError(field, f"must be one of {', '.join(allowed)}; got {shown(value)}", value)
    return value


def _name(field: str, value: Any, what: str) -> str:
    """A non-empty string of at most ``MAX_NAME`` characters (after stripping)."""
    if not isinstance(value, str) or not value.strip():
        raise RequirementError(field, f"must be a non-empty {what}, got {shown(value)}", value)
    if len(value) > MAX_NAME:
        raise RequirementError(field, f"must be at most {MAX_NAME} characters, got {len(value)}", value)
    return value


def _collection(field: str, value: Any, what: str) -> list[Any]:
    """The items of a list, tuple or set of at most ``MAX_ITEMS`` (one string is not a collection)."""
    if isinstance(value, str):
        raise RequirementError(field, f"must be a collection of {what}, not one string", value)
    if not isinstance(value, _COLLECTIONS):
        raise RequirementError(field, f"must be a list, tuple or set of {what}, got {type(value).__name__}", value)
    if len(value) > MAX_ITEMS:
        raise RequirementError(field, f"at most {MAX_ITEMS} {what}, got {len(value)}", value)
    return list(value)


def parse_port(token: Any) -> str:
    """``"1935/tcp"`` normalised; ``RequirementError`` (field ``ports``) when malformed."""
    if not isinstance(token, str):
        raise RequirementError("ports", f"a port is a 'PORT/proto' string, got {shown(token)}", token)
    m = _PORT.match(token.strip().lower()) if len(token) <= 64 else None
    if m is None or not (1 <= int(m.group(1)) <= 65535):
        raise RequirementError("ports", f"malformed port token {shown(token)}; expected 'PORT/tcp' or 'PORT/udp' with PORT in 1..65535", token)
    return f"{int(m.group(1))}/{m.group(2)}"


class Requirement:
    """What one piece of work needs. Immutable, hashable, validated on construction.

    Every bad value raises ``RequirementError`` naming the field (``min_tier``, ``floor``,
    ``num_cpus``, ``memory_mib``, ``num_cores``, ``num_gpus``, ``gpu_model``, ``capabilities``,
    ``ports``, ``pool``, ``prefer``, ``when_full``, ``scale``, ``payload_size``, ``resources``,
    ``label_selector``, ``accelerator_type``, ``ray``, ``preset``).
    """

    __slots__ = (
        "min_tier", "floor", "fallback", "num_cpus", "memory_mib", "num_cores", "num_gpus",
        "gpu_model", "capabilities", "ports", "pool", "prefer", "exclusive", "payload_size",
        "when_full", "scale", "resources", "label_selector", "accelerator_type", "ray", "preset", "class_key", "class_id",
        "_hash",
    )

    min_tier: ComputeTier
    """Best tier the work asks for (level 0 of the walk)."""
    floor: ComputeTier
    """Lowest tier it may degrade to (== ``min_tier`` for a hard requirement)."""
    fallback: bool
    """As given: False makes the requirement hard (``floor`` = ``min_tier``)."""
    num_cpus: float
    """CPUs reserved on the node while the work runs (fractional allowed)."""
    memory_mib: float
    """Memory reserved (MiB)."""
    num_cores: int
    """Physical cores the node must have (not reserved; ``requiredCores``)."""
    num_gpus: float
    """GPU capacity: a fraction of one device (<= 1) or a whole number of whole devices."""
    gpu_model: str | None
    """Required GPU model (normalised like Ray accelerator names, case-insensitive)."""
    capabilities: frozenset[str]
    """Capability tags the node must carry (``ffmpeg:h264_vaapi``, ``arch:aarch64``...)."""
    ports: tuple[str, ...]
    """Host ports (``"1935/tcp"``), exclusive per node."""
    pool: str | None
    """Pool to place into (None: the settings' default pool)."""
    prefer: str
    """``highest`` tier that serves first (the default) or ``lowest``."""
    exclusive: bool
    """The work needs a node of its own."""
    payload_size: int
    """Bytes of input (``payload_size``); informational, not part of ``class_key``."""
    when_full: str
    """``spill`` down the tiers when the best level is full (a burst) or ``wait`` for a slot."""
    scale: str
    """``degrade_first`` (walk every existing-node level before provisioning) or ``provision_first``."""
    resources: tuple[tuple[str, float], ...]
    """Ray custom resources the node must have (``(name, amount)``, sorted): Ray's ``resources``."""
    label_selector: tuple[LabelTerm, ...]
    """Ray's ``label_selector``, parsed: the node's Ray labels must match every term."""
    accelerator_type: str | None
    """Ray's ``accelerator_type``: the node must have the resource ``accelerator_type:<T>``."""
    ray: RayCallOptions
    """What Ray is told about the call as it is (runtime_env, num_returns, retry_exceptions, and a
    job's max_concurrency / max_task_retries); part of ``class_key`` so that calls told different
    things never share a lease's prepared options."""
    preset: "tuple[str, tuple[str, ...]] | None"
    """Where it came from: an operation preset's name and the fields given over it (``from_operation``),
    so that the preset can be applied again with other settings (a replayed decision); None for a
    requirement built field by field. Not part of ``class_key`` or equality."""
    class_key: tuple
    """Everything that affects placement, as one hashable tuple."""
    class_id: int
    """A small integer standing for ``class_key`` in this process (never reused for another
    key), so that per-class caches can key on an int instead of hashing the tuple."""
    _hash: int

    def __init__(
        self,
        min_tier: "ComputeTier | str" = ComputeTier.RELAY,
        floor: "ComputeTier | str | None" = None,
        *,
        fallback: bool = True,
        num_cpus: float = 1.0,
        memory_mib: float = 0,
        num_cores: int = 0,
        num_gpus: float = 0.0,
        gpu_model: str | None = None,
        capabilities: "tuple[str, ...] | list[str] | frozenset[str]" = (),
        ports: "tuple[str, ...] | list[str]" = (),
        pool: str | None = None,
        prefer: str = "highest",
        exclusive: bool = False,
        payload_size: int = 0,
        when_full: str = "spill",
        scale: str = "degrade_first",
        resources: "dict[str, float] | None" = None,
        label_selector: "dict[str, str] | None" = None,
        accelerator_type: str | None = None,
        ray: "RayCallOptions | dict[str, Any] | None" = None,
        preset: "tuple[str, Any] | list[Any] | None" = None,
    ) -> None:
        s = object.__setattr__
        for flag, value in (("fallback", fallback), ("exclusive", exclusive)):
            if not isinstance(value, bool):
                raise RequirementError(flag, f"must be True or False, got {shown(value)}", value)
        mt = _parse_tier("min_tier", min_tier)
        if floor is None:
            fl = ComputeTier.RELAY if fallback else mt
        else:
            fl = _parse_tier("floor", floor)
            if fl.rank > mt.rank:
                raise RequirementError("floor", f"floor {fl} is above min_tier {mt}", floor)
            if not fallback and fl is not mt:
                raise RequirementError("floor", "a hard requirement (fallback=False) cannot have a lower floor", floor)
        cpus = _amount("num_cpus", num_cpus)
        mem = _amount("memory_mib", memory_mib)
        cores = _amount("num_cores", num_cores)
        if cores != int(cores):
            raise RequirementError("num_cores", "must be a whole number of cores", num_cores)
        gpus = _amount("num_gpus", num_gpus)
        if gpus > 1 and gpus != int(gpus):
            raise RequirementError("num_gpus", "more than one GPU must be a whole number of devices", num_gpus)
        if gpu_model is not None:
            _name("gpu_model", gpu_model, "model name")
            if gpus == 0:
                raise RequirementError("gpu_model", "a GPU model needs num_gpus > 0", gpu_model)
        tags = _collection("capabilities", capabilities, "tags")
        for c in tags:  # typed before hashing: frozenset() would call a hostile __hash__
            if not isinstance(c, str) or not c.strip():
                raise RequirementError("capabilities", f"capability tags are non-empty strings, got {shown(c)}", c)
            if len(c) > MAX_NAME:
                raise RequirementError("capabilities", f"a capability tag is at most {MAX_NAME} characters, got {len(c)}", c)
        caps = frozenset(tags)
        port_tokens = tuple(sorted({parse_port(p) for p in _collection("ports", ports, "'PORT/proto' tokens")}))
        if pool is not None:
            if not isinstance(pool, str) or not pool:
                raise RequirementError("pool", f"must be a non-empty pool name, got {shown(pool)}", pool)
            _name("pool", pool, "pool name")
        _choice("prefer", prefer, _PREFER)
        _choice("when_full", when_full, _WHEN_FULL)
        _choice("scale", scale, _SCALE)
        _check_payload(payload_size)
        res = parse_resources(resources) if resources is not None else ()
        terms = parse_label_selector(label_selector) if label_selector is not None else ()
        check_fabric_labels(terms, mt, fl, pool)
        accel = parse_accelerator_type(accelerator_type)
        if ray is None:
            ray = _PLAIN_RAY
        elif isinstance(ray, dict):
            ray = ray_call_options(**{k: v for k, v in ray.items() if k in _RAY_KWARGS})
        elif not isinstance(ray, RayCallOptions):
            raise RequirementError("ray", f"must be RayCallOptions or a dict of them, got {type(ray).__name__}", ray)
        elif ray == _PLAIN_RAY:
            ray = _PLAIN_RAY
        s(self, "min_tier", mt)
        s(self, "floor", fl)
        s(self, "fallback", bool(fallback))
        s(self, "num_cpus", cpus)
        s(self, "memory_mib", mem)
        s(self, "num_cores", int(cores))
        s(self, "num_gpus", gpus)
        s(self, "gpu_model", gpu_model.strip() if gpu_model else None)
        s(self, "capabilities", caps)
        s(self, "ports", port_tokens)
        s(self, "pool", pool)
        s(self, "prefer", prefer)
        s(self, "exclusive", bool(exclusive))
        s(self, "payload_size", payload_size)
        s(self, "when_full", when_full)
        s(self, "scale", scale)
        s(self, "resources", res)
        s(self, "label_selector", terms)
        s(self, "accelerator_type", accel)
        s(self, "ray", ray)
        s(self, "preset", _preset(preset))
        key: tuple = (
            mt.rank, fl.rank, cpus, mem, int(cores), gpus, self.gpu_model, tuple(sorted(caps)),
            port_tokens, pool, prefer, bool(exclusive), when_full, scale,
        )
        if res or terms or accel is not None or ray is not _PLAIN_RAY:  # plain requirements keep their old key
            key += (res, tuple((t.key, t.negate, tuple(sorted(t.values))) for t in terms), accel, ray)
        s(self, "class_key", key)
        cid = _CLASS_IDS.get(key)
        if cid is None:
            if len(_CLASS_IDS) >= _CLASS_IDS_MAX:
                _CLASS_IDS.clear()  # ids are never reused, so caches keyed by old ids stay correct
            cid = _CLASS_IDS[key] = next(_NEXT_CLASS_ID)
        s(self, "class_id", cid)
        s(self, "_hash", hash((cid, payload_size)))

    # -- immutability, equality, pickling ---------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Requirement is immutable; use .replace(...)")

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Requirement):
            return NotImplemented
        return (self.class_id == other.class_id or self.class_key == other.class_key) and self.payload_size == other.payload_size

    def __reduce__(self):
        return (_rebuild, (self.as_kwargs(),))

    def as_kwargs(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this requirement (plain values: a job's row keeps them
        as JSON; ``ray`` as its decorator arguments, whose ``retry_exceptions`` types only pickle)."""
        out: dict[str, Any] = {
            "min_tier": self.min_tier.value, "floor": self.floor.value, "fallback": self.fallback,
            "num_cpus": self.num_cpus, "memory_mib": self.memory_mib, "num_cores": self.num_cores,
            "num_gpus": self.num_gpus, "gpu_model": self.gpu_model, "capabilities": tuple(sorted(self.capabilities)),
            "ports": self.ports, "pool": self.pool, "prefer": self.prefer, "exclusive": self.exclusive,
            "payload_size": self.payload_size, "when_full": self.when_full, "scale": self.scale,
        }
        # Ray's terms only where given: a plain requirement's arguments (and the rows kept of them) stay as they were.
        if self.resources:
            out["resources"] = dict(self.resources)
        if self.label_selector:
            out["label_selector"] = self.selector_dict()
        if self.accelerator_type is not None:
            out["accelerator_type"] = self.accelerator_type
        if self.ray is not _PLAIN_RAY:
            out["ray"] = self.ray.as_kwargs()
        if self.preset is not None:
            out["preset"] = [self.preset[0], list(self.preset[1])]
        return out

    def selector_dict(self) -> dict[str, str]:
        """``label_selector`` as Ray writes it."""
        return {t.key: t.ray_value() for t in self.label_selector}

    def with_payload(self, payload_size: int) -> "Requirement":
        """The same requirement for a call carrying ``payload_size`` bytes, without validating
        again (~1 µs: build the requirement once per decorated function, derive one per call)."""
        _check_payload(payload_size)
        new = object.__new__(Requirement)
        s = object.__setattr__
        for name in Requirement.__slots__:
            s(new, name, getattr(self, name))
        s(new, "payload_size", payload_size)
        s(new, "_hash", hash((self.class_id, payload_size)))
        return new

    def replace(self, **changes: Any) -> "Requirement":
        """A copy with ``changes`` applied (validated again)."""
        kw = self.as_kwargs()
        if ("min_tier" in changes or "fallback" in changes) and "floor" not in changes:
            kw["floor"] = None  # re-derive the floor from the (new) fallback flag
        kw.update(changes)
        if self.preset is not None and "preset" not in changes:  # the fields changed are given over the preset too
            kw["preset"] = (self.preset[0], tuple(set(self.preset[1]) | set(changes)))
        return Requirement(**kw)

    def preset_overrides(self) -> dict[str, Any]:
        """The fields given over its operation preset, as ``from_operation``'s ``overrides`` (empty
        without a preset)."""
        if self.preset is None:
            return {}
        kw = self.as_kwargs()
        return {k: kw[k] for k in self.preset[1] if k in kw}

    def __repr__(self) -> str:
        parts = [f"min_tier={self.min_tier.value!r}"]
        parts.append("fallback=False" if self.floor is self.min_tier else f"floor={self.floor.value!r}")
        d = Requirement()
        for name in ("num_cpus", "memory_mib", "num_cores", "num_gpus", "gpu_model", "pool", "prefer",
                     "exclusive", "payload_size", "when_full", "scale"):
            v = getattr(self, name)
            if v != getattr(d, name):
                parts.append(f"{name}={v!r}")
        if self.capabilities:
            parts.append(f"capabilities={tuple(sorted(self.capabilities))!r}")
        if self.ports:
            parts.append(f"ports={self.ports!r}")
        if self.resources:
            parts.append(f"resources={dict(self.resources)!r}")
        if self.label_selector:
            parts.append(f"label_selector={self.selector_dict()!r}")
        if self.accelerator_type is not None:
            parts.append(f"accelerator_type={self.accelerator_type!r}")
        if self.ray is not _PLAIN_RAY:
            parts.append(f"ray={self.ray.as_kwargs()!r}")
        return f"Requirement({', '.join(parts)})"

    # -- derived ------------------------------------------------------------------------------
    @property
    def hard(self) -> bool:
        """True when the requirement never degrades below ``min_tier``."""
        return self.floor is self.min_tier

    @property
    def levels(self) -> tuple[ComputeTier, ...]:
        """The compute levels of the walk: ``min_tier`` down to ``floor``, one tier at a time."""
        return tuple(ComputeTier.from_rank(r) for r in range(self.min_tier.rank, self.floor.rank - 1, -1))

    # -- construction from settings -----------------------------------------------------------
    @classmethod
    def from_operation(cls, name: str, settings: "FabricSettings | None" = None, **overrides: Any) -> "Requirement":
        """The requirement an operation preset (``settings.operations[name]``) stands for;
        ``overrides`` replace single fields. Unknown operation: ``RequirementError('operation')``."""
        from fabric.core.settings import FabricSettings

        settings = settings if settings is not None else FabricSettings()
        op = settings.operations.get(name) if isinstance(name, str) else None
        if op is None:
            raise RequirementError("operation", f"unknown operation {shown(name)}; operations: {sorted(settings.operations)}", name)
        kw: dict[str, Any] = {
            "min_tier": op.min_tier, "floor": op.floor if op.fallback else None, "fallback": op.fallback,
            "num_cpus": op.num_cpus, "memory_mib": op.memory_mib, "num_gpus": op.num_gpus,
            "gpu_model": op.gpu_model, "capabilities": op.capabilities, "pool": op.pool, "when_full": op.when_full,
        }
        if "min_tier" in overrides and "floor" not in overrides and not op.fallback:
            kw["floor"] = None
        kw.update(overrides)
        kw["preset"] = (name, tuple(k for k in overrides if k != "preset"))
        return cls(**kw).validate_against(settings)

    def validate_against(self, settings: "FabricSettings") -> "Requirement":
        """``self`` if it refers only to things ``settings`` defines (its pool); else
        ``RequirementError('pool')``."""
        if self.pool is not None and all(p.name != self.pool for p in settings.pools):
            raise RequirementError("pool", f"unknown pool {shown(self.pool)}; pools: {sorted(p.name for p in settings.pools)}", self.pool)
        return self


_PLAIN_RAY = RayCallOptions()
_RAY_KWARGS = frozenset({"runtime_env", "num_returns", "retry_exceptions", "max_concurrency", "max_task_retries"})


def _check_payload(payload_size: Any) -> None:
    if isinstance(payload_size, bool) or not isinstance(payload_size, int) or not 0 <= payload_size < _MAX_PAYLOAD:
        raise RequirementError("payload_size", f"must be a non-negative integer (bytes) below 2**63, got {shown(payload_size)}", payload_size)


def _preset(value: object) -> "tuple[str, tuple[str, ...]] | None":
    """``preset`` checked: None, or an operation name and the names of the fields given over it."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)) and len(value) == 2 and isinstance(value[0], str) and value[0] \
            and isinstance(value[1], (tuple, list, set, frozenset)) and all(isinstance(k, str) for k in value[1]):
        return value[0], tuple(sorted(set(value[1])))
    raise RequirementError("preset", f"must be (operation name, field names given over it), got {shown(value)}", value)


def _rebuild(kwargs: dict[str, Any]) -> Requirement:
    return Requirement(**kwargs)

"""Ray's own placement terms in a ``Requirement``: custom resources, a label selector, an
accelerator type; and ``RayCallOptions``, what Ray is told about a call once it is placed.

A label selector is Ray's: ``{key: value}`` where a value is ``"v"`` (the node's label equals
``v``), ``"!v"`` (it does not, or the node lacks the label), ``"in(a,b)"`` or ``"!in(a,b)"``.
It is parsed once into ``LabelTerm``s, which the placement filter evaluates against a node's
Ray labels. ``accelerator_type`` is Ray's resource ``accelerator_type:<T>`` on the node.

``RayCallOptions`` carries what the fabric passes to Ray as it is (``runtime_env``,
``num_returns``, ``retry_exceptions``, ``max_concurrency``, ``max_task_retries``): hashable
(``runtime_env`` is kept as canonical JSON), picklable, so it travels in the requirement to the
dispatcher and to the job runner. ``RAY_REFUSED`` holds the Ray options ``@adaptive.remote``
refuses, each with the fabric's option to use instead (``docs/ray-options.md`` maps them all).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from fabric.core.errors import RequirementError
from fabric.core.names import POOL_LABEL, TIER_LABEL
from fabric.core.tiers import ComputeTier

#: Most resources or selector keys one requirement may name.
MAX_TERMS = 64
#: Longest resource name, label key or label value.
MAX_TERM = 256
#: Longest ``runtime_env`` as JSON.
MAX_RUNTIME_ENV = 1 << 20
#: Largest custom resource amount.
MAX_RESOURCE = 1e15
#: Ray keeps counts (returns, retries, concurrency) in 32 bits.
MAX_COUNT = (1 << 31) - 1
ACCELERATOR_PREFIX = "accelerator_type:"
#: Resources Ray or the fabric name themselves: asked for by their own arguments, not ``resources``.
RESERVED_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory", "fabric.slots"})
_IN = re.compile(r"^(!?)in\((.*)\)$", re.DOTALL)
#: Ray actor options: they apply to a decorated class (a job), not to a function.
ACTOR_ONLY_ARGS = frozenset({"max_concurrency", "max_task_retries"})
_BUNDLES = ("the fabric places every call itself: say where work may go with min_tier/floor (and pool, "
            "capabilities, resources, label_selector); for gang placement submit a bundle (fabric.Bundle, docs/jobs.md)")
_DETACHED = ("a decorated class is a fabric job: it is already detached (it outlives its caller) and named by the fabric "
             "(name=... is its job name); look a job up with the fabric handle's jobs(), not Ray's get_actor")
#: Ray options ``@adaptive.remote`` refuses, with what to use instead (the error names both).
RAY_REFUSED: dict[str, str] = {
    "scheduling_strategy": _BUNDLES,
    "placement_group": _BUNDLES,
    "placement_group_bundle_index": _BUNDLES,
    "placement_group_capture_child_tasks": _BUNDLES,
    "max_restarts": "the fabric restarts a job itself: use max_restarts_per_hour and on_runtime_failure on the class",
    "lifetime": _DETACHED,
    "get_if_exists": _DETACHED,
    "namespace": "jobs live in the fabric's own namespace; name=... names the job, and the fabric handle's jobs() finds it",
    "object_store_memory": "not supported: the object store is sized per node when it joins",
    "concurrency_groups": "not supported yet: use max_concurrency on the class",
    "_metadata": "not supported: Ray's private option",
    "fallback_strategy": "the fabric degrades itself: use min_tier with floor (and fallback) to say how far",
    "enable_task_events": "not supported: the fabric keeps Ray's default",
    "_labels": "not supported: Ray's private option",
    "max_calls": "not supported yet: Ray's workers run the fabric's calls as Ray reuses them",
    "_generator_backpressure_num_objects": "not supported yet: generator tasks (num_returns='streaming') are not",
    "_num_objects_per_yield": "not supported yet: generator tasks (num_returns='streaming') are not",
    "_actor_generator_backpressure_num_objects": "not supported yet: generator methods are not",
    "allow_out_of_order_execution": "not supported yet on a job's actor: use max_concurrency",
    "max_pending_calls": "not supported yet on a job's actor",
    "enable_tensor_transport": "not supported yet on a job's actor",
}


def refuse_ray_option(key: str, value: Any) -> None:
    """``RequirementError`` naming ``key`` and the fabric's option when ``key`` is a Ray option the
    fabric refuses (``RAY_REFUSED``)."""
    why = RAY_REFUSED.get(key)
    if why is not None:
        raise RequirementError(key, f"Ray's {key} is not taken by @adaptive.remote: {why}", value)


def refuse_actor_options(options: Mapping[str, Any]) -> None:
    """Ray's actor options (``max_concurrency``, ``max_task_retries``) given to a function: refused."""
    actor_only = sorted(set(options) & ACTOR_ONLY_ARGS)
    if actor_only:
        raise RequirementError(actor_only[0], "is a Ray actor option: it applies to a decorated class (a job), not a function",
                               options[actor_only[0]])



def _cut(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class LabelTerm:
    """One key of a label selector: the node's label ``key`` must be (``negate``: must not be)
    one of ``values``. A node without the label passes only a negated term."""

    key: str
    negate: bool
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if value is None:
            return self.negate
        return (value in self.values) != self.negate

    def ray_value(self) -> str:
        """The term as Ray writes it."""
        vals = sorted(self.values)
        body = vals[0] if len(vals) == 1 else f"in({','.join(vals)})"
        return f"!{body}" if self.negate else body


def parse_label_selector(value: Any) -> tuple[LabelTerm, ...]:
    """Ray's ``label_selector`` dict as terms sorted by key; ``RequirementError('label_selector')``."""
    if not isinstance(value, Mapping):
        raise RequirementError("label_selector", f"must be a dict of label key to value, got {type(value).__name__}", value)
    if len(value) > MAX_TERMS:
        raise RequirementError("label_selector", f"at most {MAX_TERMS} keys, got {len(value)}", value)
    terms = []
    for key, expr in value.items():
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_TERM:
            raise RequirementError("label_selector", f"a label key is a non-empty string of at most {MAX_TERM} characters, got {_cut(key)}", key)
        if not isinstance(expr, str) or not expr.strip() or len(expr) > 16 * MAX_TERM:
            raise RequirementError("label_selector", f"the value of {key!r} must be a non-empty string "
                                   f"('v', '!v', 'in(a,b)' or '!in(a,b)'), got {_cut(expr)}", expr)
        expr = expr.strip()
        m = _IN.match(expr)
        if m is not None:
            negate = m.group(1) == "!"
            vals = [v.strip() for v in m.group(2).split(",")]
        else:
            negate = expr.startswith("!")
            vals = [expr[1:].strip() if negate else expr]
        if not vals or any(not v or len(v) > MAX_TERM or "," in v for v in vals):
            raise RequirementError("label_selector", f"malformed value {expr!r} for {key!r}: expected 'v', '!v', 'in(a,b)' or '!in(a,b)'", expr)
        terms.append(LabelTerm(key, negate, frozenset(vals)))
    return tuple(sorted(terms, key=lambda t: t.key))


def check_fabric_labels(terms: tuple[LabelTerm, ...], min_tier: ComputeTier, floor: ComputeTier, pool: str | None) -> None:
    """Refuse a selector on the fabric's own labels that contradicts the requirement: a
    ``fabric.io/tier`` naming a tier below the floor (or admitting none at or above it), or a
    ``fabric.io/pool`` that leaves out the pool asked for."""
    allowed = [t for t in ComputeTier if t.rank >= floor.rank]
    for term in terms:
        if term.key == TIER_LABEL:
            if not term.negate:
                below = sorted(v for v in term.values if v not in {t.value for t in allowed})
                if below:
                    raise RequirementError("label_selector", f"{TIER_LABEL}={term.ray_value()!r} names {', '.join(below)}, "
                                           f"which is not a tier at or above the floor {floor} (min_tier {min_tier}); "
                                           "say the tier with min_tier/floor", term.ray_value())
            if not any(term.matches({TIER_LABEL: t.value}) for t in allowed):
                raise RequirementError("label_selector", f"{TIER_LABEL}={term.ray_value()!r} admits no tier at or above "
                                       f"the floor {floor} (min_tier {min_tier})", term.ray_value())
        elif term.key == POOL_LABEL and pool is not None and not term.matches({POOL_LABEL: pool}):
            raise RequirementError("label_selector", f"{POOL_LABEL}={term.ray_value()!r} leaves out pool {pool!r}, "
                                   "which the requirement asks for", term.ray_value())


def tier_term(terms: tuple[LabelTerm, ...]) -> LabelTerm | None:
    """The selector's ``fabric.io/tier`` term, if any."""
    for term in terms:
        if term.key == TIER_LABEL:
            return term
    return None


def parse_resources(value: Any) -> tuple[tuple[str, float], ...]:
    """Ray's ``resources`` dict (custom resources) as sorted ``(name, amount)`` pairs, zero amounts
    dropped; ``RequirementError('resources')``. ``CPU``/``GPU``/``memory`` have their own arguments."""
    if not isinstance(value, Mapping):
        raise RequirementError("resources", f"must be a dict of resource name to amount, got {type(value).__name__}", value)
    if len(value) > MAX_TERMS:
        raise RequirementError("resources", f"at most {MAX_TERMS} resources, got {len(value)}", value)
    out = []
    for name, amount in value.items():
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_TERM:
            raise RequirementError("resources", f"a resource name is a non-empty string of at most {MAX_TERM} characters, got {_cut(name)}", name)
        if name in RESERVED_RESOURCES:
            own = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory", "object_store_memory": "(not supported)",
                   "fabric.slots": "(the fabric's own)"}[name]
            raise RequirementError("resources", f"{name!r} is not a custom resource: use {own}", name)
        if name.startswith(ACCELERATOR_PREFIX):
            raise RequirementError("resources", f"{name!r}: use accelerator_type={name[len(ACCELERATOR_PREFIX):]!r}", name)
        if isinstance(amount, bool) or not isinstance(amount, (int, float)):
            raise RequirementError("resources", f"the amount of {name!r} must be a number, got {_cut(amount)}", amount)
        if isinstance(amount, float) and not math.isfinite(amount) or amount < 0 or amount > MAX_RESOURCE:
            raise RequirementError("resources", f"the amount of {name!r} must be a finite number in [0, {MAX_RESOURCE:g}], got {_cut(amount)}", amount)
        if amount > 1 and amount != int(amount):
            raise RequirementError("resources", f"the amount of {name!r}: more than 1 must be a whole number (Ray's rule), got {amount}", amount)
        if amount > 0:
            out.append((name, float(amount)))
    return tuple(sorted(out))


def parse_accelerator_type(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TERM:
        raise RequirementError("accelerator_type", f"must be a non-empty accelerator name such as 'A100', got {_cut(value)}", value)
    return value.strip()


def _count(field: str, value: Any, low: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_COUNT:
        raise RequirementError(field, f"must be {what}, got {_cut(value)}", value)
    return value


@dataclass(frozen=True, slots=True)
class RayCallOptions:
    """What Ray is told about a call (or a job's actor) as it is, once the fabric placed it."""

    runtime_env_json: str | None = None
    """``runtime_env`` as canonical JSON (hashable); ``runtime_env`` gives the dict back."""
    num_returns: int = 1
    retry_exceptions: bool | tuple[type, ...] = False
    """Ray's meaning: retry (up to ``max_retries``) when the task raises (any, or these types)."""
    max_concurrency: int | None = None
    """A job's actor: calls it runs at once (Ray's default 1 for a plain class)."""
    max_task_retries: int | None = None
    """A job's actor: Ray's ``max_task_retries``. The fabric never has Ray restart a job's actor
    (it places a new instance itself), so this counts only the retries of methods that raised and
    are marked ``@ray.method(retry_exceptions=...)``."""

    @property
    def runtime_env(self) -> dict[str, Any] | None:
        return None if self.runtime_env_json is None else json.loads(self.runtime_env_json)

    @property
    def plain(self) -> bool:
        return self == _PLAIN

    def as_kwargs(self) -> dict[str, Any]:
        """The decorator arguments that rebuild these options."""
        out: dict[str, Any] = {}
        if self.runtime_env_json is not None:
            out["runtime_env"] = self.runtime_env
        if self.num_returns != 1:
            out["num_returns"] = self.num_returns
        if self.retry_exceptions is not False:
            out["retry_exceptions"] = self.retry_exceptions if isinstance(self.retry_exceptions, bool) else list(self.retry_exceptions)
        if self.max_concurrency is not None:
            out["max_concurrency"] = self.max_concurrency
        if self.max_task_retries is not None:
            out["max_task_retries"] = self.max_task_retries
        return out

    def task_options(self) -> dict[str, Any]:
        """Ray task options these stand for (``runtime_env``, ``num_returns``, ``retry_exceptions``)."""
        out: dict[str, Any] = {"retry_exceptions": self.retry_exceptions if isinstance(self.retry_exceptions, bool)
                               else list(self.retry_exceptions)}
        if self.runtime_env_json is not None:
            out["runtime_env"] = self.runtime_env
        if self.num_returns != 1:
            out["num_returns"] = self.num_returns
        return out


_PLAIN = RayCallOptions()


def ray_call_options(*, runtime_env: Any = None, num_returns: Any = 1, retry_exceptions: Any = False,
                     max_concurrency: Any = None, max_task_retries: Any = None) -> RayCallOptions:
    """Validated ``RayCallOptions``; a bad value raises ``RequirementError`` naming its field."""
    env_json = None
    if runtime_env is not None:
        if not isinstance(runtime_env, Mapping):
            raise RequirementError("runtime_env", f"must be a dict (Ray's runtime_env), got {type(runtime_env).__name__}", runtime_env)
        try:
            env_json = json.dumps(dict(runtime_env), sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise RequirementError("runtime_env", f"must be JSON-serialisable, as Ray requires ({exc})", runtime_env) from None
        if len(env_json) > MAX_RUNTIME_ENV:
            raise RequirementError("runtime_env", f"at most {MAX_RUNTIME_ENV} bytes as JSON, got {len(env_json)}", "...")
        if env_json == "{}":
            env_json = None
    if num_returns in ("streaming", "dynamic"):
        raise RequirementError("num_returns", f"num_returns={num_returns!r} (generators) is not supported yet: "
                               "return a list, or use num_returns=N", num_returns)
    n = _count("num_returns", num_returns, 1, f"a whole number from 1 to {MAX_COUNT}")
    retry: bool | tuple[type, ...]
    if isinstance(retry_exceptions, bool):
        retry = retry_exceptions
    elif isinstance(retry_exceptions, (list, tuple)) and retry_exceptions and len(retry_exceptions) <= MAX_TERMS \
            and all(isinstance(t, type) and issubclass(t, BaseException) for t in retry_exceptions):
        retry = tuple(retry_exceptions)
    else:
        raise RequirementError("retry_exceptions", f"must be True, False or a non-empty list of exception types, got {_cut(retry_exceptions)}",
                               retry_exceptions)
    conc = None if max_concurrency is None else _count("max_concurrency", max_concurrency, 1, f"a whole number from 1 to {MAX_COUNT}")
    mtr = None if max_task_retries is None else _count("max_task_retries", max_task_retries, -1,
                                                       f"a whole number from -1 (forever) to {MAX_COUNT}")
    return RayCallOptions(env_json, n, retry, conc, mtr)

"""A kept decision read for a person (``explain_recorded``) and decided again (``replay``).

``explain_recorded`` prints the report ``Decision.explain`` printed when the decision was made, from
what was recorded then (the fleet as it was, not as it is). ``replay`` runs the engine on the
recorded fleet slice and requirement, with the recorded settings (it must decide the same) or with
``settings`` given (today's: a requirement that came from an operation preset takes today's preset,
the fields given over it kept): the outcome again, whether it is the same, and, when it is not, why:
the requirement's fields today's preset changes, the settings that differ, and what became of the
node chosen then.
"""

from __future__ import annotations

from typing import Any

from fabric.core.decisions.book import RecordedDecision
from fabric.core.decisions.rows import settings_row
from fabric.core.errors import RequirementError
from fabric.core.placement import KEY_COMPONENTS, FleetView, NodeRecord, Requirement, place
from fabric.core.placement.explain import render
from fabric.core.placement.reference import walk_fleet
from fabric.core.placement.trace import PlacementTrace
from fabric.core.settings import FabricSettings

OUTCOME_FIELDS = ("status", "node_id", "tier", "node_tier", "fallback_levels", "reason", "pool", "pool_tier", "shape",
                  "gpu_index", "resilience_violations")
"""What two decisions must share to be the same decision."""
SETTINGS_SHOWN = 12
"""Settings differences listed at most."""


def explain_recorded(rd: RecordedDecision, verbose: bool = False) -> str:
    """The report of the kept decision, in ``Decision.explain``'s words, headed by what it was; with
    ``verbose`` every node's verdict (the walk again, on the recorded fleet)."""
    row = rd.row
    every = None
    if verbose:
        _, steps, decided = walk_fleet(_Slice(rd.records, rd.settings, rd.provision_held), rd.requirement, rd.context, trace=True)
        every = PlacementTrace(steps, decided).verdicts()
    who = f"job {row['job_id']}" if row.get("job_id") else row["subject"]
    head = f"event {rd.seq}: {who} decision recorded ({row['why']}) over {row['nodes']} node(s), fleet version {row['fleet']}"
    text = render(row["decision"]["summary"], rd.requirement, rd.context, row["walk"], row["decision"]["node_id"], every)
    lines = [head, text]
    grant = row.get("grant")
    if grant:
        slots = ", ".join(f"{s['node_id'][:12]} x{s['capacity']}" for s in grant["slots"]) or "none"
        lines.append(f"  lease {grant['lease_id']}: slots {slots}")
        if grant.get("spill"):
            among = ", ".join(f"{k}={v}" for k, v in sorted(grant["spill"].items()))
            lines.append(f"  spilled calls: Ray chose among the nodes matching {among}")
    return "\n".join(lines)


def replay(rd: RecordedDecision, settings: FabricSettings | None = None,
           records: "list[NodeRecord] | None" = None) -> dict[str, Any]:
    """The engine again on ``rd``'s inputs: the recorded settings unless ``settings`` is given, the
    recorded fleet slice unless ``records`` is. ``same``, the outcome then and now, and ``why`` (lines)
    when they differ."""
    used = settings if settings is not None else rd.settings
    recs = records if records is not None else rd.records
    req = rd.requirement
    preset_why: list[str] = []
    if settings is not None:
        recs = [_with_overrides(r, settings) for r in recs]
        req, preset_why = preset_again(rd.requirement, settings)
    fleet = FleetView(recs, used)
    fleet.provision_held = rd.provision_held
    d = place(fleet, req, rd.context, trace=True)
    then = rd.row["decision"]
    now = {**d.to_dict(), "node_name": d.node_name, "summary": d.summary()}
    same = all(_norm(then.get(k)) == _norm(now.get(k)) for k in OUTCOME_FIELDS)
    why: list[str] = []
    if not same:
        why.append(f"then: {then['summary']}")
        why.append(f"now:  {now['summary']}")
        if settings is not None:
            why.extend(preset_why)
            why.extend(settings_differences(rd.settings, settings))
        if records is not None:
            why.append("the fleet slice given differs from the one recorded")
        why.extend(_node_fate(then.get("node_id"), d.trace, now.get("node_id")))
    return {"seq": rd.seq, "same": same, "settings": "today's" if settings is not None else "recorded",
            "then": then, "now": now, "why": why, "text": d.explain()}


def preset_again(req: Requirement, settings: FabricSettings) -> tuple[Requirement, list[str]]:
    """``req`` with its operation preset applied again from ``settings`` (the fields given over the
    preset kept), and a line per field that comes out different; ``req`` as it is when it came from
    no preset, or when ``settings`` no longer define it (said in a line)."""
    if req.preset is None:
        return req, []
    name = req.preset[0]
    try:
        now = Requirement.from_operation(name, settings, **req.preset_overrides()).with_payload(req.payload_size)
    except RequirementError as e:
        return req, [f"operation {name!r}: {e.reason}; replayed with the requirement recorded"]
    then_kw, now_kw = req.as_kwargs(), now.as_kwargs()
    changed = [f"operation {name!r}: {k}: {_short(then_kw.get(k))} -> {_short(now_kw.get(k))}"
               for k in sorted(set(then_kw) | set(now_kw)) if k != "preset" and then_kw.get(k) != now_kw.get(k)]
    return now, changed


def settings_differences(old: FabricSettings, new: FabricSettings, limit: int = SETTINGS_SHOWN) -> list[str]:
    """``settings PATH: OLD -> NEW`` for each setting that differs (at most ``limit`` lines)."""
    out: list[tuple[str, Any, Any]] = []
    _diff(settings_row(old), settings_row(new), "", out)
    shown = [f"settings {path}: {_short(a)} -> {_short(b)}" for path, a, b in out[:limit]]
    if len(out) > limit:
        shown.append(f"settings: {len(out) - limit} more difference(s)")
    return shown


def _diff(a: Any, b: Any, path: str, out: list) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            _diff(a.get(k), b.get(k), f"{path}.{k}" if path else str(k), out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append((path, a, b))


def _short(v: Any, width: int = 60) -> str:
    s = repr(v)
    return s if len(s) <= width else s[: width - 3] + "..."


def _node_fate(node_id: str | None, trace: PlacementTrace | None, chosen: str | None) -> list[str]:
    """What the engine now makes of the node chosen then."""
    if node_id is None or trace is None:
        return []
    verdicts = trace.verdicts()
    verdict = verdicts.get(node_id)
    if verdict is None:
        return [f"node {node_id} is not in the fleet the engine read, or not at the level it decided at"]
    if verdict != "survivor":
        return [f"node {node_id} now fails filter {verdict}"]
    keys = {nid: key for key, nid in trace.survivors()}
    if chosen in keys and node_id in keys:
        for name, a, b in zip(KEY_COMPONENTS, keys[node_id], keys[chosen]):
            if a != b:
                return [f"node {node_id} still fits but ranks behind {chosen} on key component {name} ({a} against {b})"]
    return [f"node {node_id} still fits; the walk now decides at {trace.decided_at}"]


def _with_overrides(rec: NodeRecord, settings: FabricSettings) -> NodeRecord:
    """A recorded node with today's per-node overrides (``nodes:``) applied."""
    override = settings.nodes.get(rec.name)
    if override is not None and override.max_concurrent_tasks is not None and override.max_concurrent_tasks != rec.max_concurrent_tasks:
        return rec.evolve(max_concurrent_tasks=override.max_concurrent_tasks)
    return rec


def _norm(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


class _Slice:
    """The recorded fleet as the reference walk reads one (``settings``, ``records()``, held pool tiers)."""

    def __init__(self, records: list[NodeRecord], settings: FabricSettings, provision_held: frozenset) -> None:
        self.settings = settings
        self.provision_held = provision_held
        self._records = sorted(records, key=lambda r: r.node_id)

    def records(self) -> list[NodeRecord]:
        return self._records

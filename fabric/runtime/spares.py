"""Hot spares and provisions on the driver's side: the reconcilers ``fabric.up`` starts, and the
``FabricHandle`` methods over them (docs/pools.md).

- ``start_reconcilers`` (``fabric.runtime.lifecycle``'s): one ``SpareReconcilerActor``
  (``fabric.spares.<pool>``, detached, on the head) per pool of the live hot-spare list.
- ``h.update_hot_spares(entries)``: validated whole against the settings in force
  (``SettingsError`` with every problem; the live list unchanged then), stored in the registry
  (``HOT_SPARES_KEY``), pushed to each pool's reconciler (started for a new pool; a removed entry's
  reconciler reaps its orphans); returns what changed per pool (``diff_hot_spares``).
- ``h.spare_spec(node)``: one node's spare spec (tags, warm_for, what it holds).
- ``h.spares()``: each pool's reconciler status (target, live, pending, warm for what).
- ``h.provisions()``: open provisions (prospective nodes), held pool tiers, provisioned instances.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from fabric.core.names import HOT_SPARES_KEY, REGISTRY, SETTINGS_KEY, SPARES_PREFIX, spares_actor_name
from fabric.core.scheduler_api import SchedulerApi
from fabric.core.settings import FabricSettings, HotSpareSettings
from fabric.core.spares import SpareSpec, diff_hot_spares, parse_hot_spares, spare_spec
from fabric.runtime import session as sessions
from fabric.runtime.lifecycle import live_list, start_reconcilers


def checked_entries(entries: Any, settings: FabricSettings) -> tuple[Any, ...]:
    """``entries`` as a valid hot-spare list for ``settings``: ``SettingsError`` with every problem
    (the list's own, and shapes whose profile the local provider could not start)."""
    from fabric.core.errors import SettingsError
    from fabric.providers.local import profile_problems

    problems = []
    parsed: tuple[Any, ...] = ()
    try:
        parsed = parse_hot_spares(entries, settings)
    except SettingsError as exc:
        problems += list(exc.problems)
    raw = entries if isinstance(entries, (list, tuple)) else []
    try:
        problems += [p for p in profile_problems(settings, raw) if p.path.startswith("hot_spares.")]
    except Exception:  # entries too malformed to read: their structural problems are reported
        pass
    if problems:
        raise SettingsError(problems)
    return parsed


class SparesSurface:
    """Mixed into ``FabricHandle``."""

    timeout_s: float

    def _actor(self, name: str) -> Any:  # pragma: no cover - FabricHandle's
        raise NotImplementedError

    def _get(self, ref: Any) -> Any:  # pragma: no cover - FabricHandle's
        raise NotImplementedError

    def _scheduler_api(self) -> SchedulerApi:  # pragma: no cover - FabricHandle's
        raise NotImplementedError

    def settings_in_force(self) -> FabricSettings:
        """The settings the fabric runs with: this session's (``fabric.up``), else the ones the
        registry holds (the first ``up``'s). What the CLI's pool columns and the routes watcher read."""
        mine = sessions.session(sessions.driver()).settings
        if mine is not None:
            return mine
        return FabricSettings.load(self._get(self._actor(REGISTRY).get_state.remote(SETTINGS_KEY)))

    def hot_spares(self) -> list[dict[str, Any]]:
        """The live hot-spare list."""
        entries = live_list(sessions.driver(), self._actor(REGISTRY), self.settings_in_force(), self.timeout_s)
        return [e.model_dump(mode="json") for e in entries]

    def update_hot_spares(self, entries: Sequence[HotSpareSettings | Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """Replace the live hot-spare list without a restart; what changed, per pool."""
        driver = sessions.driver()
        settings = self.settings_in_force()
        new = checked_entries(entries, settings)  # SettingsError: every problem, nothing changed
        registry = self._actor(REGISTRY)
        old = live_list(driver, registry, settings, self.timeout_s)
        diff = diff_hot_spares(old, new)
        self._get(registry.put_state.remote(HOT_SPARES_KEY, [e.model_dump(mode="json") for e in new]))
        by_pool = {e.pool: e for e in new}
        for pool, change in diff.items():
            entry = by_pool.get(pool)
            if change["change"] == "added":
                (actor,) = start_reconcilers(driver, settings, [pool])
            else:
                actor = self._actor(spares_actor_name(pool))
            self._get(actor.set_entry.remote(entry.model_dump(mode="json") if entry is not None else None))
        return diff

    def spare_spec(self, node: str) -> SpareSpec:
        """One node's ``SpareSpec`` (by id, id prefix or name), from the scheduler's view."""
        driver = sessions.driver()
        records = self._scheduler_api().nodes()
        match = [r for r in records if r.node_id == node or r.name == node] or [r for r in records if r.node_id.startswith(node)]
        if len(match) != 1:
            from fabric.core.errors import NodeNotFoundError

            raise NodeNotFoundError(node)
        settings = self.settings_in_force()
        entries = live_list(driver, self._actor(REGISTRY), settings, self.timeout_s)
        return spare_spec(match[0], entries, settings.default_pool.name)

    def spares(self) -> list[dict[str, Any]]:
        """Each pool's spares now: target, live, consumed, pending, reaping, warm for what."""
        driver = sessions.driver()
        names = sorted(n for n in driver.named_actors() if n.startswith(SPARES_PREFIX))
        return [self._get(self._actor(n).status.remote()) for n in names]

    def provisions(self) -> dict[str, object]:
        """Open provisions (prospective nodes), held pool tiers, provisioned instances."""
        return self._scheduler_api().provisions()


__all__ = ["SparesSurface", "checked_entries", "live_list", "start_reconcilers"]

"""The ``command`` provider: the operator's own executables make and give back machines.

A pool tier with ``provider: command`` names three executables in its ``command`` block
(``fabric.core.settings_command.CommandScripts``): ``provision``, ``terminate`` and ``list``. Each
is run by ``fabric.providers.command_run.run_script`` (JSON on stdin and stdout, a time limit,
secrets by environment only, every failure a ``ProviderError`` carrying the script's stderr).
docs/providers.md is the contract the scripts implement.

``provision`` picks the instance id first and hands the script the ``fabric join`` command line
that carries it (``--instance ID --provider command`` plus the pool, pool tier, shape and spare
labels), so the machine it starts joins like any other and the scheduler matches the registering
node to its provision by the instance-id label. A provision that fails is followed by a
``terminate`` of its instance id (best effort): a script that died half-way leaves nothing billed.

``list()`` answers the machines this provider started or took back and has not terminated
(no script runs: the scheduler reads it often). After a scheduler restart the ``list`` script is the
truth: ``adopt(node)`` takes back an instance the store remembers only when the script still lists
it, and ``reconcile_unknown()`` deals with what the script lists that nobody remembers, by the
pool tier's ``unknown_instances``: ``terminate`` it, or ``adopt`` it (one that says its pool, pool
tier and a candidate shape; any other is terminated).
"""

from __future__ import annotations

import builtins
import secrets
import shlex
import threading
import time
from typing import Any, Callable, Mapping

from fabric.core.capabilities import label_value
from fabric.core.names import (
    CLOUD_LABEL, INSTANCE_LABEL, POOL_LABEL, POOL_TIER_LABEL, PROVIDER_LABEL, SHAPE_LABEL, SPARE_LABEL, ZONE_LABEL,
)
from fabric.core.settings import FabricSettings, NodeShape, PoolTier
from fabric.core.settings_command import CommandScripts
from fabric.providers.base import NO_TAGS, ProviderError, ProvisionedNode
from fabric.providers.command_run import run_script
from fabric.providers.local_args import tag_labels

NAME = "command"
TierKey = tuple[str, str]
"""``(pool, pool tier)``."""
Note = tuple[str, dict[str, Any], "ProvisionedNode | None"]
"""What ``reconcile_unknown`` did with one instance: ``(event kind, its data, the node adopted or None)``."""


def command_tiers(settings: FabricSettings) -> dict[TierKey, PoolTier]:
    """The settings' ``provider: command`` pool tiers, by ``(pool, pool tier)``."""
    return {(pool.name, pt.name): pt for pool in settings.pools for pt in pool.tiers
            if pt.provider == NAME and pt.command is not None}


def join_argv(address: str, instance_id: str, labels: Mapping[str, str], fabric: str = "fabric") -> list[str]:
    """The ``fabric join`` a provisioned machine runs: the head's ``address``, its instance id and
    provider, pool and pool tier, and its other labels (the script adds what its machine needs:
    ``--block``, ``--role``, ``--token-file``...)."""
    own = {INSTANCE_LABEL, PROVIDER_LABEL, POOL_LABEL, POOL_TIER_LABEL, ZONE_LABEL, CLOUD_LABEL}
    argv = [fabric, "join", "--address", address, "--instance", labels[INSTANCE_LABEL], "--provider", labels[PROVIDER_LABEL],
            "--pool", labels[POOL_LABEL], "--pool-tier", labels[POOL_TIER_LABEL]]
    if ZONE_LABEL in labels:
        argv += ["--zone", labels[ZONE_LABEL]]
    if CLOUD_LABEL in labels:
        argv += ["--cloud", labels[CLOUD_LABEL]]
    for key, value in sorted(labels.items()):
        if key not in own:
            argv += ["--label", f"{key}={value}"]
    return argv


class CommandProvider:
    """Provision machines through each ``command`` pool tier's scripts.

    ``tiers``: the pool tiers by ``(pool, pool tier)`` (``command_tiers``); ``address``: the head's
    address the machines join (a tier's ``join_address`` wins); ``env``: the scripts' base
    environment (default this process's); ``clock`` (wall seconds) stamps ``started_at``;
    ``new_id`` makes instance ids."""

    name = NAME

    def __init__(self, tiers: Mapping[TierKey, PoolTier], *, address: str, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.time, new_id: Callable[[], str] | None = None) -> None:
        self.tiers = {k: t for k, t in tiers.items() if t.command is not None}
        self.address = address
        self.env = None if env is None else dict(env)
        self._clock = clock
        self._new_id = new_id or (lambda: f"cmd-{secrets.token_hex(5)}")
        self._held: dict[str, ProvisionedNode] = {}
        self._lock = threading.Lock()
        self._listing: dict[str, dict[str, dict[str, Any]] | None] | None = None
        """While a restarted scheduler takes instances back: each ``list`` script's answer (by its path;
        None: it failed), asked once."""

    # -- the protocol --------------------------------------------------------------------------------------
    def provision(self, shape: NodeShape, *, pool: str, pool_tier: str, spare: bool = False,
                  tags: Mapping[str, str] = NO_TAGS) -> ProvisionedNode:
        """Run the pool tier's ``provision`` script for one machine of ``shape``; the node it made
        (it registers once the machine's ``fabric join`` ran). ``ProviderError``: a pool tier with no
        command block, a bad pool, pool tier or tag (before any script runs), or the script's failure
        (after which ``terminate`` is asked for the instance, best effort)."""
        scripts = self._scripts(pool, pool_tier, shape.name)
        for what, value in (("pool", pool), ("pool_tier", pool_tier)):
            if not value or label_value(value) != value:
                raise ProviderError(f"{what} {value!r} is not a valid label value", reason="invalid_pool", provider=NAME,
                                    shape=shape.name, field=what)
        try:
            extra = tag_labels(tags)
        except ValueError as exc:
            raise ProviderError(str(exc), reason="invalid_tag", provider=NAME, shape=shape.name, field="tags") from exc
        instance_id = self._new_id()
        labels = {POOL_LABEL: pool, POOL_TIER_LABEL: pool_tier, INSTANCE_LABEL: instance_id, PROVIDER_LABEL: NAME,
                  SPARE_LABEL: "true" if spare else "false", SHAPE_LABEL: label_value(shape.name),
                  **({ZONE_LABEL: label_value(shape.zone)} if shape.zone else {}),
                  **({CLOUD_LABEL: label_value(shape.cloud)} if shape.cloud else {})}
        clash = sorted(set(extra) & set(labels))
        if clash:
            raise ProviderError(f"tag {clash[0]!r} would replace the node's own label", reason="invalid_tag", provider=NAME,
                                shape=shape.name, field="tags")
        labels.update(extra)
        argv = join_argv(scripts.join_address or self.address, instance_id, labels)
        request = {"instance_id": instance_id, "pool": pool, "pool_tier": pool_tier, "shape": shape.model_dump(mode="json"),
                   "spare": spare, "labels": labels,
                   "join": {"address": scripts.join_address or self.address, "argv": argv, "command": shlex.join(argv)}}
        try:
            answer = run_script(scripts, "provision", request, base_env=self.env, instance_id=instance_id, shape=shape.name)
            given = answer.get("instance_id")
            if given != instance_id:
                raise ProviderError(f"the provision script answered instance_id {given!r}, not {instance_id!r} (the id it "
                                    f"was handed)", reason="bad_answer", provider=NAME, shape=shape.name,
                                    instance_id=instance_id, field="instance_id")
        except ProviderError as exc:
            self._terminate_quietly(scripts, instance_id, pool, pool_tier)
            raise exc
        name = answer.get("name")
        node = ProvisionedNode(instance_id=instance_id, provider=NAME, pool=pool, pool_tier=pool_tier, shape=shape, spare=spare,
                               started_at=self._clock(), name=name if isinstance(name, str) and name else instance_id,
                               labels=labels)
        with self._lock:
            self._held[instance_id] = node
        return node

    def terminate(self, instance_id: str) -> None:
        """Run the ``terminate`` script of the pool tier ``instance_id`` was provisioned for; the
        instance is no longer listed once it succeeded. ``ProviderError`` for an id this provider
        does not hold (``unknown_instance``) or the script's failure (the instance stays listed)."""
        with self._lock:
            node = self._held.get(instance_id)
        if node is None:
            raise ProviderError(f"no instance {instance_id!r} is held by the command provider; held: "
                                f"{', '.join(sorted(self._held)) or 'none'}", reason="unknown_instance", provider=NAME,
                                instance_id=instance_id)
        scripts = self._scripts(node.pool, node.pool_tier, node.shape.name)
        run_script(scripts, "terminate", self._terminate_request(instance_id, node.pool, node.pool_tier, node.name),
                   base_env=self.env, instance_id=instance_id, shape=node.shape.name)
        with self._lock:
            self._held.pop(instance_id, None)

    def list(self) -> builtins.list[ProvisionedNode]:
        """The instances provisioned or taken back here and not terminated, oldest first."""
        with self._lock:
            return sorted(self._held.values(), key=lambda n: (n.started_at, n.instance_id))

    def close(self) -> None:
        """Terminate every instance held (``fabric down``); one whose script fails stays listed."""
        for node in self.list():
            try:
                self.terminate(node.instance_id)
            except ProviderError as exc:
                print(f"[fabric.providers.command] {node.instance_id} not terminated: {exc}")

    # -- after a restart: the list script is the truth -------------------------------------------------------
    def listed(self, pool: str, pool_tier: str) -> dict[str, dict[str, Any]]:
        """What the pool tier's ``list`` script reports now, by instance id. ``ProviderError`` when it
        fails or an entry has no ``instance_id`` string."""
        scripts = self._scripts(pool, pool_tier)
        answer = run_script(scripts, "list", {}, base_env=self.env)
        entries = answer.get("instances")
        if not isinstance(entries, builtins.list):
            raise ProviderError(f"the list script {scripts.list!r} printed no 'instances' list", reason="bad_answer",
                                provider=NAME, field="instances")
        out: dict[str, dict[str, Any]] = {}
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("instance_id"), str) or not entry["instance_id"]:
                raise ProviderError(f"the list script {scripts.list!r} printed an entry without an instance_id string "
                                    f"(instances.{i})", reason="bad_answer", provider=NAME, field=f"instances.{i}.instance_id")
            out[entry["instance_id"]] = entry
        return out

    def adopt(self, node: ProvisionedNode) -> bool:
        """Take back an instance a scheduler before this one provisioned: True when its pool tier's
        ``list`` script still lists it (or cannot be asked: it is kept rather than leaked, and the
        next restart asks again); False for another provider's node, a pool tier that is no longer
        a ``command`` one, or an instance the script no longer lists."""
        if node.provider != NAME or (node.pool, node.pool_tier) not in self.tiers:
            return False
        listing = self._listing_of(node.pool, node.pool_tier)
        if listing is not None and node.instance_id not in listing:
            return False
        with self._lock:
            self._held.setdefault(node.instance_id, node)
        return True

    def reconcile_unknown(self) -> builtins.list[Note]:
        """Each instance a ``list`` script reports that this provider does not hold (no row
        remembered it): adopted or terminated by its pool tier's ``unknown_instances``. What was done,
        one note each (a list script that failed is one ``list_failed`` note)."""
        notes: builtins.list[Note] = []
        seen: set[str] = set()
        for (pool, pool_tier), pt in self.tiers.items():
            assert pt.command is not None
            if pt.command.list in seen:
                continue
            seen.add(pt.command.list)
            try:
                listing = self._listing_of(pool, pool_tier, strict=True)
            except ProviderError as exc:
                notes.append(("list_failed", {"provider": NAME, "pool": pool, "pool_tier": pool_tier, "error": str(exc),
                                              "log_tail": getattr(exc, "log_tail", "")}, None))
                continue
            for iid, entry in sorted((listing or {}).items()):
                with self._lock:
                    if iid in self._held:
                        continue
                notes.append(self._unknown(iid, entry, (pool, pool_tier)))
        self._listing = None
        return notes

    # -- internals -------------------------------------------------------------------------------------------
    def _scripts(self, pool: str, pool_tier: str, shape: str | None = None) -> CommandScripts:
        pt = self.tiers.get((pool, pool_tier))
        if pt is None or pt.command is None:
            raise ProviderError(f"pool tier {pool}/{pool_tier} is not a 'command' pool tier with a command block; command "
                                f"pool tiers: {', '.join(f'{p}/{t}' for p, t in sorted(self.tiers)) or 'none'}",
                                reason="unknown_pool_tier", provider=NAME, shape=shape, field="pool_tier")
        return pt.command

    @staticmethod
    def _terminate_request(instance_id: str, pool: str, pool_tier: str, name: str | None) -> dict[str, Any]:
        return {"instance_id": instance_id, "pool": pool, "pool_tier": pool_tier, "name": name or instance_id}

    def _terminate_quietly(self, scripts: CommandScripts, instance_id: str, pool: str, pool_tier: str) -> None:
        try:
            run_script(scripts, "terminate", self._terminate_request(instance_id, pool, pool_tier, None), base_env=self.env,
                       instance_id=instance_id)
        except ProviderError:
            pass  # the provision's own error is the one to report; a restart's list catches what is left

    def _listing_of(self, pool: str, pool_tier: str, strict: bool = False) -> dict[str, dict[str, Any]] | None:
        """The pool tier's ``list`` answer, asked once per restart (None: it failed; ``strict``: raise)."""
        scripts = self._scripts(pool, pool_tier)
        if self._listing is None:
            self._listing = {}
        if scripts.list not in self._listing:
            try:
                self._listing[scripts.list] = self.listed(pool, pool_tier)
            except ProviderError:
                self._listing[scripts.list] = None
                if strict:
                    raise
        got = self._listing[scripts.list]
        if got is None and strict:
            self._listing.pop(scripts.list)
            return self._listing_of(pool, pool_tier, strict=True)
        return got

    def _unknown(self, iid: str, entry: Mapping[str, Any], lister: TierKey) -> Note:
        """Adopt or terminate one instance nobody remembered."""
        pool, pool_tier = entry.get("pool"), entry.get("pool_tier")
        key = (pool, pool_tier) if isinstance(pool, str) and isinstance(pool_tier, str) else lister
        pt = self.tiers.get(key) or self.tiers[lister]
        key = key if key in self.tiers else lister
        assert pt.command is not None
        shape = next((s for s in pt.candidate_shapes if s.name == entry.get("shape")), None)
        data: dict[str, Any] = {"provider": NAME, "instance_id": iid, "pool": key[0], "pool_tier": key[1]}
        if pt.command.unknown_instances == "adopt" and shape is not None and key == (pool, pool_tier):
            spare = entry.get("spare") is True
            name = entry.get("name")
            labels = {POOL_LABEL: key[0], POOL_TIER_LABEL: key[1], INSTANCE_LABEL: iid, PROVIDER_LABEL: NAME,
                      SPARE_LABEL: "true" if spare else "false", SHAPE_LABEL: label_value(shape.name)}
            node = ProvisionedNode(instance_id=iid, provider=NAME, pool=key[0], pool_tier=key[1], shape=shape, spare=spare,
                                   started_at=self._clock(), name=name if isinstance(name, str) and name else iid, labels=labels)
            with self._lock:
                self._held[iid] = node
            return ("instance_adopted", {**data, "shape": shape.name, "reason": "listed by its scripts, unknown here"}, node)
        why = ("unknown_instances is terminate" if pt.command.unknown_instances == "terminate"
               else "its list entry names no pool, pool tier and candidate shape of a command pool tier")
        try:
            run_script(pt.command, "terminate", self._terminate_request(iid, key[0], key[1], entry.get("name")),
                       base_env=self.env, instance_id=iid)
        except ProviderError as exc:
            return ("terminate_failed", {**data, "error": str(exc), "reason": why}, None)
        return ("instance_terminated_unknown", {**data, "reason": why}, None)


__all__ = ["CommandProvider", "command_tiers", "join_argv", "NAME"]

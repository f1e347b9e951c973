"""The ``local`` provider's argument builders, shared with the rest of the fabric.

``node_args`` probes a profile, a recording folder or takes probed capabilities and returns the
node's CPUs, GPUs, resources, labels and environment (``NodeArgs.cluster_kwargs()`` is
``Cluster.add_node``'s form, which ``LocalFabric`` uses); ``ray_start_args`` renders a ``NodeArgs``
as a ``ray start`` argv (the form ``fabric join`` and the provider run); ``profile_for`` and
``profile_problems`` check a shape's profile. Re-exported from ``fabric.providers.local``.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from fabric.core.capabilities import Limitations, NodeCapabilities, label_value
from fabric.core.names import INSTANCE_LABEL, LABEL_PREFIX, PROFILE_LABEL, PROVIDER_LABEL, RECORDING_ENV, SHAPE_LABEL, SPARE_LABEL
from fabric.core.settings import NodeShape
from fabric.providers.base import NO_TAGS, ProviderError

_LABEL_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
_DNS_PREFIX = re.compile(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$")


# -- the node's Ray arguments -----------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeArgs:
    """What a node joins Ray with: CPUs (= its fabric slots), GPUs (its CUDA devices), custom
    resources, labels, and the environment its raylet needs (``FABRIC_RECORDING`` for a recording
    folder). ``capabilities``: what the probe found, for printing."""

    capabilities: NodeCapabilities
    num_cpus: int
    num_gpus: int
    resources: dict[str, float]
    labels: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)

    def cluster_kwargs(self) -> dict[str, Any]:
        """``ray.cluster_utils.Cluster.add_node`` arguments (``LocalFabric``'s ``node_spec`` form)."""
        out: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "resources": dict(self.resources),
                               "labels": dict(self.labels)}
        if self.env:
            out["env_vars"] = dict(self.env)
        return out


def tag_labels(tags: Mapping[str, str]) -> dict[str, str]:
    """Extra labels from ``tags``: a key without a ``prefix/`` goes under ``fabric.io/``. Keys and
    values must already be valid Ray labels (nothing is rewritten); ``ray.io/`` is Ray's.
    ``ValueError`` naming the first bad tag."""
    out: dict[str, str] = {}
    for key, value in tags.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"tag {key!r}: keys and values are strings, got {type(key).__name__}={type(value).__name__}")
        full = key if "/" in key else f"{LABEL_PREFIX}{key}"
        prefix, _, name = full.rpartition("/")
        if not _LABEL_NAME.match(name) or not prefix or len(prefix) > 253 or not _DNS_PREFIX.match(prefix):
            raise ValueError(f"tag {key!r}: not a valid label key (optional DNS prefix/, then up to 63 of [A-Za-z0-9_.-], "
                             f"alphanumeric at both ends)")
        if prefix == "ray.io" or prefix.endswith(".ray.io"):
            raise ValueError(f"tag {key!r}: ray.io/ labels are Ray's own")
        if not _LABEL_NAME.match(value):
            raise ValueError(f"tag {key!r}: value {value!r} is not a valid label value (up to 63 of [A-Za-z0-9_.-], "
                             f"alphanumeric at both ends)")
        out[full] = value
    return out


def node_args(source: str | os.PathLike[str] | NodeCapabilities, *, name: str | None = None, roles: Sequence[str] = (),
              max_concurrent_tasks: int | None = None, max_slots: int | None = None, pool: str | None = None,
              pool_tier: str | None = None, zone: str | None = None, cloud: str | None = None, instance_id: str | None = None,
              spare: bool | None = None,
              provider: str | None = None, shape: str | None = None, tags: Mapping[str, str] = NO_TAGS) -> NodeArgs:
    """The Ray arguments of a node probed from ``source``: a bundled profile's name (``str``; the
    node gets the ``fabric.io/profile`` label its ProbeActor replays), a recording folder
    (``os.PathLike``; ``FABRIC_RECORDING`` in its environment, as a label cannot hold a path) or
    capabilities already probed (no label, no environment: a live machine).

    ``name`` (default: the profile's name), ``roles`` and ``max_concurrent_tasks`` (an override of
    the slots) go to the probe; ``max_slots`` caps the slots (and CPUs) after it. ``pool``,
    ``pool_tier``, ``zone``, ``cloud`` label where the node belongs; ``instance_id``, ``spare``, ``provider``,
    ``shape`` (given by a provider) label a provisioned node, and ``tags`` add labels
    (``tag_labels``). ``ValueError`` for an unknown profile (listing them), a recording that is not
    a folder, a bad role or tag, or a tag that would replace one of the node's own labels."""
    env: dict[str, str] = {}
    profile: str | None = None
    if isinstance(source, NodeCapabilities):
        caps = source
    else:
        from probes import RecordedSources, probe_node

        if isinstance(source, str):
            from probes.profiles import profile_path

            profile = source
            path = profile_path(source)  # ValueError listing the profiles
            name = name or source
        else:
            path = Path(source).resolve()
            if not path.is_dir():
                raise ValueError(f"recording {str(source)!r} is not a folder")
            env[RECORDING_ENV] = str(path)
        caps = probe_node(RecordedSources(path), name=name, roles=tuple(roles), max_concurrent_tasks=max_concurrent_tasks)
    if max_slots is not None and caps.limitations.max_concurrent_tasks > max_slots:
        # What probe_node(..., max_concurrent_tasks=max_slots) gives: the slots are the limitation's only input.
        caps = caps.model_copy(update={"limitations": Limitations(max_concurrent_tasks=max_slots, notes=caps.limitations.notes)})
    labels = caps.to_ray_labels(pool=pool, pool_tier=pool_tier, zone=zone, cloud=cloud)
    if profile is not None:
        labels[PROFILE_LABEL] = profile
    own = {INSTANCE_LABEL: instance_id, SPARE_LABEL: None if spare is None else ("true" if spare else "false"),
           PROVIDER_LABEL: provider, SHAPE_LABEL: None if shape is None else label_value(shape)}
    labels.update({k: v for k, v in own.items() if v is not None})
    extra = tag_labels(tags)
    clash = sorted(set(extra) & set(labels))
    if clash:
        raise ValueError(f"tag {clash[0]!r} would replace the node's own label (own labels: {', '.join(sorted(labels))})")
    labels.update(extra)
    return NodeArgs(capabilities=caps, num_cpus=caps.limitations.max_concurrent_tasks, num_gpus=caps.ray_gpus,
                    resources=caps.to_ray_resources(), labels=labels, env=env)


def ray_start_args(node: NodeArgs, *, address: str | None, head_port: int | None = None, ray: str = "ray",
                   node_ip_address: str | None = None, block: bool = False, dashboard_agent_listen_port: int | None = None,
                   extra: Sequence[str] = ()) -> list[str]:
    """The ``ray start`` argv for ``node``: ``--address=ADDRESS`` (or ``--head`` when ``address`` is
    None, with ``--port`` when ``head_port``), its CPUs, GPUs, resources (compact JSON, sorted) and
    labels (``k=v,...`` sorted, Ray 2.60's label string), then ``--node-ip-address``,
    ``--dashboard-agent-listen-port`` (0 lets several raylets share a host), ``--block`` and
    ``extra`` as given. The environment to run it in is ``node.env`` over this process's."""
    argv = [ray, "start"]
    if address is None:
        argv += ["--head"] + ([f"--port={head_port}"] if head_port else [])
    else:
        argv += [f"--address={address}"]
    argv += [f"--num-cpus={node.num_cpus}", f"--num-gpus={node.num_gpus}",
             f"--resources={json.dumps(node.resources, sort_keys=True, separators=(',', ':'))}",
             f"--labels={','.join(f'{k}={v}' for k, v in sorted(node.labels.items()))}"]
    if node_ip_address:
        argv.append(f"--node-ip-address={node_ip_address}")
    if dashboard_agent_listen_port is not None:
        argv.append(f"--dashboard-agent-listen-port={dashboard_agent_listen_port}")
    if block:
        argv.append("--block")
    return argv + list(extra)


def profile_for(shape: NodeShape, provider: str = "local") -> str:
    """The bundled profile a shape names (``shape.profile``, else its name); ``ProviderError``
    (reason ``unknown_profile``) naming the shape and the profile, listing the bundled ones."""
    from probes.profiles import profiles

    profile = shape.profile or shape.name
    known = profiles()
    if profile not in known:
        raise ProviderError(f"shape {shape.name!r} names profile {profile!r}, which is not a bundled profile; profiles: {', '.join(known)}",
                            reason="unknown_profile", provider=provider, shape=shape.name, profile=profile, field="profile")
    return profile


def profile_problems(settings: Any, entries: Any = None) -> builtins.list[Any]:
    """``SettingsProblem``s for shapes the ``local`` provider could not start: a candidate shape of a
    ``local`` pool tier naming a profile that is not bundled (``pools.i.tiers.j.candidate_shapes.k.profile``),
    and a hot-spare entry (of ``entries``, default the settings' own) whose shape is such a shape
    (``hot_spares.k.shape``)."""
    from fabric.core.errors import SettingsProblem
    from probes.profiles import profiles

    known = set(profiles())
    out: builtins.list[Any] = []
    bad: dict[tuple[str, str], str] = {}
    for i, pool in enumerate(settings.pools):
        for j, tier in enumerate(pool.tiers):
            if tier.provider != "local":
                continue
            for k, shape in enumerate(tier.candidate_shapes):
                profile = shape.profile or shape.name
                if profile not in known:
                    bad[(pool.name, shape.name)] = profile
                    out.append(SettingsProblem("unknown_profile", f"pools.{i}.tiers.{j}.candidate_shapes.{k}.profile",
                                               f"shape {shape.name!r} names profile {profile!r}, which is not bundled; "
                                               f"profiles: {', '.join(sorted(known))}"))
    for k, entry in enumerate(settings.hot_spares if entries is None else entries):
        pool, shape = (entry.get("pool"), entry.get("shape")) if isinstance(entry, Mapping) else (entry.pool, entry.shape)
        if shape is not None and (pool, shape) in bad:
            out.append(SettingsProblem("unknown_profile", f"hot_spares.{k}.shape",
                                       f"shape {shape!r} names profile {bad[(pool, shape)]!r}, which is not bundled"))
    return out


def find_ray(explicit: str | None = None) -> str | None:
    """The ``ray`` executable: ``explicit``, else the one next to this Python, else on PATH."""
    if explicit:
        return explicit if (os.path.isfile(explicit) and os.access(explicit, os.X_OK)) else None
    here = Path(sys.executable).parent / "ray"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("ray")

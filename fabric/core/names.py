"""Every wire name the fabric uses, in one place: the Ray namespace and actor names any driver or
``ray job submit`` script finds the fabric by, the Ray label keys and custom resources nodes join
with, the registry keys other actors keep state under, and the environment variables read.

Change one here and every actor, the runtime, the CLI and the tests follow.
"""

from __future__ import annotations

# -- Ray namespace and named actors (all detached) ---------------------------------------------------------
NAMESPACE = "fabric"
REGISTRY = "fabric.registry"
HEALTH = "fabric.health"
SCHEDULER = "fabric.scheduler"
DISPATCHER = "fabric.dispatcher"
OPERATOR = "fabric.operator"
"""The operator API's actor (gRPC ``fabric.operator.v1.Operator`` and the JSON view), on the head."""
PROBE_PREFIX = "fabric.probe."
"""A node's probe actor is ``fabric.probe.<ray node id>`` (``probe_actor_name``)."""


def probe_actor_name(node_id: str) -> str:
    return f"{PROBE_PREFIX}{node_id}"


SPARES_PREFIX = "fabric.spares."
"""A pool's hot-spare reconciler is ``fabric.spares.<pool>`` (``spares_actor_name``)."""


def spares_actor_name(pool: str) -> str:
    return f"{SPARES_PREFIX}{pool}"


JOB_PREFIX = "fabric.job."
"""A job's instance is the detached actor ``fabric.job.<job id>.<instance key>`` (``job_actor_name``)."""


def job_actor_name(job_id: str, instance_key: str) -> str:
    return f"{JOB_PREFIX}{job_id}.{instance_key}"


# -- Ray labels (Ray reserves ``ray.io/``; ours live under ``fabric.io/``) ------------------------------------
LABEL_PREFIX = "fabric.io/"
TIER_LABEL = f"{LABEL_PREFIX}tier"
NAME_LABEL = f"{LABEL_PREFIX}name"
PROFILE_LABEL = f"{LABEL_PREFIX}profile"
ZONE_LABEL = f"{LABEL_PREFIX}zone"
CLOUD_LABEL = f"{LABEL_PREFIX}cloud"
"""The cloud a node runs in (``aws``, ``gcp``, ``azure``): a provider sets it, or ``fabric join --cloud``."""
POOL_LABEL = f"{LABEL_PREFIX}pool"
POOL_TIER_LABEL = f"{LABEL_PREFIX}pool-tier"
INSTANCE_LABEL = f"{LABEL_PREFIX}instance"
"""The provider's instance id of a provisioned node: how a registering node is matched to its provision."""
SPARE_LABEL = f"{LABEL_PREFIX}spare"
"""``true`` on a node provisioned as a hot spare, ``false`` on other provisioned nodes."""
PROVIDER_LABEL = f"{LABEL_PREFIX}provider"
"""The provider that made the node (``local``...)."""
SHAPE_LABEL = f"{LABEL_PREFIX}shape"
"""The node shape it was provisioned as."""
RAY_NODE_ID_LABEL = "ray.io/node-id"
"""The label Ray gives every node: its node id (a selector excludes nodes by it)."""
K3S_PREFIX = "topology.researchstack.io/"
"""The k3s topology labels a node's capabilities are also published under."""

# -- Ray resources ------------------------------------------------------------------------------------------
SLOTS_RESOURCE = "fabric.slots"
"""One per concurrent call a node takes; every call asks Ray for one."""
TIER_RESOURCE_PREFIX = "fabric.tier."
HEAD_RESOURCE = "node:__internal_head__"
"""Ray's marker resource of the head node: asking for a sliver of it places an actor on the head
without pinning it to a node id (it follows the head, which is where the SQLite file lives)."""

# -- registry state keys ------------------------------------------------------------------------------------
SETTINGS_KEY = "fabric.settings"
"""The registry state key holding the settings in force (``FabricSettings.model_dump(mode="json")``)."""
HOT_SPARES_KEY = "fabric.hot_spares"
"""The live hot-spare list (``h.update_hot_spares``); absent: the settings' ``hot_spares``."""

# -- environment variables ------------------------------------------------------------------------------------
RAY_EXECUTABLE_ENV = "FABRIC_RAY_EXECUTABLE"
"""The ``ray`` command the ``local`` provider runs (default: next to this Python, else on PATH)."""
RECORDING_ENV = "FABRIC_RECORDING"
"""A raylet started with it (``fabric join --recording DIR``, ``LocalFabric``) probes that recording."""
ARTIFACT_CACHE_ENV = "FABRIC_ARTIFACT_CACHE"
"""A node's artifact cache folder (``probes.artifacts.cache_root``; default: one per node name under
``$XDG_CACHE_HOME/adaptive-fabric/artifacts``, ``~/.cache`` without it)."""
RAY_AUTH_MODE_ENV = "RAY_AUTH_MODE"
RAY_AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
RAY_AUTH_TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"

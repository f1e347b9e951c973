"""Where the fabric's stores live: the one place the default path is worked out.

``store_paths(settings, gcs_address)`` answers for every actor that opens or sits beside a store
(the registry's node store, the scheduler's jobs store, the providers' folder, the operator's token
file): ``store.url`` (``sqlite:///DIR``) names the folder of both files; else ``store.path`` names
the node store's file and the jobs store sits beside it as ``<stem>.jobs.db``; else the per-cluster
default folder ``$XDG_DATA_HOME/adaptive-fabric/clusters/<head address>/`` (``~/.local/share``
without ``XDG_DATA_HOME``), keyed by the head's GCS address so a restarted head finds it again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

NODES_FILE = "fabric.db"
JOBS_FILE = "fabric.jobs.db"


@dataclass(frozen=True)
class StorePaths:
    nodes: Path
    """The registry's node store (SQLite)."""
    jobs: Path
    """The scheduler's jobs store (SQLite)."""

    @property
    def folder(self) -> Path:
        """The folder beside the node store (providers' files, the API token)."""
        return self.nodes.parent


def default_store_path(gcs_address: str, environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/adaptive-fabric/clusters/<head address>/fabric.db`` (``~/.local/share`` without
    ``XDG_DATA_HOME``) on the head node. Keyed by the head's GCS address, which a restarted head
    keeps (``ray start --head --port``), so the records outlive a head restart; Ray's session
    directory would not (a new head starts a new session). A relative ``XDG_DATA_HOME`` is
    ignored, as the XDG base directory rules say. ``environ`` is read at call time (default: this
    process's), so a head whose environment names a temporary ``XDG_DATA_HOME`` keeps its stores
    there (``LocalFabric`` and the test session do)."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_DATA_HOME") or ""
    base = Path(xdg) if os.path.isabs(xdg) else Path(env.get("HOME") or Path.home()) / ".local" / "share"
    key = "".join(c if c.isalnum() or c in ".-" else "-" for c in gcs_address) or "local"
    return base / "adaptive-fabric" / "clusters" / key / NODES_FILE


def configured_store_paths(settings: Any) -> StorePaths | None:
    """The stores the settings name (``store.url``, else ``store.path``); None when they name none
    (the default folder then depends on the head's address: ``store_paths``)."""
    store = settings.store
    if store.url is not None:
        folder = Path(store.folder).expanduser()
        return StorePaths(folder / NODES_FILE, folder / JOBS_FILE)
    if store.path:
        nodes = Path(store.path).expanduser()
        return StorePaths(nodes, nodes.with_name(nodes.stem + ".jobs.db"))
    return None


def store_paths(settings: Any, gcs_address: str, environ: Mapping[str, str] | None = None) -> StorePaths:
    """Both stores' files for these settings on the cluster whose head is ``gcs_address``."""
    configured = configured_store_paths(settings)
    if configured is not None:
        return configured
    nodes = default_store_path(gcs_address, environ)
    return StorePaths(nodes, nodes.with_name(JOBS_FILE))


__all__ = ["JOBS_FILE", "NODES_FILE", "StorePaths", "configured_store_paths", "default_store_path", "store_paths"]

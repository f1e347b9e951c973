"""Where the fabric keeps its durable state (``FabricSettings.store``): ``StoreSettings``.

The node store (``fabric.db``, the registry's) and the job store (``fabric.jobs.db``, the
scheduler's) sit side by side; ``fabric.store.paths`` turns these settings into their files.
"""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from fabric.core.settings_types import SettingsModel


class StoreSettings(SettingsModel):
    """Where the fabric keeps its durable state: the registry's node records (``fabric.db``) and the
    scheduler's jobs, bundles, events, drains and notices (``fabric.jobs.db``), side by side."""

    url: str | None = None
    """``sqlite:///DIR``: the folder of both files (``DIR/fabric.db``, ``DIR/fabric.jobs.db``).
    None: ``path`` when set, else the per-cluster default folder. Takes precedence over ``path``."""
    kind: Literal["sqlite"] = "sqlite"
    """Store backend; SQLite (WAL) on the head node. A server database is a later option."""
    path: str | None = None
    """The node store's SQLite file (the jobs store is ``<stem>.jobs.db`` beside it); None:
    ``~/.local/share/adaptive-fabric/clusters/<head address>/fabric.db`` on the head node
    (``$XDG_DATA_HOME`` when set), a stable per-cluster path that outlives a head restart on the
    same address (Ray's session directory would not)."""
    resume_inherited: bool = False
    """Resume the jobs of a store another Ray cluster wrote (a head cold-started on the address or
    store of a cluster that is gone) when the scheduler starts. False: they are held, never placed,
    each reason naming the old cluster (docs/head.md), until ``fabric up --resume``
    (or ``fabric.up(resume=True)``) resumes them or they are stopped. A restart of the same cluster
    (the scheduler's, or the head's with GCS fault tolerance) resumes every job either way."""

    @field_validator("url")
    @classmethod
    def _sqlite_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        prefix = "sqlite:///"
        if not isinstance(value, str) or not value.startswith(prefix) or len(value) <= len(prefix):
            raise ValueError(f"must be {prefix}DIR (a folder for fabric.db and fabric.jobs.db), got {value!r}")
        if "\x00" in value or "?" in value or "#" in value:
            raise ValueError(f"a store folder has no NUL, query or fragment, got {value!r}")
        return value

    @property
    def folder(self) -> str | None:
        """The folder ``url`` names (``sqlite:///DIR`` -> ``DIR``: ``sqlite:////abs`` and
        ``sqlite:///~/x`` as written), or None without a url."""
        return None if self.url is None else self.url[len("sqlite:///"):]


__all__ = ["StoreSettings"]

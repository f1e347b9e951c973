"""Settings of the cloud's own reclaim notices (``spot_notices:``).

A node that knows its cloud (the ``fabric.io/cloud`` label: ``aws``, ``gcp`` or ``azure``, set by a
provider from its shape or by ``fabric join --cloud``) has its probe actor read the cloud's
instance metadata every ``poll_interval_s`` for a spot interruption or rebalance notice, and hands
each new one to the scheduler as ``handle_node_interruption`` would. A node without the label
reads nothing and contacts nothing."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import field_validator

from fabric.core.settings_types import PositiveSeconds, SettingsModel


class SpotNoticeSettings(SettingsModel):
    """Reading reclaim notices from the cloud's instance metadata on nodes that carry a cloud label."""

    enabled: bool = True
    """Read the notices on every node with a ``fabric.io/cloud`` label (aws, gcp, azure); false: never."""
    poll_interval_s: PositiveSeconds = 5.0
    """How often a node reads its cloud's notice documents (AWS gives two minutes, GCP 30 s)."""
    timeout_s: PositiveSeconds = 2.0
    """How long one metadata request may take before that read is given up (the next poll tries again)."""
    metadata_url: str | None = None
    """The metadata service's base URL (``http://host:port``); null: each cloud's own
    (``http://169.254.169.254`` for aws and azure, ``http://metadata.google.internal`` for gcp)."""

    @field_validator("metadata_url")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be an http:// or https:// URL with a host, got {value!r}")
        return value

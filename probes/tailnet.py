"""This node on a tailnet, from ``tailscale status --json`` (absent is fine: most nodes are not).

Only ``Self`` matters: its DNS name (the stable node name), its tailnet IPs and
whether it is online. A stopped daemon answers ``BackendState`` other than ``Running``.
``backend_state`` and ``self_ipv4`` read the same document for ``fabric join``, which brings a
node that is not connected onto its tailnet before it probes (``fabric.cli.bootstrap``).
"""

from __future__ import annotations

from typing import Any

from fabric.core.capabilities import TailnetInfo

__all__ = ["backend_state", "parse_tailscale", "self_ipv4"]


def parse_tailscale(data: Any) -> TailnetInfo | None:
    """``TailnetInfo`` from tailscale's status JSON; None when absent, stopped or malformed."""
    if not isinstance(data, dict):
        return None
    me = data.get("Self")
    if not isinstance(me, dict):
        return None
    state = data.get("BackendState")
    if isinstance(state, str) and state not in ("Running", ""):
        return None
    dns = me.get("DNSName") if isinstance(me.get("DNSName"), str) else None
    dns = dns.rstrip(".") or None if dns else None
    ips_raw = me.get("TailscaleIPs") or data.get("TailscaleIPs") or []
    ips = tuple(ip for ip in ips_raw if isinstance(ip, str)) if isinstance(ips_raw, list) else ()
    online = me.get("Online")
    return TailnetInfo(dns_name=dns, ips=ips, online=online if isinstance(online, bool) else True)


def backend_state(data: Any) -> str | None:
    """The daemon's ``BackendState`` (``Running``, ``NeedsLogin``, ``NeedsMachineAuth``, ``Stopped``,
    ``Starting``, ``NoState``); None when ``data`` is not a status document."""
    state = data.get("BackendState") if isinstance(data, dict) else None
    return state if isinstance(state, str) and state else None


def self_ipv4(data: Any) -> str | None:
    """This node's first tailnet IPv4 (``Self.TailscaleIPs``, else the top-level ``TailscaleIPs``);
    None when it is not connected or has none."""
    info = parse_tailscale(data)
    if info is None:
        return None
    return next((ip for ip in info.ips if ip.count(".") == 3), None)

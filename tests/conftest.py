"""Shared test setup, applied before any test module imports Ray.

- Ray 2.60 turns token auth on for new local clusters: choose explicitly (the fabric must work with it on).
- Keep every Ray process on loopback: with this switch off, Ray resolves the node IP to 127.0.0.1
  instead of the machine's routable address (read by ``ray._private.services.get_node_ip_address``),
  and spawned raylets/workers inherit it.
"""

import os

os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

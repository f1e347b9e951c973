"""Shared test setup: Ray auth chosen explicitly (Ray 2.60 turns token auth on for new clusters)."""

import os

os.environ.setdefault("RAY_AUTH_MODE", "token")

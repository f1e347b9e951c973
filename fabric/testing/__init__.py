"""Testing and demo helpers (API.md § Testing and demo helper): ``LocalFabric``, a real multi-node
fabric on this machine, and ``profiles()``, the bundled probe profiles its nodes are made from.
Importing this package does not import Ray; starting a ``LocalFabric`` does."""

from __future__ import annotations

from fabric.profiles import profile_path, profiles
from fabric.testing.local import FAST_HEALTH_CHECKS, LocalFabric, LocalNode, node_spec

__all__ = ["FAST_HEALTH_CHECKS", "LocalFabric", "LocalNode", "node_spec", "profile_path", "profiles"]

"""Testing and demo helpers: ``LocalFabric``, a real multi-node
fabric on this machine, and ``profiles()``, the bundled probe profiles its nodes are made from.
Importing this package does not import Ray; starting a ``LocalFabric`` does."""

from __future__ import annotations

import os
import sys

if "ray" not in sys.modules:
    # Keep a local fabric on loopback: with this switch off, Ray resolves the node IP to
    # 127.0.0.1 rather than the machine's routable address. Ray reads it when first imported.
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from probes.profiles import profile_path, profiles
from fabric.testing.local import FAST_FENCE, FAST_HEALTH_CHECKS, LocalFabric, LocalNode, node_spec

__all__ = ["FAST_FENCE", "FAST_HEALTH_CHECKS", "LocalFabric", "LocalNode", "node_spec", "profile_path", "profiles"]

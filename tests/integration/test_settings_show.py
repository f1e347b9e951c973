"""``fabric settings show --address``: the settings a running fabric uses, read back by the CLI in a
subprocess, as a shell runs it. No scheduler is needed: the registry holds the settings in force."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

ray = pytest.importorskip("ray")

from fabric.core.settings import FabricSettings  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration

IP = "127.0.0.7"  # its own loopback address: another test's cluster may be up beside it
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "monitor_interval_s": 0.25, "join_timeout_s": 60.0},
            "routes": {"channel.example": {"job": "encode", "port": 1935}}, "queue_timeout_s": 42.0}


def fabric_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fabric", *args], capture_output=True, text=True, timeout=180)


def test_show_prints_the_settings_in_force():
    with LocalFabric([], settings=SETTINGS, scheduler=False, timeout_s=120, node_ip_address=IP) as lf:
        out = fabric_cli("settings", "show", "--address", lf.address)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert FabricSettings.load(yaml.safe_load(out.stdout)) == lf.settings
        out = fabric_cli("settings", "show", "--json", "--address", lf.address)
        assert out.returncode == 0, out.stderr[-2000:]
        shown = FabricSettings.load(json.loads(out.stdout))
        assert shown == lf.settings and shown.queue_timeout_s == 42.0

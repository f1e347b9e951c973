"""The checked-in gRPC stubs are exactly what grpcio-tools makes of fabric/api/operator.proto (issue 17)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUBS = ("operator_pb2.py", "operator_pb2_grpc.py")


def test_checked_in_stubs_match_a_fresh_protoc_run(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    done = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT}", f"--python_out={tmp_path}",
         f"--grpc_python_out={tmp_path}", str(ROOT / "fabric/api/operator.proto")],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for name in STUBS:
        fresh = (tmp_path / "fabric/api" / name).read_bytes()
        kept = (ROOT / "fabric/api" / name).read_bytes()
        assert fresh == kept, f"fabric/api/{name} is stale: regenerate it (see the command in operator.proto)"


def test_stubs_name_the_service_and_its_methods() -> None:
    from fabric.api import operator_pb2

    service = operator_pb2.DESCRIPTOR.services_by_name["Operator"]
    assert service.full_name == "fabric.operator.v1.Operator"
    assert {m.name for m in service.methods} == {
        "Status", "ListNodes", "Cordon", "Uncordon", "Drain", "Evict", "NotifyInterruption", "CreateBundle",
        "UpdateBundle", "DeleteBundle", "GetBundle", "ListBundles", "Explain", "Migrate", "AbortMigration",
        "WatchEvents",
    }
    watch = service.methods_by_name["WatchEvents"]
    assert watch.server_streaming and not watch.client_streaming

"""The checked-in gRPC stubs are exactly what grpcio-tools makes of fabric/api/operator.proto and
fabric/api/inspect.proto (issue 17)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ("fabric/api/operator.proto", "fabric/api/inspect.proto")
STUBS = ("operator_pb2.py", "operator_pb2_grpc.py", "inspect_pb2.py", "inspect_pb2_grpc.py")
INSPECT_METHODS = {
    # name: (request, response, server streaming)
    "ListJobs": ("ListJobsRequest", "ListJobsReply", False),
    "GetJob": ("JobIdRequest", "Job", False),
    "DrainStatus": ("NodeRequest", "DrainStatusReply", False),
    "GetMigration": ("MigrationIdRequest", "Migration", False),
    "ListMigrations": ("ListMigrationsRequest", "ListMigrationsReply", False),
    "ListEvents": ("ListEventsRequest", "ListEventsReply", False),
    "GetSettings": ("GetSettingsRequest", "SettingsReply", False),
    "WatchEventBatches": ("WatchEventsRequest", "EventBatch", True),
    "ListPools": ("ListPoolsRequest", "PoolsReply", False),
}


def test_checked_in_stubs_match_a_fresh_protoc_run(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    done = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT}", f"--python_out={tmp_path}",
         f"--grpc_python_out={tmp_path}", *(str(ROOT / p) for p in PROTOS)],
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
        "Status", "ListNodes", "Cordon", "Uncordon", "Drain", "Evict", "TerminateNode", "NotifyInterruption", "CreateBundle",
        "UpdateBundle", "DeleteBundle", "GetBundle", "ListBundles", "Explain", "Migrate", "AbortMigration",
        "WatchEvents",
    }
    watch = service.methods_by_name["WatchEvents"]
    assert watch.server_streaming and not watch.client_streaming


def test_inspect_has_its_own_proto_with_its_full_name_and_every_method_shaped_as_before() -> None:
    from fabric.api import inspect_pb2, operator_pb2

    assert "Inspect" not in operator_pb2.DESCRIPTOR.services_by_name
    assert inspect_pb2.DESCRIPTOR.name == "fabric/api/inspect.proto" and inspect_pb2.DESCRIPTOR.package == "fabric.operator.v1"
    service = inspect_pb2.DESCRIPTOR.services_by_name["Inspect"]
    assert service.full_name == "fabric.operator.v1.Inspect"
    for name, (request, response, streaming) in INSPECT_METHODS.items():
        method = service.methods_by_name[name]
        assert method.full_name == f"fabric.operator.v1.Inspect.{name}"
        assert method.input_type.full_name == f"fabric.operator.v1.{request}"
        assert method.output_type.full_name == f"fabric.operator.v1.{response}"
        assert method.server_streaming is streaming and not method.client_streaming
    assert inspect_pb2.WatchEventsRequest is operator_pb2.WatchEventsRequest  # the shared messages, imported publicly


def test_the_inspect_stubs_stay_under_600_lines() -> None:
    for name in ("inspect_pb2.py", "inspect_pb2_grpc.py", "operator_pb2.py"):
        assert len((ROOT / "fabric/api" / name).read_text().splitlines()) < 600, name

"""The operator API (issue 17): `fabric.operator.v1.Operator` and the read-only `fabric.operator.v1.Inspect`
over gRPC. The stubs (operator_pb2*.py, inspect_pb2*.py) are generated from operator.proto and
inspect.proto and checked in (tests/unit/test_api_stubs.py regenerates and diffs them);
`server` is the servicer, `actors.operator` the actor that serves it."""

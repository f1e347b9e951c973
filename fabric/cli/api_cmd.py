"""``fabric api-token`` and ``fabric api-address``: how a tool that is not a Python driver reaches the
operator API (issue 17; docs/operator-api.md).

``fabric api-token`` prints the bearer token (the ``fabric.operator`` actor's ``api_token`` file);
``fabric api-address`` the gRPC and HTTP (JSON view) addresses, one per line (``grpc HOST:PORT``,
``http HOST:PORT``) or, with ``--json``, one object. Both connect as the other commands do
(``--address``, default ``auto``): exit 1 when the cluster cannot be reached, the fabric's
operator actor is not up or its API did not start; 2 for a malformed address. ``api_token_with`` / ``api_address_with`` take
the actor handle's answers through a ``get`` callable, so tests drive them with a fake."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, TextIO

from fabric.cli.common import EXIT_FAILED, EXIT_USAGE, address_parent, bad_address, json_parent
from fabric.core import names

__all__ = ["add_parser", "api_address_with", "api_token_with"]


def add_parser(subparsers: Any) -> None:
    t = subparsers.add_parser("api-token", help="print the operator API's bearer token",
                              description="print the bearer token every operator API call (gRPC and the JSON view) needs",
                              parents=[address_parent()])
    t.set_defaults(func=_run, what="token")
    a = subparsers.add_parser("api-address", help="print the operator API's gRPC and HTTP addresses",
                              description="print where the operator API serves: gRPC (fabric.operator.v1.Operator) "
                                          "and HTTP (GET /api/capabilities/nodes)",
                              parents=[address_parent(), json_parent("one JSON object {grpc, http}")])
    a.set_defaults(func=_run, what="address")


def api_token_with(get: Callable[[str], Any], out: TextIO = sys.stdout) -> int:
    print(str(get("token")), file=out)
    return 0


def api_address_with(get: Callable[[str], Any], as_json: bool = False, out: TextIO = sys.stdout) -> int:
    addr = dict(get("address"))
    if as_json:
        print(json.dumps({"grpc": addr.get("grpc"), "http": addr.get("http")}), file=out)
    else:
        for key in ("grpc", "http"):
            print(f"{key} {addr.get(key) or '-'}", file=out)
    return 0


def _run(args: Any) -> int:
    from fabric.cli.connect import connect

    command = f"api-{args.what}"
    if bad_address(args.address, command):
        return EXIT_USAGE
    ray = connect(args.address, command)
    if ray is None:
        return EXIT_FAILED
    try:
        actor = ray.get_actor(names.OPERATOR, namespace=names.NAMESPACE)
    except ValueError:
        print(f"fabric {command}: the operator API is not up on this cluster (no {names.OPERATOR} actor); "
              "run fabric.up()", file=sys.stderr)
        return 1

    def get(what: str) -> Any:  # the operator actor's token() or address(), each called by its name
        ref = actor.token.remote() if what == "token" else actor.address.remote()
        return ray.get(ref, timeout=30)

    try:
        if args.what == "token":
            return api_token_with(get)
        return api_address_with(get, as_json=bool(args.json))
    except Exception as exc:
        cause = getattr(exc, "cause", None)
        print(f"fabric {command}: {cause if isinstance(cause, Exception) else exc}", file=sys.stderr)
        return 1

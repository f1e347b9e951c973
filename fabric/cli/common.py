"""What the ``fabric`` commands share: their connection and output flags (one spelling, one help),
their exit codes, and the two ways a command reaches a running fabric.

The flags come from parent parsers (``argparse``'s ``parents=``): ``address_parent`` (``--address
HOST:PORT``), ``api_parent`` (``--api HOST:PORT``, ``--token-file FILE``) and ``json_parent``
(``--json``). A command reaches the fabric either as a Ray driver on a cluster node (``--address``,
default ``auto``) or, with ``--api HOST:PORT`` (or ``FABRIC_API``), through the operator API's gRPC
with its bearer token (``--token-file FILE``, or ``FABRIC_API_TOKEN``), from any machine and without
importing Ray. ``run_over_api`` does the second: the body gets an ``fabric.api.client.ApiClient``,
which answers the same types the Ray path's ``FabricHandle`` does, so both render alike.

Exit codes, every command: ``EXIT_OK`` (0) done; ``EXIT_FAILED`` (1) the operation failed, or the
fabric (its cluster, its API) is not up or not reachable, or the token is missing or refused;
``EXIT_USAGE`` (2) bad usage or bad input (a malformed address, a refused argument, an unknown node
or job, an invalid settings file).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Callable, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from fabric.api.client import ApiClient

__all__ = ["ADDRESS_HELP", "API_HELP", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "TOKEN_HELP", "address_parent", "api_address",
           "api_parent", "bad_address", "json_parent", "remote_parents", "run_over_api"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
ADDRESS_HELP = "the Ray cluster's address, HOST:PORT (default: auto, the cluster this machine joined)"
API_HELP = ("reach the fabric through its operator API at HOST:PORT (gRPC, no Ray needed; default: $FABRIC_API; "
            "`fabric api-address` on the head prints it)")
TOKEN_HELP = ("a file holding the operator API's token (default: the token in $FABRIC_API_TOKEN; `fabric api-token` on the "
              "head prints it)")


def address_parent() -> argparse.ArgumentParser:
    """``--address HOST:PORT`` (default ``auto``), for a parser's ``parents=``."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--address", default="auto", metavar="HOST:PORT", help=ADDRESS_HELP)
    return p


def api_parent() -> argparse.ArgumentParser:
    """``--api HOST:PORT`` and ``--token-file FILE``, for a parser's ``parents=``."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--api", default=None, metavar="HOST:PORT", help=API_HELP)
    p.add_argument("--token-file", default=None, metavar="FILE", help=TOKEN_HELP)
    return p


def json_parent(help_text: str) -> argparse.ArgumentParser:
    """``--json`` (what it prints: ``help_text``), for a parser's ``parents=``."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--json", action="store_true", help=help_text)
    return p


def remote_parents(json_help: str | None = None) -> list[argparse.ArgumentParser]:
    """The parents of a command that reaches a running fabric: address, API, and ``--json`` when it has one."""
    parents = [address_parent(), api_parent()]
    return parents + [json_parent(json_help)] if json_help else parents


def api_address(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> str | None:
    """The operator API's address this command goes through: ``--api``, else ``FABRIC_API`` unless
    ``--address`` names a cluster; None: through Ray."""
    from fabric.api.client import API_ENV

    env = os.environ if env is None else env
    if getattr(args, "api", None):
        return str(args.api)
    if getattr(args, "address", "auto") not in (None, "auto"):
        return None
    return (env.get(API_ENV) or "").strip() or None


def bad_address(address: str, command: str, flag: str = "--address") -> bool:
    """True (said on stderr) when ``address`` is neither ``auto``/``local`` nor ``HOST:PORT``."""
    from fabric.cli.connect import LOCAL_ADDRESSES, parse_address

    if flag == "--address" and address in LOCAL_ADDRESSES:
        return False
    try:
        parse_address(address)
    except ValueError as exc:
        print(f"fabric {command}: error: {flag}: {exc}", file=sys.stderr)
        return True
    return False


def run_over_api(args: argparse.Namespace, command: str, body: Callable[["ApiClient"], int],
                 env: Mapping[str, str] | None = None) -> int:
    """Run ``body`` with a client of the operator API ``api_address(args)`` names, after one cheap
    authenticated call; an API error becomes one line on stderr and its exit code."""
    from fabric.api.client import ApiClient, ApiError, ApiRefused, token_from

    address = api_address(args, env)
    assert address is not None
    if bad_address(address, command, "--api"):
        return EXIT_USAGE
    try:
        token = token_from(getattr(args, "token_file", None), env)
    except ApiError as exc:
        print(f"fabric {command}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    with ApiClient(address, token) as client:
        try:
            client.check()
            return body(client)
        except ApiRefused as exc:
            print(f"fabric {command}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except ApiError as exc:
            print(f"fabric {command}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        except (ValueError, KeyError) as exc:  # an answer that does not read as its type: another fabric version?
            print(f"fabric {command}: the operator API at {address} answered what this client cannot read "
                  f"({type(exc).__name__}: {exc}); is it the same fabric version?", file=sys.stderr)
            return EXIT_FAILED

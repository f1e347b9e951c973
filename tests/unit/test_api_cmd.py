"""``fabric api-token`` / ``fabric api-address`` (issue 17): what they print from the operator actor's answers."""

from __future__ import annotations

import io
import json

from fabric.cli import build_parser
from fabric.cli.api_cmd import api_address_with, api_token_with


def test_api_token_prints_the_token_alone() -> None:
    out = io.StringIO()
    assert api_token_with(lambda m: {"token": "abc" * 15}[m], out) == 0
    assert out.getvalue() == "abc" * 15 + "\n"


def test_api_address_prints_grpc_and_http_or_json() -> None:
    answers = {"address": {"grpc": "127.0.0.1:5000", "http": None}}
    out = io.StringIO()
    assert api_address_with(answers.__getitem__, False, out) == 0
    assert out.getvalue().splitlines() == ["grpc 127.0.0.1:5000", "http -"]
    out = io.StringIO()
    api_address_with(answers.__getitem__, True, out)
    assert json.loads(out.getvalue()) == {"grpc": "127.0.0.1:5000", "http": None}


def test_both_commands_are_registered_with_an_address_option() -> None:
    parser = build_parser()
    args = parser.parse_args(["api-token", "--address", "127.0.0.1:6379"])
    assert (args.what, args.address) == ("token", "127.0.0.1:6379")
    args = parser.parse_args(["api-address", "--json"])
    assert (args.what, args.json, args.address) == ("address", True, "auto")

"""Settings of a ``provider: command`` pool tier (its ``command:`` block).

The pool tier's nodes are made and given back by executables the operator writes: ``provision``,
``terminate`` and ``list``, each handed JSON on stdin and answering JSON on stdout
(``fabric.providers.command``; the contract is docs/providers.md). Secrets reach them through
their environment only: ``secret_files`` names files whose contents become environment variables,
never an argument and never part of the JSON they read."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from fabric.core.settings_types import PositiveSeconds, SettingsModel

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_names(value: dict[str, str]) -> dict[str, str]:
    bad = sorted(k for k in value if not _ENV_NAME.match(k))
    if bad:
        raise ValueError(f"{bad[0]!r} is not an environment variable name (letters, digits and _, not starting with a digit)")
    return value


class CommandScripts(SettingsModel):
    """The executables of a ``provider: command`` pool tier and how they are run."""

    provision: str = Field(min_length=1)
    """Path of the executable that starts one machine (JSON request on stdin, JSON answer on stdout)."""
    terminate: str = Field(min_length=1)
    """Path of the executable that gives one machine back (``{"instance_id": ...}`` on stdin)."""
    list: str = Field(min_length=1)
    """Path of the executable that prints every machine it holds (``{"instances": [...]}``); after a
    scheduler restart its answer is the truth."""
    timeout_s: PositiveSeconds = 120.0
    """How long one call of a script may run before it is killed and the call fails."""
    env: dict[str, str] = {}
    """Extra environment variables for the scripts (not secrets: they are shown in the settings)."""
    secret_files: dict[str, str] = {}
    """Environment variable name -> file: each call reads the file and hands its contents (stripped)
    to the script as that variable; the value never appears in an argument, the JSON or an error."""
    unknown_instances: Literal["terminate", "adopt"] = "terminate"
    """What a restarted scheduler does with a machine ``list`` reports that it has no record of:
    ``terminate`` it (nothing billed is left running unseen), or ``adopt`` it (when ``list`` says its
    pool, pool tier and shape)."""
    join_address: str | None = None
    """The head's ``HOST:PORT`` the machines join, as they reach it; null: the cluster's GCS address."""

    _v_env = field_validator("env", "secret_files")(classmethod(lambda cls, v: _env_names(v)))

    @field_validator("join_address")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"must be HOST:PORT, got {value!r}")
        return value

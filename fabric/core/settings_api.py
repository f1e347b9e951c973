"""Settings of the operator API (issue 17): where the ``fabric.operator`` actor serves gRPC and the JSON view.

The ``api:`` section of ``FabricSettings``. It binds loopback unless told otherwise: a host that is
not a loopback address (``0.0.0.0``, a LAN address, a host name other than ``localhost``) is a
``SettingsError`` problem naming ``api.host`` unless ``allow_remote`` is true, and the actor refuses
to bind such a host on its own as well (``check_bind``). Every call needs the bearer token either way."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator

from fabric.core.settings_types import SettingsModel

Port = Annotated[int, Field(ge=0, le=65535)]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def remote_refusal(host: str) -> str:
    return (f"{host!r} is not a loopback address: the operator API binds loopback unless api.allow_remote "
            "is true (it still needs the bearer token)")


def check_bind(host: str, allow_remote: bool) -> None:
    """Raise ``ValueError`` when ``host`` may not be bound (a non-loopback host without ``allow_remote``)."""
    if not isinstance(host, str) or not host.strip():
        raise ValueError("api.host must be a host name or address")
    if not allow_remote and not is_loopback(host):
        raise ValueError(remote_refusal(host))


class ApiSettings(SettingsModel):
    """The operator API: a gRPC service and a read-only JSON view, served by an actor on the head."""

    allow_remote: bool = False
    """True lets ``host`` be a non-loopback address (reachable from other machines, token still required)."""
    host: str = "127.0.0.1"
    """The address both servers bind."""
    port: Port = 0
    """The gRPC port; 0 picks a free one (``fabric api-address`` says which)."""
    http_port: Port = 0
    """The JSON view's port (``GET /api/capabilities/nodes``); 0 picks a free one."""
    enabled: bool = True
    """False: ``fabric.up()`` starts no operator actor."""

    @field_validator("host")
    @classmethod
    def _loopback_unless_allowed(cls, host: str, info: ValidationInfo) -> str:
        check_bind(host, bool(info.data.get("allow_remote", False)))
        return host.strip()


__all__ = ["ApiSettings", "check_bind", "is_loopback", "remote_refusal"]

"""Edge routes: a host name served by a job's declared host port.

``FabricSettings.routes`` maps a host name to a ``RouteSettings``::

    routes:
      channel.example: {job: encode, port: 1935}

``fabric routes --caddy FILE`` (``fabric.runtime.routes``) turns the routes and the live bindings
(which node runs the job now) into a Caddy config, and with ``--watch`` rewrites and reloads it
whenever a binding changes. What the settings can check they refuse here, each problem naming its
field: a host name that is not a DNS name (``routes.<host>``: lower-case labels of letters, digits
and hyphens, at most 63 characters each and 253 in all, optionally behind one ``*.`` wildcard), a
job name that is empty or unprintable, a port outside 1..65535. Whether the job exists and declares
the port (``ports=["1935/tcp"]``) can only be seen live: such a route is reported unroutable by the
config builder, never refused here (jobs come and go; settings do not).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from fabric.core.settings_types import SettingsModel

MAX_HOST = 253
"""Most characters in a route's host name (DNS)."""
MAX_LABEL = 63
"""Most characters in one label of a host name (DNS)."""
MAX_JOB_NAME = 128
"""Most characters in a route's job name (``fabric.core.jobs.spec.MAX_NAME``)."""

_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?")


def host_problem(host: object) -> str | None:
    """Why ``host`` is not a route host name, or None when it is one."""
    if not isinstance(host, str):
        return f"a host name is a string, got {type(host).__name__}"
    if not host or len(host) > MAX_HOST:
        return f"a host name has 1 to {MAX_HOST} characters, got {len(host)}"
    if host != host.lower():
        return f"host names are lower case (write {host.lower()[:MAX_HOST]!r})"
    name = host[2:] if host.startswith("*.") else host
    labels = name.split(".")
    for label in labels:
        if len(label) > MAX_LABEL:
            return f"a host name's labels have at most {MAX_LABEL} characters (one has {len(label)})"
        if not _LABEL.fullmatch(label):
            shown = label if label.isprintable() else label.encode("unicode_escape").decode("ascii")
            return (f"{shown[:80]!r} is not a host name label (letters, digits and inner hyphens)"
                    if label else "a host name has no empty labels (no leading, trailing or double dots)")
    if name.replace(".", "").isdigit():
        return "a route's host is a DNS name, not an IP address"
    return None


def _host(v: str) -> str:
    why = host_problem(v)
    if why is not None:
        raise ValueError(why)
    return v


def _job_name(v: str) -> str:
    if not v.isprintable() or v.strip() != v:
        raise ValueError("a job name is printable, with no leading or trailing spaces")
    return v


HostName = Annotated[str, AfterValidator(_host)]
"""A route's host name (see ``host_problem``)."""


class RouteSettings(SettingsModel):
    """One edge route: requests for its host go to a job's declared host port, on whichever node runs the job."""

    job: Annotated[str, Field(min_length=1, max_length=MAX_JOB_NAME), AfterValidator(_job_name)]
    """The job: its name (a decorated class's name or ``name=``, a bundle job's name) or its job id.
    A name several running jobs share routes to one bundle's lowest running replica (the primary,
    else its backup); any other sharing makes the route unroutable until one job is named by id."""
    port: Annotated[int, Field(ge=1, le=65535)]
    """A TCP host port the job declares (``ports=["PORT/tcp"]``); checked live, where the fabric
    holds the port claimed for the job on its node."""


__all__ = ["HostName", "MAX_HOST", "MAX_JOB_NAME", "MAX_LABEL", "RouteSettings", "host_problem"]

"""``python -m fabric.cli.ray_start_env start --head ...``: Ray's ``ray start`` with the Redis password
taken from the environment instead of the command line.

``ray start`` reads the password of an external Redis (GCS fault tolerance) only from its
``--redis-password`` option. ``fabric start-head`` therefore runs this shim, which reads the
password from ``FABRIC_REDIS_PASSWORD``, drops that variable from its own environment (the Ray
processes it spawns need not inherit it), appends ``--redis-password`` to its in-process
``sys.argv`` and calls Ray's CLI in the same process: ``/proc/<pid>/cmdline`` of this process shows
only what it was started with. Ray then starts its own ``gcs_server`` and the head's ``raylet`` with
the password on their command lines, which is outside the fabric's reach.
"""

from __future__ import annotations

import os
import sys

PASSWORD_ENV = "FABRIC_REDIS_PASSWORD"
"""The variable ``fabric start-head`` passes the Redis password in."""


def with_password(argv: list[str], password: str | None) -> list[str]:
    """``argv`` with ``--redis-password`` appended when a password is given (before a ``--block``
    does not matter: click takes options in any order)."""
    return [*argv, f"--redis-password={password}"] if password else list(argv)


def main() -> None:
    """Run Ray's ``ray`` CLI with this process's arguments, plus the password from the environment."""
    password = os.environ.pop(PASSWORD_ENV, None)
    from ray.scripts.scripts import main as ray_main

    sys.argv = with_password(["ray", *sys.argv[1:]], password)
    ray_main()


if __name__ == "__main__":
    main()

"""Reading a file that came from outside: regular files only, a size cap, never blocking.

A settings file an operator points at, or a file in a recording from a machine we do not
control, can be anything where a file should be: a FIFO (a plain ``open`` waits for a writer
forever), a device (``/dev/zero`` never ends), a folder, gigabytes. ``read_regular`` says either
what the file holds or what kind of problem stopped it, in one line. ``fabric.core.settings`` (for
``from_yaml``) and ``probes._files`` (for every probe source) both read through it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["ABSENT", "NOT_REGULAR", "TOO_LARGE", "UNREADABLE", "read_regular"]

ABSENT, NOT_REGULAR, TOO_LARGE, UNREADABLE = "absent", "not_regular", "too_large", "unreadable"
"""Why ``read_regular`` returned no data: nothing there, not a regular file, over the cap, an error."""

_ABSENT_ERRNOS = (errno.ENOENT, errno.ENOTDIR)
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"is {kind}, not a regular file"


def read_regular(path: str | Path, limit: int) -> tuple[bytes | None, str | None, str | None]:
    """``(data, None, None)`` for a regular file of at most ``limit`` bytes; otherwise
    ``(None, kind, why)``: ``kind`` one of ``ABSENT`` (why None), ``NOT_REGULAR``, ``TOO_LARGE``,
    ``UNREADABLE``, and ``why`` one line (``is a FIFO, not a regular file``).

    The path is stat'ed before it is opened (opening a device can do things), opened
    non-blocking, and the descriptor itself is fstat'ed (in case the path was swapped between)."""
    try:
        why = _not_regular(os.stat(path).st_mode)
        if why is not None:
            return None, NOT_REGULAR, why
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno in _ABSENT_ERRNOS:
            return None, ABSENT, None
        return None, UNREADABLE, f"cannot be opened ({exc.strerror or type(exc).__name__})"
    except ValueError:  # a NUL byte in the path: no such file
        return None, ABSENT, None
    try:
        why = _not_regular(os.fstat(fd).st_mode)
        if why is not None:
            return None, NOT_REGULAR, why
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        return None, UNREADABLE, f"cannot be read ({exc.strerror or type(exc).__name__})"
    finally:
        os.close(fd)
    if size > limit:
        return None, TOO_LARGE, f"is larger than {limit // 1024} KiB"
    return b"".join(chunks), None, None

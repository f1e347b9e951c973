"""The operator API's bearer token (issue 17): a 0600 file ``api_token`` in the store's folder.

Made at the first start with ``secrets.token_urlsafe(32)`` and kept from then on (a restarted
operator actor serves the same token); a file that is not private to its owner is tightened to 0600."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

TOKEN_FILE = "api_token"


def token_path(store_path: str | os.PathLike) -> Path:
    """The token file beside the store file ``store_path`` (``<its folder>/api_token``)."""
    return Path(store_path).expanduser().parent / TOKEN_FILE


def read_token(path: str | os.PathLike) -> str:
    """The token in ``path`` (``FileNotFoundError`` when there is none; ``ValueError`` when it is empty)."""
    token = Path(path).read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError(f"{path}: the API token file is empty")
    return token


def ensure_token(path: str | os.PathLike) -> str:
    """The token in ``path``, made (0600, created exclusively) when the file does not exist yet."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if stat.S_IMODE(p.stat().st_mode) & 0o077:
            os.chmod(p, 0o600)
        try:
            return read_token(p)
        except ValueError:
            p.unlink()
            return ensure_token(p)
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    return token


__all__ = ["TOKEN_FILE", "ensure_token", "read_token", "token_path"]

"""Running one script of a ``command`` provider: JSON on stdin, JSON on stdout, a time limit.

``run_script`` starts the executable with no arguments at all (secrets never reach an argument
list, which every user of the machine can read), writes the request as one JSON document on its
stdin and reads its stdout as one JSON object. The script runs in a session of its own, its output
goes to temporary files (so a process it leaves running, a node it started, never holds the call
open), and at ``timeout_s`` the whole session is SIGKILLed. Every failure is a ``ProviderError``
carrying the last lines of the script's stderr (``log_tail``), with the secrets' values blanked:
``script_missing`` (not there or not executable), ``script_failed`` (a non-zero exit),
``script_timeout``, ``bad_answer`` (stdout not one JSON object).

The script's environment is this process's, then the block's ``env``, then one variable per
``secret_files`` entry holding that file's contents (read at each call, so a rotated secret is
picked up), and ``FABRIC_ACTION`` (``provision``, ``terminate`` or ``list``: one script may serve
all three).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from typing import Any, Mapping

from fabric.core.settings_command import CommandScripts
from fabric.providers.base import ProviderError

ACTION_ENV = "FABRIC_ACTION"
"""The variable naming what the script is asked to do."""
TAIL_LINES = 20
"""How many of the script's last stderr lines an error keeps."""
_TAIL_CHARS = 4000
_BLANK = "***"


def script_env(scripts: CommandScripts, action: str, base: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The environment a script of ``scripts`` runs in for ``action``, and the secret values in it
    (to blank out of anything shown). ``ProviderError`` (``secret_unreadable``, naming the setting)
    when a secret file cannot be read."""
    env = dict(os.environ if base is None else base)
    env.update(scripts.env)
    secrets: list[str] = []
    for name, path in scripts.secret_files.items():
        try:
            with open(path, encoding="utf-8") as f:
                value = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ProviderError(f"secret file for {name} ({path}) cannot be read: {type(exc).__name__}",
                                reason="secret_unreadable", provider="command", field=f"command.secret_files.{name}") from exc
        env[name] = value
        if value:
            secrets.append(value)
    env[ACTION_ENV] = action
    return env, secrets


def blank(text: str, secrets: list[str]) -> str:
    """``text`` with every secret value replaced by ``***``."""
    for value in sorted(secrets, key=len, reverse=True):
        text = text.replace(value, _BLANK)
    return text


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text`` (at most a few thousand characters)."""
    return "\n".join(text.strip().splitlines()[-lines:])[-_TAIL_CHARS:]


def run_script(scripts: CommandScripts, action: str, request: Mapping[str, Any], *, base_env: Mapping[str, str] | None = None,
               instance_id: str | None = None, shape: str | None = None) -> dict[str, Any]:
    """Run ``scripts``'s ``action`` executable with ``request`` on stdin; its answer (a JSON object).
    ``ProviderError`` for every failure, with the script's stderr tail (secrets blanked)."""
    path = getattr(scripts, action)
    where = f"command.{action}"
    ctx: dict[str, Any] = {"provider": "command", "instance_id": instance_id, "shape": shape, "field": where}
    env, secrets = script_env(scripts, action, base_env)
    body = json.dumps({"action": action, **request}).encode()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as inp:
        inp.write(body)
        inp.seek(0)
        try:
            proc = subprocess.Popen([path], stdin=inp, stdout=out, stderr=err, env=env, start_new_session=True, close_fds=True)
        except OSError as exc:
            raise ProviderError(f"the {action} script {path!r} cannot be run: {exc.strerror or type(exc).__name__}",
                                reason="script_missing", **ctx) from exc
        timed_out = False
        try:
            code = proc.wait(timeout=scripts.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the script's session: it and whatever it started
            except ProcessLookupError:
                pass
            code = proc.wait()
        err.seek(0)
        stderr = blank(err.read().decode(errors="replace"), secrets)
        out.seek(0)
        stdout = out.read().decode(errors="replace")
    last = tail(stderr, 3).replace("\n", " | ")
    said = f": {last}" if last else " (nothing on stderr)"
    if timed_out:
        raise ProviderError(f"the {action} script {path!r} did not finish within {scripts.timeout_s:g} s; killed{said}",
                            reason="script_timeout", log_tail=tail(stderr), **ctx)
    if code != 0:
        raise ProviderError(f"the {action} script {path!r} exited with status {code}{said}", reason="script_failed",
                            log_tail=tail(stderr), **ctx)
    try:
        answer = json.loads(stdout)
    except ValueError as exc:
        shown = blank(stdout.strip()[:200], secrets)
        raise ProviderError(f"the {action} script {path!r} did not print one JSON object ({exc}); it printed {shown!r}{said}",
                            reason="bad_answer", log_tail=tail(stderr), **ctx) from None
    if not isinstance(answer, dict):
        raise ProviderError(f"the {action} script {path!r} printed JSON {type(answer).__name__}, not an object{said}",
                            reason="bad_answer", log_tail=tail(stderr), **ctx)
    return answer


__all__ = ["ACTION_ENV", "blank", "run_script", "script_env", "tail"]

"""Stand-ins for ``tailscale``, ``kubectl`` and ``k3s``: small executables a test puts first on PATH
so that ``fabric join`` drives them as it would the real tools, on a machine that has none of them
(or, for kubectl, shadowing the real one).

Each appends its argv, as one JSON list per line (``["tailscale", "up", ...]``), to a calls file and
answers with a recorded output:

- ``tailscale status --json``: the ``before`` document until a ``tailscale up`` succeeded, the
  ``after`` one from then on. ``tailscale up --auth-key=file:PATH``: reads PATH and records its
  mode and the SHA-256 of its contents (``["tailscale-key", "0o600", "<sha256>"]``), so a test can
  show the key arrived through the file without the key itself being written anywhere (or, with
  ``up_fails``, says that and exits 1).
- ``kubectl label node ...`` (and ``k3s kubectl ...``): ``node/NAME labeled`` (exit 0), or with
  ``kubectl="unreachable"`` the recorded stderr of a kubectl that reaches no cluster (exit 1).
- ``k3s agent ...``: stays up for ``agent_runs_s`` seconds, as an agent would, then exits 0.

``StandIns.calls()`` reads the calls back; ``with_tailnet_ips`` rewrites a status document's
addresses (a test on loopback gives the node a loopback "tailnet" address).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

__all__ = ["StandIns", "with_tailnet_ips", "write_standins"]

_SCRIPT = '''#!{python}
import hashlib, json, os, sys, time
from pathlib import Path

conf = json.loads(Path({conf!r}).read_text())
tool, args = Path(sys.argv[0]).name, sys.argv[1:]


def record(row):
    with open(conf["calls"], "a") as out:
        out.write(json.dumps(row) + "\\n")


def connected():
    try:
        rows = [json.loads(line) for line in Path(conf["calls"]).read_text().splitlines()]
    except OSError:
        return False
    return conf["connected"] or any(r[:2] == ["tailscale", "up"] for r in rows)


def kubectl(rest):
    if conf["kubectl"] == "unreachable":
        sys.stderr.write(Path(conf["kubectl_unreachable"]).read_text())
        sys.exit(1)
    if rest[:2] == ["label", "node"] and len(rest) > 2:
        print(f"node/{{rest[2]}} labeled")
        sys.exit(0)
    sys.exit(0)


if tool == "tailscale" and args[:2] == ["status", "--json"]:
    record([tool, *args])
    sys.stdout.write(Path(conf["after"] if connected() else conf["before"]).read_text())
    sys.exit(0)
record([tool, *args])
if tool == "tailscale" and args[:1] == ["up"]:
    key = next((a.split("=", 1)[1] for a in args if a.startswith("--auth-key=")), "")
    if not key.startswith("file:"):
        print("the auth key did not come as a file", file=sys.stderr)
        sys.exit(2)
    path = key[len("file:"):]
    if conf["up_fails"]:
        print(conf["up_fails"], file=sys.stderr)
        sys.exit(1)
    mode = oct(os.stat(path).st_mode & 0o777)
    record(["tailscale-key", mode, hashlib.sha256(Path(path).read_text().strip().encode()).hexdigest()])
    sys.exit(0)
if tool == "kubectl":
    kubectl(args)
if tool == "k3s" and args[:1] == ["kubectl"]:
    kubectl(args[1:])
if tool == "k3s" and args[:1] == ["agent"]:
    time.sleep(conf["agent_runs_s"])
    sys.exit(0)
sys.exit(0)
'''


@dataclass(frozen=True)
class StandIns:
    """The stand-ins' folder (put ``bin`` first on PATH) and their calls file."""

    bin: Path
    calls_file: Path

    def calls(self) -> list[list[str]]:
        """Every call so far, in order (argv lists; ``tailscale-key`` rows as described above)."""
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines() if line.strip()]

    def path_env(self, path: str) -> str:
        """``PATH`` with the stand-ins first."""
        return f"{self.bin}:{path}" if path else str(self.bin)


def write_standins(folder: Path, *, before: Path, after: Path, connected: bool = False, kubectl: str = "ok",
                   kubectl_unreachable: Path | None = None, agent_runs_s: float = 3.0, up_fails: str | None = None,
                   tools: Sequence[str] = ("tailscale", "kubectl", "k3s")) -> StandIns:
    """Write the stand-ins ``tools`` into ``folder/bin``. ``before``/``after``: the status documents
    before and after ``tailscale up`` (``connected``: ``after`` from the start); ``kubectl``: ``ok``
    or ``unreachable`` (then ``kubectl_unreachable`` is the stderr it prints); ``up_fails``: ``tailscale
    up`` prints this on stderr and exits 1."""
    folder = Path(folder)
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    calls = folder / "calls.jsonl"
    conf = folder / "standins.json"
    conf.write_text(json.dumps({"calls": str(calls), "before": str(before), "after": str(after), "connected": connected,
                                "kubectl": kubectl, "kubectl_unreachable": str(kubectl_unreachable or ""),
                                "agent_runs_s": agent_runs_s, "up_fails": up_fails}))
    for tool in tools:
        exe = bin_dir / tool
        exe.write_text(_SCRIPT.format(python=sys.executable, conf=str(conf)))
        exe.chmod(0o755)
    return StandIns(bin_dir, calls)


def with_tailnet_ips(document: Any, ips: Sequence[str]) -> Any:
    """A copy of a ``tailscale status --json`` document whose node has the addresses ``ips``."""
    doc = json.loads(json.dumps(document))
    doc["TailscaleIPs"] = list(ips)
    if isinstance(doc.get("Self"), dict):
        doc["Self"]["TailscaleIPs"] = list(ips)
        doc["Self"]["AllowedIPs"] = [f"{ip}/32" if "." in ip else f"{ip}/128" for ip in ips]
    return doc

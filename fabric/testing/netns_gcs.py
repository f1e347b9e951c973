"""Ray's node table as a head's GCS tells it, asked from any network namespace that reaches the head.

``python -m fabric.testing.netns_gcs HOST:PORT [--wait N] [--timeout S]`` prints one JSON line: a
list of ``{"node_id", "ip", "name", "state", "is_head"}``. With ``--wait N`` it asks again until N
nodes are ALIVE (exit 1 and the last table when ``--timeout`` passes first). It runs as a process of
its own so that the fleet's token (``RAY_AUTH_TOKEN_PATH`` in its environment) is the one Ray's
client loads, whatever token the calling process holds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

__all__ = ["node_table"]


def node_table(address: str, timeout_s: float = 5.0) -> list[dict[str, object]]:
    """Every node the GCS at ``address`` knows, alive or dead."""
    from ray._raylet import GcsClient
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    client = GcsClient(address=address)
    rows: list[dict[str, object]] = []
    for node_id, info in client.get_all_node_info(timeout=timeout_s).items():
        rows.append({"node_id": node_id.hex(), "ip": info.node_manager_address, "name": info.node_name,
                     "state": GcsNodeInfo.GcsNodeState.Name(info.state), "is_head": bool(info.is_head_node)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabric.testing.netns_gcs")
    parser.add_argument("address")
    parser.add_argument("--wait", type=int, default=0, metavar="N", help="ask until N nodes are ALIVE")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    rows: list[dict[str, object]] = []
    while True:
        try:
            rows = node_table(args.address)
        except Exception as exc:  # the GCS not up yet: ask again until the deadline
            rows = [{"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}]
        alive = sum(1 for r in rows if r.get("state") == "ALIVE")
        if alive >= args.wait or time.monotonic() > deadline:
            print(json.dumps(rows), flush=True)
            return 0 if alive >= args.wait else 1
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())

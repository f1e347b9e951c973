"""Which Ray cluster this process runs in: Ray's cluster id, the one identity a store can be stamped with.

Ray's GCS makes a cluster id when a cluster is first started and keeps it in its own store: a head
restarted with GCS fault tolerance (``RAY_gcs_storage=rocksdb`` on the same storage path, or Redis)
comes back with the same id, while a head cold-started on the same address (no fault tolerance, or a
fresh GCS store) makes a new one. Checked on a real head (``ray start --head`` with RocksDB, the head's
processes SIGKILLed and started again: the same id, and the same session name; the storage removed and
the head started again on the same port: a new id). The GCS address alone cannot tell them apart.

Read in a connected process (a driver or an actor): the node Ray's worker holds knows it. When that
is not readable (an older Ray), the session name is used: Ray keeps it across a fault-tolerant
restart too (``node.py`` reads it back from the GCS), and a cold start makes a new one.
"""

from __future__ import annotations

__all__ = ["running_cluster", "running_cluster_id"]


def running_cluster_id() -> str | None:
    """The connected Ray cluster's id (hex), else its session name; None when neither is readable."""
    import ray

    worker = ray._private.worker.global_worker
    node = getattr(worker, "node", None)
    try:
        cluster_id = getattr(node, "cluster_id", None)
        if cluster_id is not None and not cluster_id.is_nil():
            return str(cluster_id.hex())
    except Exception:
        pass
    try:
        name = getattr(node, "session_name", None)
        return f"session:{name}" if name else None
    except Exception:
        return None


def running_cluster() -> tuple[str | None, str]:
    """The connected cluster's id (``running_cluster_id``) and its head's GCS address."""
    import ray

    try:
        head = str(ray.get_runtime_context().gcs_address)
    except Exception:
        head = ""
    return running_cluster_id(), head

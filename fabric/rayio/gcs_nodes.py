"""Ray's node table, asked of a head's GCS over gRPC with the cluster token: what one node's state is.

Used by ``fabric join --supervise`` (is the node it runs dead to the head?) and by the chaos runs on
network-namespace hosts (when did the head declare a cut node dead?). A plain gRPC call, not a Ray
driver: it works from a process with no raylet of its own, and with whichever token it is given.
Ray and gRPC are imported when asked, so importing this module costs nothing.
"""

from __future__ import annotations

__all__ = ["node_state"]


def node_state(gcs: str, token: str | None, node_id: str, timeout_s: float = 3.0) -> str:
    """What the GCS at ``gcs`` (``HOST:PORT``) says of ``node_id`` (hex): ``alive``, ``dead``,
    ``unknown`` (not listed) or ``unreachable`` (no answer)."""
    import grpc
    from ray.core.generated import gcs_pb2, gcs_service_pb2, gcs_service_pb2_grpc

    selector = gcs_service_pb2.GetAllNodeInfoRequest.NodeSelector(node_id=bytes.fromhex(node_id))
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(gcs, options=[("grpc.enable_http_proxy", 0)]) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            reply = stub.GetAllNodeInfo(gcs_service_pb2.GetAllNodeInfoRequest(node_selectors=[selector]),
                                        metadata=metadata, timeout=timeout_s)
        except grpc.RpcError:
            return "unreachable"
    states = {n.state for n in reply.node_info_list if n.node_id.hex() == node_id}
    if not states:
        return "unknown"
    return "alive" if gcs_pb2.GcsNodeInfo.ALIVE in states else "dead"

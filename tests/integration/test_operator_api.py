"""The operator API end to end from a plain gRPC client (issue 17): a LocalFabric with the
``fabric.operator`` actor, and a client in a subprocess that imports only grpc and
``fabric.api.operator_pb2*`` (it asserts Ray is not loaded). It lists nodes, checks a bundle's
admission (validate_only stores nothing), creates the bundle (``fabric.testing.counter:CounterJob``
by import path), watches the event log until the bundle's job runs, and drains that job's node.
Without the token, or with a wrong one, a cordon is refused with UNAUTHENTICATED and nothing is
cordoned. A non-loopback ``api.host`` without ``allow_remote`` is refused before anything runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("grpc")

from fabric.core.errors import SettingsError  # noqa: E402
from fabric.core.names import NAMESPACE, OPERATOR  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 2.5, "monitor_interval_s": 0.25,
                       "join_timeout_s": 60.0, "reprobe_interval_s": 600.0, "flap_toggles": 50},
            "drain": {"ask_ray": False}}

CLIENT = textwrap.dedent('''
    import json, sys, time
    import grpc
    from fabric.api import operator_pb2 as pb, operator_pb2_grpc as pb_grpc
    addr, token, out_dir, what = sys.argv[1:5]
    stub = pb_grpc.OperatorStub(grpc.insecure_channel(addr))
    md = (("authorization", "Bearer " + token),)
    res = {}

    def code(fn, *a, **k):
        try:
            fn(*a, **k)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name

    if what == "refused":
        node = stub.ListNodes(pb.ListNodesRequest(), metadata=md, timeout=30).nodes[0].node_id
        res["no_token"] = code(stub.Cordon, pb.NodeRequest(node=node), timeout=30)
        res["wrong_token"] = code(stub.Cordon, pb.NodeRequest(node=node), metadata=(("authorization", "Bearer nope"),), timeout=30)
        res["no_token_status"] = code(stub.Status, pb.StatusRequest(), timeout=30)
        res["cordoned_after"] = [n.cordoned for n in stub.ListNodes(pb.ListNodesRequest(), metadata=md, timeout=30).nodes]
    else:
        nodes = stub.ListNodes(pb.ListNodesRequest(), metadata=md, timeout=30).nodes
        res["nodes"] = sorted((n.name, n.status) for n in nodes)
        job = pb.BundleJobSpec(name="enc", cls="fabric.testing.counter:CounterJob", args_json=json.dumps([out_dir]),
                               requirement_json=json.dumps({"min_tier": "cpu_ffmpeg", "floor": "cpu_ffmpeg", "num_cpus": 0.1}))
        spec = pb.BundleSpec(bundle_id="api-b", jobs=[job])
        adm = stub.CreateBundle(pb.BundleWriteRequest(bundle=spec, validate_only=True), metadata=md, timeout=60)
        res["admission"] = adm.admission_kind
        res["after_validate"] = [b.bundle_id for b in stub.ListBundles(pb.ListBundlesRequest(), metadata=md, timeout=30).bundles]
        created = stub.CreateBundle(pb.BundleWriteRequest(bundle=spec), metadata=md, timeout=60).status
        res["created"] = created.bundle_id
        job_id = created.jobs["0/enc"]
        seen = []
        for ev in stub.WatchEvents(pb.WatchEventsRequest(since=0, kinds=["job_state"]), metadata=md, timeout=120):
            data = json.loads(ev.data_json)
            if data.get("job_id") == job_id:
                seen.append(data.get("to"))
                if data.get("to") == "running":
                    break
        res["states"] = seen
        rec = json.loads(stub.ListNodes(pb.ListNodesRequest(), metadata=md, timeout=30).nodes[0].record_json)
        res["record_keys"] = sorted(rec)
        where = [n.node_id for n in stub.ListNodes(pb.ListNodesRequest(), metadata=md, timeout=30).nodes if job_id in n.jobs]
        res["job_node"] = where
        drained = stub.Drain(pb.DrainRequest(node=where[0], timeout_s=60.0), metadata=md, timeout=90)
        res["drained"] = drained.node_id
        res["drain_state"] = json.loads(drained.state_json)
        res["cordoned"] = {n.node_id: n.cordoned for n in stub.ListNodes(pb.ListNodesRequest(), metadata=md, timeout=30).nodes}
        st = stub.Status(pb.StatusRequest(), metadata=md, timeout=30)
        res["status"] = [st.node_count, st.bundle_count, st.api]
    res["ray_loaded"] = "ray" in sys.modules
    print(json.dumps(res))
''')


@pytest.fixture(scope="module")
def lf():
    with LocalFabric(["cpu-only-box", "cpu-only-box"], settings=SETTINGS, max_slots=2, timeout_s=120) as fabric_:
        yield fabric_


def operator(lf):
    actor = ray.get_actor(OPERATOR, namespace=NAMESPACE)
    return ray.get(actor.address.remote(), timeout=30), ray.get(actor.token.remote(), timeout=30), actor


def client(tmp_path: Path, addr: str, token: str, what: str) -> dict:
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, str(script), addr, token, str(tmp_path / "ticks"), what], cwd=str(ROOT),
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_token_is_a_private_file_beside_the_store_and_the_api_binds_loopback(lf):
    addr, token, actor = operator(lf)
    path = Path(ray.get(actor.token_path.remote(), timeout=30))
    assert path.name == "api_token" and oct(path.stat().st_mode & 0o777) == "0o600"
    assert path.read_text().strip() == token and len(token) >= 40
    assert addr["grpc"].startswith("127.0.0.1:") and addr["http"].startswith("127.0.0.1:")


def test_a_plain_grpc_client_lists_nodes_creates_a_bundle_watches_it_run_and_drains_its_node(lf, tmp_path):
    addr, token, _ = operator(lf)
    res = client(tmp_path, addr["grpc"], token, "flow")
    assert res["ray_loaded"] is False
    assert len(res["nodes"]) == 2 and {s for _, s in res["nodes"]} == {"active"}
    assert res["admission"] == "ok" and res["after_validate"] == []
    assert res["created"] == "api-b" and res["states"][-1] == "running"
    assert "node_id" in res["record_keys"] and len(res["job_node"]) == 1
    node = res["job_node"][0]
    assert res["drained"] == node and res["cordoned"][node] is True
    assert res["status"] == [2, 1, "fabric.operator.v1"]
    # the drain really happened in the fabric: its events name the node
    events = [e for e in lf.handle.job_events(kinds=["drain_progress"]) if e["data"].get("node_id") == node]
    assert events
    lf.handle.delete_bundle("api-b")
    lf.handle.uncordon(node)


def test_no_token_or_a_wrong_one_is_unauthenticated_and_nothing_is_cordoned(lf, tmp_path):
    addr, token, actor = operator(lf)
    pid = ray.get(actor.pid.remote(), timeout=30)
    res = client(tmp_path, addr["grpc"], token, "refused")
    assert res["ray_loaded"] is False
    assert res["no_token"] == res["wrong_token"] == res["no_token_status"] == "UNAUTHENTICATED"
    assert res["cordoned_after"] == [False] * len(res["cordoned_after"])
    assert not any(r.cordoned for r in ray.get(ray.get_actor("fabric.scheduler", namespace=NAMESPACE).nodes.remote()))
    assert ray.get(actor.pid.remote(), timeout=30) == pid


def test_a_non_loopback_bind_without_allow_remote_is_refused_before_anything_runs(lf):
    import fabric

    with pytest.raises(SettingsError) as caught:
        fabric.up({**SETTINGS, "api": {"host": "0.0.0.0"}})
    assert [p.path for p in caught.value.problems] == ["api.host"]
    addr, _, _ = operator(lf)
    assert addr["grpc"].startswith("127.0.0.1:")  # the running API is untouched


def test_list_nodes_and_the_json_view_list_an_offline_node_and_filter_by_status(lf):
    """Last in the module: it kills a node. The registry's offline record stays in both lists."""
    import urllib.request

    import grpc

    from fabric.api import operator_pb2 as pb, operator_pb2_grpc as pb_grpc

    addr, token, _ = operator(lf)
    victim = lf.nodes[-1]
    lf.kill_node(victim.name)
    lf.wait_until(lambda: lf.handle.node(victim.node_id).status.value == "offline", "the killed node offline", timeout_s=60)
    md = (("authorization", f"Bearer {token}"),)
    with grpc.insecure_channel(addr["grpc"]) as channel:
        stub = pb_grpc.OperatorStub(channel)
        every = {n.node_id: n.status for n in stub.ListNodes(pb.ListNodesRequest(), metadata=md, timeout=30).nodes}
        offline = [n.node_id for n in stub.ListNodes(pb.ListNodesRequest(statuses=["offline"]), metadata=md, timeout=30).nodes]
    assert every[victim.node_id] == "offline" and "active" in every.values(), every
    assert offline == [victim.node_id]

    def view(query: str) -> dict:
        req = urllib.request.Request(f"http://{addr['http']}/api/capabilities/nodes{query}", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    assert {e["node_id"]: e["status"] for e in view("")["nodes"]} == every
    assert [e["node_id"] for e in view("?status=offline")["nodes"]] == [victim.node_id]

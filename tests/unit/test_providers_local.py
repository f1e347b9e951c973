"""The node-provider protocol and the ``local`` provider, without processes: the ``ray start``
arguments a shape's profile gives (the same as ``LocalFabric``'s ``node_spec`` and ``fabric
join``'s, so both can reuse the builders), the labels a provisioned node carries, the refusals
that come before any process starts, the child's environment, and ``providers_for``."""

from __future__ import annotations

import json
import pickle
import socket
import sys
import time

import pytest

from fabric.core.names import NAME_LABEL, POOL_LABEL, POOL_TIER_LABEL, PROFILE_LABEL, RECORDING_ENV, SLOTS_RESOURCE
from fabric.core.settings import FabricSettings, NodeShape
from fabric.providers import (
    INSTANCE_LABEL,
    PROVIDER_LABEL,
    SHAPE_LABEL,
    SPARE_LABEL,
    LocalProvider,
    NodeProvider,
    ProviderError,
    ProvisionedNode,
    node_args,
    profile_for,
    providers_for,
    ray_start_args,
)
from fabric.providers.local import tag_labels
from probes.profiles import profile_path

ADDRESS = "127.0.0.2:6379"
SHAPE = NodeShape(name="cpu-box", profile="cpu-only-box")


def provisioned_args(**kw):
    defaults = dict(name="local-abc", pool="default", pool_tier="burst", instance_id="local-abc", spare=True, provider="local",
                    shape="cpu-box")
    return node_args("cpu-only-box", **{**defaults, **kw})


def flag(argv, name):
    values = [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]
    assert len(values) == 1, (name, argv)
    return values[0]


def labels_of(argv):
    return dict(kv.split("=", 1) for kv in flag(argv, "labels").split(","))


# -- the ray start argv ----------------------------------------------------------------------------------
def test_ray_start_args_for_a_provisioned_profile_node():
    spec = provisioned_args()
    argv = ray_start_args(spec, address=ADDRESS, ray="/x/ray", node_ip_address="127.0.0.2", block=True,
                          dashboard_agent_listen_port=0)
    assert argv[:3] == ["/x/ray", "start", f"--address={ADDRESS}"]
    assert "--head" not in argv and argv.count("--block") == 1
    assert flag(argv, "num-cpus") == "2" and flag(argv, "num-gpus") == "0"  # cpu-only-box: 2 slots, no CUDA device
    assert json.loads(flag(argv, "resources")) == {SLOTS_RESOURCE: 2.0, "fabric.tier.cpu_ffmpeg": 1.0, "fabric.tier.relay": 1.0}
    assert flag(argv, "node-ip-address") == "127.0.0.2" and flag(argv, "dashboard-agent-listen-port") == "0"
    labels = labels_of(argv)
    assert labels == spec.labels
    assert labels[PROFILE_LABEL] == "cpu-only-box"  # what the node's ProbeActor replays
    assert labels[NAME_LABEL] == "local-abc" and labels[POOL_LABEL] == "default" and labels[POOL_TIER_LABEL] == "burst"
    assert labels[INSTANCE_LABEL] == "local-abc" and labels[SPARE_LABEL] == "true"
    assert labels[PROVIDER_LABEL] == "local" and labels[SHAPE_LABEL] == "cpu-box"
    assert labels["fabric.io/tier"] == "cpu_ffmpeg" and labels["fabric.io/slots"] == "2"
    assert spec.env == {}  # a profile travels as a label, not an environment variable


def test_spare_tag_is_false_on_an_ordinary_provision_and_absent_off_providers():
    assert provisioned_args(spare=False).labels[SPARE_LABEL] == "false"
    plain = node_args("cpu-only-box")
    assert not {INSTANCE_LABEL, SPARE_LABEL, PROVIDER_LABEL, SHAPE_LABEL, POOL_LABEL} & set(plain.labels)


def test_gpu_profile_declares_its_cuda_devices_and_max_slots_caps_cpus():
    spec = node_args("gpu-cuda-workstation")
    assert spec.num_gpus == 1 and spec.num_cpus == spec.capabilities.limitations.max_concurrent_tasks > 2
    capped = node_args("gpu-cuda-workstation", max_slots=2)
    argv = ray_start_args(capped, address=ADDRESS)
    assert flag(argv, "num-cpus") == "2" and flag(argv, "num-gpus") == "1"
    assert json.loads(flag(argv, "resources"))[SLOTS_RESOURCE] == 2.0 and labels_of(argv)["fabric.io/slots"] == "2"
    assert "--block" not in argv and not any(a.startswith("--node-ip-address") for a in argv)


def test_head_form_and_extra_arguments_last():
    argv = ray_start_args(node_args("cpu-only-box"), address=None, head_port=6380, extra=["--include-dashboard=false"])
    assert argv[:4] == ["ray", "start", "--head", "--port=6380"] and argv[-1] == "--include-dashboard=false"


def test_cluster_kwargs_are_local_fabrics_node_spec():
    """LocalFabric can build its nodes with node_args: same CPUs, GPUs, resources, labels, environment."""
    from fabric.testing.local import node_spec, recording_node_spec

    kw = dict(max_slots=2, pool="default", pool_tier="fixed", zone="z1")
    for profile in ("cpu-only-box", "gpu-cuda-workstation", "steamdeck-apu"):
        assert node_args(profile, name="n1", **kw).cluster_kwargs() == node_spec(profile, "n1", **kw)
    rec = profile_path("cpu-only-box")
    assert node_args(rec, name="n2", **kw).cluster_kwargs() == recording_node_spec(str(rec), "n2", **kw)
    assert node_args(rec, name="n2").env == {RECORDING_ENV: str(rec.resolve())}


def test_ray_start_args_are_fabric_joins():
    """fabric join can build its command with node_args + ray_start_args: the same argv and environment."""
    from fabric.cli.node import build_ray_start
    from probes import RecordedSources, probe_node

    caps = probe_node(RecordedSources(profile_path("steamdeck-apu")), name="deck", roles=("relay",), max_concurrent_tasks=3)
    argv, env = build_ray_start(caps, ray="ray", address=ADDRESS, profile="steamdeck-apu", pool="p", pool_tier="t", zone="z",
                                extra=["--block"])
    spec = node_args("steamdeck-apu", name="deck", roles=("relay",), max_concurrent_tasks=3, pool="p", pool_tier="t", zone="z")
    assert ray_start_args(spec, address=ADDRESS, extra=["--block"]) == argv and spec.env == env
    # capabilities probed elsewhere (a live machine): no profile label, no environment
    live = node_args(caps, pool="p")
    assert PROFILE_LABEL not in live.labels and live.env == {} and live.num_cpus == 3
    argv, _ = build_ray_start(caps, ray="ray", head_port=6390)
    assert ray_start_args(node_args(caps), address=None, head_port=6390) == argv


def test_unknown_profile_and_bad_recording_are_value_errors_naming_them(tmp_path):
    with pytest.raises(ValueError, match="unknown profile 'no-such-box'.*cpu-only-box"):
        node_args("no-such-box")
    with pytest.raises(ValueError, match="is not a folder"):
        node_args(tmp_path / "missing")


# -- tags --------------------------------------------------------------------------------------------------
def test_tags_become_labels_under_the_fabric_prefix_unless_prefixed():
    assert tag_labels({"warm-for": "encoder", "example.com/team": "a_b.c"}) == {
        "fabric.io/warm-for": "encoder", "example.com/team": "a_b.c"}
    spec = provisioned_args(tags={"reserved-for": "encoder"})
    assert spec.labels["fabric.io/reserved-for"] == "encoder"


@pytest.mark.parametrize("tags, words", [
    ({"bad key!": "x"}, "not a valid label key"),
    ({"k": "has space"}, "not a valid label value"),
    ({"k": "-edge"}, "not a valid label value"),
    ({"k": "x" * 64}, "not a valid label value"),
    ({"ray.io/node-id": "x"}, "Ray's own"),
    ({"k": 3}, "strings"),
])
def test_bad_tags_are_refused_naming_the_tag(tags, words):
    with pytest.raises(ValueError, match=words):
        tag_labels(tags)


def test_a_tag_may_not_replace_a_label_the_node_carries():
    with pytest.raises(ValueError, match="would replace the node's own label"):
        provisioned_args(tags={"pool": "other"})
    with pytest.raises(ValueError, match="fabric.io/spare"):
        provisioned_args(tags={"fabric.io/spare": "false"})


# -- shapes and profiles ------------------------------------------------------------------------------------
def test_a_shape_names_its_profile_or_is_one():
    assert profile_for(SHAPE) == "cpu-only-box"
    assert profile_for(NodeShape(name="steamdeck-apu")) == "steamdeck-apu"


def test_an_unknown_profile_is_a_provider_error_naming_shape_and_profile_and_it_pickles():
    with pytest.raises(ProviderError) as info:
        profile_for(NodeShape(name="big-box", profile="no-such-box"))
    err = info.value
    assert err.reason == "unknown_profile" and err.shape == "big-box" and err.profile == "no-such-box" and err.field == "profile"
    assert "'big-box'" in str(err) and "'no-such-box'" in str(err) and "cpu-only-box" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is ProviderError and again.reason == "unknown_profile" and again.profile == "no-such-box"


# -- LocalProvider, before any process ----------------------------------------------------------------------
@pytest.fixture
def provider(tmp_path):
    p = LocalProvider(ADDRESS, log_dir=tmp_path / "logs", ray=str(tmp_path / "no-ray"))
    yield p
    p.close()


def test_local_provider_satisfies_the_protocol_and_starts_empty(provider):
    assert isinstance(provider, NodeProvider) and provider.name == "local"
    assert provider.list() == []


def test_provision_refusals_come_before_any_process(provider, tmp_path):
    def refused(shape=SHAPE, **kw):
        with pytest.raises(ProviderError) as info:
            provider.provision(shape, **{"pool": "default", "pool_tier": "burst", **kw})
        return info.value

    err = refused(NodeShape(name="big-box", profile="no-such-box"))
    assert err.reason == "unknown_profile" and "no-such-box" in str(err)
    err = refused(pool="not a label")
    assert err.reason == "invalid_pool" and err.field == "pool"
    err = refused(pool_tier="")
    assert err.reason == "invalid_pool" and err.field == "pool_tier"
    err = refused()  # the ray executable given does not exist
    assert err.reason == "no_ray" and "no-ray" in str(err)
    assert provider.list() == [] and not (tmp_path / "logs").exists()  # no process started, no log written


@pytest.fixture
def listening():
    """A loopback address something accepts TCP at (nothing more: no Ray there)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_a_head_nothing_answers_at_is_refused_before_any_process(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: refused
        with LocalProvider(address, log_dir=tmp_path / "logs") as p:
            with pytest.raises(ProviderError, match=f"cannot reach the head at {address}") as info:
                p.provision(SHAPE, pool="default", pool_tier="burst")
            assert info.value.reason == "unreachable" and p.list() == [] and not (tmp_path / "logs").exists()


def test_bad_tags_refused_by_provision(tmp_path, listening):
    with LocalProvider(listening, log_dir=tmp_path / "logs") as p:  # the real ray, a head that answers: the tag stops it
        with pytest.raises(ProviderError) as info:
            p.provision(SHAPE, pool="default", pool_tier="burst", tags={"k": "bad value"})
        assert info.value.reason == "invalid_tag" and info.value.field == "tags"
        with pytest.raises(ProviderError) as info:
            p.provision(SHAPE, pool="default", pool_tier="burst", tags={"instance": "mine"})
        assert info.value.reason == "invalid_node" and "would replace" in str(info.value)
        assert p.list() == [] and not (tmp_path / "logs").exists()


def test_terminate_of_an_unknown_instance_names_it(provider):
    with pytest.raises(ProviderError, match="no instance 'local-nope' was started by this local provider") as info:
        provider.terminate("local-nope")
    assert info.value.reason == "unknown_instance" and info.value.instance_id == "local-nope"


def test_a_closed_provider_refuses_to_provision(tmp_path):
    p = LocalProvider(ADDRESS, log_dir=tmp_path)
    p.close()
    p.close()  # idempotent
    with pytest.raises(ProviderError, match="closed"):
        p.provision(SHAPE, pool="default", pool_tier="burst")


@pytest.mark.parametrize("address", ["nohost", "host:", ":6379", "h:99999", "h:port"])
def test_a_bad_address_is_refused(address):
    with pytest.raises(ProviderError) as info:
        LocalProvider(address)
    assert info.value.reason == "bad_address" and info.value.field == "address"


def test_node_ip_defaults_to_a_loopback_head_address():
    assert LocalProvider("127.0.0.2:6379").node_ip_address == "127.0.0.2"
    assert LocalProvider("10.0.0.5:6379").node_ip_address is None  # a real cluster: Ray's choice
    assert LocalProvider("head.example:6379").node_ip_address is None
    assert LocalProvider("127.0.0.2:6379", node_ip_address="127.0.0.3").node_ip_address == "127.0.0.3"


def test_child_environment_drops_the_loopback_switch_and_keeps_auth(monkeypatch):
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    p = LocalProvider(ADDRESS, env={"EXTRA": "1"})
    env = p._child_env({RECORDING_ENV: "/r"})
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in env  # ray start --address refuses to run with it on
    assert env["RAY_AUTH_MODE"] == "token" and env["EXTRA"] == "1" and env[RECORDING_ENV] == "/r"
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "1")  # macOS clusters: left alone
    assert p._child_env({})["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "1"


def test_provisioned_node_is_frozen_and_hashable():
    node = ProvisionedNode(instance_id="i", provider="local", pool="p", pool_tier="t", shape=SHAPE, spare=False, started_at=1.0,
                           name="i", labels={"a": "b"})
    with pytest.raises(Exception):
        node.spare = True  # type: ignore[misc]
    assert hash(node) == hash(ProvisionedNode(**{**node.__dict__, "labels": {}}))


# -- providers_for ----------------------------------------------------------------------------------------------
def settings_with(*providers: str) -> FabricSettings:
    tiers = [{"name": "fixed"}] + [
        {"name": f"t{i}", "scale_out": "elastic", "provider": prov, "candidate_shapes": [{"name": "cpu-box", "profile": "cpu-only-box"}]}
        for i, prov in enumerate(providers)]
    return FabricSettings.load({"pools": [{"name": "default", "tiers": tiers}]})


def test_providers_for_builds_one_provider_per_name_used():
    assert providers_for(None) == {} and providers_for(settings_with()) == {}
    got = providers_for(settings_with("local", "local"), address=ADDRESS, max_slots=1, node_ip_address="127.0.0.3")
    assert set(got) == {"local"} and isinstance(got["local"], LocalProvider)
    assert got["local"].address == ADDRESS and got["local"].max_slots == 1 and got["local"].node_ip_address == "127.0.0.3"
    assert isinstance(got["local"], NodeProvider)
    assert set(providers_for(settings_with("local").model_dump(mode="json"), address=ADDRESS)) == {"local"}


def test_providers_for_builds_ray_autoscaler_beside_local_and_refuses_local_without_an_address():
    got = providers_for(settings_with("local", "ray-autoscaler"), address=ADDRESS)
    assert set(got) == {"local", "ray-autoscaler"} and got["ray-autoscaler"].name == "ray-autoscaler"
    with pytest.raises(ProviderError, match="needs the cluster address") as info:
        providers_for(settings_with("local"))
    assert info.value.reason == "no_address" and info.value.field == "address"



def _fake_ray(tmp_path, body: str):
    script = tmp_path / "bin" / "ray"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!{sys.executable}\nimport signal, sys, time\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_a_node_still_starting_is_stopped_with_a_short_grace_and_a_started_one_with_the_full_one(tmp_path, listening, monkeypatch):
    import threading

    import fabric.providers.local as local

    graces: list[float] = []
    real = local.stop_session
    monkeypatch.setattr(local, "stop_session", lambda pid, grace_s, ended: (graces.append(grace_s), real(pid, 0.0, ended)))
    # ray start finishes its start before it heeds SIGTERM: this one never says it started
    starting = _fake_ray(tmp_path, "signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(120)")
    p = LocalProvider(listening, ray=starting, log_dir=tmp_path / "logs", stop_grace_s=60.0)
    failed: list[BaseException] = []

    def provision() -> None:
        try:
            p.provision(SHAPE, pool="default", pool_tier="burst")
        except BaseException as exc:  # noqa: BLE001 - what the provision thread saw
            failed.append(exc)

    t = threading.Thread(target=provision)
    t.start()
    deadline = time.monotonic() + 30
    while not p._children and time.monotonic() < deadline:
        time.sleep(0.02)
    p.close()
    t.join(timeout=30)
    assert graces[0] == local._FAILED_START_GRACE_S  # not the 60 s a started node gets
    assert failed and isinstance(failed[0], ProviderError) and p.list() == []

    graces.clear()
    started = _fake_ray(tmp_path / "b", f"print({local.STARTED_MARK!r}, flush=True)\ntime.sleep(120)")
    with LocalProvider(listening, ray=started, log_dir=tmp_path / "logs-b", stop_grace_s=60.0) as q:
        node = q.provision(SHAPE, pool="default", pool_tier="burst")
        q.terminate(node.instance_id)
        assert graces == [60.0] and q.list() == []

"""Ray's own option names on @adaptive.remote, checked by their effect on a real local fleet: a
``runtime_env`` reaches the task, ``resources`` and ``label_selector`` keep calls on the one node
that has them (and a resource no node has raises ``CapacityError``), ``num_returns=2`` gives two
refs, ``retry_exceptions`` retries (counted in a file), a class with ``max_concurrency=4`` runs
four calls at once, and every Ray option the fabric owns is refused naming the fabric's option.

One module-scoped LocalFabric of two ``cpu-only-box`` nodes started by hand: ``rx`` joins Ray with
the custom resource ``x`` and the label ``fabric.io/rack=r1``, ``ry`` with ``fabric.io/rack=r2``.
No wall-clock assertions: concurrency is read from overlapping intervals.
"""

from __future__ import annotations

import os
import sys
import time

import pytest

ray = pytest.importorskip("ray")

from fabric import CapacityError, RequirementError, adaptive  # noqa: E402
from fabric.providers.local import node_args  # noqa: E402
from fabric.testing import LocalFabric  # noqa: E402
from fabric.testing.spans import max_overlap  # noqa: E402

pytestmark = pytest.mark.integration
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

SETTINGS = {"health": {"heartbeat_interval_s": 0.5, "offline_after_s": 3.0, "monitor_interval_s": 0.25}}
RACK = "fabric.io/rack"


@pytest.fixture(scope="module")
def lf():
    with LocalFabric([], settings=SETTINGS, max_slots=4, timeout_s=120) as fabric_:
        ids = {}
        for name, rack, extra in (("rx", "r1", {"x": 2.0}), ("ry", "r2", {})):
            spec = node_args("cpu-only-box", name=name, max_slots=4, tags={"rack": rack}).cluster_kwargs()
            spec["resources"] = {**spec["resources"], **extra}
            ids[name] = fabric_.cluster.add_node(**spec).node_id
        fabric_.wait_registered(list(ids.values()))
        fabric_.ids = ids
        yield fabric_


def where() -> str:
    return ray.get_runtime_context().get_node_id()


def names_of(lf, node_ids) -> list[str]:
    by_id = {v: k for k, v in lf.ids.items()}
    return [by_id[n] for n in node_ids]


@adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1, runtime_env={"env_vars": {"FABRIC_RAY_OPTION": "from-runtime-env"}})
def read_env() -> str | None:
    return os.environ.get("FABRIC_RAY_OPTION")


def test_runtime_env_reaches_the_task(lf):
    assert ray.get(read_env.remote(), timeout=180) == "from-runtime-env"
    assert ray.get(read_env.options(runtime_env={"env_vars": {"FABRIC_RAY_OPTION": "other"}}).remote(), timeout=180) == "other"


def test_the_nodes_ray_resources_and_labels_reach_the_fabrics_records(lf):
    recs = {r.node_id: r for r in lf.handle.nodes()}
    rx, ry = recs[lf.ids["rx"]], recs[lf.ids["ry"]]
    assert rx.ray_resources.get("x") == 2.0 and "x" not in ry.ray_resources
    assert (rx.ray_labels.get(RACK), ry.ray_labels.get(RACK)) == ("r1", "r2")


@adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1, resources={"x": 1})
def needs_x(seconds: float = 0.0) -> str:
    time.sleep(seconds)
    return where()


def test_a_custom_resource_keeps_every_call_on_the_node_that_has_it(lf):
    assert set(names_of(lf, ray.get([needs_x.remote(0.2) for _ in range(8)], timeout=180))) == {"rx"}


def test_a_resource_no_node_has_raises_capacity_error(lf):
    nowhere = needs_x.options(resources={"nowhere": 1}, on_no_capacity="raise")
    with pytest.raises(CapacityError):
        nowhere.remote()


@adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1, label_selector={RACK: "r2"})
def on_rack(seconds: float = 0.0) -> str:
    time.sleep(seconds)
    return where()


def test_a_label_selector_keeps_every_call_on_the_matching_node(lf):
    assert set(names_of(lf, ray.get([on_rack.remote(0.2) for _ in range(8)], timeout=180))) == {"ry"}
    other = on_rack.options(label_selector={RACK: "!r2"})
    assert set(names_of(lf, ray.get([other.remote(0.1) for _ in range(4)], timeout=180))) == {"rx"}


@adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1, num_returns=2)
def two() -> tuple[str, int]:
    return "a", 2


def test_num_returns_two_gives_two_refs(lf):
    refs = two.remote()
    assert isinstance(refs, list) and len(refs) == 2
    assert ray.get(refs, timeout=180) == ["a", 2]


@adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1, num_returns=2, label_selector={RACK: "r2"})
def two_on_rack() -> tuple[str, str]:
    return "b", where()


def test_num_returns_two_through_the_dispatchers_queue(lf):
    """With its only node cordoned the call queues in the dispatcher; it runs once uncordoned."""
    h = lf.handle
    h.cordon("ry")
    try:
        lf.wait_until(lambda: any(r.cordoned for r in h.nodes() if r.name == "ry"), "cordon recorded")
        time.sleep(0.5)  # one health tick: the lease stops granting the cordoned node
        refs = two_on_rack.remote()
        assert isinstance(refs, list) and len(refs) == 2
        ready, _ = ray.wait(refs, num_returns=2, timeout=1.0)
        assert not ready  # queued: nothing may run it
    finally:
        h.uncordon("ry")
    first, node = ray.get(refs, timeout=180)
    assert first == "b" and names_of(lf, [node]) == ["ry"]


@adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1, max_retries=3, retry_exceptions=True)
def flaky(counter: str, fail_times: int) -> int:
    with open(counter, "a") as fh:
        fh.write("x")
    with open(counter) as fh:
        tries = len(fh.read())
    if tries <= fail_times:
        raise ValueError(f"try {tries} fails")
    return tries


def _tries(path) -> int:
    return len(path.read_text()) if path.exists() else 0


def test_retry_exceptions_retries_and_every_try_is_counted(lf, tmp_path):
    counter = tmp_path / "tries"
    assert ray.get(flaky.remote(str(counter), 2), timeout=180) == 3
    assert _tries(counter) == 3
    once = tmp_path / "once"
    with pytest.raises(ray.exceptions.RayTaskError):
        ray.get(flaky.options(retry_exceptions=False).remote(str(once), 2), timeout=180)
    assert _tries(once) == 1
    typed = tmp_path / "typed"
    with pytest.raises(ray.exceptions.RayTaskError):  # a KeyError-only list does not retry a ValueError
        ray.get(flaky.options(retry_exceptions=[KeyError]).remote(str(typed), 2), timeout=180)
    assert _tries(typed) == 1


class Sleeper:
    def nap(self, seconds: float) -> tuple[float, float]:
        start = time.time()
        time.sleep(seconds)
        return start, time.time()


def _overlap(job, n: int) -> int:
    return max_overlap(ray.get([job.nap.remote(1.0) for _ in range(n)], timeout=180))


def test_a_class_with_max_concurrency_four_runs_four_calls_at_once(lf):
    wide = adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1, max_concurrency=4, call_timeout_s=60)(Sleeper).remote()
    narrow = adaptive.remote(min_tier="cpu_ffmpeg", num_cpus=0.1, call_timeout_s=60)(Sleeper).remote()
    try:
        wide.wait_running(120)
        narrow.wait_running(120)
        assert _overlap(wide, 4) == 4
        assert _overlap(narrow, 2) == 1  # Ray's default for a plain class: one at a time
    finally:
        wide.stop()
        narrow.stop()


@pytest.mark.parametrize("key,fabric_option", [
    ("scheduling_strategy", "min_tier"), ("placement_group", "bundle"), ("max_restarts", "max_restarts_per_hour"),
    ("lifetime", "detached"), ("get_if_exists", "named"), ("namespace", "name="), ("num_returns", "not supported yet"),
])
def test_each_refused_ray_option_names_the_fabrics_option(lf, key, fabric_option):
    value = "streaming" if key == "num_returns" else "x"
    with pytest.raises(RequirementError) as exc:
        adaptive.remote(min_tier="cpu_ffmpeg", **{key: value})(Sleeper)
    assert exc.value.field == key and fabric_option in str(exc.value)

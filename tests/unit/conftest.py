"""Unit tests are pure: a unit test that reaches for a Ray cluster fails at once (Ray Serve's habit)."""

import pytest


@pytest.fixture(autouse=True)
def _forbid_ray_init(monkeypatch):
    try:
        import ray
    except ImportError:  # pragma: no cover
        yield
        return

    def _refuse(*args, **kwargs):
        raise RuntimeError("unit tests must not start Ray: move this test to tests/integration")

    monkeypatch.setattr(ray, "init", _refuse)
    yield


@pytest.fixture(autouse=True)
def _validate_scheduler_cores(monkeypatch):
    """Every ``SchedulerCore`` a unit test makes has its invariants checked when the test ends
    (``validate_state``, Dask's habit): a test that leaves the core inconsistent fails."""
    from fabric.core.scheduling import SchedulerCore

    made = []
    init = SchedulerCore.__init__

    def tracked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(SchedulerCore, "__init__", tracked)
    yield made
    for core in made:
        core.validate_state()

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

"""The metrics sink: counters and gauges by name, exported through ``ray.util.metrics`` (Ray's
Prometheus endpoint), best effort.

Actors take a sink through their constructors: ``RayMetrics`` in production, ``NullMetrics`` to
export nothing, ``RecordingMetrics`` in unit tests (it keeps what was sent). A metric is made on
first use, its tag keys from that call's tags; a Ray that cannot make or update one costs nothing
but the metric (it is never an error for the caller)."""

from __future__ import annotations

from typing import Any, Mapping, Protocol


class MetricsSink(Protocol):
    def count(self, name: str, value: float = 1.0, *, tags: Mapping[str, str] | None = None, description: str = "") -> None:
        """Add ``value`` to counter ``name``."""

    def gauge(self, name: str, value: float, *, tags: Mapping[str, str] | None = None, description: str = "") -> None:
        """Set gauge ``name`` to ``value``."""


class NullMetrics:
    """Exports nothing."""

    def count(self, name: str, value: float = 1.0, *, tags: Mapping[str, str] | None = None, description: str = "") -> None:
        pass

    def gauge(self, name: str, value: float, *, tags: Mapping[str, str] | None = None, description: str = "") -> None:
        pass


class RecordingMetrics:
    """Keeps what it was sent (unit tests): ``counters[(name, tags)]`` sums, ``gauges[(name, tags)]`` last values."""

    def __init__(self) -> None:
        self.counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.gauges: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    @staticmethod
    def _key(name: str, tags: Mapping[str, str] | None) -> tuple[str, tuple[tuple[str, str], ...]]:
        return name, tuple(sorted((tags or {}).items()))

    def count(self, name: str, value: float = 1.0, *, tags: Mapping[str, str] | None = None, description: str = "") -> None:
        key = self._key(name, tags)
        self.counters[key] = self.counters.get(key, 0.0) + value

    def gauge(self, name: str, value: float, *, tags: Mapping[str, str] | None = None, description: str = "") -> None:
        self.gauges[self._key(name, tags)] = value


class RayMetrics:
    """``ray.util.metrics`` Counter and Gauge objects, made on first use (Ray's Prometheus endpoint)."""

    def __init__(self) -> None:
        self._made: dict[str, Any] = {}
        self._broken: set[str] = set()

    def _metric(self, kind: str, name: str, tags: Mapping[str, str] | None, description: str) -> Any:
        if name in self._broken:
            return None
        metric = self._made.get(name)
        if metric is None:
            try:
                from ray.util import metrics as ray_metrics

                cls = ray_metrics.Counter if kind == "counter" else ray_metrics.Gauge
                metric = cls(name, description or name, tag_keys=tuple(sorted(tags or {})))
            except Exception:  # metrics are best effort
                self._broken.add(name)
                return None
            self._made[name] = metric
        return metric

    def count(self, name: str, value: float = 1.0, *, tags: Mapping[str, str] | None = None, description: str = "") -> None:
        metric = self._metric("counter", name, tags, description)
        if metric is not None:
            try:
                metric.inc(value, tags=dict(tags) if tags else None)
            except Exception:  # best effort: a tag the metric was not made with, Ray shutting down
                pass

    def gauge(self, name: str, value: float, *, tags: Mapping[str, str] | None = None, description: str = "") -> None:
        metric = self._metric("gauge", name, tags, description)
        if metric is not None:
            try:
                metric.set(value, tags=dict(tags) if tags else None)
            except Exception:
                pass

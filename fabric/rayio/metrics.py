"""The metrics sink: counters and gauges by name, exported through ``ray.util.metrics`` (Ray's
Prometheus endpoint), best effort.

Actors take a sink through their constructors: ``RayMetrics`` in production, ``NullMetrics`` to
export nothing, ``RecordingMetrics`` in unit tests (it keeps what was sent). A metric is made on
first use, its tag keys from that call's tags; a Ray that cannot make or update one costs nothing
but the metric (it is never an error for the caller).

``MetricsExporter`` sends the scheduler's ``metrics_view`` through a sink every tick: counters as
deltas (the Prometheus counter equals the figure), gauges as values (``ray_`` prefix, and
``_total`` on counters, on the head's ``MetricsExportPort``)."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from fabric.core.scheduling.metrics_view import DESCRIPTIONS, series


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


class MetricsExporter:
    """Sends a ``metrics_view`` dict to a sink (every scheduler tick): each counter as the delta
    since the last export (so the exported counter equals the figure), each gauge as its value,
    and 0 for a gauge tag set sent before but absent now (a pool emptied, a bundle repaired). A
    figure that went down (a counter reset) sends nothing and becomes the new baseline."""

    def __init__(self, sink: MetricsSink) -> None:
        self.sink = sink
        self._counted: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._gauged: set[tuple[str, tuple[tuple[str, str], ...]]] = set()

    def export(self, view: Mapping[str, Any]) -> None:
        counters, gauges = series(view)
        for key, value in counters.items():
            name, tags = key
            delta = value - self._counted.get(key, 0.0)
            self._counted[key] = value
            if delta > 0:
                self.sink.count(name, delta, tags=dict(tags) or None, description=DESCRIPTIONS.get(name, ""))
        for key in self._gauged - set(gauges):
            name, tags = key
            self.sink.gauge(name, 0.0, tags=dict(tags) or None, description=DESCRIPTIONS.get(name, ""))
        for key, value in gauges.items():
            name, tags = key
            self.sink.gauge(name, value, tags=dict(tags) or None, description=DESCRIPTIONS.get(name, ""))
        self._gauged = set(gauges)

"""Prometheus metrics: the standard gRPC server metrics and the per-process HTTP endpoint."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)

# `*_created` series double the scrape size and no dashboard uses them.
disable_created_metrics()  # type: ignore[no-untyped-call]

# Millisecond RPCs: fine buckets below 100 ms, a few above for stalls and timeouts.
RPC_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class GrpcMetrics:
    """The go-grpc-prometheus names, so existing dashboards and alerts apply unchanged."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("grpc_type", "grpc_service", "grpc_method")
        self.started = Counter(
            "grpc_server_started", "RPCs started on the server.", labels, registry=registry
        )
        self.handled = Counter(
            "grpc_server_handled",
            "RPCs completed on the server, regardless of success or failure.",
            (*labels, "grpc_code"),
            registry=registry,
        )
        self.handling_seconds = Histogram(
            "grpc_server_handling_seconds",
            "Response latency of RPCs handled by the server, in seconds.",
            labels,
            buckets=RPC_BUCKETS,
            registry=registry,
        )
        self.msg_sent = Counter(
            "grpc_server_msg_sent", "Stream messages sent by the server.", labels, registry=registry
        )


class MethodMetrics:
    """One method's label children, looked up once (handled: once per final code), so that
    counting a call costs no label lookups."""

    def __init__(self, metrics: GrpcMetrics, kind: str, service: str, name: str) -> None:
        self.labels = (kind, service, name)
        self._metrics = metrics
        self.started = metrics.started.labels(*self.labels)
        self._seconds = metrics.handling_seconds.labels(*self.labels)
        self._handled: dict[str, Any] = {}

    def finished(self, code: str, seconds: float) -> None:
        counter = self._handled.get(code)
        if counter is None:
            counter = self._handled[code] = self._metrics.handled.labels(*self.labels, code)
        counter.inc()
        self._seconds.observe(seconds)


def pool_gauges(registry: CollectorRegistry, service: str, pool_stats: Callable[[], Any]) -> None:
    """Postgres pool usage, read at scrape time from the live pool."""
    gauge = Gauge(
        "ration_db_pool_connections",
        "Postgres pool connections by state.",
        ("service", "state"),
        registry=registry,
    )

    def reader(state: str) -> Callable[[], float]:
        def read() -> float:
            stats = pool_stats()
            return float(stats.get(state, 0)) if stats else 0.0

        return read

    for state in ("in_use", "idle", "max"):
        gauge.labels(service, state).set_function(reader(state))


class MetricsEndpoint:
    """The HTTP `/metrics` endpoint of one service process."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self._server: Any
        self._thread: threading.Thread
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

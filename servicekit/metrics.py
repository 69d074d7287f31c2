"""Prometheus metrics: the standard gRPC server metrics and the per-process HTTP endpoint."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    make_wsgi_app,
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


# How often the endpoint's loop looks for `close`: prometheus_client's start_http_server polls
# every 0.5 s, which every service stop (and every test server) then waited for.
STOP_POLL_SECONDS = 0.05


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not log lines."""


class MetricsEndpoint:
    """The HTTP `/metrics` endpoint of one service process: prometheus_client's WSGI app on a
    threading server of the address's family, as its start_http_server builds it."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        family, _, _, _, sockaddr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]

        class Server(ThreadingMixIn, WSGIServer):
            daemon_threads = True
            address_family = family

        self._server = make_server(
            str(sockaddr[0]), port, make_wsgi_app(registry), Server, handler_class=_QuietHandler
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(STOP_POLL_SECONDS,), daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

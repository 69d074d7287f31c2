"""`ration notify`: the webhook alert process, built from RATION_NOTIFY_* and run until stopped."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

import asyncpg
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from budget_service.adapters.notify_metrics import NotifyMetrics
from budget_service.definition import MIGRATIONS
from budget_service.usecases.notifier import Notifier
from budget_service.usecases.notify_settings import NotifySettings
from ration_server.cli import database_url
from servicekit.db import Database
from servicekit.dbrole import check_role
from servicekit.logs import say
from servicekit.metrics import MetricsEndpoint
from servicekit.migrations import pending
from servicekit.settings import Env, SettingsError
from servicekit.shutdown import Stop

SERVICE_NAME = "ration.notify"  # its gRPC health service name ("" answers too)


async def _check_database(url: str, settings: NotifySettings) -> None:
    """The role must be one that row-level security applies to (outside development mode),
    and the schema current."""
    conn = await asyncpg.connect(url, timeout=10)
    try:
        allowed = settings.database.allow_privileged_role
        await check_role(conn, ["budget"], dev_mode=settings.dev_mode, allowed=allowed)
        missing = await pending(conn, [MIGRATIONS])
    finally:
        await conn.close()
    if missing:
        raise SettingsError(f"migrations pending (run `ration migrate`): {', '.join(missing)}")


@contextlib.asynccontextmanager
async def _health(settings: NotifySettings) -> AsyncIterator[str]:
    """grpc.health.v1 on RATION_NOTIFY_LISTEN: SERVING while the process follows its webhooks."""
    if settings.health is None:
        yield "off"
        return
    host, port = settings.health
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    if not bound:
        raise SettingsError(f"RATION_NOTIFY_LISTEN: cannot bind {host}:{port}")
    await server.start()
    for name in ("", SERVICE_NAME):
        await servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    try:
        yield f"{host}:{bound}"
    finally:
        for name in ("", SERVICE_NAME):
            await servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await server.stop(0)


@contextlib.contextmanager
def _metrics(settings: NotifySettings, registry: CollectorRegistry) -> Iterator[str]:
    """Prometheus /metrics on RATION_NOTIFY_METRICS_LISTEN."""
    if settings.metrics is None:
        yield "off"
        return
    host, port = settings.metrics
    try:
        endpoint = MetricsEndpoint(registry, host, port)
    except OSError as exc:
        raise SettingsError(
            f"RATION_NOTIFY_METRICS_LISTEN: cannot bind {host}:{port} ({exc.strerror})"
        ) from None
    try:
        yield f"http://{host}:{endpoint.port}/metrics"
    finally:
        endpoint.close()


async def run_notify(env: Env, stop: Stop) -> int:
    settings = NotifySettings.from_env(env)
    # No RATION_DATABASE_URL: the embedded server of `make run` (joined, as `ration up` does).
    async with database_url(settings.database, stop) as url:
        await _check_database(url, settings)
        database = Database(url, settings.database)
        await database.connect()
        registry = CollectorRegistry()
        metrics = NotifyMetrics(registry, settings.labels)
        try:
            notifier = Notifier(database, settings, metrics=metrics)
            with _metrics(settings, registry) as metrics_url:
                async with _health(settings) as health_address:
                    tenants = {w.tenant for w in settings.webhooks}
                    say(
                        f"notify: {len(settings.webhooks)} webhooks of {len(tenants)} tenants"
                        f"  health {health_address}  metrics {metrics_url} (Ctrl-C to stop)"
                    )
                    await stop.race(notifier.run())
        finally:
            await database.close()
    return 0

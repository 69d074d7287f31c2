"""Server wiring written once: interceptors, health, reflection (v1 and v1alpha), readiness,
graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import grpc
from google.protobuf import descriptor_pool
from google.rpc import error_details_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry

from servicekit import ports
from servicekit import reflection as reflection_v1
from servicekit.auth import IssuedKeys, RoleTable, TokenTable, check_role_table
from servicekit.db import Database
from servicekit.dbrole import check_role
from servicekit.interceptors import CallInterceptor, ErrorMapper
from servicekit.metrics import GrpcMetrics, MetricsEndpoint, pool_gauges
from servicekit.migrations import MigrationSet, migrate, pending
from servicekit.settings import ServerSettings, SettingsError, postgres_target

log = logging.getLogger(__name__)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass
class ServiceApp:
    """What a service hands to servicekit: its gRPC registration and its background work."""

    name: str
    service_name: str
    error_domain: str
    migrations: Sequence[MigrationSet]
    register: Callable[[grpc.aio.Server], None]
    # Started once Postgres answers (sweepers, listeners); cancelled at shutdown.
    background: Sequence[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    close: Callable[[], Awaitable[None]] | None = None
    # Full method name → required role (servicekit.auth.RoleTable), one row per RPC of
    # service_name; the server does not start when a row is missing or names no method.
    roles: RoleTable = field(kw_only=True)
    # API keys the service issues (servicekit.auth.IssuedKeys), accepted beside the token file.
    issued_keys: IssuedKeys | None = field(default=None, kw_only=True)


def service_methods(service_name: str) -> frozenset[str]:
    """The full method names of a service in the default descriptor pool (empty when the
    service has no descriptor, like the test probes that register generic handlers)."""
    try:
        service = descriptor_pool.Default().FindServiceByName(service_name)
    except KeyError:
        return frozenset()
    return frozenset(f"/{service.full_name}/{method.name}" for method in service.methods)


AppFactory = Callable[[Database, CollectorRegistry], ServiceApp]


def enable_reflection(server: grpc.aio.Server, service_name: str) -> None:
    """Reflection over the default pool, which must hold the service and the error details
    (google.rpc.ErrorInfo, BadRequest, ...) so that grpcurl can describe and decode them."""
    pool = descriptor_pool.Default()
    pool.FindFileByName(error_details_pb2.DESCRIPTOR.name)
    try:
        pool.FindServiceByName(service_name)
    except KeyError:  # the app never imported its *_service_pb2 (or has no descriptor)
        log.warning("reflection cannot describe the service", extra={"service": service_name})
    names = (service_name, health.SERVICE_NAME, reflection.SERVICE_NAME, reflection_v1.V1_SERVICE)
    reflection.enable_server_reflection(names, server, pool)
    reflection_v1.enable_v1_reflection(server, names, pool)


class ServiceRunner:
    """One gRPC server for one service: start, become SERVING when Postgres answers, stop."""

    def __init__(
        self,
        factory: AppFactory,
        settings: ServerSettings,
        database: Database,
        *,
        reuse_port: bool = False,
    ) -> None:
        self.settings = settings
        # SO_REUSEPORT only between the workers of one supervisor (which checked the port is
        # free); a lone server binds exclusively, so a second one fails instead of sharing.
        self.reuse_port = reuse_port
        self.database = database
        self.registry = CollectorRegistry()
        self.app = factory(database, self.registry)
        self.health = health.aio.HealthServicer()
        self.port = 0
        self.metrics_port = 0
        self._metrics: MetricsEndpoint | None = None
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.ready = asyncio.Event()
        # Set when the service cannot serve as configured (e.g. a privileged database role):
        # `error` says why; the command exits 2 with it.
        self.failed = asyncio.Event()
        self.error: SettingsError | None = None

    @property
    def address(self) -> str:
        host = self.settings.host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    async def start(self) -> None:
        ports.check_service_ports(self.app.name, self.settings, grpc=not self.reuse_port)
        errors = ErrorMapper(self.app.error_domain)
        tokens = TokenTable.load(self.settings.token_file)
        if self.app.issued_keys is not None:
            tokens = tokens.with_issued(self.app.issued_keys)
        methods = service_methods(self.app.service_name) or frozenset(self.app.roles)
        check_role_table(self.app.name, self.app.roles, methods)
        # One interceptor (metrics, auth, errors); its cache holds only registered methods,
        # unknown paths get UnknownMethod.
        self.interceptors = (
            CallInterceptor(GrpcMetrics(self.registry), tokens, errors, self.app.roles),
        )
        server = grpc.aio.server(
            interceptors=self.interceptors,
            options=[
                ("grpc.max_receive_message_length", self.settings.max_message_bytes),
                ("grpc.max_send_message_length", self.settings.max_message_bytes),
                ("grpc.max_concurrent_streams", self.settings.max_concurrent_streams),
                ("grpc.so_reuseport", 1 if self.reuse_port else 0),
            ],
        )
        self.app.register(server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        enable_reflection(server, self.app.service_name)
        try:
            self.port = server.add_insecure_port(f"{self.settings.host}:{self.settings.port}")
        except RuntimeError:  # taken between the check and the bind
            variable = ports.listen_variables(self.app.name)[0]
            raise ports.PortTaken(
                variable, self.settings.host, self.settings.port, "just taken by another process"
            ) from None
        await self._set_health(NOT_SERVING)
        await server.start()
        self._server = server
        if self.settings.metrics_host is not None:
            self._metrics = MetricsEndpoint(
                self.registry, self.settings.metrics_host, self.settings.metrics_port
            )
            self.metrics_port = self._metrics.port
        pool_gauges(self.registry, self.app.name, self._pool_stats)
        self._tasks.append(asyncio.create_task(self._readiness(), name=f"{self.app.name}-ready"))

    def _log_listening(self) -> None:
        """Once SERVING (migrations applied, role checked): before that the port only answers
        health checks with NOT_SERVING."""
        metrics = (
            f"{self.settings.metrics_host}:{self.metrics_port}" if self.metrics_port else "off"
        )
        log.info(
            "service listening",
            extra={"service": self.app.name, "address": self.address, "metrics": metrics},
        )

    def _pool_stats(self) -> dict[str, int] | None:
        if not self.database.ready:
            return None
        pool = self.database.pool
        return {
            "in_use": pool.get_size() - pool.get_idle_size(),
            "idle": pool.get_idle_size(),
            "max": pool.get_max_size(),
        }

    async def _set_health(self, status: int) -> None:
        await self.health.set("", status)
        await self.health.set(self.app.service_name, status)

    async def _readiness(self) -> None:
        """Connects and migrates (or checks the schema) with backoff, checks the role, then
        follows Postgres with a periodic probe."""
        delay = 0.1
        attempt = 0
        while not self._stopping:
            try:
                await self.database.connect()
                await self._schema()
                async with self.database.connection() as conn:
                    await check_role(
                        conn,
                        [m.schema for m in self.app.migrations],
                        dev_mode=self.settings.dev_mode,
                        allowed=self.database.settings.allow_privileged_role,
                    )
                break
            except SettingsError as exc:  # retrying cannot help: the operator must act
                log.error("service cannot start", extra={"error": str(exc)})
                self.error = exc
                self.failed.set()
                return
            except Exception as exc:  # keep retrying whatever the cause; say so each time
                attempt += 1
                log.warning(
                    f"database not ready ({postgres_target(self.database.url)}): "
                    f"{type(exc).__name__}; retrying in {delay:g}s",
                    extra={
                        "service": self.app.name,
                        "database": postgres_target(self.database.url),
                        "attempt": attempt,
                        "retry_in_s": delay,
                        "error": repr(exc)[:300],
                    },
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        if self._stopping:
            return
        for work in self.app.background:
            self._tasks.append(asyncio.create_task(work()))
        await self._set_health(SERVING)
        self._log_listening()
        self.ready.set()
        serving = True
        while not self._stopping:
            await asyncio.sleep(self.settings.health_probe_seconds)
            ok = await self.database.ping()
            if ok != serving and not self._stopping:
                serving = ok
                await self._set_health(SERVING if ok else NOT_SERVING)
                log.warning("health changed", extra={"serving": ok, "service": self.app.name})

    async def _schema(self) -> None:
        """Applies pending migrations (RATION_MIGRATE_ON_START, as RATION_MIGRATE_DATABASE_URL's
        role when set), or only checks that none is pending: the application role cannot
        migrate, and the service waits NOT_SERVING until the owner has (`ration migrate`)."""
        sets = list(self.app.migrations)
        settings = self.database.settings
        if settings.migrate_on_start and settings.migrate_url:
            conn = await asyncpg.connect(settings.migrate_url, timeout=10)
            try:
                await migrate(conn, sets)
            finally:
                await conn.close()
            return
        async with self.database.connection() as conn:
            if settings.migrate_on_start:
                await migrate(conn, sets)
                return
            missing = await pending(conn, sets)
        if missing:
            raise RuntimeError(f"migrations pending (run `ration migrate`): {', '.join(missing)}")

    async def stop(self) -> None:
        """NOT_SERVING first, then drain in-flight calls within the grace period."""
        if self._stopping:
            return
        self._stopping = True
        with contextlib.suppress(Exception):
            await self._set_health(NOT_SERVING)
        if self._server is not None:
            await self._server.stop(self.settings.grace_seconds)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.app.close is not None:
            await self.app.close()
        await self.database.close()
        if self._metrics is not None:
            self._metrics.close()
        log.info("service stopped", extra={"service": self.app.name})

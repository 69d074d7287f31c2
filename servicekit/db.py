"""The asyncpg pool and the one way to run a transaction, failing closed as STORE_UNAVAILABLE."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import asyncpg

from servicekit.errors import store_unavailable
from servicekit.settings import DatabaseSettings

log = logging.getLogger(__name__)
T = TypeVar("T")

# Failures that mean "Postgres is not answering properly right now": the caller may retry.
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.QueryCanceledError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.InsufficientResourcesError,
    # A connection the server dropped while it sat idle in the pool (e.g. `pg_ctl stop -m
    # fast`) fails its next statement with a protocol-state error rather than a connection one.
    asyncpg.exceptions.InternalClientError,
)
# Conflicts that a fresh attempt of the same transaction resolves.
RETRYABLE_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
)


# The setting every row-level security policy filters on (the migrations' tenant_isolation).
TENANT_SETTING = "ration.tenant_id"


def quote_literal(value: str) -> str:
    """A SQL string literal, correct whatever standard_conforming_strings says."""
    if "\0" in value:
        raise ValueError("a SQL literal cannot contain NUL")
    quoted = value.replace("'", "''")
    if "\\" in quoted:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return f"'{quoted}'"


def enter_tenant(tenant: str) -> str:
    """BEGIN and the tenant in one simple-protocol message: no round trip of its own.

    SET LOCAL (rather than set_config) because it is what Citus propagates to the workers
    (citus.propagate_set_commands = 'local'), and local because nothing may outlive the
    transaction: a pooled connection (or PgBouncer in transaction mode) never carries a tenant
    into the next one."""
    return f"BEGIN; SET LOCAL {TENANT_SETTING} = {quote_literal(tenant)}"


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Returning a connection to the pool runs no reset query (asyncpg's default costs a round
    trip per call): no code keeps session state (advisory locks, LISTEN, SET, cursors) on a
    pooled connection, as PgBouncer in transaction mode requires (DESIGN 6). asyncpg still rolls
    back a transaction left open."""


class Database:
    """Owns the pool. Transactions acquire with a bounded wait so exhaustion fails fast."""

    def __init__(self, url: str, settings: DatabaseSettings) -> None:
        self.url = url
        self.settings = settings
        self._pool: asyncpg.Pool | None = None

    @property
    def ready(self) -> bool:
        return self._pool is not None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise store_unavailable("the database is not connected yet; retry")
        return self._pool

    async def connect(self) -> None:
        if self._pool is not None:
            return
        self._pool = await asyncpg.create_pool(
            self.url,
            min_size=self.settings.pool_min,
            max_size=self.settings.pool_max,
            timeout=10,
            command_timeout=self.settings.statement_timeout_ms / 1000 + 1,
            reset=_keep_session,
            server_settings={
                "statement_timeout": str(self.settings.statement_timeout_ms),
                "application_name": "ration",
                "timezone": "UTC",
            },
        )

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), timeout=5)
            except UNAVAILABLE_ERRORS:
                pool.terminate()

    async def ping(self) -> bool:
        """True when a connection answers `SELECT 1` within the acquire timeout."""
        try:
            async with self.pool.acquire(timeout=self.settings.acquire_timeout_seconds) as conn:
                await conn.fetchval("SELECT 1", timeout=self.settings.acquire_timeout_seconds)
            return True
        except Exception:  # any failure of the probe means "not serving"
            return False

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection, waiting at most the acquire timeout. asyncio.timeout instead of
        asyncpg's own acquire timeout, which spawns a task per acquire."""
        pool = self.pool
        async with asyncio.timeout(self.settings.acquire_timeout_seconds):
            conn = await pool.acquire()
        try:
            yield conn
        finally:
            await pool.release(conn)

    async def transaction(
        self, work: Callable[[asyncpg.Connection], Awaitable[T]], *, attempts: int = 3
    ) -> T:
        """Runs `work` in one transaction; retries serialization conflicts, maps outages."""

        async def in_transaction(conn: asyncpg.Connection) -> T:
            async with conn.transaction():
                return await work(conn)

        return await self.statement(in_transaction, attempts=attempts)

    async def read(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """Runs read-only `work` on one connection without an explicit transaction."""
        try:
            async with self.connection() as conn:
                return await work(conn)
        except UNAVAILABLE_ERRORS as exc:
            log.warning("store unavailable", extra={"error": type(exc).__name__})
            raise store_unavailable() from exc

    async def statement(
        self,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        attempts: int = 3,
        retry_on: tuple[type[BaseException], ...] = (),
    ) -> T:
        """Runs `work` as one statement without an explicit transaction: the statement is its
        own transaction (no BEGIN/COMMIT round trips), e.g. a server-side function. Conflicts
        (and `retry_on`) are retried like transactions; outages map to STORE_UNAVAILABLE."""
        retryable = RETRYABLE_ERRORS + retry_on
        for attempt in range(1, attempts + 1):
            try:
                async with self.connection() as conn:
                    return await work(conn)
            except retryable:
                if attempt == attempts:
                    raise store_unavailable(
                        "the database kept reporting conflicts; retry"
                    ) from None
            except UNAVAILABLE_ERRORS as exc:
                log.warning("store unavailable", extra={"error": type(exc).__name__})
                raise store_unavailable() from exc
        raise AssertionError("unreachable")

    async def tenant_transaction(
        self,
        tenant: str,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        attempts: int = 3,
        retry_on: tuple[type[BaseException], ...] = (),
    ) -> T:
        """`work` in one transaction that has entered `tenant` for row-level security
        (servicekit/tenancy.py): BEGIN and SET LOCAL travel in one message, so entering the
        tenant costs no round trip of its own."""
        begin = enter_tenant(tenant)

        async def scoped(conn: asyncpg.Connection) -> T:
            await conn.execute(begin)
            try:
                result = await work(conn)
            except BaseException:
                if not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.execute("ROLLBACK")
                raise
            await conn.execute("COMMIT")
            return result

        return await self.statement(scoped, attempts=attempts, retry_on=retry_on)

"""The asyncpg pool and the one way to run a transaction, failing closed as STORE_UNAVAILABLE.

Two reasons, never confused: STORE_UNAVAILABLE means Postgres is unreachable (a connection
was refused or failed) or a statement timed out; STORE_BUSY means Postgres did not refuse but
this call could not get to it in time: every pooled connection stayed in use, or opening a new
one (slow on a CPU-starved host) took, for as long as the call's deadline allows (or
serialization conflicts kept aborting the transaction). Both are waited on, not refused: within
the current RPC's deadline (servicekit.cpu.current_deadline), keeping a share of it for the
work itself, or for the acquire timeout when the call has no deadline (background work,
probes).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import asyncpg

from servicekit.cpu import current_deadline
from servicekit.errors import store_busy, store_unavailable, tenant_connections_busy
from servicekit.logs import error_text
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


# Of a call's remaining time, the share (at least MIN_WORK_SECONDS) kept for its statements and
# its answer: the wait for a connection ends early enough that STORE_BUSY reaches the caller
# before its deadline does.
WORK_SHARE = 0.1
MIN_WORK_SECONDS = 0.02
# What a tenant refused for its share of the pool is told to wait before retrying.
RETRY_SECONDS = 0.1

# The setting every row-level security policy filters on (the migrations' tenant_isolation).
TENANT_SETTING = "ration.tenant_id"
# Read by the upkeep policies (granted to the owner only, migration 0005), which the SECURITY
# DEFINER upkeep functions pass; the application role's own policies never read it.
UPKEEP_SETTING = "ration.upkeep"


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


# asyncpg knows the codec of text[] but looks every other array type up in the catalog the first
# time a connection meets it: a query of ~1 ms on PostgreSQL and of 0.5-1 s on a Citus
# coordinator, which in the middle of a transaction holds its row locks (a memory's head) all
# that time. Each new pooled connection learns the array types the stores use up front.
_ARRAY_TYPES = (
    "SELECT NULL::bigint[], NULL::boolean[], NULL::bytea[], NULL::integer[], NULL::timestamptz[]"
)


async def _learn_array_types(conn: asyncpg.Connection) -> None:
    await conn.prepare(_ARRAY_TYPES)


class TenantShare:
    """How many of the pool's connections each tenant's transactions hold, at most `share`:
    one more waits for one of its own to end (first come, first served) for as long as the
    caller may wait, then is refused TENANT_BUSY. Other tenants do not wait for it."""

    def __init__(self, share: int) -> None:
        self.share = share
        self._held: dict[str, int] = {}
        self._waiting: dict[str, collections.deque[asyncio.Future[None]]] = {}

    def holding(self, tenant: str) -> int:
        return self._held.get(tenant, 0)

    @contextlib.asynccontextmanager
    async def held(self, tenant: str, wait_seconds: Callable[[], float]) -> AsyncIterator[None]:
        if self.holding(tenant) >= self.share or self._waiting.get(tenant):
            await self._wait_turn(tenant, wait_seconds())
        else:
            self._held[tenant] = self.holding(tenant) + 1
        try:
            yield
        finally:
            self._give_back(tenant)

    async def _wait_turn(self, tenant: str, seconds: float) -> None:
        turn = asyncio.get_running_loop().create_future()
        queue = self._waiting.setdefault(tenant, collections.deque())
        queue.append(turn)
        try:
            if seconds <= 0:
                raise TimeoutError
            async with asyncio.timeout(seconds):
                await turn  # handed over by _give_back: the count already includes it
        except BaseException as error:
            if turn.done() and not turn.cancelled():
                self._give_back(tenant)  # handed over just as the wait ended: pass it on
            else:
                turn.cancel()
                queue.remove(turn)
                if not queue:
                    del self._waiting[tenant]
            if isinstance(error, TimeoutError):
                raise tenant_connections_busy(self.share, RETRY_SECONDS) from None
            raise

    def _give_back(self, tenant: str) -> None:
        queue = self._waiting.get(tenant)
        if queue:
            queue.popleft().set_result(None)  # the slot goes to the next waiter as it is
            if not queue:
                del self._waiting[tenant]
            return
        left = self.holding(tenant) - 1
        if left > 0:
            self._held[tenant] = left
        else:
            self._held.pop(tenant, None)


class Database:
    """Owns the pool. A full pool is waited on within the call's deadline, then STORE_BUSY."""

    def __init__(self, url: str, settings: DatabaseSettings) -> None:
        self.url = url
        self.settings = settings
        self._pool: asyncpg.Pool | None = None
        # One slot per pooled connection, taken before asking the pool: waiting for a slot is
        # waiting for a busy pool; once a slot is held the pool has a free connection or opens
        # one. Either wait past what the deadline allows is STORE_BUSY; a refused or failed
        # connection is STORE_UNAVAILABLE.
        self._slots = asyncio.Semaphore(settings.pool_max)
        # Unset (the default): no per-tenant cap, so a tenant waits only for the pool itself.
        self.tenant_share = TenantShare(settings.tenant_share) if settings.tenant_share else None
        # Statements that may wait long on a lock (a run locked elsewhere) hold at most this
        # many connections per tenant even with no share set, so one tenant's locked runs
        # cannot take the pool: a quarter of it, at least one.
        self.waiting_share = self.tenant_share or TenantShare(max(1, settings.pool_max // 4))

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
            init=_learn_array_types,
            server_settings={
                "statement_timeout": str(self.settings.statement_timeout_ms),
                "idle_in_transaction_session_timeout": str(
                    self.settings.idle_in_transaction_timeout_ms
                ),
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
            async with self.connection() as conn:
                await conn.fetchval("SELECT 1", timeout=self.settings.acquire_timeout_seconds)
            return True
        except Exception:  # any failure of the probe means "not serving"
            return False

    def _wait_seconds(self) -> float:
        """How long a caller may wait for a slot: its deadline less the share kept for its
        work, or the acquire timeout without a deadline."""
        deadline = current_deadline()
        if deadline is None:
            return self.settings.acquire_timeout_seconds
        remaining = deadline - time.monotonic()
        return remaining - max(MIN_WORK_SECONDS, remaining * WORK_SHARE)

    async def _take_slot(self) -> None:
        if not self._slots.locked():
            await self._slots.acquire()  # a slot is free: taken without waiting
            return
        wait = self._wait_seconds()
        if wait <= 0:
            raise store_busy()
        try:
            async with asyncio.timeout(wait):
                await self._slots.acquire()
        except TimeoutError:
            raise store_busy() from None

    def _free_slot(self, released: asyncio.Future[None]) -> None:
        self._slots.release()
        if not released.cancelled():
            released.exception()  # retrieved (and dropped): the caller has its own outcome

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection: STORE_BUSY when none frees up, or a new one does not open,
        within what the call's deadline allows (see the module docstring); a refused
        connection raises OSError (mapped to STORE_UNAVAILABLE). asyncio.timeout instead of
        asyncpg's own acquire timeout, which spawns a task per acquire."""
        pool = self.pool
        await self._take_slot()
        try:
            async with asyncio.timeout(max(self._wait_seconds(), MIN_WORK_SECONDS)):
                conn = await pool.acquire()
        except TimeoutError:  # also asyncpg's own connect timeout: nothing refused us
            self._slots.release()
            raise store_busy(
                "opening a database connection took longer than this call's deadline allows;"
                " nothing was done, retry"
            ) from None
        except BaseException:
            self._slots.release()
            raise
        try:
            yield conn
        finally:
            # The slot is freed when the connection is back in the pool, even if this caller
            # is cancelled meanwhile (the release goes on, shielded).
            released = asyncio.ensure_future(pool.release(conn))
            released.add_done_callback(self._free_slot)
            await asyncio.shield(released)

    async def transaction(
        self, work: Callable[[asyncpg.Connection], Awaitable[T]], *, attempts: int = 3
    ) -> T:
        """Runs `work` in one transaction; retries serialization conflicts, maps outages."""

        async def in_transaction(conn: asyncpg.Connection) -> T:
            async with conn.transaction():
                return await work(conn)

        return await self.statement(in_transaction, attempts=attempts)

    async def read(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """Runs read-only `work` on one connection without an explicit transaction; a conflict
        (e.g. serialization_failure from a Citus shard that moved meanwhile) runs it again."""
        return await self.statement(work)

    async def statement(
        self,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        attempts: int = 3,
        retry_on: tuple[type[BaseException], ...] = (),
    ) -> T:
        """Runs `work` as one statement without an explicit transaction: the statement is its
        own transaction (no BEGIN/COMMIT round trips), e.g. a server-side function. Conflicts
        (and `retry_on`) are retried like transactions, then STORE_BUSY; outages map to
        STORE_UNAVAILABLE."""
        retryable = RETRYABLE_ERRORS + retry_on
        for attempt in range(1, attempts + 1):
            try:
                async with self.connection() as conn:
                    return await work(conn)
            except retryable:
                if attempt == attempts:
                    raise store_busy(
                        "conflicting transactions kept aborting this one; nothing was done, retry"
                    ) from None
            except UNAVAILABLE_ERRORS as exc:
                log.warning("store unavailable", extra={"error": error_text(exc)})
                raise store_unavailable() from exc
        raise AssertionError("unreachable")

    async def tenant_statement(
        self,
        tenant: str,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        attempts: int = 3,
        retry_on: tuple[type[BaseException], ...] = (),
    ) -> T:
        """`statement`, holding one of the tenant's share of the pool's connections (the
        configured share, else `waiting_share`'s quarter of the pool): for statements of a
        tenant that may wait long on a lock, so that many of them cannot take the connections
        other tenants need. Past the share the statement waits within its deadline for one of
        the tenant's own, then TENANT_BUSY."""
        async with self.waiting_share.held(tenant, self._wait_seconds):
            return await self.statement(work, attempts=attempts, retry_on=retry_on)

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
        tenant costs no round trip of its own. The tenant holds at most its share of the
        pool's connections: past it the call waits within its deadline, then TENANT_BUSY."""
        if self.tenant_share is None:
            return await self._scoped(enter_tenant(tenant), work, attempts, retry_on)
        async with self.tenant_share.held(tenant, self._wait_seconds):
            return await self._scoped(enter_tenant(tenant), work, attempts, retry_on)

    async def upkeep_transaction(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """`work` (calls of the SECURITY DEFINER upkeep functions) in one transaction that set
        the upkeep setting itself: the functions set it too, but on Citus only a SET LOCAL of
        the transaction (not one inside a function) reaches the workers their statements run
        on, where the shards' policies read it."""
        return await self._scoped(f"BEGIN; SET LOCAL {UPKEEP_SETTING} = 'on'", work, 3, ())

    async def _scoped(
        self,
        begin: str,
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        attempts: int,
        retry_on: tuple[type[BaseException], ...],
    ) -> T:
        async def scoped(conn: asyncpg.Connection) -> T:
            # BEGIN and COMMIT inside the try: a cancellation can land in either, and the
            # connection must go back to the pool without a transaction (asyncpg would roll
            # it back itself, reporting an ERROR).
            try:
                await conn.execute(begin)
                result = await work(conn)
                await conn.execute("COMMIT")
            except BaseException:
                if not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.execute("ROLLBACK")
                raise
            return result

        return await self.statement(scoped, attempts=attempts, retry_on=retry_on)

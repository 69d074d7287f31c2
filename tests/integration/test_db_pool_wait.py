"""A full pool is waited on within the call's deadline, then STORE_BUSY; STORE_UNAVAILABLE is
kept for a Postgres that cannot be reached."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from servicekit.cpu import deadline_var
from servicekit.db import Database
from servicekit.errors import DomainError, ErrorKind, RetryDetail
from servicekit.settings import DatabaseSettings
from servicekit.tenancy import for_tenant

ACQUIRE_TIMEOUT = 0.3


def settings(pool_max: int = 1, pool_min: int = 1) -> DatabaseSettings:
    return DatabaseSettings(
        url=None,
        data_dir=Path("unused"),
        pool_min=pool_min,
        pool_max=pool_max,
        statement_timeout_ms=5000,
        acquire_timeout_seconds=ACQUIRE_TIMEOUT,
        migrate_on_start=False,
    )


@pytest.fixture
async def database(app_database_url: str) -> AsyncIterator[Database]:
    database = Database(app_database_url, settings())
    await database.connect()
    try:
        yield database
    finally:
        await database.close()


async def select_one(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT 1"))


async def within(seconds: float | None, database: Database) -> int:
    """A read as the handler of a call with `seconds` left (None: a call without deadline)."""
    deadline_var.set(None if seconds is None else time.monotonic() + seconds)
    return await database.read(select_one)


def assert_busy(error: DomainError) -> None:
    assert (error.kind, error.reason) == (ErrorKind.UNAVAILABLE, "STORE_BUSY")
    assert isinstance(error.detail, RetryDetail)
    assert error.detail.delay_seconds > 0


async def test_a_full_pool_answers_store_busy_before_a_short_deadline(database: Database) -> None:
    async with database.connection():  # the pool's only connection, held by the test
        started = time.monotonic()
        with pytest.raises(DomainError) as refused:
            await within(0.5, database)
        assert_busy(refused.value)
        assert time.monotonic() - started < 0.5  # answered before the caller's deadline
        with pytest.raises(DomainError) as late:
            await within(-1, database)  # a deadline already passed: no wait at all
        assert_busy(late.value)
    assert await within(0.5, database) == 1


async def test_without_a_deadline_a_full_pool_waits_the_acquire_timeout(
    database: Database,
) -> None:
    async with database.connection():
        started = time.monotonic()
        with pytest.raises(DomainError) as refused:
            await within(None, database)
        assert_busy(refused.value)
        assert time.monotonic() - started >= ACQUIRE_TIMEOUT


async def test_a_longer_deadline_waits_for_the_connection_and_succeeds(
    database: Database,
) -> None:
    tenant = for_tenant(database, "t1")  # a tenant's view waits on the same pool
    async with database.connection():
        patient = asyncio.create_task(within(30, database))
        patient_tenant = asyncio.create_task(within(30, tenant))
        # Callers without a deadline give up after the acquire timeout; the patient ones,
        # queued first, are still waiting then, well past the acquire timeout.
        with pytest.raises(DomainError) as impatient:
            await within(None, database)
        assert_busy(impatient.value)
        assert not patient.done()
        assert not patient_tenant.done()
    assert await patient == 1
    assert await patient_tenant == 1


async def test_a_cancelled_waiter_leaves_the_pool_whole(database: Database) -> None:
    async with database.connection():
        waiter = asyncio.create_task(within(30, database))
        await asyncio.sleep(0)  # let it queue for the connection
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert [await within(1, database) for _ in range(3)] == [1, 1, 1]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_postgres_is_store_unavailable_not_busy() -> None:
    database = Database(f"postgresql://nobody@127.0.0.1:{closed_port()}/none", settings(pool_min=0))
    await database.connect()  # min size 0: nothing is opened yet
    try:
        with pytest.raises(DomainError) as refused:
            await within(5, database)
        assert (refused.value.kind, refused.value.reason) == (
            ErrorKind.UNAVAILABLE,
            "STORE_UNAVAILABLE",
        )
        with pytest.raises(DomainError) as again:  # the failed attempt gave its slot back
            await within(5, database)
        assert again.value.reason == "STORE_UNAVAILABLE"
    finally:
        await database.close()

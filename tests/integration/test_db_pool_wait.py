"""A full pool is waited on within the call's deadline, then STORE_BUSY; STORE_UNAVAILABLE is
kept for a Postgres that cannot be reached; a cancelled transaction goes back to the pool
rolled back."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
import pytest

from servicekit.cpu import deadline_var
from servicekit.db import Database
from servicekit.errors import DomainError, ErrorKind, RetryDetail
from servicekit.settings import DatabaseSettings, Env
from servicekit.tenancy import TenantDatabase, for_tenant

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


class HeldOpen:
    """A TCP proxy on loopback to Postgres that holds every new connection, unanswered, until
    `open()`: a server up but slow to accept (a CPU-starved host), as the pool sees it."""

    def __init__(self, target: str) -> None:
        self._target = urlsplit(target)
        self._gate = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def open(self) -> None:
        self._gate.set()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for pipe in self._pipes:
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._gate.wait()
        up_reader, up_writer = await self._upstream()
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pipe = asyncio.create_task(self._pipe(source, sink))
            self._pipes.add(pipe)

    async def _upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The server the target URL names: a host, or a socket directory (`?host=/dir`)."""
        port = self._target.port or 5432
        socket_dir = parse_qs(self._target.query).get("host", [""])[0]
        if socket_dir.startswith("/"):
            return await asyncio.open_unix_connection(f"{socket_dir}/.s.PGSQL.{port}")
        return await asyncio.open_connection(self._target.hostname or "127.0.0.1", port)

    def url(self, port: int) -> str:
        """The target URL, through the proxy listening on `port`."""
        user = self._target.netloc.rpartition("@")[0]
        query = urlencode({k: v for k, v in parse_qsl(self._target.query) if k != "host"})
        netloc = f"{user}@127.0.0.1:{port}"
        return urlunsplit(self._target._replace(netloc=netloc, query=query))

    @staticmethod
    async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()


@pytest.fixture
async def slow_to_open(app_database_url: str) -> AsyncIterator[tuple[Database, HeldOpen]]:
    """A database whose connections open only when the test lets them (none is open yet)."""
    proxy = HeldOpen(app_database_url)
    database = Database(proxy.url(await proxy.start()), settings(pool_max=2, pool_min=0))
    await database.connect()
    try:
        yield database, proxy
    finally:
        proxy.open()
        await database.close()
        await proxy.close()


async def test_a_connection_slow_to_open_is_store_busy_not_unavailable(
    slow_to_open: tuple[Database, HeldOpen],
) -> None:
    database, proxy = slow_to_open
    with pytest.raises(DomainError) as refused:
        await within(1, database)  # past the acquire timeout, within the deadline
    assert_busy(refused.value)
    proxy.open()
    assert await within(1, database) == 1


async def test_a_patient_call_waits_for_a_slow_connection_past_the_acquire_timeout(
    slow_to_open: tuple[Database, HeldOpen],
) -> None:
    database, proxy = slow_to_open
    patient = asyncio.create_task(within(30, database))
    with pytest.raises(DomainError) as impatient:  # no deadline: the acquire timeout
        await within(None, database)
    assert_busy(impatient.value)
    assert not patient.done()  # still waiting for its connection to open, well past it
    proxy.open()
    assert await patient == 1


async def test_our_sessions_end_a_transaction_left_idle(app_database_url: str) -> None:
    """idle_in_transaction_session_timeout: the documented default, and as configured."""
    assert DatabaseSettings.from_env(Env({})).idle_in_transaction_timeout_ms == 10_000
    configured = Env({"RATION_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS": "1500"})
    database = Database(app_database_url, DatabaseSettings.from_env(configured))
    await database.connect()
    try:
        shown = await database.read(
            lambda conn: conn.fetchval("SHOW idle_in_transaction_session_timeout")
        )
    finally:
        await database.close()
    assert shown == "1500ms"


async def hold_in_transaction(
    tenant: TenantDatabase, inside: list[int], all_inside: asyncio.Event, release: asyncio.Event
) -> int:
    """A transaction of `tenant` that keeps its connection until `release`."""

    async def work(conn: asyncpg.Connection) -> int:
        inside.append(1)
        if len(inside) == 2:
            all_inside.set()
        await release.wait()
        return int(await conn.fetchval("SELECT 1"))

    return await tenant.read(work)


async def test_a_tenant_over_its_share_of_connections_waits_others_do_not(
    app_database_url: str,
) -> None:
    """Pool of 3, share of 2: tenant a holds 2; its third call waits for one of its own
    (then TENANT_BUSY with RetryInfo at its deadline) while tenant b gets the free one."""
    database = Database(app_database_url, replace(settings(pool_max=3, pool_min=0), tenant_share=2))
    await database.connect()
    release = asyncio.Event()
    a, b = for_tenant(database, "a"), for_tenant(database, "b")
    try:
        inside: list[int] = []
        all_inside = asyncio.Event()
        holders = [
            asyncio.create_task(hold_in_transaction(a, inside, all_inside, release))
            for _ in range(2)
        ]
        await all_inside.wait()
        with pytest.raises(DomainError) as refused:
            await within(0.3, a)
        error = refused.value
        assert (error.kind, error.reason, error.metadata) == (
            ErrorKind.EXHAUSTED,
            "TENANT_BUSY",
            {"limit": "2"},
        )
        assert isinstance(error.detail, RetryDetail)
        assert await within(5, b) == 1  # another tenant is not held up
        patient = asyncio.create_task(within(30, a))
        await asyncio.sleep(0)
        assert not patient.done()
        release.set()  # one of a's own ends: the waiting call gets its turn
        assert await patient == 1
        assert await asyncio.gather(*holders) == [1, 1]
        assert database.tenant_share is not None
        assert database.tenant_share.holding("a") == 0
    finally:
        release.set()
        await database.close()


async def sleep_briefly(conn: asyncpg.Connection) -> None:
    await conn.execute("SELECT pg_sleep(0.002)")


async def test_a_cancelled_transaction_never_leaves_a_transaction_for_the_pool_to_reset(
    database: Database,
) -> None:
    """Cancelled at any point (its BEGIN, its work, its COMMIT), a transaction hands its
    connection back rolled back by us: asyncpg never has to reset one with a transaction open,
    which it reports as an ERROR (once seen at `ration up`'s Ctrl-C)."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        # Cancelled after 0..8 ms in small steps: in the BEGIN, the work, the COMMIT, after.
        for step in range(200):
            task = asyncio.ensure_future(database.upkeep_transaction(sleep_briefly))
            await asyncio.sleep((step % 40) * 0.0002)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert await database.read(select_one) == 1
    finally:
        loop.set_exception_handler(previous)
    assert [c["message"] for c in reported] == []

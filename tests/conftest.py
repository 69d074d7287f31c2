"""Test harness: a real Postgres (TEST_DATABASE_URL, a testcontainer, or embedded) and real servers.

Each test session creates its own owner and application roles (tests/pgroles.py) and migrates
one template database as the owner; each test that asks for `database_url` gets a fresh clone
of it, dropped afterwards. `database_url` and `db` connect as the superuser (for tests that
inspect or alter the database directly); the servers connect as the application role
(`app_database_url`), so row-level security applies to them. API fixtures start the real
servers on 127.0.0.1:0.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import grpc
import pgroles
import pytest

from ration_server import registry
from servicekit.embedded import EmbeddedPostgres
from servicekit.migrations import MigrationSet, migrate
from servicekit.server import ServiceRunner
from servicekit.settings import Env

ROOT = Path(__file__).resolve().parent.parent


def with_database(url: str, name: str) -> str:
    """The same server URL pointing at another database (works for host and socket URLs)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A Postgres server to create test databases on."""
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        yield url
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as container:
            yield container.get_connection_url()
        return
    data_dir = Path(tempfile.mkdtemp(prefix="ration-test-pg-"))
    embedded = EmbeddedPostgres(data_dir)
    try:
        yield embedded.start()
    finally:
        embedded.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


async def _admin(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def all_migrations() -> list[MigrationSet]:
    return registry.all_migrations()


@pytest.fixture(scope="session")
def db_roles(pg_server_url: str) -> Iterator[pgroles.Roles]:
    """This session's owner and application roles, dropped when it ends."""
    roles = asyncio.run(pgroles.create(pg_server_url))
    pgroles.CURRENT = roles
    try:
        yield roles
    finally:
        pgroles.CURRENT = None
        asyncio.run(pgroles.drop(roles))


@pytest.fixture(scope="session")
def template_database(pg_server_url: str, db_roles: pgroles.Roles) -> Iterator[str]:
    """A database migrated by the (non-superuser) owner, that per-test databases are cloned from."""
    name = f"ration_tpl_{uuid.uuid4().hex[:12]}"
    url = with_database(pg_server_url, name)

    async def build() -> None:
        await pgroles.create_database(db_roles, url, name)
        conn = await asyncpg.connect(db_roles.owner_url(url))
        try:
            await migrate(conn, all_migrations())
        finally:
            await conn.close()

    asyncio.run(build())
    try:
        yield name
    finally:
        asyncio.run(_admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def empty_database_url(pg_server_url: str, db_roles: pgroles.Roles) -> Iterator[str]:
    """A fresh database with nothing in it (for migration tests), owned by the session's owner
    role with the operator's default privileges, as an operator prepares one (superuser URL)."""
    name = f"ration_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(pgroles.create_database(db_roles, with_database(pg_server_url, name), name))
    try:
        yield with_database(pg_server_url, name)
    finally:
        asyncio.run(_admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def database_url(pg_server_url: str, template_database: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"ration_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(pg_server_url, f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"'))
    try:
        yield with_database(pg_server_url, name)
    finally:
        asyncio.run(_admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def app_database_url(database_url: str, db_roles: pgroles.Roles) -> str:
    """The test database as the application role: what the services connect with."""
    return db_roles.app_url(database_url)


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A direct connection to the test database, for asserting what was (not) written."""
    conn = await asyncpg.connect(database_url)
    try:
        yield conn
    finally:
        await conn.close()


def service_env(database_url: str, **overrides: str) -> Env:
    values = {
        "RATION_DATABASE_URL": database_url,
        "RATION_BUDGET_LISTEN": "127.0.0.1:0",
        "RATION_BUDGET_METRICS_LISTEN": "127.0.0.1:0",
        "RATION_MEMORY_LISTEN": "127.0.0.1:0",
        "RATION_MEMORY_METRICS_LISTEN": "127.0.0.1:0",
        "RATION_DB_POOL_MIN": "1",
        "RATION_HEALTH_PROBE_MS": "200",
        "RATION_SHUTDOWN_GRACE_MS": "200",
    }
    values.update(overrides)
    return Env(values)


StartServer = Callable[..., Awaitable[ServiceRunner]]


@pytest.fixture
async def start_server(app_database_url: str) -> AsyncIterator[StartServer]:
    """Starts a real service ('budget' or 'memory') on loopback, connected as the application
    role; stopped after the test."""
    runners: list[ServiceRunner] = []

    async def start(kind: str, **overrides: str) -> ServiceRunner:
        runner = registry.build_runner(kind, service_env(app_database_url, **overrides))
        await runner.start()
        runners.append(runner)
        await asyncio.wait_for(runner.ready.wait(), timeout=30)
        return runner

    yield start
    for runner in runners:
        await runner.stop()


@pytest.fixture
async def budget_channel(start_server: StartServer) -> AsyncIterator[grpc.aio.Channel]:
    runner = await start_server("budget")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield channel


@pytest.fixture
async def memory_channel(start_server: StartServer) -> AsyncIterator[grpc.aio.Channel]:
    runner = await start_server("memory")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{runner.port}") as channel:
        yield channel

"""Test harness: a real Postgres (TEST_DATABASE_URL, a testcontainer, or embedded) and real servers.

Each test session creates its own owner and application roles (tests/support/dbroles.py) and
migrates one template database as the owner; each test that asks for `database_url` gets a fresh
clone of it (made ahead, dropped afterwards, both in the background: tests/support/clones.py).
`database_url` and `db` connect as the superuser (for tests that inspect or alter the database
directly); the servers connect as the application role (`app_database_url`), so row-level
security applies to them. API fixtures start the real
servers on 127.0.0.1:0.

A module whose tests isolate themselves by unique ids (tests/support/ids.py) asks for the
`shared_*` fixtures instead: one database and one server per kind for the whole module. Tests
that need a database of their own (they alter settings, count rows across it, restart or
reconfigure the server, or need an empty tenant) keep the per-test fixtures.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import grpc
import pytest
from hypothesis import HealthCheck, settings

from ration_server import registry
from servicekit.embedded import EmbeddedPostgres
from servicekit.migrations import migrate
from servicekit.server import ServiceRunner
from tests.support import adapters, dbroles
from tests.support.clones import Clones
from tests.support.postgres import admin, docker_answers, with_database
from tests.support.servers import SharedServers, StartServer, service_env

# Tests never assert wall-clock speed (DESIGN 9): hypothesis's per-example deadline and its
# too-slow health check are timings, and they fail on a loaded machine, so both are off here.
settings.register_profile(
    "ration", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("ration")


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A Postgres server to create test databases on."""
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        yield url
        return
    if docker_answers():
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


@pytest.fixture(scope="session")
def db_roles(pg_server_url: str) -> Iterator[dbroles.Roles]:
    """This session's owner and application roles, dropped when it ends."""
    roles = asyncio.run(dbroles.create(pg_server_url))
    dbroles.CURRENT = roles
    try:
        yield roles
    finally:
        dbroles.CURRENT = None
        asyncio.run(dbroles.drop(roles))


@pytest.fixture(scope="session")
def template_database(pg_server_url: str, db_roles: dbroles.Roles) -> Iterator[str]:
    """A database migrated by the (non-superuser) owner, that per-test databases are cloned from."""
    name = f"ration_tpl_{uuid.uuid4().hex[:12]}"
    url = with_database(pg_server_url, name)

    async def build() -> None:
        await dbroles.create_database(db_roles, url, name)
        conn = await asyncpg.connect(db_roles.owner_url(url))
        try:
            await migrate(conn, registry.all_migrations())
        finally:
            await conn.close()

    asyncio.run(build())
    try:
        yield name
    finally:
        asyncio.run(admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def empty_database_url(
    pg_server_url: str, db_roles: dbroles.Roles, template_clones: Clones
) -> Iterator[str]:
    """A fresh database with nothing in it (for migration tests), owned by the session's owner
    role with the operator's default privileges, as an operator prepares one (superuser URL).
    Dropped behind the test, with the clones (its forced checkpoint took up to 30 s inline)."""
    name = f"ration_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(dbroles.create_database(db_roles, with_database(pg_server_url, name), name))
    try:
        yield with_database(pg_server_url, name)
    finally:
        template_clones.give_back(name)


@pytest.fixture(scope="session")
def template_clones(pg_server_url: str, template_database: str) -> Iterator[Clones]:
    """Clones of the template made ahead of the tests and dropped behind them (support/clones)."""
    clones = Clones(pg_server_url, template_database)
    try:
        yield clones
    finally:
        clones.close()


@pytest.fixture
def database_url(pg_server_url: str, template_clones: Clones) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = template_clones.take()
    try:
        yield with_database(pg_server_url, name)
    finally:
        template_clones.give_back(name)


@pytest.fixture
def app_database_url(database_url: str, db_roles: dbroles.Roles) -> str:
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


@pytest.fixture
async def start_server(app_database_url: str) -> AsyncIterator[StartServer]:
    """Starts a real service ('budget' or 'memory') on loopback, connected as the application
    role, with the session's shared heavy adapters (tests/support/adapters.py); stopped after
    the test."""
    runners: list[ServiceRunner] = []

    async def start(kind: str, **overrides: str) -> ServiceRunner:
        runner = registry.build_runner(
            kind, service_env(app_database_url, **overrides), adapters=adapters.for_service(kind)
        )
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


@pytest.fixture(scope="module")
def shared_env() -> dict[str, str]:
    """Environment overrides of the module's shared servers; a module redefines this fixture
    to give them, say, its token file."""
    return {}


@pytest.fixture(scope="module")
def shared_database_url(pg_server_url: str, template_clones: Clones) -> Iterator[str]:
    """One fresh, migrated database for a whole module (superuser URL)."""
    name = template_clones.take()
    try:
        yield with_database(pg_server_url, name)
    finally:
        template_clones.give_back(name)


@pytest.fixture(scope="module")
def shared_servers(shared_database_url: str, shared_env: dict[str, str]) -> Iterator[SharedServers]:
    """The module's servers on `shared_database_url`, each on its own thread (so it outlives
    the per-test event loops), connected as the application role."""
    servers = SharedServers(shared_database_url, **shared_env)
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
async def shared_budget_channel(shared_servers: SharedServers) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(shared_servers.address("budget")) as channel:
        yield channel


@pytest.fixture
async def shared_memory_channel(shared_servers: SharedServers) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(shared_servers.address("memory")) as channel:
        yield channel


@pytest.fixture
async def shared_db(shared_database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A direct connection to the module's shared database (superuser)."""
    conn = await asyncpg.connect(shared_database_url)
    try:
        yield conn
    finally:
        await conn.close()

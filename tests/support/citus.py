"""A Citus cluster for the Citus system tests: a fresh database on every node of the cluster
that RATION_TEST_CITUS_URL names (a superuser URL of a coordinator database that has the citus
extension and its workers added), set up as deploy/README.md's Citus section says, and dropped
afterwards with the roles the test created in it. Nothing relies on leftovers."""

from __future__ import annotations

import asyncio
import os
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from servicekit import pgroles

URL_VARIABLE = "RATION_TEST_CITUS_URL"


def with_location(
    url: str,
    *,
    host: str | None = None,
    port: int | None = None,
    database: str | None = None,
    user: str | None = None,
    password: str | None = None,
) -> str:
    parts = urlsplit(url)
    old_user = parts.username or ""
    old_password = parts.password
    name = user if user is not None else old_user
    secret = password if password is not None else old_password
    credentials = name + (f":{secret}" if secret else "")
    location = f"{host or parts.hostname}:{port or parts.port or 5432}"
    netloc = f"{credentials}@{location}" if credentials else location
    path = f"/{database}" if database is not None else parts.path
    return urlunsplit((parts.scheme, netloc, path, parts.query, parts.fragment))


def skip_reason() -> str | None:
    """Why the Citus tests cannot run here (one line), or None when they can."""
    url = os.environ.get(URL_VARIABLE)
    if not url:
        return f"{URL_VARIABLE} is not set: no Citus coordinator to test against"

    async def probe() -> str | None:
        try:
            conn = await asyncpg.connect(url, timeout=10)
        except (OSError, asyncpg.PostgresError) as exc:
            return f"{URL_VARIABLE} does not connect ({type(exc).__name__}): {exc}"
        try:
            if not await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"
            ):
                return f"{URL_VARIABLE} is plain PostgreSQL (no citus extension in its database)"
        finally:
            await conn.close()
        return None

    return asyncio.run(probe())


@dataclass(frozen=True)
class Node:
    host: str
    port: int


@dataclass(frozen=True)
class CitusDatabase:
    """A database of the cluster with the README's two roles, created for one test module."""

    admin_url: str  # the superuser's, on the coordinator, in this database
    name: str
    coordinator: Node
    workers: tuple[Node, ...]
    owner: str
    app: str
    password: str

    def url(self, role: str) -> str:
        return with_location(self.admin_url, user=role, password=self.password)

    @property
    def owner_url(self) -> str:
        return self.url(self.owner)

    @property
    def app_url(self) -> str:
        return self.url(self.app)

    def node_url(self, node: Node, database: str | None = None) -> str:
        return with_location(self.admin_url, host=node.host, port=node.port, database=database)


async def execute(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url, timeout=30)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def create() -> CitusDatabase:
    """A new database on every node, the citus extension in each, the workers added to its
    coordinator (Citus's own setup), then the README's roles and grants, created while connected
    to that database so that Citus creates the roles on every node."""
    source = os.environ[URL_VARIABLE]
    conn = await asyncpg.connect(source, timeout=30)
    try:
        nodes = await conn.fetch(
            "SELECT nodename, nodeport, groupid FROM pg_dist_node"
            " WHERE isactive AND noderole = 'primary' ORDER BY groupid, nodeid"
        )
    finally:
        await conn.close()
    parts = urlsplit(source)
    coordinator = next(
        (Node(n["nodename"], n["nodeport"]) for n in nodes if n["groupid"] == 0),
        Node(parts.hostname or "127.0.0.1", parts.port or 5432),
    )
    workers = tuple(Node(n["nodename"], n["nodeport"]) for n in nodes if n["groupid"] != 0)
    if not workers:
        raise AssertionError(f"{URL_VARIABLE}: the coordinator has no workers (pg_dist_node)")
    tag = secrets.token_hex(4)
    name = f"ration_citus_{tag}"
    database = CitusDatabase(
        admin_url=with_location(source, database=name),
        name=name,
        coordinator=coordinator,
        workers=workers,
        owner=f"ration_citus_own_{tag}",
        app=f"ration_citus_app_{tag}",
        password=secrets.token_hex(12),
    )
    for node in (coordinator, *workers):
        await execute(database.node_url(node, parts.path.lstrip("/")), f'CREATE DATABASE "{name}"')
        await execute(database.node_url(node, name), "CREATE EXTENSION citus")
    await execute(
        database.admin_url,
        f"SELECT citus_set_coordinator_host('{coordinator.host}', {coordinator.port})",
        *(f"SELECT citus_add_node('{w.host}', {w.port})" for w in workers),
        # deploy/README.md, Postgres roles: the same SQL, in the Citus database.
        *pgroles.role_statements(database.owner, database.app, *[database.password] * 2),
        f'ALTER DATABASE "{name}" OWNER TO "{database.owner}"',
        f'GRANT CONNECT ON DATABASE "{name}" TO "{database.owner}", "{database.app}"',
        *pgroles.database_statements(database.owner, database.app),
    )
    return database


async def drop(database: CitusDatabase) -> None:
    """Drops the database on every node, then the roles on every node (best effort)."""
    source = os.environ[URL_VARIABLE]
    maintenance = urlsplit(source).path.lstrip("/")
    for node in (database.coordinator, *database.workers):
        url = database.node_url(node, maintenance)
        try:
            await execute(url, f'DROP DATABASE IF EXISTS "{database.name}" WITH (FORCE)')
            await execute(
                url, *(f'DROP ROLE IF EXISTS "{r}"' for r in (database.app, database.owner))
            )
        except (OSError, asyncpg.PostgresError):
            pass

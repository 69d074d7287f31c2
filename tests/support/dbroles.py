"""The test session's two Postgres roles (an owner that migrates, the application role the
services connect as), created with the operator's SQL (servicekit/pgroles.py) under names unique
to this session, and dropped at its end: roles are cluster-wide, so nothing relies on leftovers."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from servicekit import pgroles


def with_user(url: str, user: str, password: str) -> str:
    """The same server and database as another user (host and socket URLs alike)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{user}:{password}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True)
class Roles:
    server_url: str  # the superuser's
    owner: str
    app: str
    password: str

    def on_this_server(self, url: str) -> bool:
        mine, theirs = urlsplit(self.server_url), urlsplit(url)
        same_host = mine.netloc.rpartition("@")[2] == theirs.netloc.rpartition("@")[2]
        return same_host and mine.query == theirs.query

    def owner_url(self, url: str) -> str:
        return with_user(url, self.owner, self.password)

    def app_url(self, url: str) -> str:
        return with_user(url, self.app, self.password)

    def service_env(self, url: str) -> dict[str, str]:
        """How a test hands a database to the services: they connect as the application role
        and migrate (when they do) as the owner."""
        return {
            "RATION_DATABASE_URL": self.app_url(url),
            "RATION_MIGRATE_DATABASE_URL": self.owner_url(url),
        }


CURRENT: Roles | None = None  # the session's, once created


def current() -> Roles:
    if CURRENT is None:
        raise RuntimeError("the test session's database roles are not created yet")
    return CURRENT


async def _run(url: str, statements: list[str]) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def create(server_url: str) -> Roles:
    tag = secrets.token_hex(5)
    roles = Roles(server_url, f"ration_own_{tag}", f"ration_app_{tag}", secrets.token_hex(12))
    await _run(server_url, pgroles.role_statements(roles.owner, roles.app, *[roles.password] * 2))
    return roles


async def create_database(roles: Roles, database_url: str, name: str) -> None:
    """CREATE DATABASE owned by the owner, with the default privileges the application role
    needs (the operator's per-database SQL), ready for `ration migrate` as the owner."""
    await _run(roles.server_url, [pgroles.database_statement(name, roles.owner)])
    await _run(database_url, pgroles.database_statements(roles.owner, roles.app))


async def drop(roles: Roles) -> None:
    """Best effort: a database still holding their objects keeps them (reported, not fatal)."""
    conn = await asyncpg.connect(roles.server_url)
    try:
        for role in (roles.app, roles.owner):
            try:
                await conn.execute(f'DROP ROLE IF EXISTS "{role}"')
            except asyncpg.PostgresError as exc:
                print(f"test roles: could not drop {role}: {exc}")
    finally:
        await conn.close()

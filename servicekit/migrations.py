"""Forward-only numbered SQL migrations per service schema, applied once under an advisory lock."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources

import asyncpg
import sqlparse

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# One lock for every migration of every service: replicas starting together queue behind it.
LOCK_KEY = 0x7261_7469_6F6E  # "ration"

_LEDGER = """
CREATE TABLE IF NOT EXISTS public.ration_migrations (
    schema_name text NOT NULL,
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_name, version)
)
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def statements(self) -> list[str]:
        """The statements of the file, sent one at a time: Citus propagates some DDL to the
        workers by the text of the query that carried it, which must then be that one
        statement and not the rest of the file."""
        return [s for s in sqlparse.split(self.sql) if s.strip()]

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


@dataclass(frozen=True)
class MigrationSet:
    """The migrations of one schema, read from `NNNN_name.sql` files in a package."""

    schema: str
    package: str
    # Checksums of earlier texts of a migration rewritten in place (version -> checksums): a
    # database that applied one of them is valid, because a later migration converges both.
    rewritten: Mapping[int, frozenset[str]] = field(default_factory=dict)

    def load(self) -> list[Migration]:
        found = []
        for item in resources.files(self.package).iterdir():
            match = _NAME.match(item.name)
            if match:
                found.append(Migration(int(match[1]), match[2], item.read_text(encoding="utf-8")))
        found.sort(key=lambda m: m.version)
        versions = [m.version for m in found]
        if versions != list(range(1, len(found) + 1)):
            raise RuntimeError(f"{self.package}: migrations must be numbered 1..n, got {versions}")
        return found


Applied = dict[tuple[str, int], str]  # (schema, version) -> checksum


class MigrationDrift(RuntimeError):
    """An applied migration's file changed: migrations are forward-only and never edited."""


async def _applied(conn: asyncpg.Connection) -> Applied:
    if await conn.fetchval("SELECT to_regclass('public.ration_migrations')") is None:
        return {}
    rows = await conn.fetch("SELECT schema_name, version, checksum FROM public.ration_migrations")
    return {(r["schema_name"], r["version"]): r["checksum"] for r in rows}


def _todo(
    applied: dict[tuple[str, int], str], sets: list[MigrationSet]
) -> list[tuple[str, Migration]]:
    """The migrations not applied yet, in order; raises MigrationDrift on an edited one."""
    todo = []
    for mset in sets:
        for migration in mset.load():
            key = (mset.schema, migration.version)
            if key not in applied:
                todo.append((mset.schema, migration))
            elif applied[key] != migration.checksum and applied[key] not in mset.rewritten.get(
                migration.version, frozenset()
            ):
                raise MigrationDrift(
                    f"{mset.schema} migration {migration.version:04d}_{migration.name} "
                    "was edited after it was applied"
                )
    return todo


async def pending(conn: asyncpg.Connection, sets: list[MigrationSet]) -> list[str]:
    """The migrations this database still lacks, read without any DDL or lock (so the
    application role, which may not create anything, can check the schema version)."""
    todo = _todo(await _applied(conn), sets)
    return [f"{schema}/{m.version:04d}_{m.name}" for schema, m in todo]


async def migrate(conn: asyncpg.Connection, sets: list[MigrationSet]) -> list[str]:
    """Applies pending migrations in one transaction per call; returns what it applied. With
    nothing pending it only reads the ledger: no lock and no DDL, so any role can call it."""
    if not await pending(conn, sets):
        return []
    applied_now: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK_KEY)
        await conn.execute(_LEDGER)
        for schema, migration in _todo(await _applied(conn), sets):
            for statement in migration.statements:
                await conn.execute(statement)
            await conn.execute(
                "INSERT INTO public.ration_migrations (schema_name, version, name, checksum)"
                " VALUES ($1, $2, $3, $4)",
                schema,
                migration.version,
                migration.name,
                migration.checksum,
            )
            applied_now.append(f"{schema}/{migration.version:04d}_{migration.name}")
    for name in applied_now:
        log.info("migration applied", extra={"migration": name})
    return applied_now

"""Forward-only numbered SQL migrations per service schema, applied once under an advisory
lock, then the schema's stored functions, re-applied from their source files when changed."""

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
_FUNCTION_FILE = re.compile(r"^([a-z0-9_]+)\.sql$")
# One lock for every migration of every service: replicas starting together queue behind it.
LOCK_KEY = 0x7261_7469_6F6E  # "ration"

_LEDGER = """
CREATE TABLE public.ration_migrations (
    schema_name text NOT NULL,
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_name, version)
)
"""

# The function files applied, by the checksum of the text that was applied.
_FUNCTION_LEDGER = """
CREATE TABLE public.ration_functions (
    schema_name text NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schema_name, name)
)
"""


def _split(sql: str) -> list[str]:
    """The statements of a file, sent one at a time: Citus propagates some DDL to the workers
    by the text of the query that carried it, which must then be that one statement and not
    the rest of the file."""
    return [s for s in sqlparse.split(sql) if s.strip()]


def _checksum(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def statements(self) -> list[str]:
        return _split(self.sql)

    @property
    def checksum(self) -> str:
        return _checksum(self.sql)


@dataclass(frozen=True)
class FunctionSource:
    """One stored function's current definition (`CREATE OR REPLACE FUNCTION`, and the grants
    that go with it), kept as source code rather than as migration history."""

    name: str
    sql: str

    @property
    def statements(self) -> list[str]:
        return _split(self.sql)

    @property
    def checksum(self) -> str:
        return _checksum(self.sql)


@dataclass(frozen=True)
class MigrationSet:
    """The migrations of one schema, read from `NNNN_name.sql` files in a package, and its
    stored functions, read from `name.sql` files in another (the Flyway "repeatable
    migration": applied after the numbered ones whenever a file's checksum changes)."""

    schema: str
    package: str
    # Checksums of earlier texts of a migration rewritten in place (version -> checksums): a
    # database that applied one of them is valid, because a later migration or the function
    # files converge both.
    rewritten: Mapping[int, frozenset[str]] = field(default_factory=dict)
    functions_package: str | None = None

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

    def load_functions(self) -> list[FunctionSource]:
        if self.functions_package is None:
            return []
        found = []
        for item in resources.files(self.functions_package).iterdir():
            match = _FUNCTION_FILE.match(item.name)
            if match:
                found.append(FunctionSource(match[1], item.read_text(encoding="utf-8")))
        return sorted(found, key=lambda f: f.name)


Applied = dict[tuple[str, int], str]  # (schema, version) -> checksum
AppliedFunctions = dict[tuple[str, str], str]  # (schema, file name) -> checksum


class MigrationDrift(RuntimeError):
    """An applied migration's file changed: migrations are forward-only and never edited."""


async def _applied(conn: asyncpg.Connection) -> Applied:
    if await conn.fetchval("SELECT to_regclass('public.ration_migrations')") is None:
        return {}
    rows = await conn.fetch("SELECT schema_name, version, checksum FROM public.ration_migrations")
    return {(r["schema_name"], r["version"]): r["checksum"] for r in rows}


async def _applied_functions(conn: asyncpg.Connection) -> AppliedFunctions:
    if await conn.fetchval("SELECT to_regclass('public.ration_functions')") is None:
        return {}
    rows = await conn.fetch("SELECT schema_name, name, checksum FROM public.ration_functions")
    return {(r["schema_name"], r["name"]): r["checksum"] for r in rows}


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


def _functions_todo(
    applied: AppliedFunctions, sets: list[MigrationSet]
) -> list[tuple[str, FunctionSource]]:
    """The function files new or changed since they were last applied."""
    return [
        (mset.schema, source)
        for mset in sets
        for source in mset.load_functions()
        if applied.get((mset.schema, source.name)) != source.checksum
    ]


async def pending(conn: asyncpg.Connection, sets: list[MigrationSet]) -> list[str]:
    """The migrations and function files this database still lacks, read without any DDL or
    lock (so the application role, which may not create anything, can check the schema)."""
    todo = _todo(await _applied(conn), sets)
    functions = _functions_todo(await _applied_functions(conn), sets)
    return [f"{schema}/{m.version:04d}_{m.name}" for schema, m in todo] + [
        f"{schema}/functions/{f.name}" for schema, f in functions
    ]


async def migrate(conn: asyncpg.Connection, sets: list[MigrationSet]) -> list[str]:
    """Applies pending migrations, then changed function files, in one transaction per call;
    returns what it applied. With nothing pending it only reads the ledgers: no lock and no
    DDL, so any role can call it."""
    if not await pending(conn, sets):
        return []
    applied_now: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK_KEY)
        for table, ledger in (
            ("ration_migrations", _LEDGER),
            ("ration_functions", _FUNCTION_LEDGER),
        ):
            # Only when missing: CREATE ... IF NOT EXISTS still needs CREATE on schema public.
            if await conn.fetchval("SELECT to_regclass($1)", f"public.{table}") is None:
                await conn.execute(ledger)
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
        applied_now += await _apply_functions(conn, sets)
    for name in applied_now:
        log.info("migration applied", extra={"migration": name})
    return applied_now


async def _apply_functions(conn: asyncpg.Connection, sets: list[MigrationSet]) -> list[str]:
    """Re-creates every function whose file changed, after the migrations (which made the
    tables and types they use). Bodies are not checked at CREATE, so one file may call a
    function another file creates later; a wrong body fails when called, as any edit would."""
    todo = _functions_todo(await _applied_functions(conn), sets)
    if todo:
        await conn.execute("SET LOCAL check_function_bodies = off")
    for schema, source in todo:
        for statement in source.statements:
            await conn.execute(statement)
        await conn.execute(
            "INSERT INTO public.ration_functions (schema_name, name, checksum)"
            " VALUES ($1, $2, $3) ON CONFLICT (schema_name, name)"
            " DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = EXCLUDED.applied_at",
            schema,
            source.name,
            source.checksum,
        )
    for mset in sets:  # a file deleted with the migration that dropped its function
        if mset.functions_package is not None:
            await conn.execute(
                "DELETE FROM public.ration_functions"
                " WHERE schema_name = $1 AND NOT name = ANY($2::text[])",
                mset.schema,
                [f.name for f in mset.load_functions()],
            )
    return [f"{schema}/functions/{source.name}" for schema, source in todo]

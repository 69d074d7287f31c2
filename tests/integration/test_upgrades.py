"""Upgrades (DESIGN 6): a database migrated by any recorded release (CHANGELOG.md), or by one of
the two pre-release states whose migrations were later edited, upgrades with today's `migrate`
as the owner role and ends with the same schema as one migrated from scratch: tables,
columns, constraints, indexes, policies, types, triggers, grants and the definition of every
function. The old states are built by that commit's own runner from that commit's files."""

from __future__ import annotations

import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from ration_server import registry
from servicekit.migrations import migrate
from tests.support import dbroles
from tests.support.releases import BROKEN_STATES, files_at, git, history_problem, releases

SCHEMAS = ["budget", "memory"]
FOLDERS = {
    "budget": "budget_service/store/migrations",
    "memory": "memory_service/store/migrations",
}
FUNCTION_FOLDERS = {
    "budget": "budget_service/store/functions",
    "memory": "memory_service/store/functions",
}
_MIGRATION = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_FUNCTION = re.compile(r"^([a-z0-9_]+)\.sql$")
STATES = {f"release-{r.version}": r.commit for r in releases() if r.cut} | {
    f"pre-release-{commit[:7]}": commit for commit in BROKEN_STATES
}

# Every part of the schema a query of the catalog can name, as comparable rows.
CATALOG = {
    "relations": """
        SELECT n.nspname, c.relname, c.relkind, c.relpersistence, c.relrowsecurity,
               c.relforcerowsecurity, pg_get_userbyid(c.relowner) AS owner, c.relacl::text
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY($1::text[]) AND c.relkind <> 'i'""",
    "columns": """
        SELECT n.nspname, c.relname, a.attname,
               row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) AS position,
               format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid) AS default, a.attidentity, a.attgenerated,
               a.attcollation::regcollation::text AS collation
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = ANY($1::text[]) AND a.attnum > 0 AND NOT a.attisdropped""",
    "constraints": """
        SELECT n.nspname, co.conrelid::regclass::text AS relation,
               co.contypid::regtype::text AS domain, co.conname, pg_get_constraintdef(co.oid)
        FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace
        WHERE n.nspname = ANY($1::text[])""",
    "indexes": """
        SELECT schemaname, tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = ANY($1::text[])""",
    "policies": """
        SELECT schemaname, tablename, policyname, permissive, roles::text, cmd, qual, with_check
        FROM pg_policies WHERE schemaname = ANY($1::text[])""",
    "types": """
        SELECT n.nspname, t.typname, t.typtype, t.typbasetype::regtype::text AS base,
               (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_enum e
                WHERE e.enumtypid = t.oid)::text AS labels
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = ANY($1::text[])""",
    "triggers": """
        SELECT tg.tgrelid::regclass::text AS relation, tg.tgname, pg_get_triggerdef(tg.oid)
        FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY($1::text[]) AND NOT tg.tgisinternal""",
    "functions": """
        SELECT p.oid::regprocedure::text AS signature, pg_get_functiondef(p.oid),
               pg_get_userbyid(p.proowner) AS owner, p.proacl::text
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = ANY($1::text[])""",
    "schemas": """
        SELECT nspname, pg_get_userbyid(nspowner) AS owner, nspacl::text FROM pg_namespace
        WHERE nspname = ANY($1::text[])""",
    "migrations": "SELECT schema_name, version, name FROM public.ration_migrations",
    "function files": "SELECT schema_name, name, checksum FROM public.ration_functions",
}


async def schema_of(url: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = await asyncpg.connect(url)
    try:
        found = {}
        for part, query in CATALOG.items():
            args = [SCHEMAS] if "$1" in query else []
            found[part] = sorted(
                (tuple(str(v) for v in row.values()) for row in await conn.fetch(query, *args)),
            )
        return found
    finally:
        await conn.close()


def runner_of(commit: str) -> types.ModuleType:
    """servicekit/migrations.py as it was at the commit: the code that wrote its ledger."""
    name = f"_ration_migrations_{commit[:12]}"
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up while decorating
    try:
        source = git("show", f"{commit}:servicekit/migrations.py")
        exec(compile(source, f"{commit[:12]}:servicekit/migrations.py", "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module


@dataclass(frozen=True)
class FilesAt:
    """One schema's migrations as a commit had them, for that commit's runner."""

    schema: str
    migrations: list[Any]
    rewritten: dict[int, frozenset[str]] = field(default_factory=dict)
    # Its function files, for a runner that has them (0.2.0 on); None before.
    functions: list[Any] | None = None

    @property
    def functions_package(self) -> str | None:
        return None if self.functions is None else "(files at the commit)"

    def load(self) -> list[Any]:
        return self.migrations

    def load_functions(self) -> list[Any]:
        return self.functions or []


async def migrate_at(commit: str, owner_url: str) -> list[str]:
    runner = runner_of(commit)
    sets = []
    for schema, folder in FOLDERS.items():
        files = files_at(commit, folder)
        migrations = [
            runner.Migration(int(m[1]), m[2], text.decode("utf-8"))
            for name, text in sorted(files.items())
            if (m := _MIGRATION.match(name))
        ]
        functions = None
        if hasattr(runner, "FunctionSource"):  # a release that keeps functions as files
            functions = [
                runner.FunctionSource(m[1], text.decode("utf-8"))
                for name, text in sorted(files_at(commit, FUNCTION_FOLDERS[schema]).items())
                if (m := _FUNCTION.match(name))
            ]
        sets.append(FilesAt(schema, migrations, functions=functions))
    conn = await asyncpg.connect(owner_url)
    try:
        applied: list[str] = await runner.migrate(conn, sets)
        return applied
    finally:
        await conn.close()


def test_every_recorded_release_is_an_upgrade_start() -> None:
    assert "release-0.1.0" in STATES
    assert len(STATES) >= 3


@pytest.mark.parametrize("commit", list(STATES.values()), ids=list(STATES))
async def test_an_upgraded_database_has_the_schema_of_a_fresh_one(
    commit: str, empty_database_url: str, database_url: str, db_roles: dbroles.Roles
) -> None:
    problem = history_problem(commit)
    if problem:
        pytest.skip(problem)
    owner_url = db_roles.owner_url(empty_database_url)
    assert await migrate_at(commit, owner_url)  # the old state, as that commit's runner left it
    conn = await asyncpg.connect(owner_url)
    try:
        assert not await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        upgraded = await migrate(conn, registry.all_migrations())
    finally:
        await conn.close()
    if not hasattr(runner_of(commit), "FunctionSource"):  # functions were migration history
        assert any("/functions/" in name for name in upgraded)
    before, after = await schema_of(database_url), await schema_of(empty_database_url)
    for part in CATALOG:
        assert after[part] == before[part], f"{part} differ after upgrading from {commit[:12]}"

"""The repeatable step (servicekit/migrations.py): stored functions are applied from their
source files after the numbered migrations, and again whenever a file's checksum changes."""

from __future__ import annotations

import asyncpg

from budget_service.definition import MIGRATIONS as BUDGET
from ration_server import registry
from servicekit.migrations import migrate, pending
from tests.support import dbroles

DEFINITION = "SELECT pg_get_functiondef('budget.usd_text(bigint)'::regprocedure)"


async def test_a_fresh_database_records_every_function_file_it_applied(
    db: asyncpg.Connection,
) -> None:
    rows = await db.fetch("SELECT schema_name, name, checksum FROM public.ration_functions")
    recorded = {(r["schema_name"], r["name"]): r["checksum"] for r in rows}
    files = {
        (mset.schema, source.name): source.checksum
        for mset in registry.all_migrations()
        for source in mset.load_functions()
    }
    assert recorded == files
    assert "budget" in {schema for schema, _ in files}
    assert await pending(db, registry.all_migrations()) == []


async def test_a_changed_file_is_pending_for_the_app_role_and_reapplied_alone(
    database_url: str, db_roles: dbroles.Roles
) -> None:
    owner = await asyncpg.connect(db_roles.owner_url(database_url))
    app = await asyncpg.connect(db_roles.app_url(database_url))
    try:
        # What a database whose usd_text was applied from an older text looks like.
        await owner.execute(
            "CREATE OR REPLACE FUNCTION budget.usd_text(nanos bigint) RETURNS text"
            " LANGUAGE sql IMMUTABLE AS $$ SELECT 'stale' $$"
        )
        await owner.execute(
            "UPDATE public.ration_functions SET checksum = 'older'"
            " WHERE schema_name = 'budget' AND name = 'usd_text'"
        )
        assert await pending(app, registry.all_migrations()) == ["budget/functions/usd_text"]
        assert await migrate(owner, registry.all_migrations()) == ["budget/functions/usd_text"]
        assert await app.fetchval("SELECT budget.usd_text(1020000000)") == "1.02"
        assert "'stale'" not in await owner.fetchval(DEFINITION)
        assert await pending(app, registry.all_migrations()) == []
        assert await migrate(app, registry.all_migrations()) == []  # only a check: no DDL
    finally:
        await app.close()
        await owner.close()


async def test_a_file_not_recorded_yet_is_applied_with_its_grants(
    database_url: str, db_roles: dbroles.Roles
) -> None:
    owner = await asyncpg.connect(db_roles.owner_url(database_url))
    try:
        await owner.execute("GRANT EXECUTE ON FUNCTION budget.overdue_runs(integer) TO PUBLIC")
        await owner.execute("DELETE FROM public.ration_functions WHERE name = 'overdue_runs'")
        assert await migrate(owner, registry.all_migrations()) == ["budget/functions/overdue_runs"]
        public_execute = await owner.fetchval(
            "SELECT has_function_privilege('public', 'budget.overdue_runs(integer)', 'EXECUTE')"
        )
        assert public_execute is False  # the file's REVOKE ran again
    finally:
        await owner.close()


async def test_databases_that_applied_the_first_texts_of_budget_0006_and_0010_upgrade(
    empty_database_url: str, db_roles: dbroles.Roles
) -> None:
    """Migrated at 772a3ac or a79d752..7a4a0a3, before those two were edited in place: the
    old checksums are accepted and the function files re-create the current definitions
    (the full upgrade from those commits' files is tests/integration/test_upgrades.py)."""
    owner = await asyncpg.connect(db_roles.owner_url(empty_database_url))
    try:
        await migrate(owner, registry.all_migrations())
        current = await owner.fetchval(
            "SELECT pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.proname = 'decide_v1'"
        )
        for version in (6, 10):
            (first_text,) = BUDGET.rewritten[version]
            await owner.execute(
                "UPDATE public.ration_migrations SET checksum = $1"
                " WHERE schema_name = 'budget' AND version = $2",
                first_text,
                version,
            )
        await owner.execute("DROP TABLE public.ration_functions")  # as before the files
        applied = await migrate(owner, registry.all_migrations())
        assert "budget/functions/decide_v1" in applied
        assert not [name for name in applied if "/functions/" not in name]
        assert current == await owner.fetchval(
            "SELECT pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.proname = 'decide_v1'"
        )
    finally:
        await owner.close()

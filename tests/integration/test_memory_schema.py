"""The memory schema: the expected tables, tenant_id leading every key and index (DESIGN 6),
and row-level security on every table (DESIGN 5, CTI-1's second line)."""

from __future__ import annotations

import asyncpg
import pytest

from servicekit.db import enter_tenant
from tests.support.memory import MEMORY_TABLES

# GIN cannot lead with a text column without btree_gin (absent from the embedded server); its
# queries filter tenant_id and memory_id too, and under Citus it is per shard anyway.
FULL_TEXT_INDEX = "entry_versions_search"

INDEX_LEADS = """
SELECT c.relname AS index_name, t.relname AS table_name, a.attname AS first_column,
       am.amname AS method
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am am ON am.oid = c.relam
JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0]
WHERE n.nspname = 'memory'
"""


async def test_migrations_create_the_memory_tables(db: asyncpg.Connection) -> None:
    tables = await db.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'memory'"
    )
    assert sorted(r["table_name"] for r in tables) == sorted(MEMORY_TABLES)


async def test_every_memory_table_and_index_leads_with_tenant_id(db: asyncpg.Connection) -> None:
    rows = await db.fetch(INDEX_LEADS)
    assert {r["table_name"] for r in rows} == set(MEMORY_TABLES)  # every table has a key
    others = [(r["index_name"], r["method"]) for r in rows if r["first_column"] != "tenant_id"]
    assert others == [(FULL_TEXT_INDEX, "gin")]


async def test_entry_ids_sort_as_bytes_in_the_store(db: asyncpg.Connection) -> None:
    collations = await db.fetch(
        "SELECT table_name, column_name, collation_name FROM information_schema.columns"
        " WHERE table_schema = 'memory' AND column_name = 'entry_id'"
    )
    assert {r["collation_name"] for r in collations} == {"C"}


async def test_every_memory_table_has_row_level_security_with_a_tenant_policy(
    db: asyncpg.Connection,
) -> None:
    rows = await db.fetch(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, p.qual, p.with_check"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " LEFT JOIN pg_policies p ON p.schemaname = n.nspname AND p.tablename = c.relname"
        "   AND p.policyname = 'tenant_isolation'"
        " WHERE n.nspname = 'memory' AND c.relkind = 'r'"
    )
    assert sorted(r["relname"] for r in rows) == sorted(MEMORY_TABLES)
    for row in rows:
        assert row["relrowsecurity"], row["relname"]
        assert row["relforcerowsecurity"], row["relname"]
        for clause in (row["qual"], row["with_check"]):
            assert "current_setting('ration.tenant_id'" in clause, row["relname"]


async def _as_tenant(url: str, tenant: str | None, sql: str) -> int:
    """`sql` as the application role, in a transaction that entered `tenant` (or none)."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(enter_tenant(tenant) if tenant is not None else "BEGIN")
        try:
            return int(await conn.fetchval(sql))
        finally:
            await conn.execute("ROLLBACK")
    finally:
        await conn.close()


async def test_the_application_role_sees_only_the_tenant_it_entered(
    db: asyncpg.Connection, app_database_url: str
) -> None:
    for tenant in ("alpha", "beta"):
        await db.execute(
            "INSERT INTO memory.request_log (tenant_id, request_id, fingerprint, response)"
            " VALUES ($1, 'r1', '', '')",
            tenant,
        )
    count = "SELECT count(*) FROM memory.request_log"  # no tenant filter at all
    assert await db.fetchval(count) == 2  # the test connects as a superuser: no policies
    assert await _as_tenant(app_database_url, "alpha", count) == 1
    assert await _as_tenant(app_database_url, "gamma", count) == 0
    assert await _as_tenant(app_database_url, None, count) == 0  # no tenant: fail closed
    conn = await asyncpg.connect(app_database_url)
    try:
        await conn.execute(enter_tenant("alpha"))
        with pytest.raises(asyncpg.exceptions.InsufficientPrivilegeError):  # WITH CHECK
            await conn.execute(
                "INSERT INTO memory.request_log (tenant_id, request_id, fingerprint, response)"
                " VALUES ('beta', 'r2', '', '')"
            )
    finally:
        await conn.close()
